/* request_kv2.c: KServe v2 inference bodies: JSON inputs (FP32, UINT8,
 * BYTES), the binary tensor extension, requested outputs, and replies. */
#include "serve/request_internal.h"

/* ---- KServe v2 ------------------------------------------------------- */

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

/* The elements of nested BYTES data (strings or {"b64": s}) into out[cap]
 * (counting all in *pos); anything else is an element without bytes,
 * which wf_serve_tensor_input refuses once the shape is checked. */
static void collect_strings(const json_t *v, wf_serve_bytes *out, size_t cap, size_t *pos,
			    int depth)
{
	if (json_is_object(v) && json_is_string(json_object_get(v, "b64")))
		v = json_object_get(v, "b64");
	if (json_is_array(v) && depth <= 8) {
		for (size_t i = 0; i < json_array_size(v); i++)
			collect_strings(json_array_get(v, i), out, cap, pos, depth + 1);
		return;
	}
	if (*pos < cap)
		out[*pos] = json_is_string(v)
				    ? (wf_serve_bytes){(const uint8_t *)json_string_value(v),
						       json_string_length(v)}
				    : (wf_serve_bytes){NULL, 0};
	(*pos)++;
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

/* An FP32 or UINT8 tensor's "data" (nested numbers, or read ahead in pre)
 * as v's values: pre's, or flattened into pre (which then owns them). */
static int data_numbers(const json_t *data, kv2_pre *pre, wf_serve_tensor_view *v, wf_err *err)
{
	if (!pre->x) {
		size_t n = 0;
		int rc = flatten_numbers(data, NULL, 0, &n, 0, err);
		if (rc)
			return rc;
		if (n > (size_t)WF_SERVE_MAX_INPUT_FLOATS)
			return wf_errf(err, WF_EINVAL,
				       "input \"data\" has %zu values; a request holds at most %ld",
				       n, WF_SERVE_MAX_INPUT_FLOATS);
		if (!(pre->x = malloc(n * sizeof(float) + 1)))
			return wf_errf(err, WF_ENOMEM, "out of memory");
		pre->n = 0;
		flatten_numbers(data, pre->x, n, &pre->n, 0, err);
	}
	v->values = pre->x;
	v->nvalues = pre->n;
	v->has_values = 1;
	return 0;
}

/* A BYTES tensor's "data" (base64 strings, or {"b64": s}, nested) as v's
 * elements, in *out (malloc'd). */
static int data_strings(const json_t *data, wf_serve_bytes **out, wf_serve_tensor_view *v,
			wf_err *err)
{
	size_t n = 0;
	collect_strings(data, NULL, 0, &n, 0);
	if (!(*out = calloc(n + 1, sizeof(**out))))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	size_t pos = 0;
	collect_strings(data, *out, n, &pos, 0);
	v->elements = *out;
	v->nelements = n;
	v->has_elements = 1;
	return 0;
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
	wf_serve_bytes *strs = NULL;
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
	const json_t *tparams = json_object_get(t, "parameters");
	const json_t *bds = json_object_get(tparams, "binary_data_size");
	const json_t *data = json_object_get(t, "data");
	int64_t dims[8];
	wf_serve_tensor_view v = {.name = json_string_value(json_object_get(t, "name")),
				  .datatype = json_string_value(json_object_get(t, "datatype")),
				  .dims = dims,
				  .raw_what = "binary_data_size",
				  .raw_borrow = 1, /* http.c aligns the binary part */
				  .values_what = "\"data\"",
				  .elements_b64 = 1};
	rc = parse_shape(json_object_get(t, "shape"), dims, &v.ndim, err);
	if (rc)
		goto out_root;
	int in_shm = shm_params(tparams, "input", v.shm_region, sizeof(v.shm_region), &v.shm_offset,
				&v.shm_size, err);
	if (in_shm < 0) {
		rc = in_shm;
		goto out_root;
	}
	if (bds && !in_shm &&
	    (!json_is_integer(bds) || json_integer_value(bds) < 0 ||
	     (size_t)json_integer_value(bds) != bin_left)) {
		rc = wf_errf(err, WF_EINVAL,
			     "binary_data_size must equal the %zu bytes after the JSON header",
			     bin_left);
		goto out_root;
	}
	if (!bds && !data && !in_shm) {
		rc = wf_errf(err, WF_EINVAL, "input has neither \"data\" nor binary_data_size");
		goto out_root;
	}
	if (bin_left && (!bds || in_shm)) {
		rc = wf_errf(err, WF_EINVAL,
			     "%zu bytes after the JSON header are not claimed by any input's "
			     "binary_data_size",
			     bin_left);
		goto out_root;
	}
	v.has_raw = bds != NULL;
	v.raw = bin;
	v.raw_len = bin_left;
	if (data && v.datatype && !strcmp(v.datatype, "BYTES"))
		rc = data_strings(data, &strs, &v, err);
	else if (data)
		rc = data_numbers(data, &pre, &v, err);
	if (!rc)
		rc = wf_serve_tensor_input(io, &v, shm, &req->in, err);
	if (rc)
		goto out_root;
	rc = kv2_outputs(json_object_get(root, "outputs"), binary_default, req, err);
	if (rc)
		wf_serve_input_free(&req->in);
out_root:
	json_decref(root);
	free(pre.x);
	free(strs);
	return rc;
}

void wf_serve_kv2_req_free(wf_serve_kv2_req *req)
{
	if (req)
		wf_serve_input_free(&req->in);
}

int wf_serve_kv2_reply(const wf_serve_kv2_req *req, const wf_serve_tensor *t, const char *model,
		       long version, char **body, size_t *len, size_t *header_len, wf_err *err)
{
	int rc = 0;
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
	json_decref(root);
	return rc;
}
