#include "model/batchplan.h"

#include "common/cancel.h"
#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sequence of several forwards replaces the one forward that holds all n
 * rows only when it measured at least this much faster: a few forwards
 * timed right after a warm-up flatter small batches (on a 2-vCPU Xeon,
 * resnet50 at batch 4 timed 43-50 ms per image at load but ran 57 ms per
 * image sustained, against 47 at batch 16). */
#define WF_BATCHPLAN_SPLIT_GAIN 0.85

/* first[n] for every n from the measured seconds per forward. */
static int choose(wf_batchplan *p)
{
	double *cost = malloc(sizeof(double) * ((size_t)p->max_batch + 1));
	if (!cost)
		return WF_ENOMEM;
	cost[0] = 0;
	for (int n = 1; n <= p->max_batch; n++) {
		cost[n] = -1;
		for (int b = p->nsizes - 1; b >= 0; b--) { /* ties: the larger batch */
			int rest = n > p->size[b] ? n - p->size[b] : 0;
			double c = p->secs[b] + cost[rest];
			if (cost[n] < 0 || c < cost[n]) {
				cost[n] = c;
				p->first[n] = (unsigned char)b;
			}
		}
		int one = 0; /* the smallest size that holds n rows in one forward */
		while (p->size[one] < n)
			one++;
		if (p->size[p->first[n]] < n && cost[n] > WF_BATCHPLAN_SPLIT_GAIN * p->secs[one]) {
			cost[n] = p->secs[one];
			p->first[n] = (unsigned char)one;
		}
	}
	free(cost);
	return 0;
}

/* One warm-up forward of executor b over the staging rows. */
static int forward(wf_batchplan *p, int b, wf_err *err)
{
	if (wf_exec_forward(p->ex[b], p->in, p->size[b], 0, 0) != 0 ||
	    wf_exec_logits(p->ex[b], p->out) != 0)
		return wf_errf(err, WF_EINTERNAL, "warm-up forward at batch %d: %s", p->size[b],
			       wf_exec_error(p->ex[b]));
	return 0;
}

int wf_batchplan_create(wf_batchplan **out, wf_model *m, wf_backend *be, int max_batch,
			size_t max_bytes, const wf_batchplan *like, wf_err *err)
{
	*out = NULL;
	if (max_batch < 1)
		return wf_errf(err, WF_EINVAL, "batch plan: max_batch must be >= 1, got %d",
			       max_batch);
	wf_batchplan *p = calloc(1, sizeof(*p));
	if (!p)
		return wf_errf(err, WF_ENOMEM, "out of memory for a batch plan");
	p->max_batch = max_batch;
	p->per = (size_t)m->in_h * m->in_w * m->in_c;
	p->classes = (size_t)m->classes;
	p->first = calloc((size_t)max_batch + 1, 1);
	p->in = calloc(2 * (size_t)max_batch * p->per, sizeof(float));
	p->out = calloc(2 * (size_t)max_batch * p->classes, sizeof(float));
	int rc = 0;
	if (!p->first || !p->in || !p->out) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory for batch buffers (batch %d)",
			     max_batch);
		goto fail;
	}
	for (int b = 1; p->nsizes < WF_BATCHPLAN_MAX_SIZES; b *= 2) {
		int size = b < max_batch ? b : max_batch;
		p->size[p->nsizes++] = size;
		if (size == max_batch)
			break;
	}
	p->bytes = (2 * (size_t)max_batch * (p->per + p->classes)) * sizeof(float);
	if (like && (like->max_batch != max_batch || like->nsizes != p->nsizes))
		like = NULL;
	for (int b = 0; b < p->nsizes; b++) {
		if ((rc = wf_cancel_check("batch plan", err)) != 0 ||
		    (rc = wf_exec_create(&p->ex[b], m, be, p->size[b], 0, err)) != 0)
			goto fail;
		/* the plan composes a batch from its smaller executors itself:
		 * only the largest tries tiles (each trial costs forwards at load) */
		if (p->size[b] < max_batch)
			wf_exec_whole_batches(p->ex[b]);
		size_t made = wf_exec_bytes(p->ex[b]);
		p->bytes += made;
		if (max_bytes && p->bytes > max_bytes) {
			rc = wf_errf(err, WF_ENOMEM,
				     "executors up to batch %d already take %.1f MiB, over the "
				     "budget of %.1f MiB",
				     p->size[b], p->bytes / 1048576.0, max_bytes / 1048576.0);
			goto fail;
		}
		/* the first forward builds the plans; an executor still tuning
		 * (branches tried) runs on until it has chosen, planning its
		 * memory again: all untimed; then the fastest of at least two, as
		 * long as they take less than 0.25 s together: one slow forward (a
		 * page fault storm, another process) would otherwise fix the plan
		 * for the server's life */
		for (int rep = 0; rc == 0 && (rep == 0 || wf_exec_tuning(p->ex[b])); rep++)
			rc = forward(p, b, err);
		if (rc)
			goto fail;
		p->bytes = p->bytes - made + wf_exec_bytes(p->ex[b]); /* after any re-plan */
		if (like) {
			p->secs[b] = like->secs[b];
			continue;
		}
		double spent = 0;
		p->secs[b] = -1;
		for (int rep = 0; rep < 2 || (rep < 4 && spent < 0.25); rep++) {
			double t0 = wf_now();
			if ((rc = forward(p, b, err)) != 0)
				goto fail;
			double el = wf_now() - t0;
			spent += el;
			if (p->secs[b] < 0 || el < p->secs[b])
				p->secs[b] = el;
		}
	}
	if ((rc = choose(p)) != 0) {
		wf_errf(err, rc, "out of memory for a batch plan");
		goto fail;
	}
	*out = p;
	return 0;
fail:
	wf_batchplan_free(p);
	return rc;
}

int wf_batchplan_run(wf_batchplan *p, int n, wf_err *err)
{
	if (n < 1 || n > p->max_batch)
		return wf_errf(err, WF_EINVAL, "batch plan: %d rows, want 1..%d", n, p->max_batch);
	for (int off = 0; off < n;) {
		int b = p->first[n - off], size = p->size[b];
		int rows = WF_MIN(size, n - off);
		if (size > rows) /* a padded last forward */
			memset(p->in + (size_t)(off + rows) * p->per, 0,
			       (size_t)(size - rows) * p->per * sizeof(float));
		if (wf_exec_forward(p->ex[b], p->in + (size_t)off * p->per, size, 0, 0) != 0 ||
		    wf_exec_logits(p->ex[b], p->out + (size_t)off * p->classes) != 0)
			return wf_errf(err, WF_EINTERNAL, "inference failed: %s",
				       wf_exec_error(p->ex[b]));
		off += rows;
	}
	return 0;
}

void wf_batchplan_describe(const wf_batchplan *p, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = 0;
	for (int b = 0; b < p->nsizes && len < cap; b++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%d: %.1f ms%s", b ? ", " : "",
					p->size[b], p->secs[b] * 1e3,
					wf_exec_tile_rows(p->ex[b]) ? " (as tiles)" : "");
	for (int n = p->max_batch, off = 0; off < n && len < cap;) {
		int size = p->size[p->first[n - off]];
		len += (size_t)snprintf(buf + len, cap - len, "%s%d", off ? " + " : "; runs as ",
					size);
		off += WF_MIN(size, n - off);
	}
	if (len < cap)
		snprintf(buf + len, cap - len, " for a batch of %d", p->max_batch);
}

void wf_batchplan_force(wf_batchplan *p, int idx)
{
	if (idx < 0) {
		choose(p);
		return;
	}
	for (int n = 1; n <= p->max_batch; n++)
		p->first[n] = (unsigned char)WF_MIN(idx, p->nsizes - 1);
}

void wf_batchplan_free(wf_batchplan *p)
{
	if (!p)
		return;
	for (int b = 0; b < p->nsizes; b++)
		wf_exec_free(p->ex[b]);
	free(p->first);
	free(p->in);
	free(p->out);
	free(p);
}
