/* request.c: what every front end shares: the one builder of model input
 * (a tensor, tf.Examples, the protocol-neutral request), input buffers,
 * JSON with NaN/Infinity, error bodies. TF Serving's REST bodies:
 * request_tfs.c; KServe v2's: request_kv2.c. */
#include "serve/request_internal.h"

void wf_serve_input_free(wf_serve_input *in)
{
	if (!in)
		return;
	if (!in->borrowed)
		free(in->x);
	wf_serve_shm_view_put(&in->view);
	in->x = NULL;
	in->n = 0;
	in->borrowed = 0;
}

/* ---- model input ------------------------------------------------------ */

const char *wf_serve_input_name(const wf_image_io *io)
{
	return io->input_name && io->input_name[0] ? io->input_name : WF_SERVE_INPUT_NAME;
}

int wf_serve_input_name_ok(const wf_image_io *io, const char *name)
{
	return name &&
	       (!strcmp(name, WF_SERVE_INPUT_NAME) || !strcmp(name, wf_serve_input_name(io)));
}

int wf_serve_numbers_as_is(const wf_image_io *io)
{
	return !io->raw_numbers;
}

void wf_serve_input_numbers(const wf_image_io *io, float *x, size_t n)
{
	if (io->raw_numbers) /* NaN in, NaN out, as the graph would */
		wf_image_preprocess_f32(io, x, n);
}

void wf_serve_input_pixels(const wf_image_io *io, const uint8_t *px, float *dst)
{
	wf_image_preprocess_u8(io, px, dst);
}

int wf_serve_input_image(const wf_image_io *io, const uint8_t *bytes, size_t len, float *dst,
			 wf_err *err)
{
	return wf_image_decode(io, bytes, len, dst, err);
}

int wf_serve_input_dense(const wf_image_io *io, size_t n, const void *data, int u8, int borrow,
			 wf_serve_input *in, wf_err *err)
{
	int in_place = borrow && !u8 && wf_serve_numbers_as_is(io) &&
		       (uintptr_t)data % _Alignof(float) == 0;
	int rc = input_alloc(io, in, n, in_place ? (const float *)data : NULL, err);
	if (rc || in_place)
		return rc;
	size_t per = sample_floats(io);
	if (u8) {
		for (size_t i = 0; i < n; i++)
			wf_serve_input_pixels(io, (const uint8_t *)data + i * per, in->x + i * per);
		return 0;
	}
	if (wf_serve_copy_guarded(in->x, data, n * per * sizeof(float))) {
		wf_serve_input_free(in);
		return wf_errf(err, WF_EINVAL,
			       "the input's shared memory object is shorter than registered");
	}
	wf_serve_input_numbers(io, in->x, n);
	return 0;
}

/* ---- one input tensor (KServe: JSON, binary, gRPC) ---------------------- */

enum { DT_FP32, DT_UINT8, DT_BYTES };

/* raw [len] as n BYTES elements (a 4-byte little-endian length, then the
 * bytes) into e[n]; an error names what the bytes are and where. */
static int split_elements(const uint8_t *raw, size_t len, long n, const char *what,
			  wf_serve_bytes *e, wf_err *err)
{
	size_t off = 0;
	for (long i = 0; i < n; i++) {
		if (len - off < 4)
			return wf_errf(err, WF_EINVAL, "%s: BYTES data truncated at element %ld",
				       what, i);
		const uint8_t *p = raw + off;
		size_t l =
			(size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
		off += 4;
		if (l > len - off)
			return wf_errf(err, WF_EINVAL, "%s: BYTES element %ld is truncated", what,
				       i);
		e[i] = (wf_serve_bytes){raw + off, l};
		off += l;
	}
	if (off != len)
		return wf_errf(err, WF_EINVAL, "%s: BYTES data has %zu bytes past its elements",
			       what, len - off);
	return 0;
}

static int parse_b64_image(const wf_image_io *io, const char *s, size_t n, float *dst,
			   const char *what, long idx, wf_err *err)
{
	uint8_t *bytes = NULL;
	size_t nbytes = 0;
	int rc = wf_b64_decode(s, n, &bytes, &nbytes, err);
	if (rc == 0)
		rc = wf_serve_input_image(io, bytes, nbytes, dst, err);
	free(bytes);
	if (rc)
		wf_err_wrap(err, "%s %ld", what, idx);
	return rc;
}

/* BYTES [N] or [N,1]: one encoded image per sample, in raw (what names it)
 * or t's elements. */
static int bytes_input(const wf_image_io *io, const wf_serve_tensor_view *t, const uint8_t *raw,
		       size_t raw_len, const char *raw_what, wf_serve_input *in, wf_err *err)
{
	if (!(t->ndim == 1 || (t->ndim == 2 && t->dims[1] == 1)))
		return wf_errf(err, WF_EINVAL, "BYTES input shape must be [N] or [N,1]");
	long n = (long)t->dims[0];
	int rc = input_alloc(io, in, (size_t)n, NULL, err);
	if (rc)
		return rc;
	wf_serve_bytes *split = NULL;
	const wf_serve_bytes *e = t->elements;
	int b64 = t->elements_b64;
	if (raw) {
		e = split = malloc(sizeof(*split) * (size_t)n);
		b64 = 0;
		rc = split ? split_elements(raw, raw_len, n, raw_what, split, err)
			   : wf_errf(err, WF_ENOMEM, "out of memory");
	} else if (t->nelements != (size_t)n) {
		rc = wf_errf(err, WF_EINVAL, "input %s has %zu images, shape says %ld",
			     t->values_what, t->nelements, n);
	}
	size_t per = sample_floats(io);
	for (long i = 0; !rc && i < n; i++) {
		float *dst = in->x + (size_t)i * per;
		if (b64 && !e[i].p)
			rc = wf_errf(
				err, WF_EINVAL,
				"BYTES input %s must hold base64 strings of JPEG or PNG images",
				t->values_what);
		else if (b64)
			rc = parse_b64_image(io, (const char *)e[i].p, e[i].len, dst,
					     t->element_what ? t->element_what : "input element", i,
					     err);
		else if ((rc = wf_serve_input_image(io, e[i].p, e[i].len, dst, err)) != 0)
			wf_err_wrap(err, "%s %ld",
				    t->element_what ? t->element_what : "input element", i);
	}
	free(split);
	if (rc)
		wf_serve_input_free(in);
	return rc;
}

/* FP32 or UINT8 numbers v[nv] (what names them) as n samples. */
static int values_input(const wf_image_io *io, int u8, const float *v, size_t nv, const char *what,
			long n, wf_serve_input *in, wf_err *err)
{
	int rc = input_alloc(io, in, (size_t)n, NULL, err);
	if (rc)
		return rc;
	size_t per = sample_floats(io), count = (size_t)n * per;
	if (nv != count) {
		wf_serve_input_free(in);
		return wf_errf(err, WF_EINVAL, "input %s has %zu values, shape needs %zu", what, nv,
			       count);
	}
	if (!u8) {
		memcpy(in->x, v, count * sizeof(float));
		wf_serve_input_numbers(io, in->x, (size_t)n);
		return 0;
	}
	uint8_t *px = malloc(per);
	if (!px)
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
	for (long i = 0; !rc && i < n; i++) {
		const float *s = v + (size_t)i * per;
		for (size_t j = 0; j < per && !rc; j++) {
			if (!(s[j] >= 0.0f && s[j] <= 255.0f) || s[j] != floorf(s[j]))
				rc = wf_errf(err, WF_EINVAL,
					     "UINT8 value %g out of range at sample %ld",
					     (double)s[j], i);
			px[j] = (uint8_t)s[j];
		}
		if (!rc)
			wf_serve_input_pixels(io, px, in->x + (size_t)i * per);
	}
	free(px);
	if (rc)
		wf_serve_input_free(in);
	return rc;
}

/* The shared memory region t names into *raw: FP32 viewed where it is
 * (*view held; the batcher's copy out of it is guarded), other types
 * copied into *copy (their readers are not guarded). */
static int shm_values(const wf_serve_tensor_view *t, int dt, wf_serve_shm *shm,
		      wf_serve_shm_view *view, uint8_t **copy, const uint8_t **raw, wf_err *err)
{
	if (t->has_raw || t->has_values || t->has_elements)
		return wf_errf(err, WF_EINVAL,
			       "input \"%s\" names a shared_memory_region and also has %s", t->name,
			       t->has_raw ? t->raw_what : t->values_what);
	if (!t->shm_size)
		return wf_errf(err, WF_EINVAL,
			       "input \"%s\" names a shared_memory_region without "
			       "shared_memory_byte_size",
			       t->name);
	if (t->shm_size > (uint64_t)WF_SERVE_MAX_INPUT_FLOATS * sizeof(float))
		return wf_errf(err, WF_EINVAL,
			       "input \"shared_memory_byte_size\" %llu is larger than a request "
			       "may be",
			       (unsigned long long)t->shm_size);
	int rc = dt == DT_FP32 ? wf_serve_shm_view_get(shm, t->shm_region, t->shm_offset,
						       t->shm_size, view, err)
			       : wf_serve_shm_copy_out(shm, t->shm_region, t->shm_offset,
						       t->shm_size, copy, err);
	*raw = dt == DT_FP32 ? view->p : *copy;
	return rc;
}

int wf_serve_tensor_input(const wf_image_io *io, const wf_serve_tensor_view *t, wf_serve_shm *shm,
			  wf_serve_input *in, wf_err *err)
{
	memset(in, 0, sizeof(*in));
	if (!wf_serve_input_name_ok(io, t->name))
		return wf_errf(err, WF_EINVAL,
			       "unknown input \"%s\"; the model has one input, \"%s\"",
			       t->name ? t->name : "(none)", wf_serve_input_name(io));
	const char *d = t->datatype ? t->datatype : "";
	int dt = !strcmp(d, "FP32") ? DT_FP32 : !strcmp(d, "UINT8") ? DT_UINT8 : DT_BYTES;
	if (dt == DT_BYTES && strcmp(d, "BYTES"))
		return wf_errf(err, WF_EINVAL,
			       "input datatype \"%.32s\" is not supported (FP32, UINT8 or BYTES)",
			       t->datatype ? t->datatype : "(none)");
	if (t->ndim < 1 || t->ndim > 8)
		return wf_errf(err, WF_EINVAL, "input \"%s\" must have 1 to 8 dimensions", t->name);
	for (int i = 0; i < t->ndim; i++)
		if (t->dims[i] < 0 || t->dims[i] > (1L << 30))
			return wf_errf(err, WF_EINVAL, "input \"%s\" shape[%d] is not a valid size",
				       t->name, i);
	const uint8_t *raw = t->has_raw ? t->raw : NULL;
	size_t raw_len = t->raw_len;
	const char *raw_what = t->raw_what;
	int borrow = t->raw_borrow, rc = 0;
	wf_serve_shm_view view = {0};
	uint8_t *copy = NULL;
	if (t->shm_region[0]) {
		if ((rc = shm_values(t, dt, shm, &view, &copy, &raw, err)) != 0)
			goto out;
		raw_len = (size_t)t->shm_size;
		raw_what = "shared_memory_byte_size";
		borrow = 1;
	} else if (!raw && !t->has_values && !t->has_elements) {
		rc = wf_errf(err, WF_EINVAL, "input \"%s\" has no values", t->name);
		goto out;
	}
	if (dt == DT_BYTES) {
		rc = bytes_input(io, t, raw, raw_len, raw_what, in, err);
		goto out;
	}
	long n = 0;
	if ((rc = wf_serve_dense_samples(io, t->dims, t->ndim, &n, err)) != 0)
		goto out;
	if (!raw) {
		rc = values_input(io, dt == DT_UINT8, t->values, t->nvalues, t->values_what, n, in,
				  err);
		goto out;
	}
	size_t per = sample_floats(io),
	       want = (size_t)n * per * (dt == DT_FP32 ? sizeof(float) : 1);
	/* no samples or too many: input_alloc's message, below */
	if (n > 0 && (size_t)n <= (size_t)WF_SERVE_MAX_INPUT_FLOATS / per && raw_len != want) {
		rc = wf_errf(err, WF_EINVAL,
			     "%s %zu of input \"%s\" does not match its shape and datatype (%zu "
			     "bytes)",
			     raw_what, raw_len, t->name, want);
		goto out;
	}
	rc = wf_serve_input_dense(io, (size_t)n, raw, dt == DT_UINT8, borrow, in, err);
	if (!rc && view.region && (const uint8_t *)in->x == view.p) {
		in->view = view; /* held while the request reads it in place */
		view = (wf_serve_shm_view){0};
	}
out:
	wf_serve_shm_view_put(&view);
	free(copy);
	return rc;
}

/* ---- buffers ------------------------------------------------------------ */

size_t sample_floats(const wf_image_io *io)
{
	return (size_t)io->h * io->w * io->c;
}

int input_alloc(const wf_image_io *io, wf_serve_input *in, size_t n, const float *borrow,
		wf_err *err)
{
	size_t per = sample_floats(io);
	if (n == 0)
		return wf_errf(err, WF_EINVAL, "the request has no samples");
	if (per == 0 || n > (size_t)WF_SERVE_MAX_INPUT_FLOATS / per)
		return wf_errf(err, WF_EINVAL, "too many samples in one request: %zu (at most %zu)",
			       n, per ? (size_t)WF_SERVE_MAX_INPUT_FLOATS / per : 0);
	if (borrow) {
		in->x = (float *)borrow; /* never written: wf_serve_input */
		in->borrowed = 1;
		in->n = (int)n;
		return 0;
	}
	in->x = malloc(n * per * sizeof(float));
	if (!in->x)
		return wf_errf(err, WF_ENOMEM, "out of memory for %zu samples", n);
	in->n = (int)n;
	return 0;
}

/* NaN, Infinity and -Infinity (TF Serving accepts them as bare JSON tokens)
 * become numbers jansson reads: Infinity a double beyond float range (inf
 * once cast), NaN the sentinel NAN_SENTINEL (NaN once read by num_f). */
#define NAN_SENTINEL -7.7e307
static char *replace_nonfinite(const char *body, size_t len, size_t *out_len)
{
	char *o = wf_json_budget_malloc(3 * len + 1); /* counted as the JSON tree is */
	size_t n = 0;
	int in_str = 0;
	if (!o)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		char c = body[i];
		if (in_str) {
			o[n++] = c;
			if (c == '\\' && i + 1 < len)
				o[n++] = body[++i];
			else if (c == '"')
				in_str = 0;
			continue;
		}
		if (c == '"')
			in_str = 1;
		if (c == 'N' && len - i >= 3 && !memcmp(body + i, "NaN", 3)) {
			memcpy(o + n, "-7.7e307", 8);
			n += 8;
			i += 2;
		} else if (c == 'I' && len - i >= 8 && !memcmp(body + i, "Infinity", 8)) {
			memcpy(o + n, "9.9e300", 7);
			n += 7;
			i += 7;
		} else {
			o[n++] = c;
		}
	}
	o[n] = 0;
	*out_len = n;
	return o;
}

float num_f(const json_t *v)
{
	double d = json_number_value(v);
	return d == NAN_SENTINEL ? NAN : (float)d;
}

json_t *parse_json(const char *body, size_t len, wf_err *err)
{
	json_error_t jerr;
	char *fixed = NULL;
	size_t flen = 0;
	if ((memchr(body, 'N', len) || memchr(body, 'I', len)) &&
	    (fixed = replace_nonfinite(body, len, &flen)) != NULL) {
		body = fixed;
		len = flen;
	}
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	wf_json_budget_free(fixed);
	if (!root) {
		wf_errf(err, WF_EINVAL, "malformed JSON at line %d column %d: %s", jerr.line,
			jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(root)) {
		json_decref(root);
		wf_errf(err, WF_EINVAL, "the request body must be a JSON object");
		return NULL;
	}
	return root;
}

/* ---- tf.Example ------------------------------------------------------------ */

int wf_serve_example_rank(const wf_image_io *io, const char *key, size_t nfeatures)
{
	const char *keys[] = {"image/encoded", "image", WF_SERVE_INPUT_NAME,
			      wf_serve_input_name(io)};
	for (size_t k = 0; k < WF_ARRAY_LEN(keys); k++)
		if (key && !strcmp(key, keys[k]))
			return (int)k;
	return nfeatures == 1 ? (int)WF_ARRAY_LEN(keys) : -1;
}

int wf_serve_example_sample(const wf_image_io *io, size_t i, const wf_serve_feature *f, float *dst,
			    wf_err *err)
{
	size_t per = sample_floats(io);
	if (f && f->kind == WF_SERVE_FEATURE_BYTES && f->n == 1) {
		int rc = wf_serve_input_image(io, f->data, f->len, dst, err);
		return rc ? wf_err_wrap(err, "example %zu", i) : 0;
	}
	if (f && f->kind == WF_SERVE_FEATURE_FLOATS && f->n == per) {
		memcpy(dst, f->floats, per * sizeof(float));
		wf_serve_input_numbers(io, dst, 1);
		return 0;
	}
	return wf_errf(err, WF_EINVAL,
		       "example %zu needs a feature \"image/encoded\" (bytes_list with one JPEG "
		       "or PNG) or \"%.200s\" (float_list of %zu model input values)",
		       i, wf_serve_input_name(io), per);
}

int wf_serve_examples_input(const wf_image_io *io, const wf_serve_feature *f, size_t n,
			    wf_serve_input *in, wf_err *err)
{
	int rc = input_alloc(io, in, n, NULL, err);
	size_t per = sample_floats(io);
	for (size_t i = 0; !rc && i < n; i++)
		rc = wf_serve_example_sample(io, i, &f[i], in->x + i * per, err);
	if (rc)
		wf_serve_input_free(in);
	return rc;
}

/* ---- one request ------------------------------------------------------------ */

int wf_serve_request_input(const wf_image_io *io, wf_serve_request *rq, wf_err *err)
{
	if (rq->input.x)
		return 0;
	if (rq->has_examples)
		return wf_serve_examples_input(io, rq->examples, rq->nexamples, &rq->input, err);
	if (rq->has_tensor)
		return wf_serve_tensor_input(io, &rq->tensor, rq->shm, &rq->input, err);
	return wf_errf(err, WF_EINVAL, "the request has no input");
}

void wf_serve_request_free(wf_serve_request *rq)
{
	if (rq)
		wf_serve_input_free(&rq->input);
}

char *wf_serve_error_json(const char *msg)
{
	json_t *root = json_pack("{ss}", "error", msg ? msg : "");
	char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	return s;
}

/* ---- server metadata ------------------------------------------------------ */

int wf_serve_extensions(int shm, const char **out)
{
	static const char *const always[] = {"binary_tensor_data",
					     "classification",
					     "model_repository",
					     "model_configuration",
					     "statistics",
					     "parameters",
					     "trace",
					     "logging"};
	int n = 0;
	for (size_t i = 0; i < WF_ARRAY_LEN(always); i++)
		out[n++] = always[i];
	if (shm)
		out[n++] = "system_shared_memory";
	return n;
}

const char *wf_serve_kserve_unknown(const char *name, long version, int none_available, char *buf,
				    size_t cap)
{
	if (none_available)
		snprintf(buf, cap, "Request for unknown model: '%.200s' has no available versions",
			 name);
	else if (version > 0)
		snprintf(buf, cap, "Request for unknown model: '%.200s' version %ld is not found",
			 name, version);
	else
		snprintf(buf, cap, "Request for unknown model: '%.200s' is not found", name);
	return buf;
}

/* ---- tensor shapes ------------------------------------------------------ */

/* "[a,b,c]" of dims into buf. */
static const char *shape_str(const int64_t *dims, int ndim, char *buf, size_t cap)
{
	size_t len = (size_t)snprintf(buf, cap, "[");
	for (int i = 0; i < ndim && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "," : "",
					(long long)dims[i]);
	if (len < cap)
		snprintf(buf + len, cap - len, "]");
	return buf;
}

int wf_serve_dense_samples(const wf_image_io *io, const int64_t *dims, int ndim, long *n,
			   wf_err *err)
{
	int64_t want[4];
	int nwant = wf_serve_input_shape(io, want), batched = !io->unbatched;
	int ok = ndim == nwant;
	for (int i = batched; ok && i < ndim; i++)
		ok = dims[i] == want[i];
	if (ok) {
		*n = batched ? (long)dims[0] : 1;
		return 0;
	}
	char got[128];
	return wf_errf(err, WF_EINVAL,
		       "input '%s' shape must be %s%d,%d,%d] (the model input%s), got %s",
		       wf_serve_input_name(io), batched ? "[N," : "[", io->h, io->w, io->c,
		       batched ? "" : "; the model is unbatched: max_batch_size 0",
		       shape_str(dims, ndim, got, sizeof(got)));
}

int wf_serve_input_shape(const wf_image_io *io, int64_t dims[4])
{
	int b = !io->unbatched;
	dims[0] = -1;
	dims[b] = io->h;
	dims[b + 1] = io->w;
	dims[b + 2] = io->c;
	return 3 + b;
}

json_t *wf_serve_dims_json(const int64_t *dims, int nd)
{
	json_t *a = json_array();
	for (int i = 0; i < nd; i++)
		json_array_append_new(a, json_integer((json_int_t)dims[i]));
	return a;
}
