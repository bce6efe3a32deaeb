/* conv.c: one convolution through oneDNN's C API, built against the 2.x API
 * (Debian's libdnnl 2.6) or the 3.x API (PyPI's onednn wheel): the same
 * shapes, data type and post-op, so the two library versions can be compared
 * kernel for kernel (bench_onednn3.sh). Prints one line: version, shape,
 * ms per call (median of 7 rounds), GFLOP/s and the implementation name.
 * int8 is weft's quantised conv: u8 input, s8 weights with per-channel scales,
 * u8 output (requantised), f32 bias; 2.x takes the scales as output scales,
 * 3.x as per-argument scales (source, weights, destination) at execution.
 *
 * usage: conv N f32|bf16|int8 dense|depthwise|first|pointwise */
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

/* Fills a buffer with values like a network's (not the zero page: untouched
 * memory would make every read a cache hit). */
static void fill(dnnl_memory_t m, dnnl_data_type_t dt, size_t bytes)
{
	void *p;
	dnnl_memory_get_data_handle(m, &p);
	unsigned x = 12345;
	for (size_t i = 0; i < bytes; i += dt == dnnl_f32 ? 4 : dt == dnnl_bf16 ? 2 : 1) {
		x = x * 1103515245u + 12345u;
		float v = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
		if (dt == dnnl_f32)
			memcpy((char *)p + i, &v, 4);
		else if (dt == dnnl_bf16)
			memcpy((char *)p + i, (char *)&v + 2, 2);
		else
			((unsigned char *)p)[i] =
				(unsigned char)(x >> 16) & (dt == dnnl_s8 ? 0x3f : 0xff);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: conv N f32|bf16|int8 dense|depthwise|first|pointwise\n");
		return 2;
	}
	int n = atoi(argv[1]), bf16 = !strcmp(argv[2], "bf16"), i8 = !strcmp(argv[2], "int8");
	int dw = !strcmp(argv[3], "depthwise"), first = !strcmp(argv[3], "first");
	int pw = !strcmp(argv[3], "pointwise");
	/* resnet50's 3x3 conv of stage 1, its first 7x7/2 conv on 224x224 RGB and
	 * the 1x1 256->64 at 56x56; mobilenetv2's 3x3 depthwise at 56x56 */
	int c = dw	? 144
		: first ? 3
		: pw	? 256
			: 64,
	    k = dw ? 144 : 64,
	    kh = first ? 7
		 : pw  ? 1
		       : 3;
	int h = first ? 224 : 56, oh = first ? 112 : 56, st2 = first ? 2 : 1,
	    p0 = first ? 3
		 : pw  ? 0
		       : 1;
	dnnl_dims_t sd = {n, c, h, h}, wd = {k, c, kh, kh}, gwd = {c, 1, 1, 3, 3}, bd = {k},
		    dd = {n, k, oh, oh}, strides = {st2, st2}, dil = {0, 0}, pad = {p0, p0};
	dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_data_type_t sdt = i8 ? dnnl_u8 : dt, wdt = i8 ? dnnl_s8 : dt, ddt = sdt;
	float wsc[256], one = 1.0f;
	for (int i = 0; i < k; i++)
		wsc[i] = 0.01f + 0.0001f * (float)i;
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
	CK(dnnl_memory_desc_create_with_tag(&s, 4, sd, sdt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_create_with_tag(&w, dw ? 5 : 4, dw ? gwd : wd, wdt,
					    dnnl_format_tag_any));
	CK(dnnl_memory_desc_create_with_tag(&b, 1, bd, dnnl_f32, dnnl_a));
	CK(dnnl_memory_desc_create_with_tag(&d, 4, dd, ddt, dnnl_format_tag_any));
	CK(dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0, 0));
	if (i8) {
		CK(dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_SRC, 0));
		CK(dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_WEIGHTS, dw ? 3 : 1));
		CK(dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_DST, 0));
	}
	CK(dnnl_primitive_attr_set_post_ops(attr, po));
	CK(dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference,
							  dnnl_convolution_direct, s, w, b, d,
							  strides, dil, pad, pad, attr));
	const_dnnl_memory_desc_t qb = b;
#else
	dnnl_memory_desc_t s, w, b, d;
	CK(dnnl_memory_desc_init_by_tag(&s, 4, sd, sdt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&w, dw ? 5 : 4, dw ? gwd : wd, wdt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_a));
	CK(dnnl_memory_desc_init_by_tag(&d, 4, dd, ddt, dnnl_format_tag_any));
	CK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0));
	if (i8)
		CK(dnnl_primitive_attr_set_output_scales(attr, k, dw ? 3 : 2, wsc));
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
	fill(ms, sdt,
	     dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0)));
	fill(mw, wdt,
	     dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)));
	fill(mb, dnnl_f32, (size_t)k * 4);
	dnnl_primitive_t p;
	CK(dnnl_primitive_create(&p, pd));
	int nargs = 4;
	dnnl_exec_arg_t args[7] = {{DNNL_ARG_SRC, ms},
				   {DNNL_ARG_WEIGHTS, mw},
				   {DNNL_ARG_BIAS, mb},
				   {DNNL_ARG_DST, md}};
#if DNNL_VERSION_MAJOR >= 3
	dnnl_memory_t msc[3] = {0};
	if (i8) {
		dnnl_dims_t d1 = {1}, dk = {k};
		dnnl_memory_desc_t s1, sk;
		CK(dnnl_memory_desc_create_with_tag(&s1, 1, d1, dnnl_f32, dnnl_a));
		CK(dnnl_memory_desc_create_with_tag(&sk, 1, dk, dnnl_f32, dnnl_a));
		CK(dnnl_memory_create(&msc[0], s1, eng, &one));
		CK(dnnl_memory_create(&msc[1], sk, eng, wsc));
		CK(dnnl_memory_create(&msc[2], s1, eng, &one));
		args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, msc[0]};
		args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, msc[1]};
		args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, msc[2]};
		dnnl_memory_desc_destroy(s1);
		dnnl_memory_desc_destroy(sk);
	}
#else
	(void)one;
#endif
	int reps = n == 1 ? 200 : 10;
	double t[7];
	for (int r = -1; r < 7; r++) { /* round -1: warm-up */
		double t0 = now();
		for (int i = 0; i < reps; i++)
			CK(dnnl_primitive_execute(p, st, nargs, args));
		CK(dnnl_stream_wait(st));
		if (r >= 0)
			t[r] = (now() - t0) / reps;
	}
	qsort(t, 7, sizeof(t[0]), cmp);
	double flops = 2.0 * n * k * oh * oh * (dw ? 1 : c) * kh * kh;
	printf("oneDNN %d.%d %-9s %-4s N=%-3d %8.3f ms %7.1f GFLOP/s  %s\n", DNNL_VERSION_MAJOR,
	       DNNL_VERSION_MINOR, argv[3], argv[2], n, t[3] * 1e3, flops / t[3] / 1e9, impl);
	dnnl_primitive_destroy(p);
	dnnl_memory_destroy(ms);
	dnnl_memory_destroy(mw);
	dnnl_memory_destroy(mb);
	dnnl_memory_destroy(md);
#if DNNL_VERSION_MAJOR >= 3
	for (int i = 0; i < 3; i++)
		if (msc[i])
			dnnl_memory_destroy(msc[i]);
#endif
	dnnl_primitive_desc_destroy(pd);
	dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	dnnl_stream_destroy(st);
	dnnl_engine_destroy(eng);
	return 0;
}
