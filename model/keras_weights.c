/* keras_weights.c: the Keras importer's weight copy and preprocessing
 * (see keras.c). */
#include "model/keras_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- weights ------------------------------------------------------------------------ */

/* Weight name without scope and ":0" ("conv1/kernel:0" -> "kernel"). */
static void weight_key(const char *wn, char *key, size_t n)
{
	const char *base = strrchr(wn, '/') ? strrchr(wn, '/') + 1 : wn;
	snprintf(key, n, "%s", base);
	char *colon = strchr(key, ':');
	if (colon)
		*colon = '\0';
}

/* The legacy .h5 group of a weight: the layer's own, or for a layer of a
 * nested model the outermost nested model's (weights named "<layer>/key"). */
static void legacy_group(const wload *l, char *grp, size_t n)
{
	const char *slash = strchr(l->scope, '/');
	if (!l->scope[0])
		snprintf(grp, n, "%s", l->layer);
	else
		snprintf(grp, n, "%.*s", slash ? (int)(slash - l->scope) : (int)strlen(l->scope),
			 l->scope);
}

/* 1 when weight name wn ("scope/layer/key:0") is l's. */
static int weight_matches(const wload *l, const char *wn)
{
	char key[NM];
	weight_key(wn, key, sizeof(key));
	if (strcmp(key, l->key) != 0 && !(l->depthwise && strcmp(key, "kernel") == 0))
		return 0;
	if (!l->scope[0])
		return 1;
	/* a nested layer's weights: the segment before the key is the layer */
	const char *end = strrchr(wn, '/');
	if (!end)
		return 0;
	const char *start = end;
	while (start > wn && start[-1] != '/')
		start--;
	return (size_t)(end - start) == strlen(l->layer) &&
	       strncmp(start, l->layer, strlen(l->layer)) == 0;
}

int wf_keras_load_weights(kimp *k, wf_model *m)
{
	int rc = 0;
	char **wn = NULL;
	int nw = 0, idx = 0;
	char cur[3 * NM] = "", dpath[8 * NM];
	hid_t lg = -1;
	const wload *prev = NULL;
	for (int i = 0; i < k->nloads && !rc; i++) {
		if ((rc = wf_cancel_check(k->path, k->err)))
			break;
		const wload *l = &k->loads[i];
		int same = prev && strcmp(prev->layer, l->layer) == 0 &&
			   strcmp(prev->scope, l->scope) == 0;
		idx = same ? idx + 1 : 0; /* .keras: the layer's variables in order */
		prev = l;
		int found = -1;
		hid_t d = -1;
		if (k->v3) {
			/* <the layer's group>/vars/<i> */
			snprintf(dpath, sizeof(dpath), "%s/vars/%d", l->v3path, idx);
			d = H5Lexists(k->weights, dpath, H5P_DEFAULT) > 0
				    ? H5Dopen2(k->weights, dpath, H5P_DEFAULT)
				    : -1;
			if (d < 0) {
				rc = wf_keras_fail(
					k, WF_EFORMAT,
					"model.weights.h5: %s: missing (layer '%s' has weight "
					"'%s')",
					dpath, l->layer, l->key);
				break;
			}
		} else {
			char grp[3 * NM];
			legacy_group(l, grp, sizeof(grp));
			if (strcmp(cur, grp) != 0) {
				wf_h5_strs_free(wn, nw);
				wn = NULL, nw = 0;
				wf_h5_close(&lg);
				snprintf(cur, sizeof(cur), "%s", grp);
				lg = H5Lexists(k->weights, cur, H5P_DEFAULT) > 0
					     ? H5Gopen2(k->weights, cur, H5P_DEFAULT)
					     : -1;
				if (lg < 0) {
					rc = wf_keras_fail(
						k, WF_EFORMAT,
						"model_weights/%s: missing (layer '%s' has "
						"weights)",
						cur, cur);
					break;
				}
				if ((rc = wf_h5_attr_read_str_list(lg, "weight_names", &wn, &nw,
								   k->path, k->err)))
					break;
			}
			for (int w = 0; w < nw && found < 0; w++)
				if (weight_matches(l, wn[w]))
					found = w;
			if (found < 0) {
				rc = wf_keras_fail(
					k, WF_EFORMAT,
					"model_weights/%s: no weight '%s%s%s' in weight_names", cur,
					l->scope[0] ? l->layer : "", l->scope[0] ? "/" : "",
					l->key);
				break;
			}
			snprintf(dpath, sizeof(dpath), "model_weights/%s/%s", cur, wn[found]);
			d = H5Dopen2(lg, wn[found], H5P_DEFAULT);
		}
		const wf_view *v = wf_model_view(m, l->view);
		hid_t sp = d < 0 ? -1 : H5Dget_space(d);
		hsize_t dims[8];
		int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
		int ok = v && d >= 0 && nd >= 1 && nd <= 8;
		if (ok) {
			H5Sget_simple_extent_dims(sp, dims, NULL);
			size_t cnt = 1;
			for (int q = 0; q < nd; q++)
				cnt *= (size_t)dims[q];
			ok = cnt == v->count;
			if (ok && !l->depthwise) {
				ok = nd == v->ndim;
				for (int q = 0; ok && q < nd; q++)
					ok = dims[q] == (hsize_t)v->shape[q];
			}
		}
		if (!ok) {
			rc = wf_keras_fail(k, WF_EFORMAT,
					   "%s: missing or of the wrong shape for %s (%zu values)",
					   dpath, l->view, v ? v->count : 0);
		} else {
			float *dst = (v->trainable ? m->params : m->state) + v->offset;
			if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
				rc = wf_keras_fail(k, WF_EFORMAT, "%s: cannot be read", dpath);
		}
		wf_h5_close(&sp);
		wf_h5_close(&d);
	}
	wf_h5_strs_free(wn, nw);
	wf_h5_close(&lg);
	return rc;
}

/* ---- preprocessing ------------------------------------------------------------------- */

void wf_keras_set_meta(kimp *k, const char *model_name, wf_model_meta *meta)
{
	int c = k->b.in_c < 4 ? k->b.in_c : 4;
	for (int i = 0; i < 4; i++)
		meta->mean[i] = 0.0f, meta->std[i] = 1.0f;
	snprintf(meta->channel_order, sizeof(meta->channel_order), "RGB");
	meta->scale = 1.0f;
	meta->pre_in_model = k->have_pre;
	if (k->have_pre) {
		/* y = pa x + pc as (x * scale - mean) / std */
		int uniform = 1;
		for (int i = 1; i < c; i++)
			uniform &= k->pa[i] == k->pa[0];
		meta->scale = uniform ? (float)k->pa[0] : 1.0f;
		for (int i = 0; i < c; i++) {
			meta->std[i] = uniform ? 1.0f : (float)(1.0 / k->pa[i]);
			meta->mean[i] = (float)(-k->pc[i] * meta->std[i]);
		}
		return;
	}
	/* The Keras applications expect their preprocess_input outside the model
	 * (also when one is the base model of a transfer-learning model). */
	int h, w, cc;
	const char *zoo = NULL;
	for (int q = 0; q < 2 && !zoo; q++) {
		const char *mn = q ? k->base_name : model_name ? model_name : "";
		if (strncasecmp(mn, "mobilenetv2", 11) == 0 || strncasecmp(mn, "nasnet", 6) == 0)
			zoo = "mobilenetv2";
		else if (strcmp(mn, "resnet50") == 0 || strcmp(mn, "resnet101") == 0 ||
			 strcmp(mn, "resnet152") == 0)
			zoo = "resnet50";
	}
	if (zoo)
		wf_model_zoo_info(zoo, &h, &w, &cc, meta, NULL);
}
