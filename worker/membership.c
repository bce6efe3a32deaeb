/* membership.c: the membership service of elastic allreduce and a
 * worker's connection to it (see membership.h).
 *
 * Conversation on a worker's connection (elastic_wire.h messages):
 *   worker -> HELLO {slot, job, ring address, nonce_w, generation it is in}
 *   service -> CHALLENGE {0, nonce_s, HMAC(K, "weft membership service",
 *              nonce_w, nonce_s, slot)} or {1, text: why refused}
 *   worker -> PROOF {HMAC(K, "weft membership worker", nonce_s, nonce_w,
 *              slot)}
 *   then, any number of times: worker -> READY {gen, committed step};
 *   service -> ASSIGN (or FAIL); between them the service may send NOTICE
 *   {gen} (a worker waits to join generation gen's ring); finally LEAVE, or
 *   the connection closes (the worker died).
 *
 * When a generation forms: every member of the last one that is still
 * connected has asked to be placed again (or `settle` seconds passed since
 * the first did: the others are dropped), and at least MIN are ready (the
 * first generation: `expect`, or MIN once `settle` has passed). Ranks go
 * by slot; the root is the lowest rank among those with the newest
 * committed step. Fewer than MIN ready for `elastic_timeout` seconds: every
 * waiting worker gets FAIL. A restarted service starts with no generation
 * and takes the newest one a HELLO names (the members connect again). */
#include "worker/membership.h"

#include "common/events.h"
#include "common/log.h"
#include "common/util.h"
#include "worker/netio.h"
#include "worker/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONN	(WF_EL_MAX_MEMBERS + 16)
#define MSG_WAIT	1.0 /* seconds the service waits for the rest of a message */
#define HANDSHAKE_WAIT	5.0 /* seconds a connection has to prove the key */
#define CONNECT_ATTEMPT 2.0
#define BACKOFF_FIRST	0.1
#define BACKOFF_MAX	1.0
#define LABEL_SERVICE	"weft membership service"
#define LABEL_WORKER	"weft membership worker"

static void mac(uint8_t out[WF_EL_MAC], const uint8_t *key, const char *label, const uint8_t *a,
		const uint8_t *b, int slot)
{
	if (key)
		wf_rdv_mac(out, key, label, a, b, slot);
	else
		memset(out, 0, WF_EL_MAC);
}

/* ---- the service ---------------------------------------------------------- */

typedef enum { ST_HELLO, ST_PROOF, ST_IDLE, ST_READY } conn_state;

typedef struct conn {
	int fd;
	conn_state st;
	int slot;
	char addr[WF_EL_TEXT]; /* its ring's address */
	char peer[96];
	uint8_t nonce_w[WF_EL_NONCE], nonce_s[WF_EL_NONCE];
	double since; /* wf_now() of the connection (handshake deadline) */
	int in_gen;   /* a member of the current generation */
	uint64_t was; /* HELLO: the generation it says it is in (0: none) */
	int64_t step; /* READY: its committed step */
} conn;

struct wf_membership {
	wf_membership_cfg cfg;
	uint8_t key[32];
	int has_key;
	int lfd;
	int wake[2]; /* self-pipe: wf_membership_stop */
	conn *c;     /* [nc] */
	int nc;
	uint64_t gen;	     /* the current generation (0: none yet) */
	double first_ready;  /* wf_now() the first of the waiting became ready (0: none) */
	double reform_since; /* wf_now() a member of the current generation asked first */
	double short_since;  /* wf_now() fewer than MIN were ready (0: enough) */
	int short_logged;
	int done;	   /* a member said the job trained its last step ... */
	int64_t done_step; /* ... this one */
};

int wf_membership_create(wf_membership **out, const wf_membership_cfg *cfg, wf_err *err)
{
	*out = NULL;
	if (cfg->min_workers < 1 || cfg->expect < cfg->min_workers ||
	    cfg->expect > WF_EL_MAX_MEMBERS)
		return wf_errf(err, WF_EINVAL,
			       "membership: MIN %d and the first generation's %d workers: want 1 "
			       "<= MIN <= that <= %d",
			       cfg->min_workers, cfg->expect, WF_EL_MAX_MEMBERS);
	if (wf_rdv_crypto_init() != 0)
		return wf_errf(err, WF_EINTERNAL, "membership: libsodium failed to initialise");
	wf_membership *s = calloc(1, sizeof(*s));
	if (!s)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	s->c = calloc(MAX_CONN, sizeof(*s->c));
	s->cfg = *cfg;
	s->wake[0] = s->wake[1] = -1;
	if (cfg->key) {
		memcpy(s->key, cfg->key, sizeof(s->key));
		s->has_key = 1;
	}
	s->cfg.key = NULL; /* the copy above is used */
	if (s->cfg.settle <= 0)
		s->cfg.settle = 60;
	int rc;
	if (!s->c) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory");
		goto fail;
	}
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		rc = wf_errf(err, WF_EIO, "membership: pipe: %s", strerror(errno));
		goto fail;
	}
	s->lfd = wf_net_listen(cfg->port, 128, "membership: the service", err);
	if (s->lfd < 0) {
		rc = s->lfd;
		goto fail;
	}
	*out = s;
	return 0;
fail:
	wf_membership_free(s);
	return rc;
}

int wf_membership_port(const wf_membership *s)
{
	return wf_net_local_port(s->lfd);
}

void wf_membership_stop(wf_membership *s)
{
	char b = 1;
	if (s && s->wake[1] >= 0 && write(s->wake[1], &b, 1) < 0) {
		/* full: a stop is pending already */
	}
}

static const uint8_t *svc_key(const wf_membership *s)
{
	return s->has_key ? s->key : NULL;
}

static void drop(wf_membership *s, int i, const char *why)
{
	conn *c = &s->c[i];
	if (c->st >= ST_IDLE)
		wf_info("membership: worker slot %d (%s) %s", c->slot, c->peer, why);
	else
		wf_debug("membership: connection from %s dropped: %s", c->peer, why);
	close(c->fd);
	s->c[i] = s->c[--s->nc];
}

static void send_or_drop(wf_membership *s, int i, const wf_el_msg *m)
{
	if (wf_el_send(s->c[i].fd, m, wf_now() + MSG_WAIT) != 0)
		drop(s, i, "could not be told (its connection broke)");
}

static void refuse(wf_membership *s, int i, const char *why)
{
	wf_el_msg m = {.type = WF_EL_CHALLENGE, .status = 1};
	snprintf(m.text, sizeof(m.text), "%s", why);
	(void)wf_el_send(s->c[i].fd, &m, wf_now() + MSG_WAIT);
	wf_warn("membership: refused %s: %s", s->c[i].peer, why);
	drop(s, i, why);
}

/* A connection still open? (the process behind it may have died unseen) */
static int conn_alive(int fd)
{
	char b;
	ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return k > 0 || (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

static void on_hello(wf_membership *s, int i, const wf_el_msg *m)
{
	conn *c = &s->c[i];
	char why[WF_EL_TEXT];
	if (m->job != s->cfg.job)
		return refuse(s, i, "a worker of another job (config or cluster spec differs)");
	if (m->keyed != s->has_key) {
		snprintf(why, sizeof(why), "%s",
			 s->has_key ? "the service authenticates workers with the job key: give "
				      "this worker the same cluster.key_dir"
				    : "the service has no job key (--insecure): start every worker "
				      "alike");
		return refuse(s, i, why);
	}
	for (int j = 0; j < s->nc; j++) {
		if (j == i || s->c[j].st < ST_PROOF || s->c[j].slot != m->slot)
			continue;
		if (conn_alive(s->c[j].fd)) {
			snprintf(why, sizeof(why), "slot %d is taken by a worker still connected",
				 m->slot);
			return refuse(s, i, why);
		}
		drop(s, j, "closed its connection (a new process took its slot)");
		if (i == s->nc) /* our entry moved into the hole */
			i = j;
		c = &s->c[i];
		break;
	}
	c->slot = m->slot;
	c->was = m->gen;
	snprintf(c->addr, sizeof(c->addr), "%s", m->addr);
	memcpy(c->nonce_w, m->nonce, WF_EL_NONCE);
	wf_rdv_nonce(c->nonce_s);
	wf_el_msg ch = {.type = WF_EL_CHALLENGE};
	memcpy(ch.nonce, c->nonce_s, WF_EL_NONCE);
	mac(ch.mac, svc_key(s), LABEL_SERVICE, c->nonce_w, c->nonce_s, c->slot);
	c->st = ST_PROOF;
	send_or_drop(s, i, &ch);
}

static void on_proof(wf_membership *s, int i, const wf_el_msg *m)
{
	conn *c = &s->c[i];
	uint8_t want[WF_EL_MAC];
	mac(want, svc_key(s), LABEL_WORKER, c->nonce_s, c->nonce_w, c->slot);
	if (s->has_key && !wf_rdv_mac_equal(m->mac, want)) {
		wf_warn("membership: %s (as slot %d) did not prove it holds the job key", c->peer,
			c->slot);
		return drop(s, i, "failed the key check");
	}
	c->st = ST_IDLE;
	if (!c->was) {
		wf_info("membership: worker slot %d registered (ring at %s)", c->slot, c->addr);
		return;
	}
	/* a member of a running ring connecting again: this service restarted
	 * (or the connection broke). The generations go on from the newest a
	 * member names, whose members count as its members again. */
	if (c->was > s->gen) {
		if (s->gen)
			wf_warn("membership: worker slot %d is in generation %llu, past this "
				"service's %llu: taking it",
				c->slot, (unsigned long long)c->was, (unsigned long long)s->gen);
		s->gen = c->was;
		for (int j = 0; j < s->nc; j++)
			s->c[j].in_gen = s->c[j].st >= ST_IDLE && s->c[j].was == s->gen;
	}
	c->in_gen = c->was == s->gen;
	wf_info("membership: worker slot %d connected again, a member of generation %llu%s",
		c->slot, (unsigned long long)c->was,
		c->in_gen ? "" : " (an older one: it joins the next)");
	wf_event("membership_rejoined",
		 json_pack("{s:i, s:I, s:I}", "slot", c->slot, "generation", (json_int_t)c->was,
			   "current", (json_int_t)s->gen));
	/* someone asked to join while this member was away: tell it now (last:
	 * a failed send drops connection i) */
	for (int j = 0; j < s->nc && c->in_gen; j++)
		if (s->c[j].st == ST_READY && !s->c[j].in_gen) {
			wf_el_msg n = {.type = WF_EL_NOTICE, .gen = s->gen};
			send_or_drop(s, i, &n);
			break;
		}
}

static void on_ready(wf_membership *s, int i, const wf_el_msg *m)
{
	conn *c = &s->c[i];
	double now = wf_now();
	if (s->done) { /* too late to join: the job is over */
		wf_el_msg d = {.type = WF_EL_DONE, .step = s->done_step};
		(void)wf_el_send(c->fd, &d, now + MSG_WAIT);
		return drop(s, i, "asked to join after the job's last step: told it is over");
	}
	c->st = ST_READY;
	c->step = m->step;
	if (!s->first_ready)
		s->first_ready = now;
	if (c->in_gen && !s->reform_since)
		s->reform_since = now;
	if (c->in_gen || !s->gen)
		return;
	/* a joiner: the members learn of it at their next step */
	wf_info("membership: worker slot %d waits to join generation %llu", c->slot,
		(unsigned long long)s->gen);
	wf_el_msg n = {.type = WF_EL_NOTICE, .gen = s->gen};
	for (int j = s->nc - 1; j >= 0; j--)
		if (s->c[j].in_gen && s->c[j].st == ST_IDLE)
			send_or_drop(s, j, &n);
}

/* The job trained its last step: whoever waits to join is told so. */
static void on_done(wf_membership *s, int i, const wf_el_msg *m)
{
	if (!s->done)
		wf_info("membership: the job finished at step %lld", (long long)m->step);
	s->done = 1;
	s->done_step = m->step;
	drop(s, i, "finished the job");
	wf_el_msg d = {.type = WF_EL_DONE, .step = s->done_step};
	for (int j = s->nc - 1; j >= 0; j--)
		if (s->c[j].st == ST_READY && !s->c[j].in_gen) {
			(void)wf_el_send(s->c[j].fd, &d, wf_now() + MSG_WAIT);
			drop(s, j, "waited to join: told the job is over");
		}
}

/* One message from connection i (POLLIN). */
static void serve(wf_membership *s, int i)
{
	wf_el_msg m;
	char why[WF_EL_TEXT] = "";
	int rc = wf_el_recv(s->c[i].fd, &m, wf_now() + MSG_WAIT, why, sizeof(why));
	if (rc == -1)
		return drop(s, i,
			    errno == ECONNRESET ? "closed its connection (it ended or died)"
						: strerror(errno));
	if (rc == -2)
		return drop(s, i, why);
	conn_state st = s->c[i].st;
	if (st == ST_HELLO && m.type == WF_EL_HELLO)
		on_hello(s, i, &m);
	else if (st == ST_PROOF && m.type == WF_EL_PROOF)
		on_proof(s, i, &m);
	else if (st >= ST_IDLE && m.type == WF_EL_READY)
		on_ready(s, i, &m);
	else if (st >= ST_IDLE && m.type == WF_EL_LEAVE)
		drop(s, i, "left the job");
	else if (st >= ST_IDLE && m.type == WF_EL_DONE)
		on_done(s, i, &m);
	else
		drop(s, i, "sent a message out of turn");
	wf_el_msg_free(&m);
}

static int by_slot(const void *a, const void *b)
{
	const conn *x = *(const conn *const *)a, *y = *(const conn *const *)b;
	return (x->slot > y->slot) - (x->slot < y->slot);
}

static void fail_waiting(wf_membership *s, int ready, double waited)
{
	wf_el_msg f = {.type = WF_EL_FAIL};
	snprintf(f.text, sizeof(f.text),
		 "only %d worker%s ready, fewer than strategy.min_workers %d, for %.0f s "
		 "(strategy.elastic_timeout): the job fails",
		 ready, ready == 1 ? "" : "s", s->cfg.min_workers, waited);
	wf_error("membership: %s", f.text);
	for (int j = s->nc - 1; j >= 0; j--)
		if (s->c[j].st == ST_READY)
			send_or_drop(s, j, &f);
	s->short_since = 0;
}

/* Form the next generation when its members are all in (module comment). */
static void try_form(wf_membership *s)
{
	double now = wf_now();
	int ready = 0, pending = 0;
	for (int i = 0; i < s->nc; i++) {
		ready += s->c[i].st == ST_READY;
		pending += s->c[i].in_gen && s->c[i].st != ST_READY;
	}
	if (ready == 0 || s->done) {
		s->first_ready = s->reform_since = s->short_since = 0;
		return;
	}
	if (pending > 0) {
		if (!s->reform_since || now - s->reform_since < s->cfg.settle)
			return; /* the members come at their next step, or after a failure */
		for (int i = s->nc - 1; i >= 0; i--)
			if (s->c[i].in_gen && s->c[i].st != ST_READY)
				drop(s, i,
				     "did not ask to be placed again within strategy.stall_"
				     "timeout: dropped");
	}
	int need = s->cfg.min_workers;
	if (!s->gen && now - s->first_ready < s->cfg.settle)
		need = s->cfg.expect;
	ready = 0;
	for (int i = 0; i < s->nc; i++)
		ready += s->c[i].st == ST_READY;
	if (ready < need) {
		if (ready < s->cfg.min_workers) {
			if (!s->short_since)
				s->short_since = now;
			if (now - s->short_since > 5 && !s->short_logged++)
				wf_warn("membership: %d worker%s ready, strategy.min_workers is "
					"%d: "
					"waiting (strategy.elastic_timeout %g s)",
					ready, ready == 1 ? "" : "s", s->cfg.min_workers,
					s->cfg.elastic_timeout);
			if (s->cfg.elastic_timeout > 0 &&
			    now - s->short_since > s->cfg.elastic_timeout)
				fail_waiting(s, ready, now - s->short_since);
		}
		return;
	}
	conn *m[WF_EL_MAX_MEMBERS];
	int n = 0;
	for (int i = 0; i < s->nc && n < WF_EL_MAX_MEMBERS; i++)
		if (s->c[i].st == ST_READY)
			m[n++] = &s->c[i];
	qsort(m, (size_t)n, sizeof(*m), by_slot);
	int root = 0;
	for (int i = 1; i < n; i++)
		if (m[i]->step > m[root]->step)
			root = i;
	wf_el_member *list = calloc((size_t)n, sizeof(*list));
	if (!list) {
		wf_error("membership: out of memory forming a generation of %d", n);
		return;
	}
	for (int i = 0; i < n; i++) {
		list[i].slot = m[i]->slot;
		snprintf(list[i].addr, sizeof(list[i].addr), "%s", m[i]->addr);
	}
	s->gen++;
	wf_info("membership: generation %llu: %d worker%s, state of slot %d (step %lld)",
		(unsigned long long)s->gen, n, n == 1 ? "" : "s", m[root]->slot,
		(long long)m[root]->step);
	for (int i = 0; i < s->nc; i++)
		s->c[i].in_gen = 0;
	wf_el_msg a = {.type = WF_EL_ASSIGN,
		       .gen = s->gen,
		       .size = n,
		       .root = root,
		       .step = m[root]->step,
		       .nmembers = n,
		       .members = list};
	int fds[WF_EL_MAX_MEMBERS];
	for (int i = 0; i < n; i++) {
		m[i]->in_gen = 1;
		m[i]->was = s->gen;
		m[i]->st = ST_IDLE;
		fds[i] = m[i]->fd;
	}
	/* by fd: a failed send drops (and moves) connections */
	for (int i = 0; i < n; i++) {
		a.rank = i;
		for (int j = 0; j < s->nc; j++)
			if (s->c[j].fd == fds[i]) {
				send_or_drop(s, j, &a);
				break;
			}
	}
	free(list);
	s->first_ready = s->reform_since = s->short_since = 0;
	s->short_logged = 0;
}

int wf_membership_run(wf_membership *s, wf_err *err)
{
	wf_info("membership: serving on port %d: MIN %d, first generation %d",
		wf_membership_port(s), s->cfg.min_workers, s->cfg.expect);
	struct pollfd *p = calloc(MAX_CONN + 2, sizeof(*p));
	if (!p)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	int rc = 0;
	for (;;) {
		int np = 0;
		p[np++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
		p[np++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
		int first = np;
		for (int i = 0; i < s->nc; i++)
			p[np++] = (struct pollfd){.fd = s->c[i].fd, .events = POLLIN};
		int n = poll(p, (nfds_t)np, 100);
		if (n < 0 && errno != EINTR) {
			rc = wf_errf(err, WF_EIO, "membership: poll: %s", strerror(errno));
			break;
		}
		if (n > 0 && (p[0].revents & POLLIN))
			break;
		/* from the last: drop() moves the last connection into the hole */
		int seen = s->nc;
		for (int i = seen - 1; i >= 0 && n > 0; i--)
			if (i < s->nc && p[first + i].fd == s->c[i].fd &&
			    (p[first + i].revents & (POLLIN | POLLERR | POLLHUP)))
				serve(s, i);
		if (n > 0 && (p[1].revents & POLLIN)) {
			int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0 && s->nc >= MAX_CONN) {
				close(fd);
			} else if (fd >= 0) {
				conn *c = &s->c[s->nc++];
				*c = (conn){
					.fd = fd, .st = ST_HELLO, .since = wf_now(), .step = -1};
				wf_net_peer_name(fd, c->peer, sizeof(c->peer));
			}
		}
		double now = wf_now();
		for (int i = s->nc - 1; i >= 0; i--)
			if (s->c[i].st < ST_IDLE && now - s->c[i].since > HANDSHAKE_WAIT)
				drop(s, i, "did not finish the hand-shake in time");
		try_form(s);
	}
	free(p);
	return rc;
}

void wf_membership_free(wf_membership *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nc; i++)
		close(s->c[i].fd);
	if (s->lfd >= 0)
		close(s->lfd);
	for (int i = 0; i < 2; i++)
		if (s->wake[i] >= 0)
			close(s->wake[i]);
	wf_rdv_wipe(s->key, sizeof(s->key));
	free(s->c);
	free(s);
}

/* ---- a worker's side ------------------------------------------------------- */

struct wf_member {
	wf_member_cfg cfg;
	char service[WF_EL_TEXT], addr[WF_EL_TEXT], host[256];
	int port;
	int fd;
	uint64_t gen; /* the generation this worker is in, for the hello (0: none) */
};

/* The connection to the service broke: closed until wf_member_reconnect. */
static void lost(wf_member *m)
{
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
}

/* One attempt: 0 registered; 1 retry (why in last); < 0 permanent (err). */
static int member_once(wf_member *m, const char *host, int port, double deadline, char *last,
		       size_t nlast, wf_err *err)
{
	int fd = wf_net_connect(host, port, WF_MIN(deadline, wf_now() + CONNECT_ATTEMPT), last,
				nlast);
	if (fd < 0)
		return 1;
	wf_el_msg h = {.type = WF_EL_HELLO,
		       .keyed = m->cfg.key != NULL,
		       .slot = m->cfg.slot,
		       .job = m->cfg.job,
		       .gen = m->gen};
	snprintf(h.addr, sizeof(h.addr), "%s", m->addr);
	wf_rdv_nonce(h.nonce);
	wf_el_msg ch;
	char why[WF_EL_TEXT] = "";
	int rc = 1;
	if (wf_el_send(fd, &h, deadline) != 0) {
		snprintf(last, nlast, "sending the hello: %s", strerror(errno));
		goto close_fd;
	}
	int got = wf_el_recv(fd, &ch, deadline, why, sizeof(why));
	if (got == -1) {
		snprintf(last, nlast, "connected, but no answer: %s", strerror(errno));
		goto close_fd;
	}
	if (got != 0 || ch.type != WF_EL_CHALLENGE) {
		rc = wf_errf(err, WF_EINVAL,
			     "membership: %s answered, but it is not a weft membership service of "
			     "this version (%s); is strategy.elastic_service right?",
			     m->service, why[0] ? why : "unexpected message");
		goto close_fd;
	}
	if (ch.status != 0) {
		rc = wf_errf(err, WF_EINVAL, "membership: the service at %s refused slot %d: %s",
			     m->service, m->cfg.slot, ch.text);
		goto close_fd;
	}
	uint8_t want[WF_EL_MAC];
	mac(want, m->cfg.key, LABEL_SERVICE, h.nonce, ch.nonce, m->cfg.slot);
	if (m->cfg.key && !wf_rdv_mac_equal(ch.mac, want)) {
		rc = wf_errf(err, WF_EINVAL,
			     "membership: the service at %s did not prove it holds the job key "
			     "(is cluster.key_dir the same for the service and every worker?)",
			     m->service);
		goto close_fd;
	}
	wf_el_msg pr = {.type = WF_EL_PROOF};
	mac(pr.mac, m->cfg.key, LABEL_WORKER, ch.nonce, h.nonce, m->cfg.slot);
	if (wf_el_send(fd, &pr, deadline) != 0) {
		snprintf(last, nlast, "sending the proof: %s", strerror(errno));
		goto close_fd;
	}
	m->fd = fd;
	return 0;
close_fd:
	close(fd);
	return rc;
}

/* Connect and register, retrying until timeout seconds (<= 0: 300) pass. */
static int dial(wf_member *m, double timeout, wf_err *err)
{
	double t0 = wf_now(), deadline = t0 + (timeout > 0 ? timeout : 300);
	double backoff = BACKOFF_FIRST;
	char last[256] = "no attempt";
	for (;;) {
		int rc = member_once(m, m->host, m->port, deadline, last, sizeof(last), err);
		if (rc <= 0)
			return rc;
		double left = deadline - wf_now();
		if (left <= 0)
			break;
		wf_sleep(WF_MIN(backoff, left));
		backoff = WF_MIN(backoff * 2, BACKOFF_MAX);
	}
	return wf_errf(err, WF_ETRANSIENT,
		       "membership: slot %d found no service at %s within %.1f s (last: %s); is "
		       "strategy.elastic_service (WEFT_ELASTIC_SERVICE) right and the service "
		       "running?",
		       m->cfg.slot, m->service, wf_now() - t0, last);
}

int wf_member_connect(wf_member **out, const wf_member_cfg *cfg, wf_err *err)
{
	*out = NULL;
	char host[256];
	int port;
	if (!cfg->service || wf_net_split_hostport(cfg->service, host, sizeof(host), &port) != 0)
		return wf_errf(err, WF_EINVAL,
			       "strategy.elastic_service: \"%s\" is not host:port (the membership "
			       "service's address)",
			       cfg->service ? cfg->service : "");
	if (wf_rdv_crypto_init() != 0)
		return wf_errf(err, WF_EINTERNAL, "membership: libsodium failed to initialise");
	wf_member *m = calloc(1, sizeof(*m));
	if (!m)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	m->cfg = *cfg;
	m->fd = -1;
	m->port = port;
	snprintf(m->host, sizeof(m->host), "%s", host);
	snprintf(m->service, sizeof(m->service), "%s", cfg->service);
	snprintf(m->addr, sizeof(m->addr), "%s", cfg->addr ? cfg->addr : "");
	m->cfg.service = m->service;
	m->cfg.addr = m->addr;
	int rc = dial(m, cfg->timeout, err);
	if (rc != 0) {
		free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int wf_member_reconnect(wf_member *m, uint64_t gen, double timeout, wf_err *err)
{
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
	m->gen = gen;
	return dial(m, timeout, err);
}

int wf_member_connected(const wf_member *m)
{
	return m->fd >= 0;
}

int wf_member_ready(wf_member *m, uint64_t gen, long step, double timeout, wf_el_msg *a,
		    wf_err *err)
{
	memset(a, 0, sizeof(*a));
	double deadline = wf_now() + (timeout > 0 ? timeout : 1e9);
	wf_el_msg r = {.type = WF_EL_READY, .gen = gen, .step = step < -1 ? -1 : step};
	if (m->fd < 0 || wf_el_send(m->fd, &r, deadline) != 0) {
		int was = m->fd;
		lost(m);
		return wf_errf(err, WF_ETRANSIENT,
			       "membership: slot %d cannot reach the service at %s: %s",
			       m->cfg.slot, m->service,
			       was < 0 ? "not connected" : strerror(errno));
	}
	for (;;) {
		char why[WF_EL_TEXT] = "";
		int got = wf_el_recv(m->fd, a, deadline, why, sizeof(why));
		if (got == -1) {
			int e = errno;
			if (e != ETIMEDOUT)
				lost(m);
			return wf_errf(err, WF_ETRANSIENT,
				       "membership: slot %d got no generation from the service at "
				       "%s: %s",
				       m->cfg.slot, m->service,
				       e == ETIMEDOUT ? "timed out" : strerror(e));
		}
		if (got == -2)
			return wf_errf(err, WF_EINVAL, "membership: the service at %s: %s",
				       m->service, why);
		if (a->type == WF_EL_ASSIGN)
			return 0;
		if (a->type == WF_EL_DONE)
			return 1;
		if (a->type == WF_EL_FAIL)
			return wf_errf(err, WF_EINVAL, "membership (%s): %s", m->service, a->text);
		wf_el_msg_free(a); /* a NOTICE meant for the generation being left */
	}
}

int wf_member_poll_notice(wf_member *m, uint64_t gen, wf_err *err)
{
	int seen = 0;
	for (;;) {
		struct pollfd p = {.fd = m->fd, .events = POLLIN};
		if (m->fd < 0 || poll(&p, 1, 0) != 1)
			break;
		wf_el_msg n;
		char why[WF_EL_TEXT] = "";
		int got = wf_el_recv(m->fd, &n, wf_now() + MSG_WAIT, why, sizeof(why));
		if (got != 0 || (n.type != WF_EL_NOTICE && n.type != WF_EL_FAIL)) {
			wf_el_msg_free(&n);
			lost(m);
			return wf_errf(err, WF_ETRANSIENT,
				       "membership: lost the service at %s (%s)", m->service,
				       got == -1 ? strerror(errno)
				       : why[0]	 ? why
						 : "out of turn");
		}
		if (n.type == WF_EL_FAIL)
			return wf_errf(err, WF_EINVAL, "membership (%s): %s", m->service, n.text);
		seen |= n.gen >= gen;
	}
	return seen;
}

void wf_member_done(wf_member *m, long step)
{
	if (!m || m->fd < 0)
		return;
	wf_el_msg d = {.type = WF_EL_DONE, .step = step};
	(void)wf_el_send(m->fd, &d, wf_now() + MSG_WAIT);
}

void wf_member_leave(wf_member *m)
{
	if (!m || m->fd < 0)
		return;
	wf_el_msg l = {.type = WF_EL_LEAVE};
	(void)wf_el_send(m->fd, &l, wf_now() + MSG_WAIT);
}

void wf_member_free(wf_member *m)
{
	if (!m)
		return;
	if (m->fd >= 0)
		close(m->fd);
	free(m);
}
