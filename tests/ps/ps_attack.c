/* ps_attack.c: an outsider against a running parameter server, for
 * tests/ps/test_attack.sh. It speaks the real wire protocol with the job id
 * it was given (as an attacker who learnt it would) and tries to pull the
 * weights, push a gradient, make the server write a checkpoint under a path
 * of its choosing, read stats, and shut the server down.
 *
 *   ps_attack MODE ENDPOINT JOB_ID_HEX [EVIL_DIR] [KEY_DIR]
 *   MODE: plain      no CURVE at all
 *         wrongkey   CURVE with the server's real public key (KEY_DIR/server.pub)
 *                    but a client key pair of its own
 *         goodkey    the control: the cluster's client keys from KEY_DIR; only
 *                    reads stats, and exits 0 when that is answered
 *         wrongjob   plain, with a wrong job id: the error reply must not
 *                    reveal the right one
 *         topk       plain, the right job id, against a server with
 *                    ps.compression topk:F: hostile topk pushes (truncated,
 *                    indices out of order, repeated, past the chunk) must
 *                    each be refused with an error naming topk, and the
 *                    server must answer stats afterwards
 *
 * Prints one line per attempt; exits 0 when every attempt was refused (no
 * reply, or an error reply), 1 when any succeeded, 2 on usage errors. */
#include "ps/proto.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 1000

static uint64_t job;
static uint32_t tag;

/* Send op and wait for the reply; 1 when a non-error reply came, 0 when
 * refused. Error reply text into why. */
static int attempt(void *sock, int op, uint32_t chunk, int64_t step, const void *payload, size_t n,
		   int dtype, char *why, size_t whyn, uint64_t *reply_bytes)
{
	wf_ps_hdr h = {.version = WF_PS_VERSION,
		       .op = (uint16_t)op,
		       .sender = WF_PS_SENDER(
			       op == WF_PS_OP_PUSH_PULL ? WF_PS_ROLE_WORKER : WF_PS_ROLE_TOOL, 0),
		       .job_id = job,
		       .step = step,
		       .chunk = chunk,
		       .dtype = (uint16_t)dtype,
		       .tag = ++tag};
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[1] = {payload};
	size_t sz[1] = {n};
	wf_ps_hdr_encode(&h, hb, f, sz, payload ? 1 : 0);
	why[0] = '\0';
	if (zmq_send(sock, hb, sizeof(hb), payload ? ZMQ_SNDMORE | ZMQ_DONTWAIT : ZMQ_DONTWAIT) <
		    0 ||
	    (payload && zmq_send(sock, payload, n, ZMQ_DONTWAIT) < 0)) {
		snprintf(why, whyn, "not sent: %s", zmq_strerror(zmq_errno()));
		return 0;
	}
	for (;;) {
		zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, WAIT_MS) <= 0) {
			snprintf(why, whyn, "no reply within %d ms", WAIT_MS);
			return 0;
		}
		zmq_msg_t m[3];
		int nf = 0, more = 1;
		while (more) {
			zmq_msg_t tmp, *p = nf < 3 ? &m[nf] : &tmp;
			zmq_msg_init(p);
			zmq_msg_recv(p, sock, 0);
			more = zmq_msg_more(p);
			if (p == &tmp)
				zmq_msg_close(p);
			else
				nf++;
		}
		wf_ps_hdr r = {0};
		int ok = 0;
		if (zmq_msg_size(&m[0]) == WF_PS_HEADER_BYTES)
			wf_ps_hdr_decode(&r, zmq_msg_data(&m[0]));
		if (r.tag == h.tag) {
			ok = !(r.flags & WF_PS_FLAG_ERROR);
			if (!ok && nf > 1) {
				size_t k = zmq_msg_size(&m[1]) < whyn - 1 ? zmq_msg_size(&m[1])
									  : whyn - 1;
				memcpy(why, zmq_msg_data(&m[1]), k);
				why[k] = '\0';
			}
			if (reply_bytes)
				*reply_bytes = r.payload_bytes;
		}
		for (int i = 0; i < nf; i++)
			zmq_msg_close(&m[i]);
		if (r.tag == h.tag)
			return ok;
	}
}

/* Mode topk: 0 when every hostile push was refused naming topk and the
 * server still answers. */
static int topk_attack(void *sock)
{
	/* 3 entries: u32 indices, then f32 values */
	static const uint32_t cases[][6] = {
		{1, 5, 9, 0x3f800000u, 0x3f800000u, 0x3f800000u},	    /* truncated below */
		{5, 1, 9, 0x3f800000u, 0x3f800000u, 0x3f800000u},	    /* out of order */
		{1, 1, 9, 0x3f800000u, 0x3f800000u, 0x3f800000u},	    /* repeated */
		{1, 5, 0xffffffffu, 0x3f800000u, 0x3f800000u, 0x3f800000u}, /* past the chunk */
	};
	static const char *const what[] = {"truncated", "out of order", "repeated",
					   "past the chunk"};
	char why[1024];
	int bad = 0;
	for (int i = 0; i < 4; i++) {
		size_t n = i == 0 ? sizeof(cases[i]) - 1 : sizeof(cases[i]);
		int ok = attempt(sock, WF_PS_OP_PUSH_PULL, 0, 0, cases[i], n, WF_PS_DTYPE_TOPK, why,
				 sizeof(why), NULL);
		int named = strstr(why, "topk") != NULL;
		printf("topk: push %s: %s %s\n", what[i], ok ? "ACCEPTED" : "refused", why);
		bad += ok || !named;
	}
	int ok = attempt(sock, WF_PS_OP_STATS, 0, 0, NULL, 0, WF_PS_DTYPE_NONE, why, sizeof(why),
			 NULL);
	printf("topk: stats afterwards: %s %s\n", ok ? "answered" : "NOT answered", why);
	return bad || !ok;
}

static int read_key(const char *dir, const char *name, char out[41])
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	char line[256];
	int rc = -1;
	while (f && fgets(line, sizeof(line), f)) {
		if (line[0] == '#')
			continue;
		line[strcspn(line, "\r\n")] = '\0';
		if (strlen(line) == 40) {
			memcpy(out, line, 41);
			rc = 0;
		}
		break;
	}
	if (f)
		fclose(f);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: ps_attack plain|wrongkey|wrongjob|topk ENDPOINT JOB_ID_HEX "
				"[EVIL_DIR] [SERVER_PUB_FILE]\n");
		return 2;
	}
	const char *mode = argv[1], *ep = argv[2];
	const char *evil = argc > 4 ? argv[4] : "/tmp/weft-evil";
	job = strtoull(argv[3], NULL, 16);
	uint64_t right_job = job;
	if (!strcmp(mode, "wrongjob"))
		job ^= 0x5a5a5a5a5a5a5a5aull;
	void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
	int linger = 0;
	zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
	int good = !strcmp(mode, "goodkey");
	if (!strcmp(mode, "wrongkey") || good) {
		char spub[41], pub[41], sec[41];
		if (argc < 6 || read_key(argv[5], "server.pub", spub) ||
		    (good && (read_key(argv[5], "client.pub", pub) ||
			      read_key(argv[5], "client.key", sec)))) {
			fprintf(stderr, "ps_attack: %s needs KEY_DIR with the key files\n", mode);
			return 2;
		}
		if (!good)
			zmq_curve_keypair(pub, sec);
		zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, spub, 41);
		zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 41);
		zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 41);
	} else if (strcmp(mode, "plain") && strcmp(mode, "wrongjob") && strcmp(mode, "topk")) {
		fprintf(stderr, "ps_attack: unknown mode %s\n", mode);
		return 2;
	}
	zmq_connect(sock, ep);
	char why[1024];
	int accepted = 0, leaked = 0;
	uint64_t bytes = 0;
	if (good) {
		int ok = attempt(sock, WF_PS_OP_STATS, 0, 0, NULL, 0, WF_PS_DTYPE_NONE, why,
				 sizeof(why), NULL);
		printf("goodkey: stats: %s %s\n", ok ? "ACCEPTED" : "refused", why);
		zmq_close(sock);
		zmq_ctx_term(ctx);
		return ok ? 0 : 1;
	}
	if (!strcmp(mode, "topk")) {
		int rc = topk_attack(sock);
		zmq_close(sock);
		zmq_ctx_term(ctx);
		return rc;
	}
	/* pull chunk 0: the weights */
	int ok = attempt(sock, WF_PS_OP_PULL, 0, 0, NULL, 0, WF_PS_DTYPE_NONE, why, sizeof(why),
			 &bytes);
	printf("%s: pull weights: %s %s\n", mode, ok ? "ACCEPTED" : "refused", why);
	accepted += ok;
	char right[32];
	snprintf(right, sizeof(right), "%" PRIu64, right_job);
	leaked += strstr(why, right) != NULL || strstr(why, argv[3]) != NULL;
	/* push a huge gradient as worker 0 (the size learnt from the pull, else 1024) */
	size_t nf = ok && bytes ? (size_t)bytes / 4 : 1024;
	float *g = malloc(nf * sizeof(float));
	for (size_t i = 0; g && i < nf; i++)
		g[i] = 1e6f;
	ok = g && attempt(sock, WF_PS_OP_PUSH_PULL, 0, 0, g, nf * sizeof(float), WF_PS_DTYPE_F32,
			  why, sizeof(why), NULL);
	printf("%s: push gradient: %s %s\n", mode, ok ? "ACCEPTED" : "refused", why);
	accepted += ok;
	free(g);
	/* a checkpoint written where the attacker says */
	ok = attempt(sock, WF_PS_OP_CHECKPOINT, 0, 7, evil, strlen(evil), WF_PS_DTYPE_BYTES, why,
		     sizeof(why), NULL);
	printf("%s: checkpoint to %s: %s %s\n", mode, evil, ok ? "ACCEPTED" : "refused", why);
	accepted += ok;
	ok = attempt(sock, WF_PS_OP_STATS, 0, 0, NULL, 0, WF_PS_DTYPE_NONE, why, sizeof(why), NULL);
	printf("%s: stats: %s %s\n", mode, ok ? "ACCEPTED" : "refused", why);
	accepted += ok;
	ok = attempt(sock, WF_PS_OP_SHUTDOWN, 0, 0, NULL, 0, WF_PS_DTYPE_NONE, why, sizeof(why),
		     NULL);
	printf("%s: shutdown: %s %s\n", mode, ok ? "ACCEPTED" : "refused", why);
	accepted += ok;
	if (leaked)
		printf("%s: an error reply revealed the job id\n", mode);
	zmq_close(sock);
	zmq_ctx_term(ctx);
	return accepted || leaked ? 1 : 0;
}
