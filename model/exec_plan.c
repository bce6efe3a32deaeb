/* exec_plan.c: the executor's memory. Every layer output, batch-norm saved
 * statistics, dropout masks, labels, probabilities and losses are placed in
 * one activation arena by a first-fit planner over the order the layers
 * run in (an output's memory is released after its last reader in an
 * inference executor, kept for backward in a training one); activation
 * gradients in a second arena, each live from its first write in backward
 * order to its own layer's backward. Layers that alias another's memory
 * (flatten, inference dropout, layers fused into a conv, paddings applied
 * inside their conv, equal layers: same_as) are resolved here too. */
#include "model/model.h"
#include "model/model_priv.h"
#include "model/exec_priv.h"

#include "common/util.h"

#include <stdlib.h>
#include <string.h>

/* ---- memory planning ---------------------------------------------------- */

static size_t align_up(size_t x)
{
	return (x + WF_EXEC_ALIGN - 1) & ~(size_t)(WF_EXEC_ALIGN - 1);
}

/* A first-fit planner of offsets in one arena; blocks are kept sorted. */
typedef struct planner {
	size_t top; /* arena size so far (bytes) */
	int nlive;
	size_t *boff, *bsize; /* live blocks, sorted by offset */
	int *bid;
} planner;

static int planner_init(planner *p, int cap)
{
	memset(p, 0, sizeof(*p));
	p->boff = malloc(sizeof(size_t) * (size_t)cap);
	p->bsize = malloc(sizeof(size_t) * (size_t)cap);
	p->bid = malloc(sizeof(int) * (size_t)cap);
	return p->boff && p->bsize && p->bid ? 0 : WF_ENOMEM;
}

static void planner_free(planner *p)
{
	free(p->boff);
	free(p->bsize);
	free(p->bid);
}

/* Offset of a new live block of bytes for id. */
static size_t planner_alloc(planner *p, int id, size_t bytes)
{
	bytes = align_up(bytes ? bytes : 1);
	size_t off = 0;
	int at = 0;
	for (; at < p->nlive; at++) {
		if (p->boff[at] - off >= bytes)
			break;
		off = p->boff[at] + p->bsize[at];
	}
	memmove(p->boff + at + 1, p->boff + at, sizeof(size_t) * (size_t)(p->nlive - at));
	memmove(p->bsize + at + 1, p->bsize + at, sizeof(size_t) * (size_t)(p->nlive - at));
	memmove(p->bid + at + 1, p->bid + at, sizeof(int) * (size_t)(p->nlive - at));
	p->boff[at] = off, p->bsize[at] = bytes, p->bid[at] = id;
	p->nlive++;
	if (off + bytes > p->top)
		p->top = off + bytes;
	return off;
}

static void planner_release(planner *p, int id)
{
	for (int at = 0; at < p->nlive; at++) {
		if (p->bid[at] != id)
			continue;
		p->nlive--;
		memmove(p->boff + at, p->boff + at + 1, sizeof(size_t) * (size_t)(p->nlive - at));
		memmove(p->bsize + at, p->bsize + at + 1, sizeof(size_t) * (size_t)(p->nlive - at));
		memmove(p->bid + at, p->bid + at + 1, sizeof(int) * (size_t)(p->nlive - at));
		return;
	}
}

/* The layer whose memory layer i's output is (flatten, inference dropout,
 * layers fused into a conv), or -1 when it has its own. */
int wf_exec_alias_src(const wf_exec *ex, int i)
{
	wf_layer_type t = ex->m->layers[i].type;
	if (ex->fuse_into && ex->fuse_into[i] >= 0)
		return ex->fuse_into[i];
	if (ex->pad_skip && ex->pad_skip[i])
		return ex->m->layers[i].inputs[0];
	if (ex->res_inplace && ex->res_inplace[i])
		return ex->fuse_res[i];
	if (ex->pool_in_add && ex->pool_in_add[i])
		return ex->m->layers[i].inputs[0];
	if (ex->same_as && ex->same_as[i] >= 0)
		return ex->same_as[i];
	return t == WF_LAYER_FLATTEN || (t == WF_LAYER_DROPOUT && !ex->training)
		       ? ex->m->layers[i].inputs[0]
		       : -1;
}

int wf_exec_is_alias(const wf_exec *ex, int i)
{
	return wf_exec_alias_src(ex, i) >= 0;
}

/* The only layer reading layer j's output, or -1 (none, several, or j is the
 * model's output). */
int wf_exec_sole_consumer(const wf_model *m, int j)
{
	int who = -1;
	if (j == m->output)
		return -1;
	for (int i = j + 1; i < m->nlayers; i++)
		for (int k = 0; k < m->layers[i].ninputs; k++)
			if (m->layers[i].inputs[k] == j) {
				if (who >= 0)
					return -1;
				who = i;
			}
	return who;
}

/* The layer whose plan entries (out_bf16, qy, qyu8) say how layer j's
 * output is kept: through a padding its reader applies, the layer j is
 * fused into, an equal earlier layer (same_as). */
int wf_exec_planned_at(const wf_exec *ex, int j)
{
	while (ex->pad_skip[j])
		j = ex->m->layers[j].inputs[0];
	if (ex->fuse_into[j] >= 0)
		j = ex->fuse_into[j];
	if (ex->same_as && ex->same_as[j] >= 0)
		j = ex->same_as[j];
	return j;
}

/* Is layer j's output (through fusion aliases) kept in bf16? */
int wf_exec_is_bf16(const wf_exec *ex, int j)
{
	return ex->out_bf16[wf_exec_planned_at(ex, j)];
}

int wf_exec_root(const wf_exec *ex, int j)
{
	for (int a; (a = wf_exec_alias_src(ex, j)) >= 0;)
		j = a;
	return j;
}

size_t wf_exec_out_bytes(const wf_exec *ex, int i)
{
	return align_up((size_t)ex->max_batch * wf_layer_size(&ex->m->layers[i]) * sizeof(float));
}

/* Offsets of the activations, placed in the order seq (NULL: layer order);
 * an inference executor releases root j before it places seq[free_at[j]]
 * (free_at NULL: after its last reader). */
int wf_exec_plan_activations(wf_exec *ex, size_t *bytes, const int *seq, const int *free_at)
{
	wf_model *m = ex->m;
	int nl = m->nlayers, rc = WF_ENOMEM;
	size_t B = (size_t)ex->max_batch;
	int *owner = calloc((size_t)nl, sizeof(int));
	int *last = calloc((size_t)nl, sizeof(int));
	planner p;
	if (planner_init(&p, 4 * nl + 8) || !owner || !last)
		goto done;
	for (int i = 0; i < nl; i++) {
		owner[i] = wf_exec_is_alias(ex, i) ? owner[wf_exec_alias_src(ex, i)] : i;
		last[i] = i + 1;
	}
	for (int i = 0; i < nl; i++)
		for (int k = 0; k < m->layers[i].ninputs; k++)
			last[owner[m->layers[i].inputs[k]]] = i + 1;
	last[owner[m->output]] = nl + 1; /* logits are read after forward */
	if (free_at)
		memcpy(last, free_at, sizeof(int) * (size_t)nl);
	/* an inference executor's output first, apart from every other tensor:
	 * a forward run as tiles (exec_tile.c) keeps each tile's output rows
	 * there while the later tiles run every layer again */
	int out = ex->training ? -1 : owner[m->output];
	if (out >= 0)
		ex->own[out] = WF_EXEC_OFFSET(planner_alloc(&p, out, wf_exec_out_bytes(ex, out)));
	for (int at = 0;; at++) {
		/* an inference executor frees what no later layer reads */
		if (!ex->training)
			for (int j = 0; j < nl; j++)
				if (owner[j] == j && last[j] == at)
					planner_release(&p, j);
		if (at == nl)
			break;
		int i = seq ? seq[at] : at;
		const wf_layer *l = &m->layers[i];
		if (owner[i] == i && i != out)
			ex->own[i] = WF_EXEC_OFFSET(planner_alloc(&p, i, wf_exec_out_bytes(ex, i)));
		if (ex->training && l->type == WF_LAYER_BATCHNORM) {
			ex->save_mean[i] = WF_EXEC_OFFSET(
				planner_alloc(&p, nl + 2 * i, sizeof(float) * l->oc));
			ex->save_invstd[i] = WF_EXEC_OFFSET(
				planner_alloc(&p, nl + 2 * i + 1, sizeof(float) * l->oc));
		}
		if (ex->training && l->type == WF_LAYER_DROPOUT)
			ex->mask[i] =
				WF_EXEC_OFFSET(planner_alloc(&p, 3 * nl + i, B * wf_layer_size(l)));
	}
	ex->labels = WF_EXEC_OFFSET(planner_alloc(&p, 4 * nl, B * sizeof(int32_t)));
	ex->probs = WF_EXEC_OFFSET(
		planner_alloc(&p, 4 * nl + 1, B * (size_t)m->classes * sizeof(float)));
	ex->losses = WF_EXEC_OFFSET(planner_alloc(&p, 4 * nl + 2, B * sizeof(float)));
	*bytes = p.top;
	rc = 0;
done:
	planner_free(&p);
	free(owner);
	free(last);
	return rc;
}

/* Plan activation gradients in backward order: dact[j] lives from the
 * backward of its last consumer to its own. */
int wf_exec_plan_gradients(wf_exec *ex, size_t *bytes)
{
	wf_model *m = ex->m;
	int nl = m->nlayers;
	size_t B = (size_t)ex->max_batch, largest = 0;
	planner p;
	if (planner_init(&p, nl + 2)) {
		planner_free(&p);
		return WF_ENOMEM;
	}
	char *placed = ex->gdone; /* borrowed: reset below */
	memset(placed, 0, (size_t)nl);
	for (int i = 0; i < nl; i++)
		largest = WF_MAX(largest, wf_layer_size(&m->layers[i]));
	ex->scratch = WF_EXEC_OFFSET(planner_alloc(&p, nl, B * largest * sizeof(float)));
	ex->dact[m->output] = WF_EXEC_OFFSET(
		planner_alloc(&p, m->output, B * wf_layer_size(&m->layers[m->output]) * 4));
	placed[m->output] = 1;
	for (int i = nl - 1; i >= 1; i--) {
		const wf_layer *l = &m->layers[i];
		int into = wf_exec_grad_alias(ex, i);
		for (int k = 0; k < l->ninputs; k++) {
			int j = l->inputs[k];
			if (placed[j] || !ex->need_grad[j])
				continue;
			placed[j] = 1;
			ex->dact[j] = j == into ? ex->dact[i]
						: WF_EXEC_OFFSET(planner_alloc(
							  &p, j,
							  B * wf_layer_size(&m->layers[j]) *
								  sizeof(float)));
		}
		if (into >= 0)
			continue; /* into's backward reads it: released there */
		planner_release(&p, i);
		int r = wf_exec_sole_consumer(m, i);
		if (r >= 0 && wf_exec_grad_alias(ex, r) == i)
			planner_release(&p, r);
	}
	memset(placed, 0, (size_t)nl);
	*bytes = p.top;
	planner_free(&p);
	return 0;
}
