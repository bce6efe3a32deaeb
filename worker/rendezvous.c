/* rendezvous.c: the chief's id hand-out over TCP (see rendezvous.h).
 *
 * Wire format, all integers big-endian:
 *   hello (rank r -> chief, 24 bytes): "WFRV", version, rank, size, job (u64)
 *   reply (chief -> rank r, 272 bytes): "WFRV", version, status (0 ok,
 *     1 refused), size, id[128], message[128] (why it was refused)
 * Version 2, with a job key K (both ends hold it):
 *   hello: the 24 bytes, then nonce_r[32] (fresh random)
 *   reply (320 bytes): "WFRV", 2, status, size, nonce_c[32] (fresh random),
 *     box[144] = secretbox(id, nonce_c[0..24), HMAC(K, "weft rendezvous id" |
 *     nonce_r | nonce_c | rank)), message[128]
 *   proof (rank r -> chief, 32 bytes): HMAC(K, "weft rendezvous rank" |
 *     nonce_c | nonce_r | rank); the rank counts as served only with it.
 * A chief without a key answers a version-2 hello, and a chief with one a
 * version-1 hello, with a version-1 refusal that says why.
 * The chief answers each hello at once and returns when every rank in
 * [1, size) has had its answer; a rank asking twice (a restarted pod) gets
 * the same id again. Anything that is not a hello is dropped without
 * touching the state. */
#include "worker/rendezvous.h"

#include "common/log.h"
#include "common/util.h"
#include "worker/netio.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDV_MAGIC	0x57465256u /* "WFRV" */
#define RDV_VERSION	1u
#define RDV_VERSION_KEY 2u
#define HELLO_BYTES	24
#define MSG_BYTES	128
#define REPLY_BYTES	(16 + WF_RDV_ID_BYTES + MSG_BYTES)
#define NONCE_BYTES	32
#define BOX_BYTES	(crypto_secretbox_MACBYTES + WF_RDV_ID_BYTES)
#define REPLY2_BYTES	(16 + NONCE_BYTES + BOX_BYTES + MSG_BYTES)
#define PROOF_BYTES	crypto_auth_hmacsha256_BYTES
#define CLIENT_TIMEOUT	5.0 /* seconds the chief gives one connection */
#define CONNECT_ATTEMPT 2.0 /* seconds one connect may take */
#define BACKOFF_FIRST	0.1 /* seconds between attempts, doubling ... */
#define BACKOFF_MAX	2.0 /* ... up to this */
#define MAX_NAMED	16  /* missing ranks listed by number */

/* ---- crypto for the elastic allreduce's connections ------------------------ */

int wf_rdv_crypto_init(void)
{
	return sodium_init() < 0 ? -1 : 0;
}

void wf_rdv_nonce(uint8_t out[WF_RDV_NONCE_BYTES])
{
	randombytes_buf(out, WF_RDV_NONCE_BYTES);
}

int wf_rdv_mac_equal(const uint8_t a[WF_RDV_MAC_BYTES], const uint8_t b[WF_RDV_MAC_BYTES])
{
	return crypto_verify_32(a, b) == 0;
}

void wf_rdv_wipe(void *p, size_t n)
{
	sodium_memzero(p, n);
}

/* ---- the job key ----------------------------------------------------------- */

void wf_rdv_key_derive(uint8_t key[WF_RDV_KEY_BYTES], const char *client_secret)
{
	static const char ctx[] = "weft rendezvous key v2"; /* 16..64 bytes: a BLAKE2b key */
	crypto_generichash(key, WF_RDV_KEY_BYTES, (const uint8_t *)client_secret,
			   strlen(client_secret), (const uint8_t *)ctx, sizeof(ctx) - 1);
}

void wf_rdv_mac(uint8_t out[WF_RDV_MAC_BYTES], const uint8_t *key, const char *label,
		const uint8_t a[WF_RDV_NONCE_BYTES], const uint8_t b[WF_RDV_NONCE_BYTES], int rank)
{
	crypto_auth_hmacsha256_state st;
	uint8_t r[4];
	wf_net_put32(r, (uint32_t)rank);
	crypto_auth_hmacsha256_init(&st, key, WF_RDV_KEY_BYTES);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
	crypto_auth_hmacsha256_update(&st, a, NONCE_BYTES);
	crypto_auth_hmacsha256_update(&st, b, NONCE_BYTES);
	crypto_auth_hmacsha256_update(&st, r, sizeof(r));
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

static int check_cfg(const wf_rdv_cfg *cfg, char *host, size_t n, int *port, wf_err *err)
{
	if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size)
		return wf_errf(err, WF_EINVAL, "rendezvous: rank %d is not in a job of %d ranks",
			       cfg->rank, cfg->size);
	if (!cfg->chief || wf_net_split_hostport(cfg->chief, host, n, port) != 0)
		return wf_errf(err, WF_EINVAL,
			       "rendezvous: the chief's address \"%s\" is not host:port",
			       cfg->chief ? cfg->chief : "(none)");
	return 0;
}

/* ---- the chief --------------------------------------------------------- */

typedef struct chief_state {
	const wf_rdv_cfg *cfg;
	const uint8_t *id;
	unsigned char *seen; /* [size] 1 once rank got the id */
	int nseen;	     /* ranks in [1, size) served */
} chief_state;

/* The first 16 bytes of a reply of n bytes, the rest zeroed. */
static void reply_head(uint8_t *reply, size_t n, uint32_t version, int refused, int size)
{
	memset(reply, 0, n);
	wf_net_put32(reply, RDV_MAGIC);
	wf_net_put32(reply + 4, version);
	wf_net_put32(reply + 8, refused ? 1u : 0u);
	wf_net_put32(reply + 12, (uint32_t)size);
}

/* A version-1 refusal (the format every rank reads): why. */
static void refuse_v1(int fd, const chief_state *s, const char *why, double deadline)
{
	uint8_t reply[REPLY_BYTES];
	reply_head(reply, sizeof(reply), RDV_VERSION, 1, s->cfg->size);
	snprintf((char *)reply + 16 + WF_RDV_ID_BYTES, MSG_BYTES, "%s", why);
	(void)wf_net_io(fd, reply, sizeof(reply), 1, deadline);
}

/* One connection: read a hello, answer it (with a key: and read the rank's
 * proof). Bad input only costs a warning. */
static void serve_client(chief_state *s, int fd, const char *peer)
{
	uint8_t hello[HELLO_BYTES + NONCE_BYTES], reply[REPLY2_BYTES];
	const uint8_t *key = s->cfg->key;
	double deadline = wf_now() + CLIENT_TIMEOUT;
	if (wf_net_io(fd, hello, HELLO_BYTES, 0, deadline) != 0) {
		wf_warn("rendezvous: %s sent no hello: %s", peer, strerror(errno));
		return;
	}
	uint32_t version = wf_net_get32(hello + 4);
	if (wf_net_get32(hello) != RDV_MAGIC ||
	    (version != RDV_VERSION && version != RDV_VERSION_KEY)) {
		wf_warn("rendezvous: %s is not a weft rank of this version (dropped)", peer);
		return;
	}
	if ((version == RDV_VERSION_KEY) != (key != NULL)) {
		const char *why = key ? "the chief authenticates its ranks with the job key: give "
					"this rank the same cluster.key_dir"
				      : "the chief has no job key (--insecure): start every rank "
					"alike";
		wf_warn("rendezvous: refused %s: %s", peer, why);
		refuse_v1(fd, s, why, deadline);
		return;
	}
	if (key && wf_net_io(fd, hello + HELLO_BYTES, NONCE_BYTES, 0, deadline) != 0) {
		wf_warn("rendezvous: %s sent half a hello: %s", peer, strerror(errno));
		return;
	}
	int rank = (int)wf_net_get32(hello + 8), size = (int)wf_net_get32(hello + 12);
	uint64_t job = wf_net_get64(hello + 16);
	char why[MSG_BYTES] = "";
	if (size != s->cfg->size)
		snprintf(why, sizeof(why), "rank %d says the job has %d ranks, the chief %d", rank,
			 size, s->cfg->size);
	else if (rank < 1 || rank >= size)
		snprintf(why, sizeof(why), "rank %d is not a worker rank of a job of %d", rank,
			 size);
	else if (job != s->cfg->job)
		snprintf(why, sizeof(why),
			 "rank %d belongs to another job (config or cluster spec differs)", rank);
	reply_head(reply, sizeof(reply), version, why[0] != 0, s->cfg->size);
	size_t bytes = REPLY_BYTES;
	uint8_t *nonce_c = reply + 16, *box = reply + 16 + NONCE_BYTES;
	if (key) {
		bytes = REPLY2_BYTES;
		randombytes_buf(nonce_c, NONCE_BYTES);
		if (!why[0]) {
			uint8_t k[PROOF_BYTES];
			wf_rdv_mac(k, key, "weft rendezvous id", hello + HELLO_BYTES, nonce_c,
				   rank);
			crypto_secretbox_easy(box, s->id, WF_RDV_ID_BYTES, nonce_c, k);
			sodium_memzero(k, sizeof(k));
		}
		memcpy(box + BOX_BYTES, why, MSG_BYTES);
	} else {
		if (!why[0])
			memcpy(reply + 16, s->id, WF_RDV_ID_BYTES);
		memcpy(reply + 16 + WF_RDV_ID_BYTES, why, MSG_BYTES);
	}
	if (wf_net_io(fd, reply, bytes, 1, deadline) != 0) {
		wf_warn("rendezvous: answering %s (rank %d): %s", peer, rank, strerror(errno));
		return;
	}
	if (why[0]) {
		wf_warn("rendezvous: refused %s: %s", peer, why);
		return;
	}
	if (key) {
		uint8_t proof[PROOF_BYTES], want[PROOF_BYTES];
		wf_rdv_mac(want, key, "weft rendezvous rank", nonce_c, hello + HELLO_BYTES, rank);
		if (wf_net_io(fd, proof, sizeof(proof), 0, deadline) != 0 ||
		    crypto_verify_32(proof, want) != 0) {
			wf_warn("rendezvous: %s (as rank %d) did not prove it holds the job key: "
				"not counted",
				peer, rank);
			return;
		}
	}
	if (s->seen[rank]) {
		wf_info("rendezvous: rank %d (%s) asked again: same id", rank, peer);
		return;
	}
	s->seen[rank] = 1;
	s->nseen++;
	wf_debug("rendezvous: rank %d (%s) has the id (%d of %d)", rank, peer, s->nseen,
		 s->cfg->size - 1);
}

static void peer_name(const struct sockaddr_storage *sa, char *buf, size_t n)
{
	char host[NI_MAXHOST], serv[NI_MAXSERV];
	if (getnameinfo((const struct sockaddr *)sa, sizeof(*sa), host, sizeof(host), serv,
			sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(buf, n, "%s:%s", host, serv);
	else
		snprintf(buf, n, "a peer");
}

static int chief_serve(const wf_rdv_cfg *cfg, int port, const uint8_t *id, double timeout,
		       wf_err *err)
{
	if (cfg->size < 2)
		return 0;
	chief_state s = {.cfg = cfg, .id = id};
	s.seen = calloc((size_t)cfg->size, 1);
	if (!s.seen)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	int rc = 0;
	int fd = wf_net_listen(port, WF_MIN(cfg->size, 4096), "rendezvous: the chief", err);
	if (fd < 0) {
		rc = fd;
		goto free_seen;
	}
	wf_info("rendezvous: chief waiting for %d rank%s on port %d (timeout %g s)", cfg->size - 1,
		cfg->size == 2 ? "" : "s", port, timeout);
	double deadline = wf_now() + timeout;
	while (s.nseen < cfg->size - 1) {
		int ready = wf_net_wait(fd, POLLIN, deadline);
		if (ready < 0) {
			rc = wf_errf(err, WF_EIO, "rendezvous: poll: %s", strerror(errno));
			goto close_fd;
		}
		if (ready == 0)
			break;
		struct sockaddr_storage sa;
		socklen_t len = sizeof(sa);
		int cfd = accept4(fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (cfd < 0)
			continue; /* the peer gave up, or a signal: wait again */
		char peer[NI_MAXHOST + NI_MAXSERV + 2];
		peer_name(&sa, peer, sizeof(peer));
		serve_client(&s, cfd, peer);
		close(cfd);
	}
	if (s.nseen < cfg->size - 1) {
		char list[256] = "";
		size_t n = 0;
		int missing = 0;
		for (int r = 1; r < cfg->size; r++) {
			if (s.seen[r])
				continue;
			if (missing < MAX_NAMED && n < sizeof(list))
				n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d",
						      missing ? ", " : "", r);
			else if (missing == MAX_NAMED && n < sizeof(list))
				n += (size_t)snprintf(list + n, sizeof(list) - n, ", ...");
			missing++;
		}
		rc = wf_errf(err, WF_ETRANSIENT,
			     "rendezvous: rank%s %s of %d did not connect to the chief (port %d, "
			     "%s) within %g s",
			     missing > 1 ? "s" : "", list, cfg->size, port, cfg->chief, timeout);
		goto close_fd;
	}
	wf_info("rendezvous: all %d ranks have the id", cfg->size);
close_fd:
	close(fd);
free_seen:
	free(s.seen);
	return rc;
}

/* ---- the other ranks ----------------------------------------------------- */

/* One attempt: resolve, connect, hello, reply. 0 done; 1 retry later (why
 * in last); < 0 a permanent error in err. */
static int join_once(const wf_rdv_cfg *cfg, const char *host, int port, double deadline,
		     uint8_t *id, char *last, size_t nlast, wf_err *err)
{
	int rc = 1;
	int fd = wf_net_connect(host, port, WF_MIN(deadline, wf_now() + CONNECT_ATTEMPT), last,
				nlast);
	if (fd < 0)
		return 1;
	const uint8_t *key = cfg->key;
	uint8_t hello[HELLO_BYTES + NONCE_BYTES], reply[REPLY2_BYTES];
	wf_net_put32(hello, RDV_MAGIC);
	wf_net_put32(hello + 4, key ? RDV_VERSION_KEY : RDV_VERSION);
	wf_net_put32(hello + 8, (uint32_t)cfg->rank);
	wf_net_put32(hello + 12, (uint32_t)cfg->size);
	wf_net_put64(hello + 16, cfg->job);
	if (key)
		randombytes_buf(hello + HELLO_BYTES, NONCE_BYTES);
	/* the first 16 bytes say which reply follows (a refusal is version 1) */
	if (wf_net_io(fd, hello, key ? sizeof(hello) : HELLO_BYTES, 1, deadline) != 0 ||
	    wf_net_io(fd, reply, 16, 0, deadline) != 0) {
		snprintf(last, nlast, "connected, but no answer: %s", strerror(errno));
		goto close_fd;
	}
	uint32_t version = wf_net_get32(reply + 4);
	if (wf_net_get32(reply) != RDV_MAGIC ||
	    (version != RDV_VERSION && !(key && version == RDV_VERSION_KEY))) {
		rc = wf_errf(err, WF_EINVAL,
			     "rendezvous: %s answered, but it is not a weft chief of this version "
			     "(is TF_CONFIG's chief address right?)",
			     cfg->chief);
		goto close_fd;
	}
	size_t bytes = version == RDV_VERSION_KEY ? REPLY2_BYTES : REPLY_BYTES;
	if (wf_net_io(fd, reply + 16, bytes - 16, 0, deadline) != 0) {
		snprintf(last, nlast, "the chief's answer broke off: %s", strerror(errno));
		goto close_fd;
	}
	if (wf_net_get32(reply + 8) != 0) {
		char why[MSG_BYTES + 1];
		memcpy(why, reply + bytes - MSG_BYTES, MSG_BYTES);
		why[MSG_BYTES] = '\0';
		rc = wf_errf(err, WF_EINVAL, "rendezvous: the chief at %s refused rank %d: %s",
			     cfg->chief, cfg->rank, why);
		goto close_fd;
	}
	if (key && version != RDV_VERSION_KEY) {
		rc = wf_errf(err, WF_EINVAL,
			     "rendezvous: the chief at %s handed out the NCCL id without the job "
			     "key: refused (start every rank with the same cluster.key_dir, or "
			     "every rank with --insecure)",
			     cfg->chief);
		goto close_fd;
	}
	if (key) {
		const uint8_t *nonce_c = reply + 16, *box = reply + 16 + NONCE_BYTES;
		uint8_t k[PROOF_BYTES], proof[PROOF_BYTES];
		wf_rdv_mac(k, key, "weft rendezvous id", hello + HELLO_BYTES, nonce_c, cfg->rank);
		int opened = crypto_secretbox_open_easy(id, box, BOX_BYTES, nonce_c, k);
		sodium_memzero(k, sizeof(k));
		if (opened != 0) {
			rc = wf_errf(err, WF_EINVAL,
				     "rendezvous: the chief at %s did not prove it holds the job "
				     "key (is cluster.key_dir the same on every rank?)",
				     cfg->chief);
			goto close_fd;
		}
		wf_rdv_mac(proof, key, "weft rendezvous rank", nonce_c, hello + HELLO_BYTES,
			   cfg->rank);
		if (wf_net_io(fd, proof, sizeof(proof), 1, deadline) != 0) {
			snprintf(last, nlast, "sending the proof: %s", strerror(errno));
			goto close_fd;
		}
	} else {
		memcpy(id, reply + 16, WF_RDV_ID_BYTES);
	}
	rc = 0;
close_fd:
	close(fd);
	return rc;
}

static int worker_join(const wf_rdv_cfg *cfg, const char *host, int port, uint8_t *id,
		       double timeout, wf_err *err)
{
	double t0 = wf_now(), deadline = t0 + timeout, backoff = BACKOFF_FIRST;
	char last[512] = "no attempt";
	int attempts = 0;
	for (;;) {
		attempts++;
		int rc = join_once(cfg, host, port, deadline, id, last, sizeof(last), err);
		if (rc <= 0) {
			if (rc == 0)
				wf_debug("rendezvous: rank %d has the id from %s", cfg->rank,
					 cfg->chief);
			return rc;
		}
		double left = deadline - wf_now();
		if (left <= 0)
			break;
		wf_sleep(WF_MIN(backoff, left));
		backoff = WF_MIN(backoff * 2, BACKOFF_MAX);
	}
	int rc = wf_errf(err, WF_ETRANSIENT,
			 "rendezvous: rank %d found no chief at %s within %.0f s (%d attempts; "
			 "last: %s). Is the chief running with the same TF_CONFIG? Exiting 138 "
			 "(transient)",
			 cfg->rank, cfg->chief, wf_now() - t0, attempts, last);
	return rc;
}

int wf_rdv_exchange(const wf_rdv_cfg *cfg, uint8_t id[WF_RDV_ID_BYTES], wf_err *err)
{
	char host[256];
	int port = 0;
	int rc = check_cfg(cfg, host, sizeof(host), &port, err);
	if (rc != 0)
		return rc;
	double timeout = cfg->timeout > 0 ? cfg->timeout : WF_RDV_TIMEOUT_DEFAULT;
	if (cfg->key && sodium_init() < 0)
		return wf_errf(err, WF_EINTERNAL, "rendezvous: libsodium failed to initialise");
	if (cfg->rank == 0)
		return chief_serve(cfg, port, id, timeout, err);
	return worker_join(cfg, host, port, id, timeout, err);
}
