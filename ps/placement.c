/* placement.c: chunking of the parameter vector and size-balanced greedy
 * assignment of chunks to servers. */
#include "ps/placement.h"

#include <stdlib.h>
#include <string.h>

typedef struct builder {
	wf_ps_chunk *chunks;
	int n, cap;
	size_t cur_off, cur_count; /* the chunk being filled */
} builder;

static int push_chunk(builder *b, size_t off, size_t count)
{
	if (!count)
		return 0;
	if (b->n == b->cap) {
		int cap = b->cap ? 2 * b->cap : 64;
		wf_ps_chunk *c = realloc(b->chunks, (size_t)cap * sizeof(*c));
		if (!c)
			return WF_ENOMEM;
		b->chunks = c;
		b->cap = cap;
	}
	b->chunks[b->n++] = (wf_ps_chunk){.offset = off, .count = count, .server = -1};
	return 0;
}

static int close_current(builder *b)
{
	int rc = push_chunk(b, b->cur_off, b->cur_count);
	b->cur_off += b->cur_count;
	b->cur_count = 0;
	return rc;
}

/* Add the segment [off, off+count) (a view or a gap between views). */
static int add_segment(builder *b, size_t off, size_t count, size_t maxf)
{
	int rc;
	if (count > maxf) {
		if ((rc = close_current(b)))
			return rc;
		size_t pieces = (count + maxf - 1) / maxf;
		for (size_t i = 0; i < pieces; i++) {
			size_t a = count * i / pieces, e = count * (i + 1) / pieces;
			if ((rc = push_chunk(b, off + a, e - a)))
				return rc;
		}
		b->cur_off = off + count;
		return 0;
	}
	if (b->cur_count + count > maxf && (rc = close_current(b)))
		return rc;
	if (!b->cur_count)
		b->cur_off = off;
	b->cur_count += count;
	return 0;
}

static int cmp_view_offset(const void *a, const void *b)
{
	const wf_view *x = *(const wf_view *const *)a, *y = *(const wf_view *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Chunk order for assignment: larger first, then lower index. */
static int cmp_chunk_size(const void *a, const void *b, void *arg)
{
	const wf_ps_chunk *chunks = arg;
	int i = *(const int *)a, j = *(const int *)b;
	size_t ci = chunks[i].count, cj = chunks[j].count;
	if (ci != cj)
		return ci > cj ? -1 : 1;
	return i - j;
}

int wf_ps_place(wf_ps_placement *out, const wf_view *views, int nviews, size_t nparams,
		int nservers, size_t chunk_bytes, wf_err *err)
{
	memset(out, 0, sizeof(*out));
	if (!chunk_bytes)
		chunk_bytes = WF_PS_CHUNK_BYTES_DEFAULT;
	if (nservers < 1)
		return wf_errf(err, WF_EINVAL, "placement: %d parameter servers (need at least 1)",
			       nservers);
	if (!nparams)
		return wf_errf(err, WF_EINVAL, "placement: the model has no parameters");
	if (chunk_bytes < sizeof(float))
		return wf_errf(err, WF_EINVAL, "placement: chunk_bytes %zu below one float",
			       chunk_bytes);
	size_t maxf = chunk_bytes / sizeof(float);
	builder b = {0};
	const wf_view **sorted = NULL;
	int *order = NULL;
	int rc = WF_ENOMEM;
	if (nviews > 0 && !(sorted = calloc((size_t)nviews, sizeof(*sorted))))
		goto fail;
	int ns = 0;
	for (int i = 0; i < nviews; i++)
		if (views[i].trainable)
			sorted[ns++] = &views[i];
	if (ns)
		qsort(sorted, (size_t)ns, sizeof(*sorted), cmp_view_offset);
	size_t pos = 0;
	for (int i = 0; i < ns; i++) {
		const wf_view *v = sorted[i];
		if (v->offset < pos || v->offset + v->count > nparams) {
			rc = wf_errf(err, WF_EINVAL,
				     "placement: view %s [%zu, %zu) overlaps another or lies "
				     "outside the %zu parameters",
				     v->name, v->offset, v->offset + v->count, nparams);
			goto fail;
		}
		if (v->offset > pos && (rc = add_segment(&b, pos, v->offset - pos, maxf)))
			goto nomem;
		if ((rc = add_segment(&b, v->offset, v->count, maxf)))
			goto nomem;
		pos = v->offset + v->count;
	}
	if (pos < nparams && (rc = add_segment(&b, pos, nparams - pos, maxf)))
		goto nomem;
	if ((rc = close_current(&b)))
		goto nomem;

	out->load = calloc((size_t)nservers, sizeof(*out->load));
	order = malloc((size_t)b.n * sizeof(*order));
	if (!out->load || !order) {
		rc = WF_ENOMEM;
		goto nomem;
	}
	for (int i = 0; i < b.n; i++)
		order[i] = i;
	qsort_r(order, (size_t)b.n, sizeof(*order), cmp_chunk_size, b.chunks);
	for (int k = 0; k < b.n; k++) {
		int best = 0;
		for (int s = 1; s < nservers; s++)
			if (out->load[s] < out->load[best])
				best = s;
		b.chunks[order[k]].server = best;
		out->load[best] += b.chunks[order[k]].count;
	}
	out->nparams = nparams;
	out->chunk_bytes = chunk_bytes;
	out->nservers = nservers;
	out->nchunks = b.n;
	out->chunks = b.chunks;
	free(sorted);
	free(order);
	return 0;
nomem:
	if (rc == WF_ENOMEM)
		wf_errf(err, WF_ENOMEM, "placement: out of memory for %d chunks", b.n);
fail:
	free(sorted);
	free(order);
	free(b.chunks);
	free(out->load);
	memset(out, 0, sizeof(*out));
	return rc;
}

void wf_ps_placement_free(wf_ps_placement *p)
{
	if (!p)
		return;
	free(p->chunks);
	free(p->load);
	memset(p, 0, sizeof(*p));
}

int wf_ps_placement_count(const wf_ps_placement *p, int s)
{
	int n = 0;
	for (int i = 0; i < p->nchunks; i++)
		n += p->chunks[i].server == s;
	return n;
}
