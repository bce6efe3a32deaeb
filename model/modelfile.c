/* modelfile.c: the model file (model.h5, docs/formats.md). Root attributes
 * weft_format, graph, input_shape, preprocessing, classes, trained_steps;
 * datasets weights/<layer>/<param> (float32, Keras layout; state too).
 * Written to a temporary name, synced and renamed; read with every HDF5
 * failure turned into a message that names the file and the cause. */
#include "model/keras.h"
#include "model/model.h"
#include "model/model_priv.h"

#include "common/atomicfile.h"
#include "common/cancel.h"
#include "common/crc32c.h"
#include "common/h5.h"
#include "common/sandbox.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- meta --------------------------------------------------------------- */

void wf_model_meta_init(wf_model_meta *meta)
{
	memset(meta, 0, sizeof(*meta));
	meta->scale = 1.0f / 255.0f;
	for (int c = 0; c < 4; c++)
		meta->std[c] = 1.0f;
	snprintf(meta->channel_order, sizeof(meta->channel_order), "RGB");
}

void wf_model_meta_free(wf_model_meta *meta)
{
	if (!meta)
		return;
	for (int i = 0; i < meta->nclasses && meta->class_names; i++)
		free(meta->class_names[i]);
	free(meta->class_names);
	meta->class_names = NULL;
	meta->nclasses = 0;
}

/* ---- writing ------------------------------------------------------------ */

static char *preprocessing_json(const wf_model *m, const wf_model_meta *meta)
{
	json_t *mean = json_array(), *sd = json_array();
	for (int c = 0; c < WF_MIN(m->in_c, 4); c++) {
		json_array_append_new(mean, json_real(meta->mean[c]));
		json_array_append_new(sd, json_real(meta->std[c]));
	}
	json_t *p = json_pack("{s:[iii], s:f, s:o, s:o, s:s}", "input_shape", m->in_h, m->in_w,
			      m->in_c, "scale", (double)meta->scale, "mean", mean, "std", sd,
			      "channel_order", meta->channel_order);
	if (p && meta->precision[0])
		json_object_set_new(p, "precision", json_string(meta->precision));
	if (p && meta->pre_in_model)
		json_object_set_new(p, "in_model", json_true());
	char *s = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
		    : NULL;
	json_decref(p);
	return s;
}

/* The content checksum (root attribute weft_crc32c): CRC32C over the graph,
 * preprocessing and class-name texts as stored (each with its NUL), then
 * every view's float32 values in graph order. */
static uint32_t content_crc(const wf_model *m, const char *graph, const char *pre,
			    char *const *classes, int nclasses)
{
	uint32_t c = wf_crc32c_update(0, graph ? graph : "", graph ? strlen(graph) + 1 : 1);
	c = wf_crc32c_update(c, pre ? pre : "", pre ? strlen(pre) + 1 : 1);
	for (int i = 0; i < nclasses; i++) {
		const char *s = classes && classes[i] ? classes[i] : "";
		c = wf_crc32c_update(c, s, strlen(s) + 1);
	}
	for (int i = 0; i < m->nviews; i++) {
		const wf_view *v = &m->views[i];
		c = wf_crc32c_update(c, (v->trainable ? m->params : m->state) + v->offset,
				     v->count * sizeof(float));
	}
	return c;
}

static int write_attrs(hid_t f, const wf_model *m, const wf_model_meta *meta, const char *path,
		       wf_err *err)
{
	int rc = 0, fmt = WF_MODEL_FORMAT, shape[3] = {m->in_h, m->in_w, m->in_c};
	char *pre = preprocessing_json(m, meta);
	const char **names = calloc((size_t)WF_MAX(meta->nclasses, 1), sizeof(*names));
	if (!pre || !names) {
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory writing attributes", path);
		goto done;
	}
	for (int i = 0; i < meta->nclasses; i++)
		names[i] = meta->class_names && meta->class_names[i] ? meta->class_names[i] : "";
	if ((rc = wf_h5_attr_write(f, "weft_format", H5T_STD_I32LE, H5T_NATIVE_INT, -1, &fmt, path,
				   err)) ||
	    (rc = wf_h5_attr_write_str(f, "graph", m->graph_json, path, err)) ||
	    (rc = wf_h5_attr_write(f, "input_shape", H5T_STD_I32LE, H5T_NATIVE_INT, 3, shape, path,
				   err)) ||
	    (rc = wf_h5_attr_write_str(f, "preprocessing", pre, path, err)) ||
	    (rc = wf_h5_attr_write_strs(f, "classes", names, meta->nclasses, path, err)) ||
	    (rc = wf_h5_attr_write_i64(f, "trained_steps", meta->trained_steps, path, err)) ||
	    (rc = wf_h5_attr_write_i64(
		     f, "weft_crc32c",
		     content_crc(m, m->graph_json, pre, (char *const *)names, meta->nclasses), path,
		     err)))
		goto done;
done:
	free(pre);
	free(names);
	return rc;
}

static int write_weights(hid_t f, const wf_model *m, const char *path, wf_err *err)
{
	int rc = 0;
	hid_t wg = H5Gcreate2(f, "weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	if (wg < 0)
		return WF_H5_FAIL(err, WF_EIO, "%s: creating group weights", path);
	for (int i = 0; i < m->nlayers && !rc; i++) {
		const wf_layer *l = &m->layers[i];
		int vs[6] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta, l->s_mean, l->s_var};
		hid_t lg = -1;
		for (int k = 0; k < 6 && !rc; k++) {
			if (vs[k] < 0)
				continue;
			const wf_view *v = &m->views[vs[k]];
			if (lg < 0 && (lg = H5Gcreate2(wg, l->name, H5P_DEFAULT, H5P_DEFAULT,
						       H5P_DEFAULT)) < 0) {
				rc = WF_H5_FAIL(err, WF_EIO, "%s: creating group weights/%s", path,
						l->name);
				break;
			}
			hsize_t dims[4];
			char name[2 * WF_NAME_MAX + 16];
			for (int d = 0; d < v->ndim; d++)
				dims[d] = (hsize_t)v->shape[d];
			snprintf(name, sizeof(name), "weights/%s", v->name);
			rc = wf_h5_write_f32(f, name, v->ndim, dims,
					     (v->trainable ? m->params : m->state) + v->offset,
					     path, err);
		}
		wf_h5_close(&lg);
	}
	wf_h5_close(&wg);
	return rc;
}

int wf_model_save(const wf_model *m, const wf_model_meta *meta, const char *path, wf_err *err)
{
	wf_model_meta defaults;
	wf_h5_quiet q;
	hid_t f = H5I_INVALID_HID;
	if (!meta) {
		wf_model_meta_init(&defaults);
		meta = &defaults;
	}
	/* Built in memory, then written atomically: a full disk is an error
	 * naming path, never a half-written file or a crash in libhdf5. */
	int rc = wf_h5_create_mem(path, &f, err);
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	if ((rc = write_attrs(f, m, meta, path, err)) || (rc = write_weights(f, m, path, err)))
		wf_h5_close(&f);
	wf_h5_quiet_end(&q);
	if (!rc)
		rc = wf_h5_commit_mem(&f, path, err);
	return rc;
}

/* ---- reading ------------------------------------------------------------ */

static int parse_preprocessing(const char *text, wf_model_meta *meta, const char *path, wf_err *err)
{
	json_error_t jerr;
	json_t *p = json_loads(text, 0, &jerr);
	int rc = 0;
	if (!json_is_object(p)) {
		rc = wf_errf(err, WF_EFORMAT, "%s: attribute preprocessing: not a JSON object",
			     path);
		goto done;
	}
	json_t *v;
	if ((v = json_object_get(p, "scale"))) {
		if (!json_is_number(v)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: preprocessing.scale: not a number",
				     path);
			goto done;
		}
		meta->scale = (float)json_number_value(v);
	}
	const char *keys[2] = {"mean", "std"};
	float *dst[2] = {meta->mean, meta->std};
	for (int k = 0; k < 2; k++) {
		if (!(v = json_object_get(p, keys[k])))
			continue;
		if (!json_is_array(v) || json_array_size(v) > 4) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: preprocessing.%s: expected up to 4 numbers", path,
				     keys[k]);
			goto done;
		}
		for (size_t c = 0; c < json_array_size(v); c++) {
			json_t *x = json_array_get(v, c);
			if (!json_is_number(x) || (k == 1 && json_number_value(x) <= 0)) {
				rc = wf_errf(err, WF_EFORMAT,
					     "%s: preprocessing.%s[%zu]: expected a%s number", path,
					     keys[k], c, k == 1 ? " positive" : "");
				goto done;
			}
			dst[k][c] = (float)json_number_value(x);
		}
	}
	if ((v = json_object_get(p, "channel_order"))) {
		const char *s = json_string_value(v);
		if (!s || strlen(s) >= sizeof(meta->channel_order)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: preprocessing.channel_order: bad value",
				     path);
			goto done;
		}
		snprintf(meta->channel_order, sizeof(meta->channel_order), "%s", s);
	}
	if ((v = json_object_get(p, "in_model"))) {
		if (!json_is_boolean(v)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: preprocessing.in_model: not a boolean",
				     path);
			goto done;
		}
		meta->pre_in_model = json_is_true(v);
	}
	if ((v = json_object_get(p, "precision"))) {
		const char *s = wf_backend_precision_canon(json_string_value(v));
		if (!s) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: preprocessing.precision: not one of " WF_PRECISIONS,
				     path);
			goto done;
		}
		snprintf(meta->precision, sizeof(meta->precision), "%s", s);
	}
done:
	json_decref(p);
	return rc;
}

/* The meta attributes into meta; *pre_text gets the preprocessing text
 * (malloc'd, replacing any earlier one; NULL when absent). */
static int read_meta(hid_t f, wf_model_meta *meta, char **pre_text, const char *path, wf_err *err)
{
	int rc = 0;
	char *pre = NULL;
	int64_t steps = 0;
	free(*pre_text);
	*pre_text = NULL;
	if (H5Aexists(f, "preprocessing") > 0) {
		if ((rc = wf_h5_attr_read_str(f, "preprocessing", &pre, path, err)) ||
		    (rc = parse_preprocessing(pre, meta, path, err)))
			goto done;
	}
	if (H5Aexists(f, "classes") > 0 &&
	    (rc = wf_h5_attr_read_strs(f, "classes", &meta->class_names, &meta->nclasses, path,
				       err)))
		goto done;
	if (H5Aexists(f, "trained_steps") > 0) {
		if ((rc = wf_h5_attr_read_i64(f, "trained_steps", &steps, 1, path, err)))
			goto done;
		meta->trained_steps = (long)steps;
	}
done:
	if (rc)
		free(pre);
	else
		*pre_text = pre;
	return rc;
}

static void shape_text(char *buf, size_t n, int ndim, const hsize_t *dims)
{
	size_t at = 0;
	at += (size_t)snprintf(buf + at, n - at, "[");
	for (int d = 0; d < ndim && at < n; d++)
		at += (size_t)snprintf(buf + at, n - at, "%s%llu", d ? "," : "",
				       (unsigned long long)dims[d]);
	if (at < n)
		snprintf(buf + at, n - at, "]");
}

static int read_view(hid_t f, wf_model *m, const wf_view *v, const char *path, wf_err *err)
{
	char dpath[2 * WF_NAME_MAX + 16], layer[2 * WF_NAME_MAX + 16];
	snprintf(layer, sizeof(layer), "weights/%s", v->name);
	*strrchr(layer, '/') = '\0';
	snprintf(dpath, sizeof(dpath), "weights/%s", v->name);
	if (H5Lexists(f, "weights", H5P_DEFAULT) <= 0 || H5Lexists(f, layer, H5P_DEFAULT) <= 0 ||
	    H5Lexists(f, dpath, H5P_DEFAULT) <= 0) {
		H5Eclear2(H5E_DEFAULT);
		return wf_errf(err, WF_EFORMAT, "%s: %s: missing dataset (the graph has this %s)",
			       path, dpath, v->trainable ? "parameter" : "state tensor");
	}
	int rc = 0;
	hid_t d = H5Dopen2(f, dpath, H5P_DEFAULT);
	hid_t t = d < 0 ? -1 : H5Dget_type(d);
	hid_t sp = d < 0 ? -1 : H5Dget_space(d);
	hsize_t dims[8], want[4];
	int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
	if (d < 0 || t < 0 || nd < 0) {
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: %s: cannot be opened", path, dpath);
		goto done;
	}
	if (H5Tget_class(t) != H5T_FLOAT) {
		rc = wf_errf(err, WF_EFORMAT, "%s: %s: expected float32 data", path, dpath);
		goto done;
	}
	int same = nd == v->ndim;
	if (nd <= 8)
		H5Sget_simple_extent_dims(sp, dims, NULL);
	for (int k = 0; k < v->ndim; k++) {
		want[k] = (hsize_t)v->shape[k];
		same = same && dims[k] == want[k];
	}
	if (!same) {
		char got[128] = "[rank > 8]", exp[128];
		if (nd <= 8)
			shape_text(got, sizeof(got), nd, dims);
		shape_text(exp, sizeof(exp), v->ndim, want);
		rc = wf_errf(err, WF_EFORMAT, "%s: %s: shape %s expected %s", path, dpath, got,
			     exp);
		goto done;
	}
	float *dst = (v->trainable ? m->params : m->state) + v->offset;
	if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: %s: cannot be read (truncated or corrupt?)",
				path, dpath);
done:
	wf_h5_close(&sp);
	wf_h5_close(&t);
	wf_h5_close(&d);
	return rc;
}

static int load_open(hid_t f, wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	int rc;
	int64_t fmt, shape[3], want = 0;
	char *graph = NULL, *pre = NULL;
	wf_model *m = NULL;
	if (H5Aexists(f, "weft_format") <= 0) {
		if (wf_keras_is_model_file(f)) /* model.save('x.h5') from Keras */
			return wf_keras_load_h5(f, out, meta, path, err);
		return wf_errf(err, WF_EFORMAT,
			       "%s: not a weft model file (no weft_format attribute)", path);
	}
	if ((rc = wf_h5_attr_read_i64(f, "weft_format", &fmt, 1, path, err)))
		return rc;
	if (fmt != WF_MODEL_FORMAT)
		return wf_errf(
			err, WF_EFORMAT,
			"%s: weft_format %lld is not supported (this build reads version %d)", path,
			(long long)fmt, WF_MODEL_FORMAT);
	if (H5Aexists(f, "graph") <= 0)
		return wf_errf(err, WF_EFORMAT, "%s: no graph attribute", path);
	if ((rc = wf_h5_attr_read_str(f, "graph", &graph, path, err)))
		return rc;
	rc = wf_model_from_json(&m, graph, err);
	if (rc) {
		free(graph);
		wf_err_wrap(err, "%s: attribute graph", path);
		return err ? err->code : rc;
	}
	hsize_t fsize = 0;
	if (H5Fget_filesize(f, &fsize) >= 0 &&
	    (m->nparams + m->nstate) * sizeof(float) > (size_t)fsize) {
		/* every weight is a float32 dataset of this file */
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: attribute graph: %zu weights cannot fit in a file of %llu bytes: "
			     "the file is corrupt",
			     path, m->nparams + m->nstate, (unsigned long long)fsize);
		goto fail;
	}
	if (H5Aexists(f, "input_shape") > 0) {
		if ((rc = wf_h5_attr_read_i64(f, "input_shape", shape, 3, path, err)))
			goto fail;
		if (shape[0] != m->in_h || shape[1] != m->in_w || shape[2] != m->in_c) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: input_shape [%lld,%lld,%lld] differs from the graph's "
				     "[%d,%d,%d]",
				     path, (long long)shape[0], (long long)shape[1],
				     (long long)shape[2], m->in_h, m->in_w, m->in_c);
			goto fail;
		}
	}
	for (int i = 0; i < m->nviews; i++)
		if ((rc = wf_cancel_check(path, err)) ||
		    (rc = read_view(f, m, &m->views[i], path, err)))
			goto fail;
	if (meta && (rc = read_meta(f, meta, &pre, path, err)))
		goto fail;
	if (H5Aexists(f, "weft_crc32c") > 0) { /* files of older weft versions have none */
		wf_model_meta local;
		wf_model_meta *mm = meta;
		if (!mm) {
			wf_model_meta_init(&local);
			mm = &local;
			if ((rc = read_meta(f, mm, &pre, path, err)))
				goto fail;
		}
		uint32_t got = content_crc(m, graph, pre, mm->class_names, mm->nclasses);
		if (mm == &local)
			wf_model_meta_free(&local);
		if ((rc = wf_h5_attr_read_i64(f, "weft_crc32c", &want, 1, path, err)))
			goto fail;
		if ((uint64_t)want != got) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: content checksum mismatch (crc32c %08x, the file says "
				     "%08llx): the file is corrupt",
				     path, got, (unsigned long long)want);
			goto fail;
		}
	}
	*out = m;
	free(graph);
	free(pre);
	return 0;
fail:
	free(graph);
	free(pre);
	wf_model_free(m);
	return rc;
}

int wf_model_load_trusted(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	struct stat st;
	wf_h5_quiet q;
	hid_t f = H5I_INVALID_HID;
	*out = NULL;
	if (meta)
		wf_model_meta_init(meta);
	if (stat(path, &st) != 0)
		return wf_errf(err, WF_EIO, "%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wf_errf(err, WF_EIO, "%s: not a regular file", path);
	if (wf_keras_is_archive(path)) /* model.save('x.keras') from Keras 3 */
		return wf_keras_load(out, meta, path, err);
	int rc = wf_h5_open(path, H5F_ACC_RDONLY, &f, err);
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	rc = load_open(f, out, meta, path, err);
	if (rc && meta)
		wf_model_meta_free(meta);
	wf_h5_close(&f);
	wf_h5_quiet_end(&q);
	return rc;
}

/* The first load of a file from outside runs in a short-lived child: libhdf5
 * 1.10 crashes or hangs on some corrupt metadata (attribute messages, heap
 * references), which must cost the child, not a server. */
#define LOAD_CHECK_SECONDS 120.0

typedef struct load_probe {
	const char *path;
} load_probe;

static int probe_load(void *arg, wf_err *err)
{
	const load_probe *p = arg;
	wf_model *m = NULL;
	wf_model_meta meta;
	int rc = wf_model_load_trusted(&m, &meta, p->path, err);
	if (!rc) {
		wf_model_meta_free(&meta);
		wf_model_free(m);
	}
	return rc;
}

int wf_model_load(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err)
{
	*out = NULL;
	if (meta)
		wf_model_meta_init(meta);
	if (!wf_sandbox_active()) {
		struct stat st; /* a missing or special file: the plain message, no child */
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			load_probe p = {path};
			int rc = wf_sandbox_check(path, LOAD_CHECK_SECONDS,
						  wf_sandbox_mem_for_file(path), probe_load, &p,
						  err);
			if (rc)
				return rc;
		}
	}
	return wf_model_load_trusted(out, meta, path, err);
}
