/* outputs.c: the outputs a request may ask for, and the output tensors of a
 * reply, for every front end. */
#include "serve/outputs.h"

#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wf_serve_outputs_all(wf_serve_output out[WF_SERVE_MAX_OUTPUTS], int binary)
{
	out[0] = (wf_serve_output){.logits = 0, .binary = binary};
	out[1] = (wf_serve_output){.logits = 1, .binary = binary};
	return 2;
}

int wf_serve_outputs_check(const char *const *names, const long *classification, int n,
			   wf_serve_output *out, wf_err *err)
{
	if (n > WF_SERVE_MAX_OUTPUTS)
		return wf_errf(err, WF_EINVAL,
			       "%d outputs requested; the model has 2, \"" WF_SERVE_OUTPUT_PROBS
			       "\" and \"" WF_SERVE_OUTPUT_LOGITS "\"",
			       n);
	for (int i = 0; i < n; i++) {
		const char *name = names[i];
		if (!name)
			return wf_errf(err, WF_EINVAL, "outputs[%d] has no \"name\"", i);
		if (!strcmp(name, WF_SERVE_OUTPUT_LOGITS))
			out[i].logits = 1;
		else if (!strcmp(name, WF_SERVE_OUTPUT_PROBS))
			out[i].logits = 0;
		else
			return wf_errf(err, WF_EINVAL,
				       "unknown output \"%.200s\"; the model has "
				       "\"" WF_SERVE_OUTPUT_PROBS "\" and \"" WF_SERVE_OUTPUT_LOGITS
				       "\"",
				       name);
		for (int j = 0; j < i; j++)
			if (out[j].logits == out[i].logits)
				return wf_errf(err, WF_EINVAL, "output \"%.200s\" requested twice",
					       name);
		if (classification[i] < 0)
			return wf_errf(err, WF_EINVAL,
				       "output \"%.200s\": \"classification\" must be a positive "
				       "integer",
				       name);
		out[i].classification = (int)WF_MIN(classification[i], 1L << 20);
		if (out[i].shm_region[0] && !out[i].shm_size)
			return wf_errf(err, WF_EINVAL,
				       "output \"%.200s\" names a shared_memory_region without "
				       "shared_memory_byte_size",
				       name);
	}
	return 0;
}

/* ---- classes ------------------------------------------------------------ */

void wf_serve_top_k(const float *p, int k, int top_k, int *idx)
{
	for (int t = 0; t < top_k; t++) {
		int best = -1;
		for (int j = 0; j < k; j++) {
			int taken = 0;
			for (int u = 0; u < t; u++)
				taken |= idx[u] == j;
			if (!taken && (best < 0 || p[j] > p[best]))
				best = j;
		}
		idx[t] = best;
	}
}

const char *wf_serve_class_name(char *const *labels, int j, char *buf, size_t cap)
{
	if (labels && labels[j])
		snprintf(buf, cap, "%s", labels[j]);
	else
		snprintf(buf, cap, "%d", j);
	return buf;
}

void wf_serve_softmax(const float *logits, float *probs, int n, int k)
{
	for (int i = 0; i < n; i++) {
		const float *l = logits + (size_t)i * k;
		float *p = probs + (size_t)i * k;
		float mx = l[0];
		for (int j = 1; j < k; j++)
			mx = l[j] > mx ? l[j] : mx;
		double sum = 0;
		for (int j = 0; j < k; j++) {
			p[j] = expf(l[j] - mx);
			sum += p[j];
		}
		for (int j = 0; j < k; j++)
			p[j] = (float)(p[j] / sum);
	}
}

int wf_serve_output_shape(int unbatched, long n, int width, int64_t dims[2])
{
	dims[0] = unbatched ? width : n;
	dims[1] = width;
	return unbatched ? 1 : 2;
}

/* ---- output tensors ------------------------------------------------------ */

/* KServe's classification extension: for each of the n samples of v [n,k],
 * its top classes as "score:index:label", each a BYTES element (4-byte
 * little-endian length, then the string), into *out (malloc'd). */
static int classification_bytes(const float *v, int n, int k, int top, char *const *labels,
				uint8_t **out, size_t *len)
{
	enum { CLS_CAP = 330 }; /* a score, an index and a label of up to 255 bytes */
	size_t cap = (size_t)n * top * (4 + 32) + 64, used = 0;
	uint8_t *buf = malloc(cap);
	int *idx = malloc(sizeof(*idx) * (size_t)k);
	if (!buf || !idx)
		goto oom;
	for (int s = 0; s < n; s++) {
		const float *p = v + (size_t)s * k;
		wf_serve_top_k(p, k, top, idx);
		for (int u = 0; u < top; u++) {
			char label[256], cls[CLS_CAP];
			int sl =
				snprintf(cls, sizeof(cls), "%f:%d:%s", (double)p[idx[u]], idx[u],
					 wf_serve_class_name(labels, idx[u], label, sizeof(label)));
			if (sl >= (int)sizeof(cls))
				sl = (int)sizeof(cls) - 1;
			if (used + 4 + (size_t)sl > cap) {
				cap = 2 * cap + 4 + (size_t)sl;
				uint8_t *grown = realloc(buf, cap);
				if (!grown)
					goto oom;
				buf = grown;
			}
			for (int b = 0; b < 4; b++)
				buf[used++] = (uint8_t)((uint32_t)sl >> (8 * b));
			memcpy(buf + used, cls, (size_t)sl);
			used += (size_t)sl;
		}
	}
	free(idx);
	*out = buf;
	*len = used;
	return 0;
oom:
	free(buf);
	free(idx);
	return WF_ENOMEM;
}

int wf_serve_tensors_make(const wf_serve_output *o, int nout, const float *logits,
			  const float *probs, int n, int k, int unbatched, char *const *labels,
			  wf_serve_shm *shm, wf_serve_tensor *t, wf_err *err)
{
	memset(t, 0, sizeof(*t) * (size_t)nout);
	for (int i = 0; i < nout; i++) {
		const float *v = o[i].logits ? logits : probs;
		t[i].name = o[i].logits ? WF_SERVE_OUTPUT_LOGITS : WF_SERVE_OUTPUT_PROBS;
		if (o[i].classification) {
			int top = WF_MIN(o[i].classification, k);
			t[i].datatype = "BYTES";
			t[i].ndim = wf_serve_output_shape(unbatched, n, top, t[i].dims);
			if (classification_bytes(v, n, k, top, labels, &t[i].owned, &t[i].len))
				return wf_errf(err, WF_ENOMEM, "out of memory building the reply");
			t[i].data = t[i].owned;
		} else {
			t[i].datatype = "FP32";
			t[i].ndim = wf_serve_output_shape(unbatched, n, k, t[i].dims);
			t[i].data = (const uint8_t *)v;
			t[i].len = (size_t)n * k * sizeof(float);
		}
		if (!o[i].shm_region[0])
			continue;
		int rc = wf_serve_shm_copy_in(shm, o[i].shm_region, o[i].shm_offset, o[i].shm_size,
					      t[i].data, t[i].len, t[i].name, err);
		if (rc)
			return rc;
		t[i].in_shm = 1;
		t[i].data = NULL;
		t[i].len = 0;
	}
	return 0;
}

void wf_serve_tensors_free(wf_serve_tensor *t, int n)
{
	for (int i = 0; t && i < n; i++) {
		free(t[i].owned);
		t[i].owned = NULL;
	}
}
