/* conv.c: one convolution through oneDNN's C API, built against the 2.x API
 * (Debian's libdnnl 2.6) or the 3.x API (PyPI's onednn wheel): the same
 * shapes, data type and post-op, so the two library versions can be compared
 * kernel for kernel (bench_onednn3.sh). Prints one line: version, shape,
 * ms per call (median of 7 rounds), GFLOP/s and the implementation name.
 *
 * usage: conv N f32|bf16 dense|depthwise */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		dnnl_status_t s_ = (x);                                                            \
		if (s_ != dnnl_success) {                                                          \
			fprintf(stderr, "%s: status %d\n", #x, (int)s_);                           \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: conv N f32|bf16 dense|depthwise\n");
		return 2;
	}
	int n = atoi(argv[1]), bf16 = !strcmp(argv[2], "bf16"), dw = !strcmp(argv[3], "depthwise");
	/* resnet50's 3x3 conv of stage 1; mobilenetv2's 3x3 depthwise at 56x56 */
	int c = dw ? 144 : 64, k = c, h = 56;
	dnnl_dims_t sd = {n, c, h, h}, wd = {k, c, 3, 3}, gwd = {c, 1, 1, 3, 3}, bd = {k},
		    dd = {n, k, h, h}, strides = {1, 1}, dil = {0, 0}, pad = {1, 1};
	dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_engine_t eng;
	dnnl_stream_t st;
	CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
	CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
	dnnl_primitive_attr_t attr;
	dnnl_post_ops_t po;
	CK(dnnl_primitive_attr_create(&attr));
	CK(dnnl_post_ops_create(&po));
	dnnl_primitive_desc_t pd;
#if DNNL_VERSION_MAJOR >= 3
	dnnl_memory_desc_t s, w, b, d;
	CK(dnnl_memory_desc_create_with_tag(&s, 4, sd, dt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_create_with_tag(&w, dw ? 5 : 4, dw ? gwd : wd, dt,
					    dnnl_format_tag_any));
	CK(dnnl_memory_desc_create_with_tag(&b, 1, bd, dnnl_f32, dnnl_a));
	CK(dnnl_memory_desc_create_with_tag(&d, 4, dd, dt, dnnl_format_tag_any));
	CK(dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0, 0));
	CK(dnnl_primitive_attr_set_post_ops(attr, po));
	CK(dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference,
							  dnnl_convolution_direct, s, w, b, d,
							  strides, dil, pad, pad, attr));
	const_dnnl_memory_desc_t qb = b;
#else
	dnnl_memory_desc_t s, w, b, d;
	CK(dnnl_memory_desc_init_by_tag(&s, 4, sd, dt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&w, dw ? 5 : 4, dw ? gwd : wd, dt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_a));
	CK(dnnl_memory_desc_init_by_tag(&d, 4, dd, dt, dnnl_format_tag_any));
	CK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0));
	CK(dnnl_primitive_attr_set_post_ops(attr, po));
	dnnl_convolution_desc_t cd;
	CK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
						      dnnl_convolution_direct, &s, &w, &b, &d,
						      strides, dil, pad, pad));
	CK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
	const dnnl_memory_desc_t *qb = &b;
#endif
	const char *impl = "?";
	dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
	dnnl_memory_t ms, mw, mb, md;
	CK(dnnl_memory_create(&ms, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), eng,
			      DNNL_MEMORY_ALLOCATE));
	CK(dnnl_memory_create(&mw, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), eng,
			      DNNL_MEMORY_ALLOCATE));
	CK(dnnl_memory_create(&mb, qb, eng, DNNL_MEMORY_ALLOCATE));
	CK(dnnl_memory_create(&md, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), eng,
			      DNNL_MEMORY_ALLOCATE));
	dnnl_primitive_t p;
	CK(dnnl_primitive_create(&p, pd));
	dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms},
				   {DNNL_ARG_WEIGHTS, mw},
				   {DNNL_ARG_BIAS, mb},
				   {DNNL_ARG_DST, md}};
	int reps = n == 1 ? 200 : 10;
	double t[7];
	for (int r = -1; r < 7; r++) { /* round -1: warm-up */
		double t0 = now();
		for (int i = 0; i < reps; i++)
			CK(dnnl_primitive_execute(p, st, 4, args));
		CK(dnnl_stream_wait(st));
		if (r >= 0)
			t[r] = (now() - t0) / reps;
	}
	qsort(t, 7, sizeof(t[0]), cmp);
	double flops = 2.0 * n * k * h * h * (dw ? 1 : c) * 9;
	printf("oneDNN %d.%d %-9s %-4s N=%-3d %8.3f ms %7.1f GFLOP/s  %s\n", DNNL_VERSION_MAJOR,
	       DNNL_VERSION_MINOR, argv[3], argv[2], n, t[3] * 1e3, flops / t[3] / 1e9, impl);
	dnnl_primitive_destroy(p);
	dnnl_memory_destroy(ms);
	dnnl_memory_destroy(mw);
	dnnl_memory_destroy(mb);
	dnnl_memory_destroy(md);
	dnnl_primitive_desc_destroy(pd);
	dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	dnnl_stream_destroy(st);
	dnnl_engine_destroy(eng);
	return 0;
}
