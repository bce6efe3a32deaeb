/* request_tfs.c: TF Serving REST bodies: :predict/:classify/:regress
 * requests (row and columnar forms), translated into the tensor and the
 * examples gRPC Predict and Classify send, and their replies. */
#include "serve/request_internal.h"

/* ---- TF Serving ------------------------------------------------------ */

/* The numbers of a JSON value (a number, or lists of them nested in any
 * way) appended to out[cap]; -1 when it holds something else or too many. */
static long json_floats(const json_t *v, float *out, size_t cap, size_t at)
{
	if (json_is_number(v)) {
		if (at >= cap)
			return -1;
		out[at] = (float)json_number_value(v);
		return (long)at + 1;
	}
	if (!json_is_array(v))
		return -1;
	for (size_t i = 0; i < json_array_size(v) && (long)at >= 0; i++) {
		long r = json_floats(json_array_get(v, i), out, cap, at);
		at = r < 0 ? (size_t)-1 : (size_t)r;
	}
	return (long)at;
}

/* A nested [H][W][C] array (or [H][W] for one channel) into dst. */
static int parse_nested(const wf_image_io *io, const json_t *v, float *dst, const char *what,
			long idx, wf_err *err)
{
	if (json_array_size(v) != (size_t)io->h)
		goto bad_shape;
	for (int y = 0; y < io->h; y++) {
		const json_t *row = json_array_get(v, y);
		if (json_array_size(row) != (size_t)io->w)
			goto bad_shape;
		for (int x = 0; x < io->w; x++) {
			const json_t *px = json_array_get(row, x);
			float *o = dst + ((size_t)y * io->w + x) * io->c;
			if (io->c == 1 && json_is_number(px)) {
				o[0] = num_f(px);
				continue;
			}
			if (json_array_size(px) != (size_t)io->c)
				goto bad_shape;
			for (int ch = 0; ch < io->c; ch++) {
				const json_t *num = json_array_get(px, ch);
				if (!json_is_number(num))
					return wf_errf(
						err, WF_EINVAL,
						"%s %ld: value at [%d][%d][%d] is not a number",
						what, idx, y, x, ch);
				o[ch] = num_f(num);
			}
		}
	}
	return 0;
bad_shape:
	return wf_errf(err, WF_EINVAL,
		       "%s %ld: expected a nested array of shape [%d][%d][%d] (the model input)",
		       what, idx, io->h, io->w, io->c);
}

/* A sample of "instances" or "inputs" (one names it in messages, with its
 * index i): 1 when it is numbers, 2 when an image ({"b64": ...}), with v
 * the value itself ({"input": ...} unwrapped when named allows it). */
static int sample_kind(const wf_image_io *io, const json_t **v, const char *one, size_t i,
		       int named, wf_err *err)
{
	if (named && json_is_object(*v) && json_object_size(*v) == 1 &&
	    !json_object_get(*v, "b64")) {
		const char *key = json_object_iter_key(json_object_iter((json_t *)*v));
		if (!wf_serve_input_name_ok(io, key))
			return wf_errf(err, WF_EINVAL,
				       "%s %zu: unknown input \"%s\"; the model has one input, "
				       "\"%s\"",
				       one, i, key, wf_serve_input_name(io));
		*v = json_object_get(*v, key);
	}
	const json_t *b64 = json_object_get(*v, "b64");
	if (json_is_array(*v))
		return 1;
	if (b64 && (!json_is_string(b64) || json_object_size(*v) != 1))
		return wf_errf(err, WF_EINVAL,
			       "%s %zu: \"b64\" must be the only key, with a string", one, i);
	if (b64)
		return 2;
	return wf_errf(err, WF_EINVAL,
		       "%s %zu: expected a [%d][%d][%d] array of numbers or {\"b64\": \"<JPEG or "
		       "PNG>\"}",
		       one, i, io->h, io->w, io->c);
}

/* The samples of "instances" or "inputs" (what) as the one tensor gRPC
 * Predict takes (grpc_tfs.c), built by the same wf_serve_tensor_input:
 * nested numbers as FP32 values [n,H,W,C], images as BYTES elements [n] of
 * base64 text. A tensor has one datatype, so one request holds numbers or
 * images, not both. */
static int samples_input(const wf_image_io *io, const json_t *arr, const char *what,
			 wf_serve_input *in, wf_err *err)
{
	if (!json_is_array(arr))
		return wf_errf(err, WF_EINVAL, "\"%s\" must be a list of samples", what);
	int named = strcmp(what, "inputs") != 0;
	const char *one = named ? "instance" : "inputs sample";
	size_t n = json_array_size(arr), per = sample_floats(io);
	int64_t dims[4] = {(int64_t)n, io->h, io->w, io->c};
	wf_serve_tensor_view t = {.name = wf_serve_input_name(io),
				  .dims = dims,
				  .values_what = what,
				  .element_what = one};
	wf_serve_input vals = {0}; /* the numbers */
	wf_serve_bytes *e = NULL;  /* or the images */
	int rc = 0, kind0 = 0;
	for (size_t i = 0; !rc && i < n; i++) {
		const json_t *v = json_array_get(arr, i);
		int kind = sample_kind(io, &v, one, i, named, err);
		if (kind < 0)
			rc = kind;
		else if (i && kind != kind0)
			rc = wf_errf(err, WF_EINVAL,
				     "%s %zu: %s among %s: one request holds numbers or images "
				     "({\"b64\": ...}), not both",
				     one, i, kind == 2 ? "an image" : "numbers",
				     kind0 == 2 ? "images" : "numbers");
		else if (!i && kind == 1)
			rc = input_alloc(io, &vals, n, NULL, err);
		else if (!i && !(e = calloc(n, sizeof(*e))))
			rc = wf_errf(err, WF_ENOMEM, "out of memory");
		kind0 = i ? kind0 : kind;
		if (!rc && kind == 1)
			rc = parse_nested(io, v, vals.x + i * per, one, (long)i, err);
		else if (!rc) {
			const json_t *b64 = json_object_get(v, "b64");
			e[i] = (wf_serve_bytes){(const uint8_t *)json_string_value(b64),
						json_string_length(b64)};
		}
	}
	if (!rc && kind0 == 2) {
		t.datatype = "BYTES";
		t.ndim = 1;
		t.elements = e;
		t.nelements = n;
		t.has_elements = 1;
		t.elements_b64 = 1;
	} else if (!rc) { /* numbers, or none (refused by the builder) */
		t.datatype = "FP32";
		t.ndim = 4;
		t.values = vals.x;
		t.nvalues = n * per;
		t.has_values = 1;
	}
	if (!rc)
		rc = wf_serve_tensor_input(io, &t, NULL, in, err);
	wf_serve_input_free(&vals);
	free(e);
	return rc;
}

/* "examples": tf.Examples as JSON objects of features, translated into
 * the features gRPC Classify reads ({"b64": ...} a bytes feature, an image;
 * numbers a float feature) and built by the same rule
 * (wf_serve_examples_input). */
static int parse_examples(const wf_image_io *io, const json_t *arr, wf_serve_input *in, wf_err *err)
{
	if (!json_is_array(arr))
		return wf_errf(err, WF_EINVAL, "\"examples\" must be a list of examples");
	size_t n = json_array_size(arr), per = sample_floats(io);
	wf_serve_feature *f = calloc(n + 1, sizeof(*f));
	void **owned = calloc(n + 1, sizeof(*owned)); /* example i's bytes or floats */
	int rc = f && owned ? 0 : wf_errf(err, WF_ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < n; i++) {
		const json_t *e = json_array_get(arr, i), *best = NULL, *fv;
		const char *key;
		int rank = 0;
		json_object_foreach((json_t *)e, key, fv)
		{
			int r = wf_serve_example_rank(io, key, json_object_size(e));
			if (r >= 0 && (!best || r < rank)) {
				best = fv;
				rank = r;
			}
		}
		const json_t *b64 = json_object_get(best, "b64");
		if (json_is_string(b64) && json_object_size(best) == 1) {
			size_t nbytes = 0;
			rc = wf_b64_decode(json_string_value(b64), json_string_length(b64),
					   (uint8_t **)&owned[i], &nbytes, err);
			if (rc)
				wf_err_wrap(err, "example %zu", i);
			f[i] = (wf_serve_feature){WF_SERVE_FEATURE_BYTES, 1, owned[i], nbytes,
						  NULL};
		} else if (best && !b64) {
			float *v = owned[i] = malloc((per + 1) * sizeof(float));
			long m = v ? json_floats(best, v, per + 1, 0) : -1;
			if (!v)
				rc = wf_errf(err, WF_ENOMEM, "out of memory");
			else if (m >= 0)
				f[i] = (wf_serve_feature){WF_SERVE_FEATURE_FLOATS, (size_t)m, NULL,
							  0, v};
		}
	}
	if (!rc)
		rc = wf_serve_examples_input(io, f, n, in, err);
	for (size_t i = 0; owned && i < n; i++)
		free(owned[i]);
	free(owned);
	free(f);
	return rc;
}

int wf_serve_tf_parse(const wf_image_io *io, const char *body, size_t len, wf_serve_tf_req *req,
		      wf_err *err)
{
	memset(req, 0, sizeof(*req));
	req->top_k = 5;
	if (wf_serve_tf_fast_parse(io->h, io->w, io->c, body, len, &req->in, &req->columnar)) {
		/* plain numbers, read without a JSON tree (serve/jsonfast.h) */
		wf_serve_input_numbers(io, req->in.x, (size_t)req->in.n);
		return 0;
	}
	json_t *root = parse_json(body, len, err);
	if (!root)
		return WF_EINVAL;
	int rc = 0;
	const json_t *sig = json_object_get(root, "signature_name");
	req->all_outputs =
		json_is_string(sig) && !strcmp(json_string_value(sig), WF_SERVE_SIGNATURE_ALL);
	if (sig && !req->all_outputs &&
	    (!json_is_string(sig) ||
	     (strcmp(json_string_value(sig), "") != 0 &&
	      strcmp(json_string_value(sig), WF_SERVE_SIGNATURE_DEFAULT) != 0 &&
	      strcmp(json_string_value(sig), "predict") != 0 &&
	      strcmp(json_string_value(sig), "classify") != 0))) {
		rc = wf_errf(err, WF_EINVAL,
			     "Serving signature name: \"%s\" not found in signature def",
			     json_is_string(sig) ? json_string_value(sig) : "(not a string)");
		goto out_root;
	}
	const json_t *topk = json_object_get(root, "top_k");
	if (topk) {
		if (!json_is_integer(topk) || json_integer_value(topk) < 1 ||
		    json_integer_value(topk) > io->classes) {
			rc = wf_errf(err, WF_EINVAL, "\"top_k\" must be an integer in [1, %d]",
				     io->classes);
			goto out_root;
		}
		req->top_k = (int)json_integer_value(topk);
	}
	if (req->top_k > io->classes)
		req->top_k = io->classes;
	const json_t *inst = json_object_get(root, "instances");
	const json_t *cols = json_object_get(root, "inputs");
	const json_t *ex = json_object_get(root, "examples");
	if (!!inst + !!cols + !!ex != 1) {
		rc = wf_errf(err, WF_EINVAL,
			     "the request must have exactly one of \"instances\" or \"inputs\"");
		goto out_root;
	}
	if (cols) {
		req->columnar = 1;
		if (json_is_object(cols)) {
			const char *key =
				json_object_size(cols) == 1
					? json_object_iter_key(json_object_iter((json_t *)cols))
					: NULL;
			if (!wf_serve_input_name_ok(io, key)) {
				rc = wf_errf(err, WF_EINVAL,
					     "\"inputs\" must name the model's one input, \"%s\"",
					     wf_serve_input_name(io));
				goto out_root;
			}
			cols = json_object_get(cols, key);
		}
		rc = samples_input(io, cols, "inputs", &req->in, err);
	} else if (inst) {
		rc = samples_input(io, inst, "instances", &req->in, err);
	} else {
		rc = parse_examples(io, ex, &req->in, err);
	}
out_root:
	json_decref(root);
	return rc;
}

void wf_serve_tf_req_free(wf_serve_tf_req *req)
{
	if (req)
		wf_serve_input_free(&req->in);
}

/* Row i of a [n,k] matrix as a JSON list. */
static json_t *row_json(const float *v, int i, int k)
{
	json_t *row = json_array();
	for (int j = 0; j < k; j++)
		json_array_append_new(row, json_real(v[(size_t)i * k + j]));
	return row;
}

static json_t *matrix_json(const float *v, int n, int k)
{
	json_t *rows = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(rows, row_json(v, i, k));
	return rows;
}

char *wf_serve_tf_predict_reply(const float *probs, const float *logits, int n, int k, int columnar,
				int all_outputs)
{
	json_t *root = json_object(), *out;
	if (!all_outputs) {
		out = matrix_json(probs, n, k);
	} else if (columnar) {
		out = json_pack("{soso}", WF_SERVE_OUTPUT_PROBS, matrix_json(probs, n, k),
				WF_SERVE_OUTPUT_LOGITS, matrix_json(logits, n, k));
	} else {
		out = json_array();
		for (int i = 0; i < n; i++)
			json_array_append_new(out, json_pack("{soso}", WF_SERVE_OUTPUT_PROBS,
							     row_json(probs, i, k),
							     WF_SERVE_OUTPUT_LOGITS,
							     row_json(logits, i, k)));
	}
	json_object_set_new(root, columnar ? "outputs" : "predictions", out);
	char *s = json_dumps(root, REAL_FLAGS);
	json_decref(root);
	return s;
}

char *wf_serve_tf_classify_reply(const float *probs, int n, int k, char *const *labels, int top_k)
{
	int *idx = malloc(sizeof(*idx) * (size_t)(top_k > 0 ? top_k : 1));
	if (!idx)
		return NULL;
	json_t *root = json_object(), *results = json_array();
	char name[256];
	for (int i = 0; i < n; i++) {
		const float *p = probs + (size_t)i * k;
		json_t *res = json_array();
		wf_serve_top_k(p, k, top_k, idx);
		for (int t = 0; t < top_k; t++) {
			json_array_append_new(
				res,
				json_pack("[sf]",
					  wf_serve_class_name(labels, idx[t], name, sizeof(name)),
					  (double)p[idx[t]]));
		}
		json_array_append_new(results, res);
	}
	json_object_set_new(root, "results", results);
	char *s = json_dumps(root, REAL_FLAGS);
	json_decref(root);
	free(idx);
	return s;
}
