/* kernels.c: backend selection and the descriptor helpers shared by all backends. */
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

void wf_same_pad(int in, int k, int stride, int dilation, int *out, int *before, int *after)
{
	int ek = (k - 1) * dilation + 1;
	int o = (in + stride - 1) / stride;
	int total = (o - 1) * stride + ek - in;
	if (total < 0)
		total = 0;
	*out = o;
	*before = total / 2;
	*after = total - total / 2;
}

void wf_conv_desc_init(wf_conv_desc *d, int n, int h, int w, int c, int oc, int kh, int kw, int sh,
		       int sw, int dh, int dw, int groups, int same, int pad_h, int pad_w, int bias)
{
	memset(d, 0, sizeof(*d));
	d->n = n, d->h = h, d->w = w, d->c = c, d->oc = oc;
	d->kh = kh, d->kw = kw, d->sh = sh, d->sw = sw, d->dh = dh, d->dw = dw;
	d->groups = groups, d->bias = bias;
	if (same) {
		wf_same_pad(h, kh, sh, dh, &d->oh, &d->pt, &d->pb);
		wf_same_pad(w, kw, sw, dw, &d->ow, &d->pl, &d->pr);
	} else {
		d->pt = d->pb = pad_h;
		d->pl = d->pr = pad_w;
		d->oh = (h + 2 * pad_h - ((kh - 1) * dh + 1)) / sh + 1;
		d->ow = (w + 2 * pad_w - ((kw - 1) * dw + 1)) / sw + 1;
	}
}

void wf_pool_desc_init(wf_pool_desc *d, wf_pool_kind kind, int n, int h, int w, int c, int kh,
		       int kw, int sh, int sw, int same)
{
	memset(d, 0, sizeof(*d));
	d->kind = kind;
	d->n = n, d->h = h, d->w = w, d->c = c;
	d->kh = kh, d->kw = kw, d->sh = sh, d->sw = sw;
	if (same) {
		wf_same_pad(h, kh, sh, 1, &d->oh, &d->pt, &d->pb);
		wf_same_pad(w, kw, sw, 1, &d->ow, &d->pl, &d->pr);
	} else {
		d->oh = (h - kh) / sh + 1;
		d->ow = (w - kw) / sw + 1;
	}
}

typedef int (*backend_init_fn)(wf_backend *be, wf_err *err);

static const struct {
	const char *name;
	backend_init_fn init;
} backends[] = {
	{"ref", wf_backend_ref_init},
#ifdef WEFT_HAVE_CPU
	{"cpu", wf_backend_cpu_init},
#endif
#ifdef WEFT_HAVE_CUDA
	{"cuda", wf_backend_cuda_init},
#endif
};

const char *wf_backend_list(void)
{
	return "ref"
#ifdef WEFT_HAVE_CPU
	       " cpu"
#endif
#ifdef WEFT_HAVE_CUDA
	       " cuda"
#endif
		;
}

static int try_init(wf_backend *be, const char *name, wf_err *err)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strcmp(backends[i].name, name) == 0)
			return backends[i].init(be, err);
	return wf_errf(err, WF_ENOTSUP,
		       "device '%s' is not built into this binary (built: %s; expected one of "
		       "ref, cpu, cuda, auto)",
		       name, wf_backend_list());
}

int wf_backend_create(wf_backend **out, const char *name, int threads, wf_err *err)
{
	wf_backend_opts o = {.threads = threads};
	return wf_backend_create_opts(out, name, &o, err);
}

int wf_backend_create_opts(wf_backend **out, const char *name, const wf_backend_opts *o,
			   wf_err *err)
{
	wf_backend *be = calloc(1, sizeof(*be));
	if (!be)
		return wf_errf(err, WF_ENOMEM, "out of memory creating backend");
	if (o)
		be->opts = *o;
	be->threads = be->opts.threads;
	int rc;
	if (!name || strcmp(name, "auto") == 0) {
		rc = WF_ENOTSUP;
#ifdef WEFT_HAVE_CUDA
		wf_err quiet = {0};
		rc = try_init(be, "cuda", &quiet);
#endif
		if (rc != 0)
			rc = try_init(be, strstr(wf_backend_list(), "cpu") ? "cpu" : "ref", err);
	} else {
		rc = try_init(be, name, err);
	}
	if (rc != 0) {
		free(be);
		return rc;
	}
	*out = be;
	return 0;
}

const char *wf_backend_precision_canon(const char *s)
{
	static const struct {
		const char *name, *is;
	} names[] = {{"fp32", "fp32"},	  {"float32", "fp32"},	{"tf32", "tf32"},
		     {"bf16", "bf16"},	  {"bfloat16", "bf16"}, {"fp16", "fp16"},
		     {"float16", "fp16"}, {"int8", "int8"},	{"auto", "auto"}};
	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i].name) == 0)
			return names[i].is;
	return NULL;
}

int wf_backend_precision_fell_back(const char *want, const char *used)
{
	const char *w = wf_backend_precision_canon(want);
	return w && used && strcmp(w, "auto") != 0 && strcmp(w, used) != 0;
}

int wf_backend_set_precision(wf_backend *be, const char *want, const char **used, wf_err *err)
{
	const char *p = wf_backend_precision_canon(want);
	if (!p)
		return wf_errf(err, WF_EINVAL, "precision '%s' is not one of " WF_PRECISIONS,
			       want ? want : "(null)");
	be->int8 = strcmp(p, "int8") == 0 && (be->caps & WF_CAP_INT8);
	if (strcmp(p, "auto") == 0)
		p = be->caps & WF_CAP_BF16 ? "bf16" : "fp32";
	else if (strcmp(p, "int8") == 0 || (strcmp(p, "bf16") == 0 && !(be->caps & WF_CAP_BF16)))
		p = "fp32"; /* int8 is per conv, in inference plans: the rest computes in fp32 */
	if (be->ops->set_precision) {
		int rc = be->ops->set_precision(be, p, err);
		if (rc == WF_ENOTSUP)
			rc = be->ops->set_precision(be, p = "fp32", err);
		if (rc)
			return rc;
	} else if (strcmp(p, "bf16") != 0) {
		p = "fp32"; /* tf32 and fp16 are the cuda device's */
	}
	be->bf16 = strcmp(p, "bf16") == 0;
	if (used)
		*used = be->int8 ? "int8" : p;
	return 0;
}

void wf_backend_plan_free(wf_backend *be, wf_plan **plan)
{
	if (plan && *plan) {
		if (be->ops->plan_free)
			be->ops->plan_free(be, *plan);
		*plan = NULL;
	}
}

void wf_backend_free(wf_backend *be)
{
	if (!be)
		return;
	if (be->ops && be->ops->destroy)
		be->ops->destroy(be);
	free(be->prof);
	free(be);
}
