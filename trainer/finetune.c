/* finetune.c: fine-tuning a pretrained model (model.init_from: copy the
 * layers that match by name and shape; model.freeze: mark layers
 * non-trainable), on the run's state (see train_priv.h). */
#include "trainer/train_priv.h"

#include "common/log.h"
#include "model/keras.h"
#include "trainer/checkpoint.h"
#include "trainer/evaluate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* model.init_from as a model file: itself, or a directory's model.h5, or
 * its newest complete checkpoint's. */
static int init_source_file(const char *from, char *file, size_t size, wf_err *err)
{
	struct stat st;
	if (stat(from, &st) != 0)
		return wf_errf(err, WF_EIO, "model.init_from: %s: %s", from, strerror(errno));
	snprintf(file, size, "%s", from);
	if (!S_ISDIR(st.st_mode)) {
		int rc = wf_keras_check_archive(from, err);
		if (rc != 0)
			wf_err_wrap(err, "model.init_from");
		return rc;
	}
	snprintf(file, size, "%s/model.h5", from);
	if (stat(file, &st) == 0)
		return 0;
	char dir[4200];
	long step;
	int found = wf_ckpt_latest_loadable(from, &step, dir, sizeof(dir), err);
	if (found < 0)
		return wf_err_wrap(err, "model.init_from"), found;
	if (!found)
		return wf_errf(err, WF_EINVAL,
			       "model.init_from: %s holds neither model.h5 nor a complete "
			       "checkpoint (step-N/model.h5)",
			       from);
	snprintf(file, size, "%s/model.h5", dir);
	return 0;
}

/* model.init_from: copy every layer whose name and parameter shapes match;
 * say what was not. The source's preprocessing comes along (its weights
 * expect it). */
int wf_finetune_load_source(run *r, wf_err *err)
{
	int rc = init_source_file(r->cfg->model.init_from, r->src_file, sizeof(r->src_file), err);
	if (rc == 0 && (rc = wf_model_load(&r->src, &r->src_meta, r->src_file, err)) != 0)
		wf_err_wrap(err, "model.init_from");
	return rc;
}

/* The new classes (dst) by name in the source's (src): map[j] is the source
 * index of class j, -1 for a class the source does not have. Returns how
 * many are shared; 0 when a list is missing or a name is there twice. */
static int class_map(const wf_model_meta *src, const wf_model_meta *dst, int *map)
{
	if (!src->class_names || !dst->class_names)
		return 0;
	int shared = 0;
	for (int j = 0; j < dst->nclasses; j++) {
		map[j] = -1;
		for (int i = 0; i < src->nclasses; i++) {
			if (!src->class_names[i] || !dst->class_names[j] ||
			    strcmp(src->class_names[i], dst->class_names[j]) != 0)
				continue;
			if (map[j] >= 0)
				return 0; /* a name twice */
			map[j] = i;
		}
		for (int q = 0; q < j && map[j] >= 0; q++)
			if (map[q] == map[j])
				return 0;
		shared += map[j] >= 0;
	}
	return shared;
}

/* 1 when the output layer's views of m (k classes) and src (sk classes) are
 * the same but for the class dimension. */
static int heads_match(const wf_model *m, const wf_model *src, int k, int sk)
{
	const wf_layer *l = &m->layers[m->output];
	int views[6] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta, l->s_mean, l->s_var};
	for (int q = 0; q < 6; q++) {
		if (views[q] < 0)
			continue;
		const wf_view *v = &m->views[views[q]], *s = wf_model_view(src, v->name);
		if (!s || s->ndim != v->ndim || v->shape[v->ndim - 1] != k ||
		    s->shape[s->ndim - 1] != sk ||
		    memcmp(s->shape, v->shape, sizeof(int) * (size_t)(v->ndim - 1)) != 0)
			return 0;
	}
	return 1;
}

/* 1 when every parameter of layer i (the output) has the k classes as its
 * last dimension (a dense or 1x1-conv head: kernel [.., k], bias [k]). */
static int head_by_class(const wf_model *m, int i, int k)
{
	const wf_layer *l = &m->layers[i];
	int views[6] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta, l->s_mean, l->s_var};
	int any = 0;
	for (int q = 0; q < 6; q++) {
		if (views[q] < 0)
			continue;
		const wf_view *v = &m->views[views[q]];
		if (v->ndim < 1 || v->shape[v->ndim - 1] != k)
			return 0;
		any = 1;
	}
	return any;
}

/* Copy view s of src into v of m; with map, the last dimensions hold the
 * classes and entry j comes from the source's class map[j] (the output
 * layer's kernel and bias taken by class name; -1: a new class keeps its
 * fresh initialisation). */
static void copy_view(wf_model *m, const wf_view *v, const wf_model *src, const wf_view *s,
		      const int *map)
{
	float *dst = (v->trainable ? m->params : m->state) + v->offset;
	const float *from = (s->trainable ? src->params : src->state) + s->offset;
	if (!map) {
		memcpy(dst, from, v->count * sizeof(float));
		return;
	}
	size_t k = (size_t)v->shape[v->ndim - 1], sk = (size_t)s->shape[s->ndim - 1];
	for (size_t row = 0; row < v->count / k; row++)
		for (size_t j = 0; j < k; j++)
			if (map[j] >= 0)
				dst[row * k + j] = from[row * sk + (size_t)map[j]];
}

int wf_finetune_init_from(run *r, wf_err *err)
{
	const wf_config *c = r->cfg;
	wf_model *src = r->src;
	wf_model_meta sm = r->src_meta;
	const char *file = r->src_file;
	int rc = 0;
	wf_model *m = r->m;
	int copied = 0, with_params = 0;
	wf_err names = {0};
	/* a head of the same size for other classes is no head; the same classes in
	 * another order are taken by name (below) */
	int new_head = sm.nclasses == r->meta.nclasses &&
		       wf_check_class_names(sm.class_names, sm.nclasses, file, r->meta.class_names,
					    r->meta.nclasses, c->data.train, &names) != 0;
	char missing[2048] = "";
	size_t mlen = 0;
	int nk = r->meta.nclasses;
	/* classes shared by name: the head's rows are taken by class name (all
	 * of them in another order, or those of the shared classes) */
	int *perm = NULL, partial = 0;
	if (!(r->initialised = calloc((size_t)m->nlayers, 1)) ||
	    !(perm = malloc(sizeof(int) * (size_t)(nk + 1)))) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto out;
	}
	int shared = (new_head || sm.nclasses != nk) ? class_map(&sm, &r->meta, perm) : 0;
	if (shared && head_by_class(m, m->output, nk) && heads_match(m, src, nk, sm.nclasses)) {
		partial = shared < nk || sm.nclasses != nk;
		new_head = 0;
		if (!partial)
			wf_info("model.init_from: %s holds the classes of %s in another order: "
				"the output layer's rows are taken by class name",
				c->data.train, file);
		else if (shared == nk)
			wf_info("model.init_from: %s holds %d of the %d classes of %s: the output "
				"layer keeps their rows (by class name) and trains on",
				c->data.train, nk, sm.nclasses, file);
		else
			wf_info("model.init_from: %s shares %d of its %d classes with the %d of "
				"%s: the output layer keeps their rows (by class name), the %d "
				"others start fresh",
				c->data.train, shared, nk, sm.nclasses, file, nk - shared);
	} else {
		free(perm);
		perm = NULL;
	}
	if (new_head)
		wf_info("model.init_from: %s; the output layer starts fresh", names.msg);
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		int views[6] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta, l->s_mean, l->s_var};
		int any = 0, ok = 1;
		for (int k = 0; k < 6; k++) {
			if (views[k] < 0)
				continue;
			any = 1;
			const wf_view *v = &m->views[views[k]];
			const wf_view *s = wf_model_view(src, v->name);
			ok = ok && s && s->count == v->count && s->ndim == v->ndim &&
			     memcmp(s->shape, v->shape, sizeof(int) * (size_t)v->ndim) == 0;
		}
		if (i == m->output && perm)
			ok = 1; /* checked by heads_match */
		if (!any)
			continue;
		with_params++;
		if (!ok || (new_head && i == m->output)) {
			if (mlen < sizeof(missing) - 1)
				mlen += (size_t)snprintf(missing + mlen, sizeof(missing) - mlen,
							 "%s%s", mlen ? ", " : "", l->name);
			continue;
		}
		for (int k = 0; k < 6; k++) {
			if (views[k] < 0)
				continue;
			const wf_view *v = &m->views[views[k]];
			const wf_view *s = wf_model_view(src, v->name);
			copy_view(m, v, src, s, i == m->output ? perm : NULL);
		}
		/* a head with new classes is not "backbone": it trains */
		r->initialised[i] = !(partial && i == m->output);
		copied++;
	}
	if (!copied) {
		rc = wf_errf(err, WF_EINVAL,
			     "model.init_from: no layer of %s matches model %s by name and shape "
			     "(is it the same architecture?)",
			     file, c->model.name);
		goto out;
	}
	wf_info("model.init_from: %d of %d layers initialised from %s%s%s", copied, with_params,
		file, copied < with_params ? "; not initialised (new): " : "",
		copied < with_params ? missing : "");
	r->meta.scale = sm.scale;
	memcpy(r->meta.mean, sm.mean, sizeof(r->meta.mean));
	memcpy(r->meta.std, sm.std, sizeof(r->meta.std));
	memcpy(r->meta.channel_order, sm.channel_order, sizeof(r->meta.channel_order));
	r->meta.pre_in_model = sm.pre_in_model;
out:
	free(perm);
	wf_model_free(src);
	r->src = NULL;
	return rc;
}

/* model.freeze: mark the layers (before the executor is built). */
int wf_finetune_freeze(run *r, wf_err *err)
{
	const wf_config *c = r->cfg;
	wf_model *m = r->m;
	if (!c->model.freeze[0])
		return 0;
	char list[sizeof(c->model.freeze)];
	snprintf(list, sizeof(list), "%s", c->model.freeze);
	int n = 0;
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		int hit = 0;
		for (int i = 1; i < m->nlayers; i++) {
			wf_layer *l = &m->layers[i];
			int yes;
			if (strcmp(t, "backbone") == 0)
				yes = r->initialised ? r->initialised[i] : i != m->output;
			else
				yes = strncmp(l->name, t, strlen(t)) == 0;
			if (yes) {
				hit = 1;
				n += !l->frozen;
				l->frozen = 1;
			}
		}
		if (!hit)
			return wf_errf(err, WF_EINVAL, "model.freeze: no layer of %s matches '%s'",
				       c->model.name, t);
	}
	int trainable = 0;
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		trainable += !l->frozen && (l->p_kernel >= 0 || l->p_gamma >= 0);
	}
	if (!trainable)
		return wf_errf(err, WF_EINVAL, "model.freeze: '%s' freezes every layer of %s",
			       c->model.freeze, c->model.name);
	wf_info("model.freeze: %d layers frozen, %d with parameters still trained", n, trainable);
	return 0;
}
