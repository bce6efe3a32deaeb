/* ring.c: the TCP ring of elastic allreduce (see ring.h).
 *
 * Hand-shake (elastic_wire.h messages), rank r to its right neighbour:
 *   r -> r+1: RING_HELLO {job, gen, r, nonce_a}
 *   r+1 -> r: RING_REPLY {0, nonce_b, HMAC(K, "weft ring accept <gen>",
 *             nonce_a, nonce_b, r)} or {1, text: why refused}
 *   r -> r+1: PROOF {HMAC(K, "weft ring open <gen>", nonce_b, nonce_a, r)}
 * Every rank first connects and sends its hello, then accepts its left
 * neighbour, then finishes its own side: no rank waits on one that waits on
 * it. Without a key the MACs are zeros and not checked.
 *
 * Data: raw little-endian floats (every rank runs on the same kind of
 * machine: the ranks of one job are the same build). Each transfer sends to
 * the right and receives from the left at once (poll on both sockets), so a
 * chunk larger than the sockets' buffers cannot deadlock the ring. */
#include "worker/ring.h"

#include "common/log.h"
#include "common/util.h"
#include "worker/elastic_wire.h"
#include "worker/netio.h"
#include "worker/rendezvous.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_ATTEMPT 2.0	   /* seconds one connect may take */
#define BACKOFF		0.05	   /* seconds between connect attempts */
#define SEGMENT		(1u << 20) /* bytes a broadcast forwards at a time */

struct wf_ring {
	wf_ring_cfg cfg;
	char right_name[128], left_name[128];
	int fd_right, fd_left; /* -1: closed */
	float *tmp;	       /* [ntmp] one chunk received in the reduce-scatter */
	size_t ntmp;
	int broken;
};

static void ring_close(wf_ring *r)
{
	if (r->fd_right >= 0)
		close(r->fd_right);
	if (r->fd_left >= 0)
		close(r->fd_left);
	r->fd_right = r->fd_left = -1;
}

static int ring_fail(wf_ring *r, wf_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The ring is broken: close both sockets (the neighbours see it at once). */
static int ring_fail(wf_ring *r, wf_err *err, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->broken = 1;
	ring_close(r);
	return wf_errf(err, WF_ETRANSIENT, "ring: rank %d of %d (generation %llu): %s", r->cfg.rank,
		       r->cfg.size, (unsigned long long)r->cfg.gen, msg);
}

static void mac_label(char *buf, size_t n, const char *what, uint64_t gen)
{
	snprintf(buf, n, "weft ring %s %llu", what, (unsigned long long)gen);
}

static void ring_mac(const wf_ring *r, uint8_t out[WF_EL_MAC], const char *what, const uint8_t *a,
		     const uint8_t *b, int rank)
{
	char label[64];
	if (!r->cfg.key) {
		memset(out, 0, WF_EL_MAC);
		return;
	}
	mac_label(label, sizeof(label), what, r->cfg.gen);
	wf_rdv_mac(out, r->cfg.key, label, a, b, rank);
}

static int mac_ok(const wf_ring *r, const uint8_t *got, const uint8_t *want)
{
	return !r->cfg.key || wf_rdv_mac_equal(got, want);
}

/* ---- forming the ring ------------------------------------------------------ */

static int connect_right(wf_ring *r, double deadline, uint8_t *nonce_a, wf_err *err)
{
	char host[256], why[256] = "no attempt";
	int port;
	if (wf_net_split_hostport(r->cfg.right, host, sizeof(host), &port) != 0)
		return ring_fail(r, err, "%s's address \"%s\" is not host:port", r->right_name,
				 r->cfg.right);
	while ((r->fd_right =
			wf_net_connect(host, port, WF_MIN(deadline, wf_now() + CONNECT_ATTEMPT),
				       why, sizeof(why))) < 0) {
		if (wf_now() + BACKOFF >= deadline)
			return ring_fail(r, err, "cannot connect to %s at %s within %.0f s: %s",
					 r->right_name, r->cfg.right, r->cfg.timeout, why);
		wf_sleep(BACKOFF);
	}
	wf_el_msg h = {.type = WF_EL_RING_HELLO,
		       .job = r->cfg.job,
		       .gen = r->cfg.gen,
		       .rank = r->cfg.rank};
	wf_rdv_nonce(nonce_a);
	memcpy(h.nonce, nonce_a, WF_EL_NONCE);
	if (wf_el_send(r->fd_right, &h, deadline) != 0)
		return ring_fail(r, err, "sending the hello to %s at %s: %s", r->right_name,
				 r->cfg.right, strerror(errno));
	return 0;
}

/* Accept connections until one is the left neighbour's of this
 * generation; answer it. Others get a refusal that says why. */
static int accept_left(wf_ring *r, double deadline, uint8_t *nonce_b, uint8_t *nonce_left,
		       wf_err *err)
{
	int left = (r->cfg.rank + r->cfg.size - 1) % r->cfg.size;
	for (;;) {
		int ready = wf_net_wait(r->cfg.listen_fd, POLLIN, deadline);
		if (ready <= 0)
			return ring_fail(r, err, "%s did not connect within %.0f s", r->left_name,
					 r->cfg.timeout);
		int fd = accept4(r->cfg.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			continue;
		wf_el_msg h;
		char why[WF_EL_TEXT] = "";
		int got = wf_el_recv(fd, &h, WF_MIN(deadline, wf_now() + CONNECT_ATTEMPT), why,
				     sizeof(why));
		if (got == 0 && h.type != WF_EL_RING_HELLO)
			snprintf(why, sizeof(why), "expected a ring hello, got message %d", h.type);
		else if (got == 0 && h.job != r->cfg.job)
			snprintf(why, sizeof(why), "a ring of another job");
		else if (got == 0 && h.gen != r->cfg.gen)
			snprintf(why, sizeof(why), "generation %llu, this ring is %llu",
				 (unsigned long long)h.gen, (unsigned long long)r->cfg.gen);
		else if (got == 0 && h.rank != left)
			snprintf(why, sizeof(why), "rank %d is not rank %d's left neighbour",
				 h.rank, r->cfg.rank);
		else if (got != 0 && !why[0])
			snprintf(why, sizeof(why), "%s", strerror(errno));
		wf_el_msg_free(&h);
		wf_el_msg rep = {.type = WF_EL_RING_REPLY, .status = why[0] != 0};
		if (why[0]) {
			wf_debug("ring: rank %d: refused a connection: %s", r->cfg.rank, why);
			snprintf(rep.text, sizeof(rep.text), "%s", why);
			(void)wf_el_send(fd, &rep, wf_now() + 0.5);
			close(fd);
			continue;
		}
		wf_rdv_nonce(nonce_b);
		memcpy(rep.nonce, nonce_b, WF_EL_NONCE);
		memcpy(nonce_left, h.nonce, WF_EL_NONCE);
		ring_mac(r, rep.mac, "accept", nonce_left, nonce_b, left);
		r->fd_left = fd;
		if (wf_el_send(fd, &rep, deadline) != 0)
			return ring_fail(r, err, "answering %s: %s", r->left_name, strerror(errno));
		return 0;
	}
}

static int finish_right(wf_ring *r, double deadline, const uint8_t *nonce_a, wf_err *err)
{
	wf_el_msg rep;
	char why[WF_EL_TEXT] = "";
	int got = wf_el_recv(r->fd_right, &rep, deadline, why, sizeof(why));
	if (got == -1)
		return ring_fail(r, err, "no answer from %s at %s: %s", r->right_name, r->cfg.right,
				 strerror(errno));
	if (got != 0 || rep.type != WF_EL_RING_REPLY)
		return ring_fail(r, err, "%s at %s answered with something else: %s", r->right_name,
				 r->cfg.right, why[0] ? why : "not a ring reply");
	if (rep.status != 0)
		return ring_fail(r, err, "%s at %s refused the connection: %s", r->right_name,
				 r->cfg.right, rep.text);
	uint8_t want[WF_EL_MAC];
	ring_mac(r, want, "accept", nonce_a, rep.nonce, r->cfg.rank);
	if (!mac_ok(r, rep.mac, want))
		return ring_fail(r, err,
				 "%s at %s did not prove it holds the job key (is cluster.key_dir "
				 "the same on every worker?)",
				 r->right_name, r->cfg.right);
	wf_el_msg proof = {.type = WF_EL_PROOF};
	ring_mac(r, proof.mac, "open", rep.nonce, nonce_a, r->cfg.rank);
	if (wf_el_send(r->fd_right, &proof, deadline) != 0)
		return ring_fail(r, err, "sending the proof to %s: %s", r->right_name,
				 strerror(errno));
	return 0;
}

static int finish_left(wf_ring *r, double deadline, const uint8_t *nonce_b,
		       const uint8_t *nonce_left, wf_err *err)
{
	int left = (r->cfg.rank + r->cfg.size - 1) % r->cfg.size;
	wf_el_msg p;
	char why[WF_EL_TEXT] = "";
	int got = wf_el_recv(r->fd_left, &p, deadline, why, sizeof(why));
	uint8_t want[WF_EL_MAC];
	ring_mac(r, want, "open", nonce_b, nonce_left, left);
	if (got != 0 || p.type != WF_EL_PROOF || !mac_ok(r, p.mac, want))
		return ring_fail(r, err,
				 "%s did not prove it holds the job key (%s; is cluster.key_dir "
				 "the same on every worker?)",
				 r->left_name,
				 got == -1 ? strerror(errno)
				 : why[0]  ? why
					   : "bad proof");
	int one = 1;
	setsockopt(r->fd_left, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

int wf_ring_create(wf_ring **out, const wf_ring_cfg *cfg, wf_err *err)
{
	*out = NULL;
	if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size || cfg->timeout <= 0)
		return wf_errf(err, WF_EINVAL, "ring: rank %d of %d, timeout %g s: out of range",
			       cfg->rank, cfg->size, cfg->timeout);
	wf_ring *r = calloc(1, sizeof(*r));
	if (!r)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	r->cfg = *cfg;
	r->fd_left = r->fd_right = -1;
	snprintf(r->right_name, sizeof(r->right_name), "%s",
		 cfg->right_name ? cfg->right_name : "the right neighbour");
	snprintf(r->left_name, sizeof(r->left_name), "%s",
		 cfg->left_name ? cfg->left_name : "the left neighbour");
	r->cfg.right_name = r->right_name;
	r->cfg.left_name = r->left_name;
	r->cfg.right = NULL; /* the caller's string: used only while forming */
	if (cfg->size == 1) {
		*out = r;
		return 0;
	}
	if (wf_rdv_crypto_init() != 0) {
		free(r);
		return wf_errf(err, WF_EINTERNAL, "ring: libsodium failed to initialise");
	}
	double deadline = wf_now() + cfg->timeout;
	uint8_t nonce_a[WF_EL_NONCE], nonce_b[WF_EL_NONCE], nonce_left[WF_EL_NONCE];
	r->cfg.right = cfg->right;
	int rc = connect_right(r, deadline, nonce_a, err);
	if (rc == 0)
		rc = accept_left(r, deadline, nonce_b, nonce_left, err);
	if (rc == 0)
		rc = finish_right(r, deadline, nonce_a, err);
	if (rc == 0)
		rc = finish_left(r, deadline, nonce_b, nonce_left, err);
	r->cfg.right = NULL;
	if (rc != 0) {
		wf_ring_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* ---- moving bytes ------------------------------------------------------------ */

/* Send sbytes to the right and receive rbytes from the left at once; the
 * timeout runs from the last byte that moved. */
static int transfer(wf_ring *r, const void *sbuf, size_t sbytes, void *rbuf, size_t rbytes,
		    const char *what, wf_err *err)
{
	const uint8_t *s = sbuf;
	uint8_t *d = rbuf;
	double deadline = wf_now() + r->cfg.timeout;
	while (sbytes > 0 || rbytes > 0) {
		struct pollfd p[2];
		int np = 0, is = -1, ir = -1;
		if (sbytes > 0) {
			is = np;
			p[np++] = (struct pollfd){.fd = r->fd_right, .events = POLLOUT};
		}
		if (rbytes > 0) {
			ir = np;
			p[np++] = (struct pollfd){.fd = r->fd_left, .events = POLLIN};
		}
		int ms = wf_net_ms_left(deadline);
		int n = ms > 0 ? poll(p, (nfds_t)np, ms) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ring_fail(r, err, "%s: poll: %s", what, strerror(errno));
		if (n == 0) {
			if (rbytes > 0)
				return ring_fail(r, err,
						 "%s: %s sent nothing for %g s "
						 "(strategy.stall_timeout): it stopped or hangs",
						 what, r->left_name, r->cfg.timeout);
			return ring_fail(r, err,
					 "%s: %s took nothing for %g s (strategy.stall_timeout): "
					 "it stopped or hangs",
					 what, r->right_name, r->cfg.timeout);
		}
		if (is >= 0 && (p[is].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t k = send(r->fd_right, s, sbytes, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				return ring_fail(r, err, "%s: sending to %s: %s", what,
						 r->right_name, strerror(errno));
			if (k > 0) {
				s += k;
				sbytes -= (size_t)k;
				deadline = wf_now() + r->cfg.timeout;
			}
		}
		if (ir >= 0 && (p[ir].revents & (POLLIN | POLLERR | POLLHUP))) {
			ssize_t k = recv(r->fd_left, d, rbytes, MSG_DONTWAIT);
			if (k == 0)
				return ring_fail(r, err,
						 "%s: %s closed the connection (it died, left, or "
						 "lost its own neighbour)",
						 what, r->left_name);
			if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				return ring_fail(r, err, "%s: receiving from %s: %s", what,
						 r->left_name, strerror(errno));
			if (k > 0) {
				d += k;
				rbytes -= (size_t)k;
				deadline = wf_now() + r->cfg.timeout;
			}
		}
	}
	return 0;
}

static size_t chunk_lo(size_t n, int size, int c)
{
	return n * (size_t)c / (size_t)size;
}

int wf_ring_allreduce(wf_ring *r, float *buf, size_t n, const char *what, wf_err *err)
{
	if (r->broken)
		return wf_errf(err, WF_ETRANSIENT, "ring: %s on a broken ring", what);
	int w = r->cfg.size, me = r->cfg.rank;
	if (w == 1 || n == 0)
		return 0;
	size_t most = n / (size_t)w + 1;
	if (most > r->ntmp) {
		float *t = realloc(r->tmp, most * sizeof(float));
		if (!t)
			return wf_errf(err, WF_ENOMEM, "ring: out of memory for %zu floats", most);
		r->tmp = t;
		r->ntmp = most;
	}
	/* reduce-scatter: after step s, chunk (me - s - 1) holds s + 2 ranks' sum */
	for (int s = 0; s < w - 1; s++) {
		int cs = ((me - s) % w + w) % w, cr = ((me - s - 1) % w + w) % w;
		size_t slo = chunk_lo(n, w, cs), shi = chunk_lo(n, w, cs + 1);
		size_t rlo = chunk_lo(n, w, cr), rhi = chunk_lo(n, w, cr + 1);
		int rc = transfer(r, buf + slo, (shi - slo) * sizeof(float), r->tmp,
				  (rhi - rlo) * sizeof(float), what, err);
		if (rc != 0)
			return rc;
		float *dst = buf + rlo;
		for (size_t i = 0; i < rhi - rlo; i++)
			dst[i] = r->tmp[i] + dst[i]; /* the sum so far, then this rank's */
	}
	/* allgather: rank me holds chunk me + 1 complete; pass them on */
	for (int s = 0; s < w - 1; s++) {
		int cs = ((me + 1 - s) % w + w) % w, cr = ((me - s) % w + w) % w;
		size_t slo = chunk_lo(n, w, cs), shi = chunk_lo(n, w, cs + 1);
		size_t rlo = chunk_lo(n, w, cr), rhi = chunk_lo(n, w, cr + 1);
		int rc = transfer(r, buf + slo, (shi - slo) * sizeof(float), buf + rlo,
				  (rhi - rlo) * sizeof(float), what, err);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int wf_ring_bcast(wf_ring *r, void *buf, size_t bytes, int root, const char *what, wf_err *err)
{
	if (r->broken)
		return wf_errf(err, WF_ETRANSIENT, "ring: %s on a broken ring", what);
	int w = r->cfg.size, me = r->cfg.rank;
	if (w == 1 || bytes == 0)
		return 0;
	int last = (root + w - 1) % w; /* the rank that forwards nothing */
	uint8_t *p = buf;
	for (size_t off = 0; off < bytes; off += SEGMENT) {
		size_t k = WF_MIN((size_t)SEGMENT, bytes - off);
		int rc = 0;
		if (me != root)
			rc = transfer(r, NULL, 0, p + off, k, what, err);
		if (rc == 0 && me != last)
			rc = transfer(r, p + off, k, NULL, 0, what, err);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int wf_ring_broken(const wf_ring *r)
{
	return r->broken;
}

void wf_ring_free(wf_ring *r)
{
	if (!r)
		return;
	ring_close(r);
	free(r->tmp);
	free(r);
}
