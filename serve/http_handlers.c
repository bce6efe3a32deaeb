/* http_handlers.c: the handlers of weft-serve's HTTP API: TF Serving's and
 * KServe v2's status, metadata, config, statistics and repository documents,
 * and inference (:predict/:classify/:regress, /infer). */
#include "serve/http_internal.h"

/* ---- status and metadata documents ------------------------------------ */

static json_t *version_status(long version, const char *state, const char *code, const char *msg)
{
	char v[32];
	snprintf(v, sizeof(v), "%ld", version);
	return json_pack("{sssss{ssss}}", "version", v, "state", state, "status", "error_code",
			 code, "error_message", msg);
}

/* The version label L of model name names; 0 when unknown. */
static long label_version(wf_serve_http *h, const char *name, const char *label)
{
	wf_serve_model_config mc;
	wf_err err = {0};
	if (wf_serve_repo_model_config(h->repo, name, &mc, &err))
		return 0;
	for (int i = 0; i < mc.nlabels; i++)
		if (!strcmp(mc.labels[i].key, label))
			return mc.labels[i].version;
	return 0;
}

enum MHD_Result handle_v1_status(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				 const route *r)
{
	int n = 0;
	long want = r->version;
	if (r->label[0] && !(want = label_version(h, r->name, r->label)))
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND,
				  "Unrecognized servable version label: %s", r->label);
	wf_serve_version_state *st = wf_serve_repo_status(h->repo, r->name, &n);
	json_t *list = json_array();
	for (int i = 0; i < n; i++) {
		if (want && st[i].version != want)
			continue;
		int failed = st[i].error[0] != 0;
		json_array_append_new(list, version_status(st[i].version, st[i].state,
							   failed ? "UNKNOWN" : "OK", st[i].error));
	}
	free(st);
	if (json_array_size(list) == 0) {
		json_decref(list);
		if (want)
			return send_error(h, c, q, MHD_HTTP_NOT_FOUND,
					  "Could not find version %ld of model %s", want, r->name);
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND,
				  "Could not find any versions of model %s", r->name);
	}
	return send_jobj(h, c, q, MHD_HTTP_OK, json_pack("{so}", "model_version_status", list));
}

static json_t *tf_tensor_info(const char *name, const int *dims, int ndim)
{
	json_t *d = json_array();
	char s[32], tname[160];
	for (int i = 0; i < ndim; i++) {
		snprintf(s, sizeof(s), "%d", dims[i]);
		json_array_append_new(d, json_pack("{ssss}", "size", s, "name", ""));
	}
	snprintf(tname, sizeof(tname), "%s:0", name);
	return json_pack("{sss{sosb}ss}", "dtype", "DT_FLOAT", "tensor_shape", "dim", d,
			 "unknown_rank", 0, "name", tname);
}

static json_t *weft_info(const wf_serve_version *v)
{
	json_t *classes = json_array();
	for (int i = 0; i < v->meta.nclasses && v->meta.class_names; i++)
		json_array_append_new(
			classes, json_string(v->meta.class_names[i] ? v->meta.class_names[i] : ""));
	json_t *mean = json_array(), *std = json_array();
	for (int i = 0; i < v->io.c && i < 4; i++) {
		json_array_append_new(mean, json_real(v->meta.mean[i]));
		json_array_append_new(std, json_real(v->meta.std[i]));
	}
	return json_pack("{sos{sfsosossssss}sI}", "classes", classes, "preprocessing", "scale",
			 (double)v->meta.scale, "mean", mean, "std", std, "channel_order",
			 v->meta.channel_order[0] ? v->meta.channel_order : "RGB", "input",
			 v->io.raw_numbers ? "the model's own first layers: numbers and images "
					     "are raw pixels, it is applied to both"
					   : "numbers are model input after preprocessing; images "
					     "get it applied",
			 "input_name", wf_serve_input_name(&v->io), "trained_steps",
			 (json_int_t)v->meta.trained_steps);
}

enum MHD_Result handle_v1_metadata(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				   wf_serve_version *v)
{
	int in_dims[4] = {-1, v->io.h, v->io.w, v->io.c}, out_dims[2] = {-1, v->io.classes};
	char ver[32];
	snprintf(ver, sizeof(ver), "%ld", v->version);
	/* the default signature has one output (replies are plain lists); the
	 * second has both (replies keyed by output name) */
	const char *in_name = wf_serve_input_name(&v->io);
	json_t *sig = json_pack(
		"{s{so}s{so}ss}", "inputs", in_name, tf_tensor_info(in_name, in_dims, 4), "outputs",
		WF_SERVE_OUTPUT_PROBS, tf_tensor_info(WF_SERVE_OUTPUT_PROBS, out_dims, 2),
		"method_name", "tensorflow/serving/predict");
	json_t *all = json_pack(
		"{s{so}s{soso}ss}", "inputs", in_name, tf_tensor_info(in_name, in_dims, 4),
		"outputs", WF_SERVE_OUTPUT_PROBS,
		tf_tensor_info(WF_SERVE_OUTPUT_PROBS, out_dims, 2), WF_SERVE_OUTPUT_LOGITS,
		tf_tensor_info(WF_SERVE_OUTPUT_LOGITS, out_dims, 2), "method_name",
		"tensorflow/serving/predict");
	json_t *doc = json_pack("{s{ssssss}s{s{s{soso}}so}}", "model_spec", "name", v->name,
				"signature_name", "", "version", ver, "metadata", "signature_def",
				"signature_def", WF_SERVE_SIGNATURE_DEFAULT, sig,
				WF_SERVE_SIGNATURE_ALL, all, "weft", weft_info(v));
	(void)h;
	return send_jobj(h, c, q, MHD_HTTP_OK, doc);
}

/* Versions of model `name` being served, as strings, newest first. */
static json_t *served_versions(wf_serve_http *h, const char *name)
{
	long vs[WF_SERVE_MAX_SERVED];
	int n = wf_serve_repo_served(h->repo, name, vs, WF_SERVE_MAX_SERVED);
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		char ver[32];
		snprintf(ver, sizeof(ver), "%ld", vs[i]);
		json_array_append_new(a, json_string(ver));
	}
	return a;
}

enum MHD_Result handle_v2_model(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				wf_serve_version *v)
{
	int64_t in[4], out[2];
	int nin = wf_serve_input_shape(&v->io, in),
	    nout = wf_serve_output_shape(v->io.unbatched, -1, v->io.classes, out);
	json_t *doc =
		json_pack("{sssosss[{ssssso}]s[{ssssso},{ssssso}]so}", "name", v->name, "versions",
			  served_versions(h, v->name), "platform", "weft", "inputs", "name",
			  wf_serve_input_name(&v->io), "datatype", "FP32", "shape",
			  wf_serve_dims_json(in, nin), "outputs", "name", WF_SERVE_OUTPUT_PROBS,
			  "datatype", "FP32", "shape", wf_serve_dims_json(out, nout), "name",
			  WF_SERVE_OUTPUT_LOGITS, "datatype", "FP32", "shape",
			  wf_serve_dims_json(out, nout), "parameters", weft_info(v));
	return send_jobj(h, c, q, MHD_HTTP_OK, doc);
}

/* Triton's model configuration JSON (model_config.proto as JSON). */
enum MHD_Result handle_v2_config(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				 wf_serve_version *v)
{
	wf_serve_model_config mc;
	wf_err err = {0};
	if (wf_serve_repo_model_config(h->repo, v->name, &mc, &err))
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND, "%s", err.msg);
	json_t *policy;
	if (mc.policy == WF_SERVE_POLICY_SPECIFIC) {
		json_t *vl = json_array();
		for (int i = 0; i < mc.nspecific; i++)
			json_array_append_new(vl, json_integer(mc.specific[i]));
		policy = json_pack("{s{so}}", "specific", "versions", vl);
	} else if (mc.policy == WF_SERVE_POLICY_ALL) {
		policy = json_pack("{s{}}", "all");
	} else {
		policy = json_pack("{s{si}}", "latest", "num_versions", mc.num_versions);
	}
	char lab[WF_SERVE_LABELS_CAP];
	wf_serve_labels_string(&mc, lab, sizeof(lab));
	json_t *labels = json_pack("{ss}", "string_value", lab);
	char group[WF_SERVE_MAX_NAME + 8];
	snprintf(group, sizeof(group), "%s_0", v->name);
	json_t *outs = json_array();
	const char *onames[2] = {WF_SERVE_OUTPUT_PROBS, WF_SERVE_OUTPUT_LOGITS};
	for (int i = 0; i < 2; i++)
		json_array_append_new(outs,
				      json_pack("{sssss[i]ss}", "name", onames[i], "data_type",
						"TYPE_FP32", "dims", v->io.classes,
						"label_filename", mc.label_filename));
	json_t *doc = json_pack(
		"{sssssssosis[{sssssss[iii]sb}]sos[{sssiss}]s{so}}", "name", v->name, "platform",
		mc.platform, "backend", "weft", "version_policy", policy, "max_batch_size",
		mc.max_batch, "input", "name", wf_serve_input_name(&v->io), "data_type",
		"TYPE_FP32", "format", "FORMAT_NHWC", "dims", v->io.h, v->io.w, v->io.c,
		"allow_ragged_batch", 0, "output", outs, "instance_group", "name", group, "count",
		mc.instances, "kind", "KIND_CPU", "parameters", "weft_version_labels", labels);
	json_object_set_new(doc, "default_model_filename", json_string(WF_SERVE_MODEL_FILENAME));
	json_t *preferred = json_array();
	for (int i = 0; i < mc.npreferred; i++)
		json_array_append_new(preferred, json_integer(mc.preferred[i]));
	if (mc.batch_delay_us >= 0)
		json_object_set_new(doc, "dynamic_batching",
				    json_pack("{sOsI}", "preferred_batch_size", preferred,
					      "max_queue_delay_microseconds",
					      (json_int_t)mc.batch_delay_us));
	json_decref(preferred);
	return send_jobj(h, c, q, MHD_HTTP_OK, doc);
}

/* Triton's statistics of model `name` (all models when NULL), optionally of
 * one version. */
enum MHD_Result handle_stats(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
			     const char *name, long version)
{
	int n = 0, m = 0;
	wf_serve_version **vs = wf_serve_repo_acquire_all(h->repo, name, &n);
	for (int i = 0; i < n; i++)
		if (!version || vs[i]->version == version)
			vs[m++] = vs[i];
		else
			wf_serve_version_release(vs[i]);
	if (name && m == 0) {
		char why[300];
		free(vs);
		return send_error(
			h, c, q, MHD_HTTP_NOT_FOUND, "%s",
			wf_serve_kserve_unknown(name, version, !version, why, sizeof(why)));
	}
	char *s = wf_serve_stats_json(vs, m);
	for (int i = 0; i < m; i++)
		wf_serve_version_release(vs[i]);
	free(vs);
	return send_json(h, c, q, MHD_HTTP_OK, s);
}

/* Triton's repository index: [{name, version, state, reason}]. Body
 * {"ready": true} lists only the models ready for inference. */
enum MHD_Result handle_repo_index(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q)
{
	int ready_only = 0;
	if (q->len > CONTROL_BODY_MAX)
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "an index request body is at most %zu bytes", CONTROL_BODY_MAX);
	if (q->len) {
		json_error_t jerr;
		json_t *b = json_loadb(q->body, q->len, 0, &jerr);
		if (!json_is_object(b)) {
			json_decref(b);
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "the index request body must be a JSON object");
		}
		ready_only = json_is_true(json_object_get(b, "ready"));
		json_decref(b);
	}
	int n = 0;
	wf_serve_version_state *st = wf_serve_repo_index(h->repo, &n);
	json_t *a = json_array();
	for (int i = 0; i < n; i++) {
		/* Triton's names: READY, LOADING, UNLOADING, UNAVAILABLE */
		const char *state = !strcmp(st[i].state, "AVAILABLE")	? "READY"
				    : !strcmp(st[i].state, "LOADING")	? "LOADING"
				    : !strcmp(st[i].state, "UNLOADING") ? "UNLOADING"
									: "UNAVAILABLE";
		if (ready_only && strcmp(state, "READY"))
			continue;
		json_t *e = json_pack("{ssss}", "name", st[i].name, "state", state);
		if (st[i].version) {
			char ver[32];
			snprintf(ver, sizeof(ver), "%ld", st[i].version);
			json_object_set_new(e, "version", json_string(ver));
		}
		if (!strcmp(state, "UNAVAILABLE"))
			json_object_set_new(e, "reason",
					    json_string(st[i].error[0] ? st[i].error : "unloaded"));
		json_array_append_new(a, e);
	}
	free(st);
	return send_jobj(h, c, q, MHD_HTTP_OK, a);
}

enum MHD_Result handle_repo_control(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				    const route *r)
{
	wf_err err = {0};
	if (q->len > CONTROL_BODY_MAX)
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "a load or unload request body is at most %zu bytes",
				  CONTROL_BODY_MAX);
	char *config = NULL; /* Triton's model configuration as JSON, for a load */
	if (q->len) {
		json_error_t jerr;
		json_t *b = json_loadb(q->body, q->len, 0, &jerr);
		const json_t *p = json_object_get(b, "parameters");
		const json_t *cj = json_object_get(p, "config");
		const char *why = !json_is_object(b) ? "the request body must be a JSON object"
				  : cj && !json_is_string(cj) ? WF_SERVE_LOAD_CONFIG_NOT_STRING
				  : r->kind == R_V2_REPO_LOAD && json_object_size(p) > (cj ? 1 : 0)
					  ? WF_SERVE_LOAD_FILES_REFUSED
					  : NULL;
		if (!why && cj && r->kind == R_V2_REPO_LOAD)
			config = strdup(json_string_value(cj));
		json_decref(b);
		if (why)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST, "%s", why);
	}
	int rc = r->kind == R_V2_REPO_LOAD ? wf_serve_repo_load(h->repo, r->name, config, &err)
					   : wf_serve_repo_unload(h->repo, r->name, &err);
	free(config);
	if (rc)
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	return send_json(h, c, q, MHD_HTTP_OK, strdup(""));
}

/* ---- trace and log settings (serve/settings.h) ------------------------ */

/* The members of a JSON object as settings (strings point into obj);
 * -1 with why when one is not a setting value. */
static int json_settings(json_t *obj, wf_serve_setting *s, const char *(*strs)[8], int *n,
			 char *why, size_t cap)
{
	const char *key;
	json_t *v;
	*n = 0;
	json_object_foreach(obj, key, v)
	{
		if (*n == WF_SERVE_MAX_SETTINGS) {
			snprintf(why, cap, "at most %d settings in one request",
				 WF_SERVE_MAX_SETTINGS);
			return -1;
		}
		wf_serve_setting *e = &s[*n];
		*e = (wf_serve_setting){.key = key};
		if (json_is_null(v)) {
			e->kind = WF_SETTING_NULL;
		} else if (json_is_boolean(v)) {
			e->kind = WF_SETTING_BOOL;
			e->b = json_is_true(v);
		} else if (json_is_integer(v) && json_integer_value(v) >= 0) {
			e->kind = WF_SETTING_UINT;
			e->u = (unsigned long long)json_integer_value(v);
		} else if (json_is_string(v)) {
			e->kind = WF_SETTING_STRING;
			e->s = json_string_value(v);
		} else if (json_is_array(v) && json_array_size(v) <= 8) {
			e->kind = WF_SETTING_STRINGS;
			e->v = strs[*n];
			e->n = (int)json_array_size(v);
			for (int i = 0; i < e->n; i++)
				if (!(strs[*n][i] =
					      json_string_value(json_array_get(v, (size_t)i)))) {
					snprintf(why, cap, "setting '%s': a list of strings", key);
					return -1;
				}
		} else {
			snprintf(why, cap, "setting '%s' has a value of the wrong type", key);
			return -1;
		}
		(*n)++;
	}
	return 0;
}

static json_t *trace_json(const char *model)
{
	wf_serve_trace t;
	wf_serve_trace_get(model, &t);
	json_t *o = json_object();
	for (int k = 0; k < WF_TRACE_NKEYS; k++) {
		json_t *v = k == WF_TRACE_LEVEL ? json_array() : json_string(t.v[k][0]);
		for (int i = 0; k == WF_TRACE_LEVEL && i < t.n[k]; i++)
			json_array_append_new(v, json_string(t.v[k][i]));
		json_object_set_new(o, wf_serve_trace_keys[k], v);
	}
	return o;
}

static json_t *log_json(void)
{
	wf_serve_log l;
	wf_serve_log_get(&l);
	return json_pack("{sssbsbsbsIss}", "log_file", l.file, "log_info", l.info, "log_warning",
			 l.warning, "log_error", l.error, "log_verbose_level",
			 (json_int_t)l.verbose_level, "log_format", l.format);
}

enum MHD_Result handle_settings(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				const route *r, int post)
{
	const char *model = r->kind == R_V2_TRACE && r->name[0] ? r->name : NULL;
	if (post) {
		wf_serve_setting s[WF_SERVE_MAX_SETTINGS];
		const char *strs[WF_SERVE_MAX_SETTINGS][8];
		char why[512];
		int n = 0;
		if (q->len > CONTROL_BODY_MAX)
			return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
					  "a settings request body is at most %zu bytes",
					  CONTROL_BODY_MAX);
		json_t *b = json_loadb(q->body ? q->body : "", q->len, 0, NULL);
		int rc = !json_is_object(b) ? (snprintf(why, sizeof(why),
							"the request body must be a JSON object"),
					       -1)
					    : json_settings(b, s, strs, &n, why, sizeof(why));
		if (!rc)
			rc = r->kind == R_V2_TRACE
				     ? wf_serve_trace_update(model, s, n, why, sizeof(why))
				     : wf_serve_log_update(s, n, why, sizeof(why));
		json_decref(b);
		if (rc)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST, "%s", why);
	}
	return send_jobj(h, c, q, MHD_HTTP_OK,
			 r->kind == R_V2_TRACE ? trace_json(model) : log_json());
}

/* ---- inference -------------------------------------------------------- */

/* A body read for the model by one of request.h's JSON parsers, its tree
 * counted in the body budget. */
typedef struct body_read {
	wf_serve_http *h;
	req_ctx *q;
	wf_serve_shm *shm;
	size_t json_len;
	parse_budget pb;
	int refused; /* the budget refused the parse (send_parse_refused) */
	union {
		wf_serve_tf_req tf;
		wf_serve_kv2_req kv2;
	};
} body_read;

static int budget_refused(body_read *b, wf_err *err)
{
	b->refused = parse_budget_end(&b->pb);
	return b->refused ? wf_errf(err, WF_EINVAL, "the request body is over the budget") : 0;
}

/* TF Serving REST (:predict, :classify) for the core (infer.h). */
static int read_tf(void *arg, const wf_image_io *io, wf_serve_request *rq, wf_err *err)
{
	body_read *b = arg;
	parse_budget_begin(b->h, b->q, &b->pb);
	int rc = wf_serve_tf_parse(io, b->q->body ? b->q->body : "", b->q->len, &b->tf, err);
	if (budget_refused(b, err) && !rc)
		wf_serve_tf_req_free(&b->tf);
	if (!rc && !b->refused) {
		rq->input = b->tf.in; /* the request's now */
		memset(&b->tf.in, 0, sizeof(b->tf.in));
	}
	return b->refused ? WF_EINVAL : rc;
}

/* KServe v2 /infer (JSON and binary) for the core. */
static int read_kv2(void *arg, const wf_image_io *io, wf_serve_request *rq, wf_err *err)
{
	body_read *b = arg;
	parse_budget_begin(b->h, b->q, &b->pb);
	int rc = wf_serve_kv2_parse(io, b->q->body ? b->q->body : "", b->q->len, b->json_len,
				    b->shm, &b->kv2, err);
	if (budget_refused(b, err) && !rc)
		wf_serve_kv2_req_free(&b->kv2);
	if (rc || b->refused)
		return b->refused ? WF_EINVAL : rc;
	rq->input = b->kv2.in;
	memset(&b->kv2.in, 0, sizeof(b->kv2.in));
	rq->nout = b->kv2.nout;
	memcpy(rq->out, b->kv2.out, sizeof(rq->out));
	if (b->kv2.timeout_us > 0 && b->kv2.timeout_us * 1e-6 < rq->timeout_s)
		rq->timeout_s = b->kv2.timeout_us * 1e-6;
	return 0;
}

static wf_serve_shm *shm_for(wf_serve_http *h, struct MHD_Connection *c);

enum MHD_Result handle_infer(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const route *r,
			     wf_serve_version *v)
{
	body_read b = {.h = h, .q = q, .json_len = q->len};
	int kv2 = r->kind == R_V2_INFER;
	const char *hcl = kv2 ? MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							    "Inference-Header-Content-Length")
			      : NULL;
	if (hcl) {
		char *end;
		unsigned long long l = strtoull(hcl, &end, 10);
		if (*hcl < '0' || *hcl > '9' || *end || l > q->len)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "bad Inference-Header-Content-Length \"%s\" for a body "
					  "of %zu bytes",
					  hcl, q->len);
		b.json_len = (size_t)l;
	}
	if (kv2)
		b.shm = shm_for(h, c);
	wf_serve_request rq = {.read = kv2 ? read_kv2 : read_tf,
			       .read_arg = &b,
			       .shm = b.shm,
			       .timeout_s = h->o.request_timeout};
	wf_serve_response rs;
	wf_err err = {0};
	int rc = wf_serve_infer(h->batcher, v, &rq, &rs, &err);
	char *body = NULL;
	size_t len = 0, header_len = 0;
	if (!rc && kv2)
		rc = wf_serve_kv2_reply(&b.kv2, rs.t, v->name, v->version, &body, &len, &header_len,
					&err);
	else if (!rc)
		body = r->kind == R_V1_CLASSIFY
			       ? wf_serve_tf_classify_reply(rs.res.probs, rs.res.n, rs.res.k,
							    v->meta.class_names, b.tf.top_k)
			       : wf_serve_tf_predict_reply(rs.res.probs, rs.res.logits, rs.res.n,
							   rs.res.k, b.tf.columnar,
							   b.tf.all_outputs);
	enum MHD_Result ret =
		b.refused ? send_parse_refused(h, c, q, &b.pb)
		: rc	  ? send_error(h, c, q, http_code(rc), "%s", err.msg)
			  : send_reply(h, c, q, MHD_HTTP_OK, body,
				       kv2    ? len
				       : body ? strlen(body)
					      : 0,
				       header_len ? "application/octet-stream" : CT_JSON, header_len);
	wf_serve_response_free(&rs);
	wf_serve_request_free(&rq);
	return ret;
}

/* ---- system shared memory (Triton's extension, shm.h) ------------------ */

static int client_is_local(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	return ci && wf_serve_addr_is_loopback(ci->client_addr);
}

/* The regions this client may name in a request: none from afar under
 * --shared_memory=local. */
static wf_serve_shm *shm_for(wf_serve_http *h, struct MHD_Connection *c)
{
	return wf_serve_shm_allowed(h->o.shm, client_is_local(c), &(wf_err){0}) == 0 ? h->o.shm
										     : NULL;
}

/* A register body: {"key": K, "offset": O, "byte_size": B}. */
static int shm_register(wf_serve_http *h, req_ctx *q, const char *name, wf_err *err)
{
	if (q->len > CONTROL_BODY_MAX)
		return wf_errf(err, WF_EINVAL, "a register request body is at most %zu bytes",
			       CONTROL_BODY_MAX);
	json_error_t jerr;
	json_t *b = json_loadb(q->body ? q->body : "", q->len, 0, &jerr);
	const json_t *key = json_object_get(b, "key"), *off = json_object_get(b, "offset"),
		     *size = json_object_get(b, "byte_size");
	int rc = 0;
	if (!json_is_object(b))
		rc = wf_errf(err, WF_EINVAL,
			     "the register body must be a JSON object {\"key\", \"offset\", "
			     "\"byte_size\"}: %s",
			     jerr.text);
	else if (!json_is_string(key))
		rc = wf_errf(err, WF_EINVAL, "register: \"key\" must be a string");
	else if (off && (!json_is_integer(off) || json_integer_value(off) < 0))
		rc = wf_errf(err, WF_EINVAL, "register: \"offset\" must be a non-negative integer");
	else if (!json_is_integer(size) || json_integer_value(size) <= 0)
		rc = wf_errf(err, WF_EINVAL, "register: \"byte_size\" must be a positive integer");
	else
		rc = wf_serve_shm_register(h->o.shm, name, json_string_value(key),
					   off ? (uint64_t)json_integer_value(off) : 0,
					   (uint64_t)json_integer_value(size), err);
	json_decref(b);
	return rc;
}

enum MHD_Result handle_shm(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const route *r)
{
	wf_err err = {0};
	if (r->cuda) { /* none can be registered: status [], unregister a no-op */
		if (r->kind == R_V2_SHM_REGISTER)
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "CUDA shared memory is not supported: weft-serve takes "
					  "tensors in host memory; use system shared memory "
					  "(/v2/systemsharedmemory)");
		if (r->kind == R_V2_SHM_STATUS && r->name[0])
			return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
					  "Unable to find cuda shared memory region: '%s'",
					  r->name);
		return r->kind == R_V2_SHM_STATUS ? send_jobj(h, c, q, MHD_HTTP_OK, json_array())
						  : send_json(h, c, q, MHD_HTTP_OK, strdup(""));
	}
	int rc = wf_serve_shm_allowed(h->o.shm, client_is_local(c), &err);
	if (!rc && r->kind == R_V2_SHM_REGISTER)
		rc = shm_register(h, q, r->name, &err);
	if (!rc && r->kind == R_V2_SHM_UNREGISTER)
		wf_serve_shm_unregister(h->o.shm, r->name);
	if (rc)
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	if (r->kind != R_V2_SHM_STATUS)
		return send_json(h, c, q, MHD_HTTP_OK, strdup(""));
	wf_serve_shm_info *a;
	int n;
	if ((rc = wf_serve_shm_status(h->o.shm, r->name, &a, &n, &err)) != 0)
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	json_t *list = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(list, json_pack("{sssssIsI}", "name", a[i].name, "key",
						      a[i].key, "offset", (json_int_t)a[i].offset,
						      "byte_size", (json_int_t)a[i].byte_size));
	free(a);
	return send_jobj(h, c, q, MHD_HTTP_OK, list);
}
