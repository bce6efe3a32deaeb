/* dw_fusion.c: is oneDNN's depthwise post-op (a 1x1 conv whose output runs
 * straight into a 3x3 depthwise conv, the expanded tensor never written out)
 * faster than the two convs one after the other, as weft's inference plans
 * run them? MobileNetV2's expansion at 56x56: 1x1 24->144 + ReLU6, then 3x3
 * depthwise stride 1 on 144 channels + ReLU6; fp32 or int8 (u8 activations,
 * s8 weights, per-channel scales); formats `any`. Prints ms per call (median
 * of 7 rounds) and the implementations, for both ways. Built against
 * Debian's oneDNN 2.6 (the API weft uses).
 *
 * usage: dw_fusion N f32|int8 */
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
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static dnnl_engine_t eng;
static dnnl_stream_t st;

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

/* A memory for md filled with small values of its type. */
static dnnl_memory_t mem_filled(const dnnl_memory_desc_t *md)
{
	dnnl_memory_t m;
	void *p;
	CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
	CK(dnnl_memory_get_data_handle(m, &p));
	size_t bytes = dnnl_memory_desc_get_size(md);
	unsigned x = 777;
	if (md->data_type == dnnl_f32)
		for (size_t i = 0; i < bytes / 4; i++) {
			x = x * 1103515245u + 12345u;
			((float *)p)[i] = (float)((x >> 8) & 0xffff) / 65536.0f - 0.5f;
		}
	else
		for (size_t i = 0; i < bytes; i++) {
			x = x * 1103515245u + 12345u;
			((unsigned char *)p)[i] = (unsigned char)((x >> 16) & 0x3f);
		}
	return m;
}

static dnnl_primitive_desc_t conv_pd(const dnnl_memory_desc_t *s, const dnnl_memory_desc_t *w,
				     const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *d,
				     int stride, int pad, dnnl_primitive_attr_t attr)
{
	dnnl_dims_t strides = {stride, stride}, dil = {0, 0}, p = {pad, pad};
	dnnl_convolution_desc_t cd;
	dnnl_primitive_desc_t pd;
	CK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
						      dnnl_convolution_direct, s, w, b, d, strides,
						      dil, p, p));
	CK(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
	return pd;
}

static double time_it(dnnl_primitive_t *p, int np, int *nargs, dnnl_exec_arg_t **args, int reps)
{
	double t[7];
	for (int r = -1; r < 7; r++) {
		double t0 = now();
		for (int i = 0; i < reps; i++)
			for (int k = 0; k < np; k++)
				CK(dnnl_primitive_execute(p[k], st, nargs[k], args[k]));
		CK(dnnl_stream_wait(st));
		if (r >= 0)
			t[r] = (now() - t0) / reps;
	}
	qsort(t, 7, sizeof(t[0]), cmp);
	return t[3];
}

static const char *impl(dnnl_primitive_desc_t pd)
{
	const char *s = "?";
	dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
	return s;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: dw_fusion N f32|int8\n");
		return 2;
	}
	int n = atoi(argv[1]), i8 = !strcmp(argv[2], "int8");
	int c = 24, e = 144, h = 56;
	dnnl_data_type_t adt = i8 ? dnnl_u8 : dnnl_f32, wdt = i8 ? dnnl_s8 : dnnl_f32;
	CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
	CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
	dnnl_dims_t sd = {n, c, h, h}, w1d = {e, c, 1, 1}, ed = {n, e, h, h}, w2d = {e, 1, 1, 3, 3},
		    bd = {e};
	dnnl_memory_desc_t s, w1, b, mid, w2, d;
	CK(dnnl_memory_desc_init_by_tag(&s, 4, sd, adt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&w1, 4, w1d, wdt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&b, 1, bd, dnnl_f32, dnnl_a));
	CK(dnnl_memory_desc_init_by_tag(&mid, 4, ed, adt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&w2, 5, w2d, wdt, dnnl_format_tag_any));
	CK(dnnl_memory_desc_init_by_tag(&d, 4, ed, adt, dnnl_format_tag_any));
	float sc[144];
	for (int k = 0; k < e; k++)
		sc[k] = 0.01f;
	float hi = i8 ? 600.0f : 6.0f; /* ReLU6 in the scaled domain */

	/* two convs */
	dnnl_primitive_attr_t a1, a2;
	dnnl_post_ops_t p1, p2;
	CK(dnnl_primitive_attr_create(&a1));
	CK(dnnl_primitive_attr_create(&a2));
	CK(dnnl_post_ops_create(&p1));
	CK(dnnl_post_ops_create(&p2));
	CK(dnnl_post_ops_append_eltwise(p1, 1.0f, dnnl_eltwise_clip, 0.0f, hi));
	CK(dnnl_post_ops_append_eltwise(p2, 1.0f, dnnl_eltwise_clip, 0.0f, hi));
	CK(dnnl_primitive_attr_set_post_ops(a1, p1));
	CK(dnnl_primitive_attr_set_post_ops(a2, p2));
	if (i8) {
		CK(dnnl_primitive_attr_set_output_scales(a1, e, 2, sc));
		CK(dnnl_primitive_attr_set_output_scales(a2, e, 3, sc));
	}
	dnnl_primitive_desc_t pd1 = conv_pd(&s, &w1, &b, &mid, 1, 0, a1);
	const dnnl_memory_desc_t *mid_md = dnnl_primitive_desc_query_md(pd1, dnnl_query_dst_md, 0);
	dnnl_primitive_desc_t pd2 = conv_pd(mid_md, &w2, &b, &d, 1, 1, a2);
	dnnl_memory_t ms = mem_filled(dnnl_primitive_desc_query_md(pd1, dnnl_query_src_md, 0));
	dnnl_memory_t mw1 = mem_filled(dnnl_primitive_desc_query_md(pd1, dnnl_query_weights_md, 0));
	dnnl_memory_t mb = mem_filled(&b);
	dnnl_memory_t mm = mem_filled(mid_md);
	dnnl_memory_t mw2 = mem_filled(dnnl_primitive_desc_query_md(pd2, dnnl_query_weights_md, 0));
	dnnl_memory_t md = mem_filled(dnnl_primitive_desc_query_md(pd2, dnnl_query_dst_md, 0));
	dnnl_primitive_t pr[2];
	CK(dnnl_primitive_create(&pr[0], pd1));
	CK(dnnl_primitive_create(&pr[1], pd2));
	dnnl_exec_arg_t x1[] = {{DNNL_ARG_SRC, ms},
				{DNNL_ARG_WEIGHTS, mw1},
				{DNNL_ARG_BIAS, mb},
				{DNNL_ARG_DST, mm}};
	dnnl_exec_arg_t x2[] = {{DNNL_ARG_SRC, mm},
				{DNNL_ARG_WEIGHTS, mw2},
				{DNNL_ARG_BIAS, mb},
				{DNNL_ARG_DST, md}};
	int reps = n == 1 ? 200 : 10;
	int na[2] = {4, 4};
	dnnl_exec_arg_t *xa[2] = {x1, x2};
	double t2 = time_it(pr, 2, na, xa, reps);

	/* one conv with the depthwise post-op */
	dnnl_primitive_attr_t af;
	dnnl_post_ops_t pf;
	CK(dnnl_primitive_attr_create(&af));
	CK(dnnl_post_ops_create(&pf));
	CK(dnnl_post_ops_append_eltwise(pf, 1.0f, dnnl_eltwise_clip, 0.0f, hi));
	CK(dnnl_post_ops_append_dw_k3s1p1(pf, wdt, dnnl_f32, adt, i8 ? e : 0, i8 ? 2 : 0,
					  i8 ? sc : NULL));
	CK(dnnl_post_ops_append_eltwise(pf, 1.0f, dnnl_eltwise_clip, 0.0f, hi));
	CK(dnnl_primitive_attr_set_post_ops(af, pf));
	if (i8)
		CK(dnnl_primitive_attr_set_output_scales(af, e, 2, sc));
	dnnl_primitive_desc_t pdf = conv_pd(&s, &w1, &b, &mid, 1, 0, af);
	const dnnl_memory_desc_t *fs = dnnl_primitive_desc_query_md(pdf, dnnl_query_src_md, 0);
	dnnl_memory_t fms = mem_filled(fs);
	dnnl_memory_t fmw1 =
		mem_filled(dnnl_primitive_desc_query_md(pdf, dnnl_query_weights_md, 0));
	dnnl_memory_t fmd = mem_filled(dnnl_primitive_desc_query_md(pdf, dnnl_query_dst_md, 0));
	dnnl_memory_t fmw2 = mem_filled(dnnl_primitive_desc_query_md(
		pdf, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS));
	dnnl_primitive_t pfp;
	CK(dnnl_primitive_create(&pfp, pdf));
	dnnl_exec_arg_t xf[] = {{DNNL_ARG_SRC, fms},
				{DNNL_ARG_WEIGHTS, fmw1},
				{DNNL_ARG_BIAS, mb},
				{DNNL_ARG_DST, fmd},
				{DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, fmw2},
				{DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, mb}};
	int nf = 6;
	dnnl_exec_arg_t *xfa = xf;
	double t1 = time_it(&pfp, 1, &nf, &xfa, reps);
	printf("%-4s N=%-3d two convs %7.3f ms (%s + %s)  fused %7.3f ms (%s)  two / fused %.2f\n",
	       argv[2], n, t2 * 1e3, impl(pd1), impl(pd2), t1 * 1e3, impl(pdf), t2 / t1);
	return 0;
}
