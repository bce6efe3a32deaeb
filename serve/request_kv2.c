/* request_kv2.c: KServe v2 inference bodies: JSON inputs (FP32, UINT8,
 * BYTES), the binary tensor extension, requested outputs, and replies. */
#include "serve/request_internal.h"

/* ---- KServe v2 ------------------------------------------------------- */

enum { DT_FP32, DT_UINT8, DT_BYTES };

/* JSON bodies from this size on read a numeric "data" array without a tree. */
#define KV2_FAST_MIN 4096

/* Flatten nested numbers of v into dst[*pos..cap); counts every number. */
static int flatten_numbers(const json_t *v, float *dst, size_t cap, size_t *pos, int depth,
			   wf_err *err)
{
	if (json_is_number(v)) {
		if (*pos < cap)
			dst[*pos] = num_f(v);
		(*pos)++;
		return 0;
	}
	if (!json_is_array(v) || depth > 8)
		return wf_errf(err, WF_EINVAL, "input \"data\" must hold numbers only");
	for (size_t i = 0; i < json_array_size(v); i++) {
		int rc = flatten_numbers(json_array_get(v, i), dst, cap, pos, depth + 1, err);
		if (rc)
			return rc;
	}
	return 0;
}

/* Collect the strings of nested BYTES data (strings or {"b64": s}). */
static int collect_strings(const json_t *v, const json_t **out, size_t cap, size_t *pos, int depth,
			   wf_err *err)
{
	if (json_is_object(v) && json_is_string(json_object_get(v, "b64")))
		v = json_object_get(v, "b64");
	if (json_is_string(v)) {
		if (*pos < cap)
			out[*pos] = v;
		(*pos)++;
		return 0;
	}
	if (!json_is_array(v) || depth > 8)
		return wf_errf(
			err, WF_EINVAL,
			"BYTES input \"data\" must hold base64 strings of JPEG or PNG images");
	for (size_t i = 0; i < json_array_size(v); i++) {
		int rc = collect_strings(json_array_get(v, i), out, cap, pos, depth + 1, err);
		if (rc)
			return rc;
	}
	return 0;
}

static int parse_shape(const json_t *shape, int64_t *dims, int *ndim, wf_err *err)
{
	if (!json_is_array(shape) || json_array_size(shape) < 1 || json_array_size(shape) > 8)
		return wf_errf(err, WF_EINVAL, "input \"shape\" must be a list of 1 to 8 integers");
	*ndim = (int)json_array_size(shape);
	for (int i = 0; i < *ndim; i++) {
		const json_t *d = json_array_get(shape, i);
		if (!json_is_integer(d) || json_integer_value(d) < 0 ||
		    json_integer_value(d) > (1L << 30))
			return wf_errf(err, WF_EINVAL, "input \"shape\"[%d] is not a valid size",
				       i);
		dims[i] = (int64_t)json_integer_value(d);
	}
	return 0;
}

/* Values of a large "data" array read without a JSON tree (jsonfast.h). */
typedef struct kv2_pre {
	float *x; /* NULL: read "data" from the tree */
	size_t n;
} kv2_pre;

/* FP32/UINT8 tensor [N,H,W,C] (unbatched: [H,W,C]) from JSON data (or its
 * values read ahead in pre) or the binary section. */
static int kv2_dense_input(const wf_image_io *io, int dt, const int64_t *dims, int ndim,
			   const json_t *data, const kv2_pre *pre, const uint8_t *bin,
			   size_t bin_size, int has_bin, wf_serve_input *in, wf_err *err)
{
	long n = 0;
	int rc = wf_serve_dense_samples(io, dims, ndim, &n, err);
	if (rc)
		return rc;
	if (has_bin) {
		size_t per = sample_floats(io),
		       want = (size_t)n * per * (dt == DT_FP32 ? sizeof(float) : 1);
		/* no samples or too many: input_alloc's message, below */
		if (n > 0 && (size_t)n <= (size_t)WF_SERVE_MAX_INPUT_FLOATS / per &&
		    bin_size != want)
			return wf_errf(err, WF_EINVAL,
				       "binary_data_size %zu does not match shape (%zu bytes)",
				       bin_size, want);
		/* a binary FP32 tensor may be read where it is (http.c aligns it) */
		return wf_serve_input_dense(io, (size_t)n, bin, dt == DT_UINT8, 1, in, err);
	}
	rc = input_alloc(io, in, (size_t)n, NULL, err);
	if (rc)
		return rc;
	size_t count = (size_t)in->n * sample_floats(io);
	size_t pos = 0;
	if (pre->x) {
		pos = pre->n;
		memcpy(in->x, pre->x, WF_MIN(pos, count) * sizeof(float));
	} else if ((rc = flatten_numbers(data, in->x, count, &pos, 0, err)) != 0) {
		goto fail;
	}
	if (pos != count) {
		rc = wf_errf(err, WF_EINVAL, "input \"data\" has %zu values, shape needs %zu", pos,
			     count);
		goto fail;
	}
	if (dt == DT_FP32)
		wf_serve_input_numbers(io, in->x, (size_t)in->n);
	if (dt == DT_UINT8) {
		size_t per = sample_floats(io);
		uint8_t *px = malloc(per);
		if (!px) {
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
			goto fail;
		}
		for (int i = 0; i < in->n && !rc; i++) {
			float *s = in->x + (size_t)i * per;
			for (size_t j = 0; j < per; j++) {
				if (!(s[j] >= 0.0f && s[j] <= 255.0f) || s[j] != floorf(s[j])) {
					rc = wf_errf(err, WF_EINVAL,
						     "UINT8 value %g out of range at sample %d",
						     (double)s[j], i);
					break;
				}
				px[j] = (uint8_t)s[j];
			}
			if (!rc)
				wf_serve_input_pixels(io, px, s);
		}
		free(px);
		if (rc)
			goto fail;
	}
	return 0;
fail:
	wf_serve_input_free(in);
	return rc;
}

/* BYTES tensor [N] or [N,1] of encoded images. */
static int kv2_bytes_input(const wf_image_io *io, const int64_t *dims, int ndim, const json_t *data,
			   const uint8_t *bin, size_t bin_size, int has_bin, wf_serve_input *in,
			   wf_err *err)
{
	if (!(ndim == 1 || (ndim == 2 && dims[1] == 1)))
		return wf_errf(err, WF_EINVAL, "BYTES input shape must be [N] or [N,1]");
	int rc = input_alloc(io, in, (size_t)dims[0], NULL, err);
	if (rc)
		return rc;
	size_t per = sample_floats(io);
	if (has_bin) {
		size_t off = 0;
		for (int i = 0; i < in->n; i++) {
			uint32_t n;
			if (bin_size - off < 4) {
				rc = wf_errf(err, WF_EINVAL,
					     "binary BYTES data truncated at element %d", i);
				goto fail;
			}
			memcpy(&n, bin + off, 4);
			off += 4;
			if (n > bin_size - off) {
				rc = wf_errf(err, WF_EINVAL, "binary BYTES element %d is truncated",
					     i);
				goto fail;
			}
			rc = wf_serve_input_image(io, bin + off, n, in->x + (size_t)i * per, err);
			if (rc) {
				wf_err_wrap(err, "input element %d", i);
				goto fail;
			}
			off += n;
		}
		if (off != bin_size) {
			rc = wf_errf(err, WF_EINVAL, "binary BYTES data has %zu extra bytes",
				     bin_size - off);
			goto fail;
		}
		return 0;
	}
	const json_t **strs = calloc((size_t)in->n, sizeof(*strs));
	if (!strs) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	size_t pos = 0;
	rc = collect_strings(data, strs, (size_t)in->n, &pos, 0, err);
	if (!rc && pos != (size_t)in->n)
		rc = wf_errf(err, WF_EINVAL, "input \"data\" has %zu images, shape says %d", pos,
			     in->n);
	for (int i = 0; !rc && i < in->n; i++)
		rc = parse_b64_image(io, json_string_value(strs[i]), json_string_length(strs[i]),
				     in->x + (size_t)i * per, "input element", i, err);
	free(strs);
	if (rc)
		goto fail;
	return 0;
fail:
	wf_serve_input_free(in);
	return rc;
}

/* The system shared memory fields of a tensor's "parameters" (shm.h): 1
 * when they name a region (region, *offset, *size set), 0 when they do not,
 * a WF_E* code for malformed ones. */
static int shm_params(const json_t *params, const char *what, char *region, size_t cap,
		      uint64_t *offset, uint64_t *size, wf_err *err)
{
	const json_t *r = json_object_get(params, "shared_memory_region");
	const json_t *b = json_object_get(params, "shared_memory_byte_size");
	const json_t *o = json_object_get(params, "shared_memory_offset");
	if (!r)
		return 0;
	if (!json_is_string(r) || json_string_length(r) == 0 || json_string_length(r) >= cap)
		return wf_errf(err, WF_EINVAL,
			       "%s: \"shared_memory_region\" must name a registered region", what);
	if (!json_is_integer(b) || json_integer_value(b) <= 0)
		return wf_errf(err, WF_EINVAL,
			       "%s: \"shared_memory_byte_size\" must be a positive integer", what);
	if (o && (!json_is_integer(o) || json_integer_value(o) < 0))
		return wf_errf(err, WF_EINVAL,
			       "%s: \"shared_memory_offset\" must be a non-negative integer", what);
	snprintf(region, cap, "%s", json_string_value(r));
	*size = (uint64_t)json_integer_value(b);
	*offset = o ? (uint64_t)json_integer_value(o) : 0;
	return 1;
}

/* An input's size bytes at offset of region `name`: held in *v (FP32,
 * read in place through the batcher's guarded copy), or copied into *out
 * (malloc'd: pixels and images are read by code that is not guarded). */
static int shm_input(wf_serve_shm *shm, const char *name, uint64_t offset, uint64_t size,
		     wf_serve_shm_view *v, uint8_t **out, wf_err *err)
{
	if (size > (uint64_t)WF_SERVE_MAX_INPUT_FLOATS * sizeof(float))
		return wf_errf(err, WF_EINVAL,
			       "input \"shared_memory_byte_size\" %llu is larger than a request "
			       "may be",
			       (unsigned long long)size);
	return v ? wf_serve_shm_view_get(shm, name, offset, size, v, err)
		 : wf_serve_shm_copy_out(shm, name, offset, size, out, err);
}

/* The outputs the body asks for ("outputs"; both when it names none): their
 * parameters read here, the rules checked by wf_serve_outputs_check. */
static int kv2_outputs(const json_t *outs, int binary_default, wf_serve_kv2_req *req, wf_err *err)
{
	if (!outs) {
		req->nout = wf_serve_outputs_all(req->out, binary_default);
		return 0;
	}
	if (!json_is_array(outs) || json_array_size(outs) < 1)
		return wf_errf(err, WF_EINVAL, "\"outputs\" must list 1 or 2 outputs");
	size_t n = json_array_size(outs);
	const char *names[WF_SERVE_MAX_OUTPUTS];
	long cls[WF_SERVE_MAX_OUTPUTS];
	for (size_t i = 0; i < WF_MIN(n, (size_t)WF_SERVE_MAX_OUTPUTS); i++) {
		const json_t *o = json_array_get(outs, i);
		wf_serve_output *d = &req->out[i];
		names[i] = json_string_value(json_object_get(o, "name"));
		cls[i] = 0;
		d->binary = binary_default;
		const json_t *params = json_object_get(o, "parameters");
		const json_t *b = json_object_get(params, "binary_data");
		const json_t *c = json_object_get(params, "classification");
		if (b && !json_is_boolean(b))
			return wf_errf(err, WF_EINVAL,
				       "outputs[%zu] \"binary_data\" must be a boolean", i);
		if (b)
			d->binary = json_is_true(b);
		if (c)
			cls[i] = json_is_integer(c) && json_integer_value(c) > 0
					 ? (long)WF_MIN(json_integer_value(c), 1L << 20)
					 : -1;
		int rc = shm_params(params, names[i] ? names[i] : "output", d->shm_region,
				    sizeof(d->shm_region), &d->shm_offset, &d->shm_size, err);
		if (rc < 0)
			return rc;
	}
	int rc = wf_serve_outputs_check(names, cls, (int)WF_MIN(n, 1000), req->out, err);
	if (!rc)
		req->nout = (int)n;
	return rc;
}

int wf_serve_kv2_parse(const wf_image_io *io, const char *body, size_t len, size_t json_len,
		       wf_serve_shm *shm, wf_serve_kv2_req *req, wf_err *err)
{
	memset(req, 0, sizeof(*req));
	req->unbatched = io->unbatched;
	if (json_len > len)
		return wf_errf(err, WF_EINVAL,
			       "Inference-Header-Content-Length %zu exceeds the body (%zu bytes)",
			       json_len, len);
	/* a large "data" array is read straight into floats, the rest as a tree */
	kv2_pre pre = {0};
	size_t s0, s1;
	json_t *root = NULL;
	if (json_len >= KV2_FAST_MIN &&
	    wf_serve_kv2_fast_data(body, json_len, &pre.x, &pre.n, &s0, &s1)) {
		size_t n = json_len - (s1 - s0) + 2;
		char *rest = malloc(n);
		if (rest) {
			memcpy(rest, body, s0);
			memcpy(rest + s0, "[]", 2);
			memcpy(rest + s0 + 2, body + s1, json_len - s1);
			root = parse_json(rest, n, err);
			free(rest);
		}
		if (!root) { /* the whole body again, for the general parser's message */
			free(pre.x);
			pre.x = NULL;
		}
	}
	if (!root && !(root = parse_json(body, json_len, err)))
		return WF_EINVAL;
	const uint8_t *bin = (const uint8_t *)body + json_len;
	size_t bin_left = len - json_len;
	int rc = 0;
	const json_t *id = json_object_get(root, "id");
	if (id && !json_is_string(id)) {
		rc = wf_errf(err, WF_EINVAL, "\"id\" must be a string");
		goto out_root;
	}
	if (id) {
		snprintf(req->id, sizeof(req->id), "%s", json_string_value(id));
		req->has_id = 1;
	}
	const json_t *params = json_object_get(root, "parameters");
	int binary_default = json_is_true(json_object_get(params, "binary_data_output"));
	const json_t *timeout = json_object_get(params, "timeout");
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 0)) {
		rc = wf_errf(
			err, WF_EINVAL,
			"parameters \"timeout\" must be a non-negative integer (microseconds)");
		goto out_root;
	}
	req->timeout_us = timeout ? (long)json_integer_value(timeout) : 0;
	const json_t *inputs = json_object_get(root, "inputs");
	if (!json_is_array(inputs) || json_array_size(inputs) != 1) {
		rc = wf_errf(err, WF_EINVAL, "\"inputs\" must be a list with one tensor, \"%s\"",
			     wf_serve_input_name(io));
		goto out_root;
	}
	const json_t *t = json_array_get(inputs, 0);
	const char *name = json_string_value(json_object_get(t, "name"));
	const char *dtype = json_string_value(json_object_get(t, "datatype"));
	if (!wf_serve_input_name_ok(io, name)) {
		rc = wf_errf(err, WF_EINVAL,
			     "unknown input \"%s\"; the model has one input, \"%s\"",
			     name ? name : "(none)", wf_serve_input_name(io));
		goto out_root;
	}
	int dt;
	if (dtype && strcmp(dtype, "FP32") == 0)
		dt = DT_FP32;
	else if (dtype && strcmp(dtype, "UINT8") == 0)
		dt = DT_UINT8;
	else if (dtype && strcmp(dtype, "BYTES") == 0)
		dt = DT_BYTES;
	else {
		rc = wf_errf(err, WF_EINVAL,
			     "input datatype \"%s\" is not supported (FP32, UINT8 "
			     "or BYTES)",
			     dtype ? dtype : "(none)");
		goto out_root;
	}
	int64_t dims[8];
	int ndim = 0;
	rc = parse_shape(json_object_get(t, "shape"), dims, &ndim, err);
	if (rc)
		goto out_root;
	const json_t *tparams = json_object_get(t, "parameters");
	const json_t *bds = json_object_get(tparams, "binary_data_size");
	const json_t *data = json_object_get(t, "data");
	size_t bin_size = 0;
	char region[128];
	uint64_t soff = 0, ssize = 0;
	uint8_t *shm_bytes = NULL;
	wf_serve_shm_view view = {0};
	int in_shm = shm_params(tparams, "input", region, sizeof(region), &soff, &ssize, err);
	if (in_shm < 0) {
		rc = in_shm;
		goto out_root;
	}
	if (in_shm && (bds || data)) {
		rc = wf_errf(err, WF_EINVAL, "input names a shared_memory_region and also has %s",
			     bds ? "binary_data_size" : "\"data\"");
		goto out_root;
	}
	if (in_shm) {
		if (bin_left) {
			rc = wf_errf(err, WF_EINVAL,
				     "%zu bytes after the JSON header are not claimed by any "
				     "input's binary_data_size",
				     bin_left);
			goto out_root;
		}
		/* FP32 is read in place (the batcher's copy is guarded), the rest copied */
		rc = shm_input(shm, region, soff, ssize, dt == DT_FP32 ? &view : NULL, &shm_bytes,
			       err);
		if (rc)
			goto out_root;
		bin = dt == DT_FP32 ? view.p : shm_bytes;
		bin_size = (size_t)ssize;
	} else if (bds) {
		if (!json_is_integer(bds) || json_integer_value(bds) < 0 ||
		    (size_t)json_integer_value(bds) != bin_left) {
			rc = wf_errf(
				err, WF_EINVAL,
				"binary_data_size must equal the %zu bytes after the JSON header",
				bin_left);
			goto out_root;
		}
		bin_size = (size_t)json_integer_value(bds);
	} else if (!data) {
		rc = wf_errf(err, WF_EINVAL, "input has neither \"data\" nor binary_data_size");
		goto out_root;
	} else if (bin_left) {
		rc = wf_errf(err, WF_EINVAL,
			     "%zu bytes after the JSON header are not claimed by "
			     "any input's binary_data_size",
			     bin_left);
		goto out_root;
	}
	int has_bin = bds != NULL || in_shm;
	if (dt == DT_BYTES)
		rc = kv2_bytes_input(io, dims, ndim, data, bin, bin_size, has_bin, &req->in, err);
	else
		rc = kv2_dense_input(io, dt, dims, ndim, data, &pre, bin, bin_size, has_bin,
				     &req->in, err);
	if (!rc && view.region && req->in.x == (const float *)view.p) {
		req->in.view = view; /* held while the request reads it in place */
		view = (wf_serve_shm_view){0};
	}
	wf_serve_shm_view_put(&view);
	free(shm_bytes);
	if (rc)
		goto out_root;
	rc = kv2_outputs(json_object_get(root, "outputs"), binary_default, req, err);
	if (rc)
		wf_serve_input_free(&req->in);
out_root:
	json_decref(root);
	free(pre.x);
	return rc;
}

void wf_serve_kv2_req_free(wf_serve_kv2_req *req)
{
	if (req)
		wf_serve_input_free(&req->in);
}

int wf_serve_kv2_reply(const wf_serve_kv2_req *req, wf_serve_shm *shm, const char *model,
		       long version, const float *logits, const float *probs, int n, int k,
		       char *const *labels, char **body, size_t *len, size_t *header_len,
		       wf_err *err)
{
	wf_serve_tensor t[WF_SERVE_MAX_OUTPUTS];
	int rc = wf_serve_tensors_make(req->out, req->nout, logits, probs, n, k, req->unbatched,
				       labels, shm, t, err);
	char vbuf[32];
	snprintf(vbuf, sizeof(vbuf), "%ld", version);
	json_t *root = json_pack("{ssss}", "model_name", model, "model_version", vbuf);
	json_t *outs = json_array();
	if (req->has_id)
		json_object_set_new(root, "id", json_string(req->id));
	json_object_set_new(root, "outputs", outs);
	size_t bin = 0; /* bytes of the binary section */
	int any_binary = 0;
	for (int o = 0; !rc && o < req->nout; o++) {
		json_t *j = json_pack("{ssssso}", "name", t[o].name, "datatype", t[o].datatype,
				      "shape", wf_serve_dims_json(t[o].dims, t[o].ndim));
		json_array_append_new(outs, j);
		if (t[o].in_shm) /* name, datatype and shape only, as Triton answers */
			continue;
		if (req->out[o].binary) {
			json_object_set_new(
				j, "parameters",
				json_pack("{sI}", "binary_data_size", (json_int_t)t[o].len));
			bin += t[o].len;
			any_binary = 1;
			continue;
		}
		json_t *data = json_array();
		if (t[o].datatype[0] == 'F') {
			const float *v = (const float *)t[o].data;
			for (size_t i = 0; i < t[o].len / sizeof(float); i++)
				json_array_append_new(data, json_real(v[i]));
		} else { /* BYTES elements: a 4-byte little-endian length, then the string */
			for (size_t at = 0; at + 4 <= t[o].len;) {
				const uint8_t *p = t[o].data + at;
				size_t sl = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 |
					    (size_t)p[3] << 24;
				json_array_append_new(data, json_stringn((const char *)p + 4, sl));
				at += 4 + sl;
			}
		}
		json_object_set_new(j, "data", data);
	}
	char *js = rc ? NULL : json_dumps(root, REAL_FLAGS);
	size_t jl = js ? strlen(js) : 0;
	char *all = js ? realloc(js, jl + bin + 1) : NULL;
	if (!rc && !all) {
		free(js);
		rc = wf_errf(err, WF_ENOMEM, "out of memory building the reply");
	}
	if (!rc) {
		size_t at = jl;
		for (int o = 0; o < req->nout; o++)
			if (req->out[o].binary && !t[o].in_shm) {
				memcpy(all + at, t[o].data, t[o].len);
				at += t[o].len;
			}
		all[jl + bin] = 0;
		*body = all;
		*len = jl + bin;
		*header_len = any_binary ? jl : 0;
	}
	wf_serve_tensors_free(t, req->nout);
	json_decref(root);
	return rc;
}
