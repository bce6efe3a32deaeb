/* http.c: weft-serve's HTTP server: connections and their deadlines, the
 * body budget, authentication, the handler threads, start and stop (MHD's
 * event loop). Routes: http_routes.c; replies: http_reply.c; the documents
 * and inference handlers: http_handlers.c. */
#include "serve/http_internal.h"

#include "common/cpus.h"

#include <fcntl.h> /* O_CLOEXEC */

/* ---- connections: deadlines, budget, authentication -------------------- */

static conn_rec *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void conn_phase(wf_serve_http *h, struct MHD_Connection *c, int phase, double seconds)
{
	conn_rec *r = conn_of(c);
	if (!r)
		return;
	pthread_mutex_lock(&h->cmu);
	r->phase = phase;
	r->deadline = wf_now() + seconds;
	pthread_mutex_unlock(&h->cmu);
}

/* Count connections whose request is on its way: from the request line
 * (on_uri) until its header is complete (on_header) or the connection goes,
 * so that a drain answers a request whose header was arriving at SIGTERM.
 * (A request line still incomplete at SIGTERM is not seen.) */
static void set_receiving(wf_serve_http *h, conn_rec *r, int on)
{
	if (!r)
		return;
	pthread_mutex_lock(&h->cmu);
	if (r->receiving != on) {
		r->receiving = on;
		atomic_fetch_add(&h->receiving, on ? 1 : -1);
	}
	pthread_mutex_unlock(&h->cmu);
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	(void)uri;
	set_receiving(cls, conn_of(c), 1);
	return NULL; /* no request context yet: on_request makes it */
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	wf_serve_http *h = cls;
	conn_rec *r = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		static __thread int io_thread; /* MHD's own event threads */
		if (!io_thread) {
			wf_cpus_io_thread(NULL);
			io_thread = 1;
		}
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		r = calloc(1, sizeof(*r));
		if (!r || !ci) {
			free(r);
			return;
		}
		r->fd = ci->connect_fd;
		r->phase = C_HEADER;
		r->deadline = wf_now() + h->o.header_timeout;
		pthread_mutex_lock(&h->cmu);
		r->next = h->conns;
		if (h->conns)
			h->conns->prev = r;
		h->conns = r;
		pthread_mutex_unlock(&h->cmu);
		*socket_context = r;
	} else if (r) {
		/* MHD reports CLOSED before it closes the socket, so the reaper
		 * (under cmu) never shuts down a reused descriptor. */
		pthread_mutex_lock(&h->cmu);
		if (r->receiving)
			atomic_fetch_sub(&h->receiving, 1);
		WF_LIST_UNLINK(h->conns, r);
		pthread_mutex_unlock(&h->cmu);
		free(r);
		*socket_context = NULL;
	}
}

/* Shuts down connections whose header or body is overdue (like nginx's
 * client_header_timeout / client_body_timeout, but for the whole header or
 * body, so a client trickling one byte at a time gets no longer either). */
static void *reaper_main(void *arg)
{
	wf_serve_http *h = arg;
	wf_cpus_io_thread("http-reaper");
	pthread_mutex_lock(&h->cmu);
	while (!h->reaper_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&h->ccv, &h->cmu, &ts);
		double now = wf_now();
		for (conn_rec *r = h->conns; r; r = r->next)
			if (r->phase != C_BUSY && now > r->deadline) {
				wf_debug("serve: http: closing connection %d: %s not received in "
					 "time",
					 r->fd, r->phase == C_HEADER ? "request header" : "body");
				shutdown(r->fd, SHUT_RDWR);
				r->deadline = now + 3600;
			}
	}
	pthread_mutex_unlock(&h->cmu);
	return NULL;
}

/* Reserve n more bytes of the body budget for q; 0 when it is exhausted
 * (a request alone may always use up to the budget). */
int reserve_body(wf_serve_http *h, req_ctx *q, size_t n)
{
	if (!h->o.body_budget) {
		q->reserved += n;
		atomic_fetch_add(&h->body_bytes, n);
		return 1;
	}
	size_t cur = atomic_load(&h->body_bytes);
	for (;;) {
		if (cur > q->reserved && cur + n > h->o.body_budget)
			return 0;
		if (atomic_compare_exchange_weak(&h->body_bytes, &cur, cur + n))
			break;
	}
	q->reserved += n;
	return 1;
}

static int parse_grow(void *arg, size_t n)
{
	parse_budget *pb = arg;
	size_t budget = pb->h->o.body_budget;
	if (budget && pb->q->reserved + n > budget) {
		pb->alone = 1;
		return 0;
	}
	return reserve_body(pb->h, pb->q, n);
}

void parse_budget_begin(wf_serve_http *h, req_ctx *q, parse_budget *pb)
{
	pb->h = h;
	pb->q = q;
	pb->alone = 0;
	pb->b.grow = parse_grow;
	pb->b.arg = pb;
	wf_json_budget_begin(&pb->b);
}

int parse_budget_end(parse_budget *pb)
{
	wf_json_budget_end();
	if (pb->b.granted) {
		atomic_fetch_sub(&pb->h->body_bytes, pb->b.granted);
		pb->q->reserved -= pb->b.granted;
	}
	return pb->b.refused;
}

enum MHD_Result send_parse_refused(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
				   const parse_budget *pb)
{
	if (pb->alone)
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "the JSON of this %zu-byte body needs more memory to parse than "
				  "the budget of %zu bytes (--max_body_bytes_in_flight); send "
				  "plain numbers, base64 images or KServe's binary tensors",
				  q->len, h->o.body_budget);
	return send_error(h, c, q, MHD_HTTP_TOO_MANY_REQUESTS,
			  "too many request bodies in memory (budget %zu bytes) to parse this "
			  "body's JSON; retry later",
			  h->o.body_budget);
}

/* The body is no longer needed (the request was answered): free it and its
 * share of the budget; memory of a large one goes back to the system. */
static void release_body(wf_serve_http *h, req_ctx *q)
{
	free(q->base);
	q->body = q->base = NULL;
	q->len = q->cap = q->pad = 0;
	if (q->reserved) {
		atomic_fetch_sub(&h->body_bytes, q->reserved);
		if (q->reserved >= WF_SERVE_BODY_REUSE_BYTES)
			malloc_trim(0);
		q->reserved = 0;
	}
}

/* 1 when the request carries "Authorization: Bearer <token>". */
static int authorized(wf_serve_http *h, struct MHD_Connection *c)
{
	const char *a =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	return wf_serve_bearer_ok(h->token, a, a ? strlen(a) : 0);
}

/* The first call for a request: its header is complete. */
static enum MHD_Result on_header(wf_serve_http *h, struct MHD_Connection *c, const char *url,
				 const char *method, req_ctx *q)
{
	route r;
	q->ep = parse_route(url, &r);
	atomic_fetch_add(&h->active, 1);
	set_receiving(h, conn_of(c), 0);
	conn_phase(h, c, C_BODY, h->o.body_timeout);
	/* a browser's CORS preflight carries no credentials (Fetch standard):
	 * it is answered without the token; the request it announces needs it */
	int preflight = h->o.cors && !strcmp(method, "OPTIONS");
	if (h->token && r.kind != R_V2_LIVE && r.kind != R_V2_READY && !preflight &&
	    !authorized(h, c))
		return send_error(h, c, q, MHD_HTTP_UNAUTHORIZED,
				  "this server requires \"Authorization: Bearer <token>\"");
	const char *cl =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
	if (cl && len > h->o.max_body) {
		q->too_big = 1;
		return send_error(h, c, q, MHD_HTTP_CONTENT_TOO_LARGE,
				  "request body of %s bytes is larger than the limit of %zu "
				  "bytes",
				  cl, h->o.max_body);
	}
	if (len) {
		if (!reserve_body(h, q, (size_t)len)) {
			q->over_budget = 1;
			return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "too many request bodies in memory (budget %zu bytes); "
					  "retry later",
					  h->o.body_budget);
		}
		/* The body's exact size at once: no doubling, no copies; a KServe
		 * binary tensor after its JSON header starts 64-byte aligned, so
		 * that inference reads it in place. */
		const char *hl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     "Inference-Header-Content-Length");
		q->pad = hl ? (64 - strtoull(hl, NULL, 10) % 64) % 64 : 0;
		q->base = malloc(q->pad + (size_t)len + 1);
		if (!q->base)
			return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "out of memory for a body of %s bytes", cl);
		q->body = q->base + q->pad;
		q->cap = (size_t)len + 1;
	}
	return MHD_YES;
}

static enum MHD_Result on_body(wf_serve_http *h, req_ctx *q, const char *data, size_t n)
{
	if (q->replied || q->too_big || q->over_budget)
		return MHD_YES;
	if (q->len + n > h->o.max_body) {
		q->too_big = 1;
		free(q->base);
		q->body = q->base = NULL;
		q->len = q->cap = 0;
		return MHD_YES;
	}
	if (q->len + n + 1 > q->cap) {
		size_t cap = q->cap ? q->cap : 4096;
		while (cap < q->len + n + 1)
			cap *= 2;
		if (!reserve_body(h, q, cap - q->cap)) {
			q->over_budget = 1;
			free(q->base);
			q->body = q->base = NULL;
			q->len = q->cap = 0;
			return MHD_YES;
		}
		char *p = realloc(q->base, q->pad + cap);
		if (!p)
			return MHD_NO;
		q->base = p;
		q->body = p + q->pad;
		q->cap = cap;
	}
	memcpy(q->body + q->len, data, n);
	q->len += n;
	q->body[q->len] = 0;
	return MHD_YES;
}

/* Under the handler pool's lock, once q is admitted: its connection waits
 * suspended (holding no event thread) until the reply is ready. */
static void suspend(wf_serve_job *j)
{
	req_ctx *q = (req_ctx *)((char *)j - offsetof(req_ctx, queued));
	q->deferred = 1;
	q->t_queued = wf_now();
	MHD_suspend_connection(q->conn);
}

/* Hand an inference request to the handler threads. */
static enum MHD_Result defer(wf_serve_http *h, struct MHD_Connection *c, req_ctx *q,
			     const char *url, const char *method)
{
	q->url = strdup(url);
	if (!q->url)
		return MHD_NO;
	snprintf(q->method, sizeof(q->method), "%s", method);
	q->conn = c;
	int rc = wf_serve_pool_push(&h->handlers, &q->queued, suspend);
	if (rc == WF_ESTOPPED) /* the handlers are gone or going: a connection suspended
				* now would be suspended when the daemon stops, which
				* libmicrohttpd answers with abort() */
		return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
				  "the server is stopping; send the request again (to another "
				  "replica)");
	if (rc)
		return send_error(h, c, q, MHD_HTTP_TOO_MANY_REQUESTS,
				  "the queue is full (%d requests waiting, --max_queue_size); "
				  "retry later",
				  h->o.max_queue);
	return MHD_YES;
}

/* A handler thread runs a deferred request and resumes its connection. */
static void handle(void *ctx, wf_serve_job *j)
{
	wf_serve_http *h = ctx;
	req_ctx *q = (req_ctx *)((char *)j - offsetof(req_ctx, queued));
	route r;
	q->ep = parse_route(q->url, &r);
	if (wf_now() - q->t_queued > h->o.request_timeout)
		send_error(h, q->conn, q, MHD_HTTP_SERVICE_UNAVAILABLE,
			   "request timed out after %.1fs waiting for a handler thread",
			   h->o.request_timeout);
	else
		dispatch(h, q->conn, q, q->url, q->method, &r);
	release_body(h, q);
	MHD_resume_connection(q->conn);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	wf_serve_http *h = cls;
	req_ctx *q = *con_cls;
	(void)version;
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		q->t0 = wf_now();
		*con_cls = q;
		return on_header(h, c, url, method, q);
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		return on_body(h, q, upload_data, n);
	}
	if (q->deferred) { /* resumed: the handler thread's reply */
		if (!q->resp)
			return MHD_NO;
		enum MHD_Result ret = MHD_queue_response(c, (unsigned)q->code, q->resp);
		MHD_destroy_response(q->resp);
		q->resp = NULL;
		return ret;
	}
	if (q->replied)
		return MHD_YES;
	conn_phase(h, c, C_BUSY, 0);
	if (q->over_budget)
		return send_error(h, c, q, MHD_HTTP_SERVICE_UNAVAILABLE,
				  "too many request bodies in memory (budget %zu bytes); retry "
				  "later",
				  h->o.body_budget);
	route r;
	q->ep = parse_route(url, &r);
	/* Inference and model control (a load, or an unload waiting for one)
	 * may take long: handler threads, never the event threads. */
	if ((r.kind == R_V1_PREDICT || r.kind == R_V1_CLASSIFY || r.kind == R_V2_INFER ||
	     r.kind == R_V2_REPO_LOAD || r.kind == R_V2_REPO_UNLOAD) &&
	    strcmp(method, "POST") == 0)
		return defer(h, c, q, url, method);
	enum MHD_Result ret = dispatch(h, c, q, url, method, &r);
	release_body(h, q);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	wf_serve_http *h = cls;
	req_ctx *q = *con_cls;
	(void)toe;
	if (!q)
		return;
	/* The next request on a kept-alive connection: idle time and its header. */
	conn_phase(h, c, C_HEADER, h->o.idle_timeout + h->o.header_timeout);
	if (q->resp)
		MHD_destroy_response(q->resp);
	free(q->url);
	release_body(h, q);
	free(q);
	*con_cls = NULL;
	atomic_fetch_sub(&h->active, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = 0;
	wf_debug("serve: http: %s", msg);
}

/* The TLS key pair and the token the options name (weft-serve's secrets). */
static int load_secrets(wf_serve_http *h, wf_err *err)
{
	const wf_serve_secrets *sc = h->o.secrets;
	if (sc && sc->tls_cert && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		return wf_errf(err, WF_ENOTSUP,
			       "this libmicrohttpd was built without TLS (GnuTLS)");
	h->tls_cert = sc ? sc->tls_cert : NULL;
	h->tls_key = sc ? sc->tls_key : NULL;
	h->token = sc ? sc->token : NULL;
	return 0;
}

/* Raise the open-file limit so max_connections sockets fit; returns the
 * connection limit that does fit. */
static int fit_fd_limit(int want)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)want + 256;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return want;
	if (rl.rlim_cur < need) {
		rl.rlim_cur =
			rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		int fit = rl.rlim_cur > 512 ? (int)(rl.rlim_cur - 256) : 256;
		wf_warn("serve: open-file limit %llu allows only %d connections (wanted %d)",
			(unsigned long long)rl.rlim_cur, fit, want);
		return fit;
	}
	return want;
}

static void http_free(wf_serve_http *h)
{
	if (h->reaper_started) {
		pthread_mutex_lock(&h->cmu);
		h->reaper_stop = 1;
		pthread_cond_signal(&h->ccv);
		pthread_mutex_unlock(&h->cmu);
		pthread_join(h->reaper, NULL);
	}
	/* Handler threads finish what they hold and what waits (resuming
	 * its connections) before the daemon goes. */
	wf_serve_pool_stop(&h->handlers);
	wf_serve_pool_free(&h->handlers);
	if (h->d)
		MHD_stop_daemon(h->d);
	if (h->quiet_fd >= 0)
		close(h->quiet_fd);
	pthread_cond_destroy(&h->ccv);
	pthread_mutex_destroy(&h->cmu);
	free(h->model_name);
	free(h);
}

int wf_serve_http_start(wf_serve_http **out, const wf_serve_http_opts *o, wf_serve_repo *repo,
			wf_serve_batcher *batcher, wf_serve_metrics *metrics, wf_err *err)
{
	struct sockaddr_in addr;
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)o->port);
	if (inet_pton(AF_INET, o->bind_address, &addr.sin_addr) != 1)
		return wf_errf(err, WF_EINVAL, "--bind_address %s is not an IPv4 address",
			       o->bind_address);
	wf_serve_http *h = calloc(1, sizeof(*h));
	if (!h)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	h->quiet_fd = -1;
	pthread_mutex_init(&h->cmu, NULL);
	pthread_cond_init(&h->ccv, NULL);
	h->o = *o;
	h->model_name = strdup(o->model_name);
	h->o.model_name = h->model_name;
	if (h->o.idle_timeout <= 0)
		h->o.idle_timeout = 60;
	if (h->o.threads <= 0)
		h->o.threads = 16;
	if (h->o.start_threads <= 0)
		h->o.start_threads = 1;
	if (h->o.start_threads > h->o.threads)
		h->o.start_threads = h->o.threads;
	if (h->o.max_connections <= 0)
		h->o.max_connections = 10000;
	if (h->o.header_timeout <= 0)
		h->o.header_timeout = 10;
	if (h->o.body_timeout <= 0)
		h->o.body_timeout = 60;
	/* handlers start as requests need them and then stay: an idle server
	 * holds o.start_threads */
	wf_serve_pool_opts po = {.name = "http-handler",
				 .threads = h->o.threads,
				 .start = h->o.start_threads,
				 .max_queue = h->o.max_queue,
				 .drain = 1,
				 .run = handle,
				 .ctx = h};
	int rc = wf_serve_pool_init(&h->handlers, &po, err);
	if (rc) {
		http_free(h);
		return rc;
	}
	h->repo = repo;
	h->batcher = batcher;
	h->metrics = metrics;
	atomic_init(&h->draining, 0);
	atomic_init(&h->inflight, 0);
	atomic_init(&h->active, 0);
	atomic_init(&h->receiving, 0);
	atomic_init(&h->body_bytes, 0);
	rc = load_secrets(h, err);
	if (rc) {
		http_free(h);
		return rc;
	}
	h->o.max_connections = fit_fd_limit(h->o.max_connections);
	struct MHD_OptionItem opts[16];
	int n = 0;
#define OPT(opt, val, ptr) opts[n++] = (struct MHD_OptionItem){(opt), (intptr_t)(val), (ptr)}
	OPT(MHD_OPTION_SOCK_ADDR, 0, &addr);
	OPT(MHD_OPTION_THREAD_POOL_SIZE, WF_SERVE_EVENT_THREADS, NULL);
	OPT(MHD_OPTION_NOTIFY_COMPLETED, on_completed, h);
	OPT(MHD_OPTION_NOTIFY_CONNECTION, on_connection, h);
	OPT(MHD_OPTION_URI_LOG_CALLBACK, on_uri, h);
	OPT(MHD_OPTION_CONNECTION_TIMEOUT, h->o.idle_timeout, NULL);
	OPT(MHD_OPTION_CONNECTION_LIMIT, h->o.max_connections, NULL);
	if (h->o.max_per_client > 0)
		OPT(MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->o.max_per_client, NULL);
	OPT(MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL);
	OPT(MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h);
	if (h->tls_cert) {
		OPT(MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)h->tls_cert);
		OPT(MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)h->tls_key);
	}
	OPT(MHD_OPTION_END, 0, NULL);
#undef OPT
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			 (h->tls_cert ? MHD_USE_TLS : 0);
	h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
				MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	if (!h->d) {
		http_free(h);
		return wf_errf(err, WF_EIO,
			       "cannot listen on %s:%d (port in use, or a bad TLS "
			       "certificate or key?)",
			       o->bind_address, o->port);
	}
	if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
		http_free(h);
		return wf_errf(err, WF_EINTERNAL, "cannot start the connection reaper thread");
	}
	h->reaper_started = 1;
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : o->port;
	*out = h;
	return 0;
}

int wf_serve_http_port(wf_serve_http *h)
{
	return h ? h->port : 0;
}

/* The listening socket closes (new connections are refused) under
 * libmicrohttpd's feet: the read end of a pipe that never becomes readable
 * takes its descriptor number, so the event threads, which still hold that
 * number, never see an event on it, and the socket, whose last descriptor
 * that was, leaves their epoll sets as it closes. MHD_quiesce_daemon is not
 * used: with epoll and its own threads it races them for the same removal
 * and aborts the process when it loses (libmicrohttpd 0.9.75). */
void wf_serve_http_drain(wf_serve_http *h)
{
	if (!h || atomic_exchange(&h->draining, 1))
		return;
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_LISTEN_FD);
	int p[2];
	if (!info || info->listen_fd == MHD_INVALID_SOCKET || pipe2(p, O_CLOEXEC) != 0)
		return;
	if (dup2(p[0], info->listen_fd) < 0) {
		close(p[1]);
		p[1] = -1;
	}
	close(p[0]);
	h->quiet_fd = p[1]; /* held open: a pipe without a writer would read as hung up */
}

int wf_serve_http_inflight(wf_serve_http *h)
{
	if (!h)
		return 0;
	return atomic_load(&h->active) + atomic_load(&h->receiving);
}

void wf_serve_http_stop(wf_serve_http *h)
{
	if (!h)
		return;
	http_free(h);
}
