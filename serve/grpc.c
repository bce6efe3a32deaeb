/* grpc.c: unary and streaming gRPC over h2c with libnghttp2. The event-loop thread owns
 * every connection, session and stream; workers only see jobs (a copy of the
 * request message, the stream id and a counted reference to the connection)
 * and hand results back through a list and an eventfd. A handler may leave
 * its call pending and have another thread (a batch thread) finish it with
 * wf_grpc_call_done, into the same list; such a method's small calls run in
 * the loop itself (wf_grpc_method.loop_below). A stream that the client reset
 * or a connection that closed before its reply simply drops the result.
 * This file: the event loop, the workers, start and stop, and the fuzz
 * target's session; the HTTP/2 transport is in grpc_h2.c, framing and method
 * dispatch in grpc_call.c. */
#include "serve/grpc_internal.h"

#include "common/cpus.h"
#include "serve/shm.h" /* wf_serve_addr_is_loopback */

/* ---- the event loop ----------------------------------------------------- */

static void accept_all(wf_grpc *g)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int fd = accept4(g->lfd, (struct sockaddr *)&peer, &plen,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (g->nconns >= g->o.max_conns) {
			wf_warn("%s: %d connections open (the limit); closing a new one", g->o.name,
				g->nconns);
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->g = g;
		c->fd = fd;
		c->refs = 1;
		c->local = wf_serve_addr_is_loopback((struct sockaddr *)&peer);
		if (g->tls && !(c->tls = wf_tls_conn_new(g->tls, fd))) {
			close(fd);
			free(c);
			continue;
		}
		c->handshaking = c->tls != NULL;
		c->t_open = c->t_active = wf_now();
		if (nghttp2_session_server_new2(&c->s, g->cbs, c, g->opt) != 0) {
			wf_tls_conn_free(c->tls);
			close(fd);
			free(c);
			continue;
		}
		nghttp2_settings_entry iv[] = {
			{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)g->o.max_streams},
			{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WIN},
			{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
		};
		nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, WF_ARRAY_LEN(iv));
		nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, CONN_WIN);
		c->next = g->conns;
		if (g->conns)
			g->conns->prev = c;
		g->conns = c;
		g->nconns++;
		c->events = EPOLLIN;
		struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
		epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &e);
		if (conn_flush(c) != 0)
			conn_close(c);
	}
}

static void conn_readable(conn *c)
{
	uint8_t buf[READ_CHUNK];
	size_t got = 0;
	if (c->handshaking) {
		if (conn_flush(c) != 0) { /* the TLS handshake failed */
			conn_close(c);
			return;
		}
		if (c->handshaking)
			return; /* not done yet */
	}
	/* TLS keeps decrypted bytes no socket event announces: drain them too */
	while (got < READ_BUDGET || (c->tls && wf_tls_pending(c->tls))) {
		ssize_t n = conn_recv(c, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			conn_close(c);
			return;
		}
		got += (size_t)n;
		c->t_active = wf_now();
		ssize_t r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
		if (r < 0) {
			wf_debug("%s: closing a connection: %s", c->g->o.name,
				 nghttp2_strerror((int)r));
			conn_flush(c); /* GOAWAY, where nghttp2 queued one */
			conn_close(c);
			return;
		}
	}
	if (conn_flush(c) != 0)
		conn_close(c);
}

/* Replies the workers finished: submit those whose stream is still open. */
static void deliver(wf_grpc *g)
{
	uint64_t v;
	if (read(g->efd, &v, sizeof(v)) < 0) {
		/* nothing to read: another wake-up took it */
	}
	pthread_mutex_lock(&g->mu);
	job *list = g->done;
	g->done = NULL;
	pthread_mutex_unlock(&g->mu);
	/* The list is newest first; answer oldest first. */
	job *rev = NULL;
	while (list) {
		job *n = list->next;
		list->next = rev;
		rev = list;
		list = n;
	}
	conn *dirty = NULL; /* connections with answers to send, each flushed once */
	for (job *j = rev, *n; j; j = n) {
		n = j->next;
		conn *c = j->c;
		stream *st =
			c->closed ? NULL : nghttp2_session_get_stream_user_data(c->s, j->stream_id);
		if (st) {
			if (st->sm) {
				stream_answer(c, st, &j->call, j->code);
			} else if (j->code == WF_GRPC_OK && j->call.reply) {
				answer_ok(c, st, j->call.reply, j->call.reply_len);
				j->call.reply = NULL;
			} else {
				answer_error(c, st,
					     j->code == WF_GRPC_OK ? WF_GRPC_INTERNAL : j->code,
					     j->call.message);
			}
			if (!c->dirty) {
				c->dirty = 1;
				c->refs++;
				c->dirty_next = dirty;
				dirty = c;
			}
		}
		conn_unref(c);
		free(j->call.reply);
		free(j->body);
		free(j->inflated);
		free(j);
	}
	for (conn *c = dirty, *n; c; c = n) {
		n = c->dirty_next;
		c->dirty = 0;
		if (!c->closed && conn_flush(c) != 0)
			conn_close(c);
		conn_unref(c);
	}
}

/* Close connections that never spoke HTTP/2 (a stalled or hostile client
 * holds a connection slot) and send GOAWAY on long-idle ones (gRPC clients
 * reconnect when they next call). */
static void sweep(wf_grpc *g)
{
	double now = wf_now();
	for (conn *c = g->conns, *n; c; c = n) {
		n = c->next;
		if (!c->frames && now - c->t_open > HELLO_SECS) {
			wf_debug("%s: closing a connection that sent no HTTP/2 frame in %ds",
				 g->o.name, HELLO_SECS);
			conn_close(c);
		} else if (!c->streams && c->refs == 1 && now - c->t_active > IDLE_SECS) {
			nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR);
			c->t_active = now;
			if (conn_flush(c) != 0)
				conn_close(c);
		}
	}
}

/* The drain, in the loop that owns the connections: no new connections,
 * and a GOAWAY on each open one (a shutdown notice: its last stream id is
 * the highest, so that a call the client sent before it saw the GOAWAY is
 * still taken and served). */
static void go_away(wf_grpc *g)
{
	g->drained = 1;
	if (g->lfd >= 0) {
		epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->lfd, NULL);
		close(g->lfd);
		g->lfd = -1;
	}
	for (conn *c = g->conns, *n; c; c = n) {
		n = c->next;
		if (c->closed || c->handshaking)
			continue;
		nghttp2_submit_shutdown_notice(c->s);
		if (conn_flush(c) != 0)
			conn_close(c);
	}
}

void *loop_main(void *arg)
{
	wf_grpc *g = arg;
	wf_cpus_io_thread("grpc-loop");
	struct epoll_event ev[64];
	double last_sweep = wf_now();
	while (!atomic_load(&g->stop)) {
		int n = epoll_wait(g->epfd, ev, (int)WF_ARRAY_LEN(ev), 1000);
		for (int i = 0; i < n; i++) {
			void *p = ev[i].data.ptr;
			if (p == &g->lfd) {
				accept_all(g);
			} else if (p == &g->efd) {
				deliver(g);
			} else {
				conn *c = p;
				/* A connection closed earlier in this batch is still in
				 * memory while a job holds it; skip it. */
				if (c->closed)
					continue;
				if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					conn_readable(c);
				else if (conn_flush(c) != 0)
					conn_close(c);
			}
		}
		if (atomic_load(&g->draining) && !g->drained)
			go_away(g);
		if (wf_now() - last_sweep >= 1) {
			sweep(g);
			last_sweep = wf_now();
		}
		free_dead(g);
	}
	return NULL;
}

/* Put j on the loop's list (under mu); 1 when the loop needs a wake-up. */
static int push_done(wf_grpc *g, job *j)
{
	int wake = !g->done; /* else a wake-up for the list is on its way */
	j->next = g->done;
	g->done = j;
	return wake;
}

static void wake_loop(wf_grpc *g)
{
	uint64_t one = 1;
	if (write(g->efd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: the loop wakes anyway */
	}
}

void job_returned(wf_grpc *g, job *j, int code)
{
	pthread_mutex_lock(&g->mu);
	if (code == WF_GRPC_PENDING && !j->finished) {
		j->parked = 1; /* wf_grpc_call_done hands it on */
		g->pending++;
		pthread_mutex_unlock(&g->mu);
		return;
	}
	if (code != WF_GRPC_PENDING)
		j->code = code;
	int wake = push_done(g, j);
	pthread_mutex_unlock(&g->mu);
	if (wake)
		wake_loop(g);
}

void wf_grpc_call_done(wf_grpc_call *call, int code)
{
	job *j = (job *)((char *)call - offsetof(job, call));
	wf_grpc *g = j->c->g;
	pthread_mutex_lock(&g->mu);
	j->code = code == WF_GRPC_PENDING ? WF_GRPC_INTERNAL : code;
	if (!j->parked) { /* its handler has not returned yet: job_returned hands it on */
		j->finished = 1;
		pthread_mutex_unlock(&g->mu);
		return;
	}
	if (--g->pending == 0)
		pthread_cond_broadcast(&g->settled);
	int wake = push_done(g, j);
	pthread_mutex_unlock(&g->mu);
	if (wake)
		wake_loop(g);
}

/* A worker runs a queued call (serve/pool.h). */
static void run_job(void *ctx, wf_serve_job *q)
{
	wf_grpc *g = ctx;
	job *j = (job *)((char *)q - offsetof(job, queued));
	int code = j->call.deadline && wf_now() > j->call.deadline
			   ? wf_grpc_fail(&j->call, WF_GRPC_DEADLINE_EXCEEDED,
					  "Deadline Exceeded before the call started")
			   : j->m->fn(g->ctx, &j->call);
	job_returned(g, j, code);
}

/* ---- start and stop ----------------------------------------------------- */

int wf_grpc_start(wf_grpc **out, const wf_grpc_opts *o, const wf_grpc_method *methods, int nmethods,
		  void *ctx, wf_err *err)
{
	wf_grpc *g = calloc(1, sizeof(*g));
	int rc = 0;
	if (!g)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	g->o = *o;
	if (!g->o.name)
		g->o.name = "gRPC";
	if (g->o.workers < 1)
		g->o.workers = 1;
	if (g->o.start_workers < 1)
		g->o.start_workers = 1;
	if (g->o.start_workers > g->o.workers)
		g->o.start_workers = g->o.workers;
	if (g->o.max_queue < 1)
		g->o.max_queue = 1;
	if (g->o.max_streams < 1)
		g->o.max_streams = 100;
	if (g->o.max_conns < 1)
		g->o.max_conns = 1024;
	g->methods = methods;
	g->nmethods = nmethods;
	g->ctx = ctx;
	g->lfd = g->efd = g->epfd = -1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->settled, NULL);
	atomic_init(&g->stop, 0);
	atomic_init(&g->inflight, 0);

	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
	if (inet_pton(AF_INET, o->bind_address ? o->bind_address : "0.0.0.0", &a.sin_addr) != 1) {
		rc = wf_errf(err, WF_EINVAL, "%s: bad bind address \"%s\"", g->o.name,
			     o->bind_address);
		goto fail;
	}
	g->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (g->lfd >= 0)
		setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (g->lfd < 0 || bind(g->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(g->lfd, 1024) != 0) {
		rc = wf_errf(err, WF_EIO, "%s: cannot listen on %s:%d: %s", g->o.name,
			     o->bind_address, o->port, strerror(errno));
		goto fail;
	}
	socklen_t al = sizeof(a);
	getsockname(g->lfd, (struct sockaddr *)&a, &al);
	g->port = ntohs(a.sin_port);
	g->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	g->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (g->efd < 0 || g->epfd < 0) {
		rc = wf_errf(err, WF_EINTERNAL, "%s: eventfd/epoll: %s", g->o.name,
			     strerror(errno));
		goto fail;
	}
	struct epoll_event le = {.events = EPOLLIN, .data.ptr = &g->lfd};
	struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &g->efd};
	epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->lfd, &le);
	epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->efd, &ee);

	if (nghttp2_session_callbacks_new(&g->cbs) != 0 || nghttp2_option_new(&g->opt) != 0) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	if (o->tls_cert &&
	    (rc = wf_tls_server_create(&g->tls, o->tls_cert, o->tls_key, err)) != 0) {
		wf_err_wrap(err, "%s", g->o.name);
		goto fail;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(g->cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(g->cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g->cbs, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(g->cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(g->cbs, on_stream_close);
	nghttp2_option_set_max_deflate_dynamic_table_size(g->opt, 4096);

	/* workers start as calls need them: an idle server holds start_workers,
	 * a busy one up to o.workers (which then stay), each with 1 MB of stack */
	wf_serve_pool_opts po = {.name = "grpc-worker",
				 .threads = g->o.workers,
				 .start = g->o.start_workers,
				 .stack = 1 << 20,
				 .max_queue = g->o.max_queue,
				 .run = run_job,
				 .ctx = g};
	if ((rc = wf_serve_pool_init(&g->workers, &po, err)) != 0) {
		wf_err_wrap(err, "%s", g->o.name);
		goto fail;
	}
	if (pthread_create(&g->loop, NULL, loop_main, g) != 0) {
		rc = wf_errf(err, WF_EINTERNAL, "%s: cannot start the event loop", g->o.name);
		goto fail;
	}
	g->loop_started = 1;
	*out = g;
	return 0;
fail:
	wf_grpc_stop(g);
	return rc;
}

int wf_grpc_port(wf_grpc *g)
{
	return g ? g->port : 0;
}

void wf_grpc_drain(wf_grpc *g)
{
	if (!g || atomic_exchange(&g->draining, 1))
		return;
	wake_loop(g);
}

int wf_grpc_inflight(wf_grpc *g)
{
	return g ? atomic_load(&g->inflight) : 0;
}

static void free_jobs(job *j)
{
	while (j) {
		job *n = j->next;
		free(j->call.reply);
		free(j->body);
		free(j->inflated);
		free(j);
		j = n;
	}
}

void wf_grpc_stop(wf_grpc *g)
{
	if (!g)
		return;
	atomic_store(&g->stop, 1);
	wf_serve_pool_stop(&g->workers); /* no worker starts after this */
	/* calls left pending finish in other threads (the batcher drains its
	 * queue): wait for them, as for a worker in a call */
	pthread_mutex_lock(&g->mu);
	while (g->pending > 0)
		pthread_cond_wait(&g->settled, &g->mu);
	pthread_mutex_unlock(&g->mu);
	if (g->efd >= 0) {
		uint64_t one = 1;
		if (write(g->efd, &one, sizeof(one)) < 0) {
			/* the loop also wakes on its 1 s epoll timeout */
		}
	}
	if (g->loop_started)
		pthread_join(g->loop, NULL);
	/* Jobs still queued or done hold references to their connections:
	 * drop the jobs first, then close what is left. */
	for (wf_serve_job *q; (q = wf_serve_pool_take(&g->workers)) != NULL;) {
		job *j = (job *)((char *)q - offsetof(job, queued));
		j->next = g->done;
		g->done = j;
	}
	for (job *j = g->done; j; j = j->next)
		conn_unref(j->c);
	free_jobs(g->done);
	while (g->conns)
		conn_close(g->conns);
	free_dead(g);
	wf_serve_pool_free(&g->workers);
	if (g->cbs)
		nghttp2_session_callbacks_del(g->cbs);
	if (g->opt)
		nghttp2_option_del(g->opt);
	wf_tls_server_free(g->tls);
	if (g->lfd >= 0)
		close(g->lfd);
	if (g->efd >= 0)
		close(g->efd);
	if (g->epfd >= 0)
		close(g->epfd);
	pthread_cond_destroy(&g->settled);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

/* ---- the fuzz target's session ------------------------------------------ */

/* The workers' part, in this thread, then the loop's. */
static void fuzz_work(wf_grpc *g)
{
	for (wf_serve_job *q; (q = wf_serve_pool_take(&g->workers)) != NULL;) {
		job *j = (job *)((char *)q - offsetof(job, queued));
		job_returned(g, j, j->m->fn(g->ctx, &j->call));
	}
	deliver(g);
}

int wf_grpc_fuzz_session(const wf_grpc_method *methods, int nmethods, void *ctx,
			 const uint8_t *data, size_t len)
{
	wf_grpc g = {.methods = methods, .nmethods = nmethods, .ctx = ctx, .lfd = -1};
	int sv[2] = {-1, -1}, rc = 0;
	g.o = (wf_grpc_opts){.name = "fuzz",
			     .max_message = 1 << 16,
			     .workers = 1,
			     .max_queue = 8,
			     .max_streams = 16,
			     .max_conns = 4};
	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.settled, NULL);
	wf_serve_pool_opts po = {.name = "fuzz", .max_queue = g.o.max_queue}; /* no threads */
	wf_serve_pool_init(&g.workers, &po, &(wf_err){0});
	g.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	g.epfd = epoll_create1(EPOLL_CLOEXEC);
	conn *c = calloc(1, sizeof(*c));
	if (g.efd < 0 || g.epfd < 0 || !c ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0 ||
	    nghttp2_session_callbacks_new(&g.cbs) != 0 || nghttp2_option_new(&g.opt) != 0) {
		free(c);
		rc = -1;
		goto out;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(g.cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(g.cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g.cbs, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(g.cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(g.cbs, on_stream_close);
	c->g = &g;
	c->fd = sv[0];
	sv[0] = -1;
	c->refs = 1;
	if (nghttp2_session_server_new2(&c->s, g.cbs, c, g.opt) != 0) {
		close(c->fd);
		free(c);
		rc = -1;
		goto out;
	}
	g.conns = c;
	g.nconns = 1;
	c->events = EPOLLIN;
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
	epoll_ctl(g.epfd, EPOLL_CTL_ADD, c->fd, &e);
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)g.o.max_streams}};
	nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, WF_ARRAY_LEN(iv));
	/* in pieces of varying size, as a socket delivers them */
	for (size_t off = 0, step = 1; off < len && !c->closed; off += step, step = step * 3 + 1) {
		size_t n = step < len - off ? step : len - off;
		if (nghttp2_session_mem_recv(c->s, data + off, n) < 0) {
			conn_flush(c);
			conn_close(c);
			rc = -1;
			break;
		}
		fuzz_work(&g);
		if (!c->closed && conn_flush(c) != 0)
			conn_close(c);
	}
	fuzz_work(&g); /* calls queued before a protocol error */
	while (g.conns)
		conn_close(g.conns);
	free_dead(&g);
out:
	if (g.cbs)
		nghttp2_session_callbacks_del(g.cbs);
	if (g.opt)
		nghttp2_option_del(g.opt);
	for (int i = 0; i < 2; i++)
		if (sv[i] >= 0)
			close(sv[i]);
	if (g.efd >= 0)
		close(g.efd);
	if (g.epfd >= 0)
		close(g.epfd);
	wf_serve_pool_free(&g.workers);
	pthread_cond_destroy(&g.settled);
	pthread_mutex_destroy(&g.mu);
	return rc;
}
