/* http_routes.c: the URL table of weft-serve's HTTP API and the dispatch of
 * a parsed route to its handler. */
#include "serve/http_internal.h"

/* ---- routes ---------------------------------------------------------- */

/* rest: "NAME[/versions/V | /labels/L]SUFFIX"; stores NAME, V and L,
 * returns SUFFIX or NULL. */
static const char *parse_model_path(const char *rest, route *r)
{
	size_t n = strcspn(rest, "/:");
	if (n == 0 || n >= sizeof(r->name))
		return NULL;
	memcpy(r->name, rest, n);
	r->name[n] = 0;
	rest += n;
	if (strncmp(rest, "/versions/", 10) == 0) {
		rest += 10;
		size_t d = strcspn(rest, "/:");
		if (d == 0 || d > 15 || strspn(rest, "0123456789") != d)
			r->bad_version = 1;
		else
			r->version = strtol(rest, NULL, 10);
		if (r->version <= 0)
			r->bad_version = 1;
		rest += d;
	} else if (strncmp(rest, "/labels/", 8) == 0) {
		rest += 8;
		size_t d = strcspn(rest, "/:");
		if (d == 0 || d >= sizeof(r->label))
			return NULL;
		memcpy(r->label, rest, d);
		r->label[d] = 0;
		rest += d;
	}
	return rest;
}

/* The routes: whole URLs, and suffixes after a model path of each protocol. */
typedef struct route_entry {
	const char *path; /* whole URL, or the suffix after NAME[/versions/V] */
	route_kind kind;
	wf_serve_endpoint ep; /* the endpoint metrics count it under */
} route_entry;

static const route_entry exact_routes[] = {
	{"/metrics", R_METRICS, WF_SERVE_EP_METRICS},
	{"/monitoring/prometheus/metrics", R_METRICS, WF_SERVE_EP_METRICS},
	{"/v2", R_V2_SERVER, WF_SERVE_EP_V2_METADATA},
	{"/v2/", R_V2_SERVER, WF_SERVE_EP_V2_METADATA},
	{"/v2/health/live", R_V2_LIVE, WF_SERVE_EP_V2_HEALTH},
	{"/v2/health/ready", R_V2_READY, WF_SERVE_EP_V2_HEALTH},
	{"/v2/models/stats", R_V2_ALL_STATS, WF_SERVE_EP_V2_METADATA},
	{"/v2/repository/index", R_V2_REPO_INDEX, WF_SERVE_EP_V2_REPOSITORY},
	{"/v2/trace/setting", R_V2_TRACE, WF_SERVE_EP_V2_METADATA},
	{"/v2/logging", R_V2_LOGGING, WF_SERVE_EP_V2_METADATA},
};

static const route_entry v1_routes[] = {
	/* after /v1/models/NAME[/versions/V | /labels/L] */
	{"", R_V1_STATUS, WF_SERVE_EP_V1_STATUS},
	{"/metadata", R_V1_METADATA, WF_SERVE_EP_V1_METADATA},
	{":predict", R_V1_PREDICT, WF_SERVE_EP_V1_PREDICT},
	{":classify", R_V1_CLASSIFY, WF_SERVE_EP_V1_CLASSIFY},
	{":regress", R_V1_REGRESS, WF_SERVE_EP_V1_CLASSIFY},
};

static const route_entry v2_routes[] = {
	/* after /v2/models/NAME[/versions/V] */
	{"", R_V2_MODEL, WF_SERVE_EP_V2_METADATA},
	{"/ready", R_V2_MODEL_READY, WF_SERVE_EP_V2_METADATA},
	{"/infer", R_V2_INFER, WF_SERVE_EP_V2_INFER},
	{"/config", R_V2_CONFIG, WF_SERVE_EP_V2_METADATA},
	{"/stats", R_V2_STATS, WF_SERVE_EP_V2_METADATA},
	{"/trace/setting", R_V2_TRACE, WF_SERVE_EP_V2_METADATA},
};

static const route_entry repo_routes[] = {
	/* after /v2/repository/models/NAME */
	{"/load", R_V2_REPO_LOAD, WF_SERVE_EP_V2_REPOSITORY},
	{"/unload", R_V2_REPO_UNLOAD, WF_SERVE_EP_V2_REPOSITORY},
};

static wf_serve_endpoint match_route(const route_entry *t, size_t n, const char *path, route *r)
{
	for (size_t i = 0; path && i < n; i++)
		if (strcmp(path, t[i].path) == 0) {
			r->kind = t[i].kind;
			return t[i].ep;
		}
	return WF_SERVE_EP_OTHER;
}

static const route_entry shm_routes[] = {
	/* after /v2/systemsharedmemory[/region/NAME] */
	{"/status", R_V2_SHM_STATUS, WF_SERVE_EP_V2_SHM},
	{"/register", R_V2_SHM_REGISTER, WF_SERVE_EP_V2_SHM},
	{"/unregister", R_V2_SHM_UNREGISTER, WF_SERVE_EP_V2_SHM},
};

/* rest: after "/v2/systemsharedmemory/" (or cudasharedmemory): "status", "unregister" or
 * "region/NAME/(status|register|unregister)"; register needs a region. */
static wf_serve_endpoint parse_shm_route(const char *rest, route *r)
{
	if (strncmp(rest, "region/", 7) == 0) {
		rest += 7;
		size_t n = strcspn(rest, "/");
		if (n == 0 || n >= sizeof(r->name))
			return WF_SERVE_EP_V2_SHM;
		memcpy(r->name, rest, n);
		r->name[n] = 0;
		rest += n;
	} else {
		rest--; /* the '/' before status / unregister */
	}
	wf_serve_endpoint ep = match_route(shm_routes, WF_ARRAY_LEN(shm_routes), rest, r);
	if (r->kind == R_V2_SHM_REGISTER && !r->name[0])
		r->kind = R_UNKNOWN;
	return ep;
}

wf_serve_endpoint parse_route(const char *url, route *r)
{
	memset(r, 0, sizeof(*r));
	wf_serve_endpoint ep = match_route(exact_routes, WF_ARRAY_LEN(exact_routes), url, r);
	if (r->kind != R_UNKNOWN)
		return ep;
	if (strncmp(url, "/v1/models/", 11) == 0)
		return match_route(v1_routes, WF_ARRAY_LEN(v1_routes),
				   parse_model_path(url + 11, r), r);
	if (strncmp(url, "/v2/models/", 11) == 0) {
		ep = match_route(v2_routes, WF_ARRAY_LEN(v2_routes), parse_model_path(url + 11, r),
				 r);
		if (r->label[0])
			r->kind = R_UNKNOWN; /* labels are TF Serving's */
		return ep;
	}
	if (strncmp(url, "/v2/systemsharedmemory/", 23) == 0)
		return parse_shm_route(url + 23, r);
	if (strncmp(url, "/v2/cudasharedmemory/", 21) == 0) {
		r->cuda = 1;
		return parse_shm_route(url + 21, r);
	}
	if (strncmp(url, "/v2/repository/models/", 22) == 0) {
		const char *rest = url + 22;
		size_t n = strcspn(rest, "/");
		if (n == 0 || n >= sizeof(r->name))
			return WF_SERVE_EP_OTHER;
		memcpy(r->name, rest, n);
		r->name[n] = 0;
		return match_route(repo_routes, WF_ARRAY_LEN(repo_routes), rest + n, r);
	}
	return WF_SERVE_EP_OTHER;
}

/* ---- dispatch --------------------------------------------------------- */

static int model_ready(wf_serve_http *h)
{
	return wf_serve_repo_ready(h->repo) && !atomic_load(&h->draining);
}

/* Routes that need a loaded model version. */
static enum MHD_Result dispatch_model(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				      const route *r, int post)
{
	int v1 = r->kind <= R_V1_REGRESS;
	if (r->bad_version)
		return send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
				  "the version in the URL must be a positive integer");
	if (r->kind == R_V1_STATUS)
		return handle_v1_status(h, c, q, r);
	if (r->kind == R_V2_STATS)
		return handle_stats(h, c, q, r->name, r->version);
	wf_serve_find why;
	wf_err err = {0};
	wf_serve_version *v =
		wf_serve_repo_find(h->repo, r->name, r->version, r->label, &why, &err);
	if (!v) {
		if (r->kind == R_V2_MODEL_READY && why != WF_SERVE_BAD_REQUEST &&
		    (why == WF_SERVE_UNAVAILABLE || r->version))
			return send_jobj(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
					 json_pack("{sssb}", "name", r->name, "ready", 0));
		if (why != WF_SERVE_NOT_FOUND || v1)
			return send_error(h, c, q, (int)why, "%s", err.msg);
		char msg[300];
		return send_error(
			h, c, q, MHD_HTTP_NOT_FOUND, "%s",
			wf_serve_kserve_unknown(r->name, r->version, 0, msg, sizeof(msg)));
	}
	enum MHD_Result ret;
	atomic_fetch_add(&h->inflight, 1);
	switch (r->kind) {
	case R_V1_METADATA: ret = handle_v1_metadata(h, c, q, v); break;
	case R_V1_PREDICT:
	case R_V1_CLASSIFY: ret = handle_infer(h, c, q, r, v); break;
	case R_V1_REGRESS:
		ret = send_error(h, c, q, MHD_HTTP_BAD_REQUEST,
				 "this model has no regression signature; use :predict or "
				 ":classify");
		break;
	case R_V2_MODEL: ret = handle_v2_model(h, c, q, v); break;
	case R_V2_CONFIG: ret = handle_v2_config(h, c, q, v); break;
	case R_V2_MODEL_READY:
		ret = send_jobj(
			h, c, q,
			atomic_load(&h->draining) ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
			json_pack("{sssb}", "name", r->name, "ready", !atomic_load(&h->draining)));
		break;
	case R_V2_INFER: ret = handle_infer(h, c, q, r, v); break;
	case R_V2_TRACE: ret = handle_settings(h, c, q, r, post); break;
	default: ret = send_error(h, c, q, MHD_HTTP_NOT_FOUND, "no such endpoint");
	}
	wf_serve_version_release(v);
	atomic_fetch_sub(&h->inflight, 1);
	return ret;
}

enum MHD_Result dispatch(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q, const char *url,
			 const char *method, const route *r)
{
	int is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
	int is_post = strcmp(method, "POST") == 0;
	int wants_post = r->kind == R_V1_PREDICT || r->kind == R_V1_CLASSIFY ||
			 r->kind == R_V1_REGRESS || r->kind == R_V2_INFER ||
			 r->kind == R_V2_REPO_INDEX || r->kind == R_V2_REPO_LOAD ||
			 r->kind == R_V2_REPO_UNLOAD || r->kind == R_V2_SHM_REGISTER ||
			 r->kind == R_V2_SHM_UNREGISTER;
	int either = r->kind == R_V2_TRACE || r->kind == R_V2_LOGGING; /* GET or POST */
	if (r->kind == R_UNKNOWN || (h->o.metrics_only && r->kind != R_METRICS) ||
	    (h->o.no_metrics && r->kind == R_METRICS))
		return send_error(h, c, q, MHD_HTTP_NOT_FOUND, "Malformed request: %s %s", method,
				  url);
	if (h->o.cors && !strcmp(method, "OPTIONS")) { /* a browser's preflight */
		q->preflight = 1;
		return send_reply(h, c, q, MHD_HTTP_NO_CONTENT, strdup(""), 0, CT_JSON, 0);
	}
	if (either ? !is_get && !is_post : (wants_post && !is_post) || (!wants_post && !is_get))
		return send_error(h, c, q, MHD_HTTP_METHOD_NOT_ALLOWED,
				  "method %s is not allowed on %s", method, url);
	if (q->too_big)
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "request body larger than the limit of %zu bytes", h->o.max_body);
	wf_err err = {0};
	int rc = inflate_body(h, c, q, &err);
	if (rc)
		return send_error(h, c, q, http_code(rc), "%s", err.msg);
	switch (r->kind) {
	case R_METRICS: {
		int n = 0;
		wf_serve_version **vs = wf_serve_repo_acquire_all(h->repo, NULL, &n);
		char *s = wf_serve_metrics_render(h->metrics, vs, n, model_ready(h),
						  wf_serve_repo_swaps(h->repo),
						  wf_serve_repo_load_failures(h->repo));
		for (int i = 0; i < n; i++)
			wf_serve_version_release(vs[i]);
		free(vs);
		return send_reply(h, c, q, MHD_HTTP_OK, s, s ? strlen(s) : 0,
				  "text/plain; version=0.0.4", 0);
	}
	case R_V2_SERVER: {
		const char *ext[WF_SERVE_MAX_EXTENSIONS];
		int n = wf_serve_extensions(h->o.shm != NULL, ext);
		json_t *exts = json_array();
		for (int i = 0; i < n; i++)
			json_array_append_new(exts, json_string(ext[i]));
		return send_jobj(h, c, q, MHD_HTTP_OK,
				 json_pack("{ssssso}", "name", WF_SERVE_NAME, "version",
					   WF_SERVE_VERSION, "extensions", exts));
	}
	case R_V2_LIVE: return send_jobj(h, c, q, MHD_HTTP_OK, json_pack("{sb}", "live", 1));
	case R_V2_READY: {
		int ready = model_ready(h);
		return send_jobj(h, c, q, ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
				 json_pack("{sb}", "ready", ready));
	}
	case R_V2_ALL_STATS: return handle_stats(h, c, q, NULL, 0);
	case R_V2_REPO_INDEX: return handle_repo_index(h, c, q);
	case R_V2_REPO_LOAD:
	case R_V2_REPO_UNLOAD: return handle_repo_control(h, c, q, r);
	case R_V2_SHM_STATUS:
	case R_V2_SHM_REGISTER:
	case R_V2_SHM_UNREGISTER: return handle_shm(h, c, q, r);
	case R_V2_LOGGING: return handle_settings(h, c, q, r, is_post);
	case R_V2_TRACE: /* a model's names a model being served */
		return r->name[0] ? dispatch_model(h, c, q, r, is_post)
				  : handle_settings(h, c, q, r, is_post);
	default: return dispatch_model(h, c, q, r, is_post);
	}
}
