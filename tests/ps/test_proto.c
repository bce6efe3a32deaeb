/* Wire protocol and placement: encode/parse round trips, every kind of
 * malformed message rejected for the right reason, stats JSON, and
 * placement's chunking, balance and determinism. */
#include "tests/test.h"

#include "ps/placement.h"
#include "common/util.h"
#include "ps/proto.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JOB 77

static uint64_t floats4[4] = {256, 256, 100, 0}; /* chunk 3 lives elsewhere */

static wf_ps_limits server_limits(void)
{
	return (wf_ps_limits){.job_id = JOB,
			      .nchunks = 4,
			      .chunk_floats = floats4,
			      .state_floats = 10,
			      .nslots = 1,
			      .nworkers = 2};
}

/* Encode a push of chunk c with n floats from worker 1 into hb. */
static void make_push(wf_ps_hdr *h, uint8_t *hb, const float *g, size_t n, uint32_t c)
{
	memset(h, 0, sizeof(*h));
	h->op = WF_PS_OP_PUSH_PULL;
	h->sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 1);
	h->job_id = JOB;
	h->step = 5;
	h->chunk = c;
	h->dtype = WF_PS_DTYPE_F32;
	h->tag = 1234;
	h->aux = 32;
	const void *f[1] = {g};
	size_t sz[1] = {n * sizeof(float)};
	wf_ps_hdr_encode(h, hb, f, sz, 1);
}

static int parse2(const uint8_t *hb, size_t hsize, const float *g, size_t gbytes, int *reason)
{
	const void *f[2] = {hb, g};
	size_t sz[2] = {hsize, gbytes};
	wf_ps_msg m;
	wf_err e = {0};
	wf_ps_limits lim = server_limits();
	int rc = wf_ps_msg_parse(&m, f, sz, 2, &lim, reason, &e);
	if (rc)
		WF_CHECK(e.msg[0] != '\0');
	return rc;
}

static void test_crc32c_known_value(void)
{
	/* the standard check value of CRC-32C */
	WF_CHECK_INT(wf_ps_crc32c(0, "123456789", 9), 0xe3069283u);
	/* incremental equals one-shot */
	uint32_t a = wf_ps_crc32c(0, "12345", 5);
	WF_CHECK_INT(wf_ps_crc32c(a, "6789", 4), 0xe3069283u);
}

/* Bit-at-a-time CRC-32C: the definition the fast paths must match. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
	uint32_t c = ~crc;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

static void test_crc32c_fast_paths_match_definition(void)
{
	/* lengths around every path's edges (64-byte folds, 256-byte folds,
	 * 3 x 8 KiB crc32 lanes), at odd offsets, with a start value */
	size_t n = 3 * 8192 * 2 + 1000;
	uint8_t *buf = malloc(n + 8), *dst = malloc(n + 8);
	WF_CHECK(buf && dst);
	if (!buf || !dst)
		goto cleanup;
	uint32_t x = 12345;
	for (size_t i = 0; i < n + 8; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
	}
	const size_t lens[] = {0,   1,	 7,   8,   63,	 64,   65,    255,   256,   257,   319,
			       320, 511, 512, 513, 1000, 4096, 24575, 24576, 24577, 50000, n};
	int bad = 0, bad_copy = 0;
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t off = 0; off < 4; off += 3) {
			size_t len = lens[li];
			uint32_t want = crc32c_bitwise(0xdeadbeefu, buf + off, len);
			bad += wf_ps_crc32c(0xdeadbeefu, buf + off, len) != want;
			memset(dst, 0, n + 8);
			uint32_t got = wf_ps_crc32c_copy(0xdeadbeefu, dst + 1, buf + off, len);
			bad_copy += got != want || memcmp(dst + 1, buf + off, len) != 0;
		}
	WF_CHECK_INT(bad, 0);
	WF_CHECK_INT(bad_copy, 0);
cleanup:
	free(buf);
	free(dst);
}

static void test_round_trip(void)
{
	float g[256];
	for (int i = 0; i < 256; i++)
		g[i] = (float)i * 0.5f;
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES];
	make_push(&h, hb, g, 256, 1);
	WF_CHECK(!memcmp(hb, "WEFT", 4));
	const void *f[2] = {hb, g};
	size_t sz[2] = {sizeof(hb), sizeof(g)};
	wf_ps_msg m;
	wf_err e = {0};
	int reason = -1;
	wf_ps_limits lim = server_limits();
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, &e), 0);
	WF_CHECK_INT(m.hdr.op, WF_PS_OP_PUSH_PULL);
	WF_CHECK_INT(m.hdr.step, 5);
	WF_CHECK_INT(m.hdr.chunk, 1);
	WF_CHECK_INT(m.hdr.tag, 1234);
	WF_CHECK_INT(m.hdr.aux, 32);
	WF_CHECK_INT(m.hdr.job_id, JOB);
	WF_CHECK_INT(WF_PS_SENDER_INDEX(m.hdr.sender), 1);
	WF_CHECK_INT(m.nframes, 1);
	WF_CHECK(m.frame[0] == (const void *)g); /* in place, no copy */
	WF_CHECK_INT(m.hdr.payload_bytes, sizeof(g));
}

/* ps.compression bf16: rounding to nearest even (ties, the carry into the
 * exponent, infinities, NaN), and a push whose gradient frame is bf16
 * parses at half the bytes, while an f32-sized frame or a bf16 reply is
 * refused. */
static void test_bf16_push(void)
{
	/* 1 + 2^-8 is a tie: even (1.0); 1 + 3 * 2^-8 rounds up to 1 + 2^-6 */
	float in[6] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f,
		       65504.0f,	  1.0f / 0.0f,	     0.0f / 0.0f};
	uint16_t b[6];
	float out[6];
	wf_ps_bf16_encode(b, in, 6);
	wf_ps_bf16_decode(out, b, 6);
	WF_CHECK(out[0] == 1.0f);
	WF_CHECK(out[1] == 1.0f + 1.0f / 64);
	WF_CHECK(out[2] == -2.5f);
	WF_CHECK(out[3] == 65536.0f);
	WF_CHECK(out[4] == in[4]);
	WF_CHECK(out[5] != out[5]); /* NaN stays NaN */
	uint16_t g[256];
	for (int i = 0; i < 256; i++)
		g[i] = (uint16_t)i;
	wf_ps_hdr h = {.op = WF_PS_OP_PUSH_PULL,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 1),
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = WF_PS_DTYPE_BF16};
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *f[2] = {hb, g};
	size_t sz[2] = {sizeof(hb), sizeof(g)};
	wf_ps_hdr_encode(&h, hb, f + 1, sz + 1, 1);
	wf_ps_msg m;
	wf_err e = {0};
	int reason = -1;
	wf_ps_limits lim = server_limits();
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, &e), 0);
	WF_CHECK_INT(m.hdr.dtype, WF_PS_DTYPE_BF16);
	WF_CHECK_INT(m.size[0], 512);
	/* f32-sized: wrong bytes */
	float g32[256] = {0};
	const void *f32[2] = {hb, g32};
	size_t sz32[2] = {sizeof(hb), sizeof(g32)};
	wf_ps_hdr_encode(&h, hb, f32 + 1, sz32 + 1, 1);
	WF_CHECK(wf_ps_msg_parse(&m, f32, sz32, 2, &lim, &reason, &e) != 0);
	WF_CHECK_INT(reason, WF_PS_REJECT_BYTES);
	/* a reply never carries bf16 */
	wf_ps_limits rl = server_limits();
	rl.is_reply = 1;
	h.flags = WF_PS_FLAG_REPLY;
	wf_ps_hdr_encode(&h, hb, f + 1, sz + 1, 1);
	WF_CHECK(wf_ps_msg_parse(&m, f, sz, 2, &rl, &reason, &e) != 0);
	/* and names outside none, bf16 and topk:F are refused */
	wf_ps_compression c;
	WF_CHECK(wf_ps_compression_parse("gzip", &c, NULL, &e) == WF_EINVAL);
	WF_CHECK(strstr(e.msg, "ps.compression") && strstr(e.msg, "'gzip'"));
	WF_CHECK_INT(wf_ps_compression_parse("bf16", &c, NULL, &e), 0);
	WF_CHECK_INT(c, WF_PS_COMPRESSION_BF16);
}

/* ps.compression topk:F: the fraction is checked, naming the key and the
 * value; a chunk keeps ceil(F n) entries, the largest in magnitude, and
 * what it does not send stays in the residual for the next push (error
 * feedback: over two pushes every entry of a constant gradient arrives,
 * and sent + residual always equals the gradients summed). */
static void test_topk_encode(void)
{
	wf_ps_compression c;
	double f = 0;
	wf_err e = {0};
	WF_CHECK_INT(wf_ps_compression_parse("topk:0.01", &c, &f, &e), 0);
	WF_CHECK_INT(c, WF_PS_COMPRESSION_TOPK);
	WF_CHECK(f == 0.01);
	WF_CHECK(!strcmp(wf_ps_compression_name(c), "topk"));
	const char *bad[] = {"topk:0", "topk:1.5", "topk:", "topk:0.1x", "topk:-1", "topk:nan"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		WF_CHECK(wf_ps_compression_parse(bad[i], &c, &f, &e) == WF_EINVAL);
		WF_CHECK(strstr(e.msg, "ps.compression") && strstr(e.msg, bad[i]));
	}
	WF_CHECK_INT(wf_ps_topk_count(0.01, 100), 1);
	WF_CHECK_INT(wf_ps_topk_count(0.01, 150), 2);
	WF_CHECK_INT(wf_ps_topk_count(0.001, 10), 1);
	WF_CHECK_INT(wf_ps_topk_count(1, 10), 10);

	float g[8] = {0.1f, -5, 0.2f, 3, 0, 0, -0.3f, 0}, resid[8] = {0}, mag[8], dense[8];
	uint8_t out[8 * 8];
	wf_ps_topk_encode(out, 2, resid, g, 8, mag);
	wf_ps_topk_decode(dense, 8, out, 16);
	float want1[8] = {0, -5, 0, 3, 0, 0, 0, 0};
	for (int i = 0; i < 8; i++) {
		WF_CHECK(dense[i] == want1[i]);
		WF_CHECK(resid[i] == g[i] - want1[i]);
	}
	/* the next push of the same gradient: -5 and 3 again (10, 6 > 0.6) */
	wf_ps_topk_encode(out, 2, resid, g, 8, mag);
	wf_ps_topk_decode(dense, 8, out, 16);
	WF_CHECK(dense[1] == -5 && dense[3] == 3);
	WF_CHECK(fabsf(resid[6] - 2 * g[6]) < 1e-6f);
	/* ties: the first k of equal magnitude, indices ascending */
	float t[6] = {1, -1, 1, 1, 0, 0}, r2[6] = {0};
	wf_ps_topk_encode(out, 2, r2, t, 6, mag);
	WF_CHECK_INT(out[0], 0);
	WF_CHECK_INT(out[4], 1);
	WF_CHECK(r2[0] == 0 && r2[1] == 0 && r2[2] == 1 && r2[3] == 1);
	/* a larger chunk: sent + residual is the sum of the gradients */
	enum { N = 1000, K = 10 };
	static float big[N], res[N], sum[N], got[N], m2[N];
	static uint8_t sp[8 * K];
	memset(res, 0, sizeof(res));
	memset(sum, 0, sizeof(sum));
	memset(got, 0, sizeof(got));
	for (int s = 0; s < 5; s++) {
		for (int i = 0; i < N; i++) {
			big[i] = (float)((i * 7919 + s * 104729) % 1000) / 1000.0f - 0.5f;
			sum[i] += big[i];
		}
		wf_ps_topk_encode(sp, K, res, big, N, m2);
		uint32_t last = 0;
		float least = INFINITY, most = 0; /* sent; left in the residual */
		for (int j = 0; j < K; j++) {
			uint32_t i;
			float v;
			memcpy(&i, sp + 4 * j, 4); /* little-endian host */
			memcpy(&v, sp + 4 * (K + j), 4);
			WF_CHECK(i < N && (j == 0 || i > last));
			last = i;
			got[i] += v;
			least = fminf(least, fabsf(v));
		}
		for (int i = 0; i < N; i++)
			most = fmaxf(most, fabsf(res[i]));
		WF_CHECK(least >= most); /* the K largest went */
	}
	for (int i = 0; i < N; i++)
		WF_CHECK(fabsf(got[i] + res[i] - sum[i]) < 1e-4f);
}

/* A topk push parses (at 8 bytes an entry, with the state frame after it);
 * one truncated, with indices out of order, repeated or past the chunk, or
 * with more entries than the chunk has floats is refused with a reason. */
static void test_topk_push(void)
{
	wf_ps_limits lim = server_limits();
	uint32_t chunk_floats = (uint32_t)lim.chunk_floats[0];
	uint8_t sp[8 * 3];
	uint32_t idx[3] = {1, 5, chunk_floats - 1};
	float val[3] = {0.5f, -2, 7};
	memcpy(sp, idx, sizeof(idx)); /* little-endian host */
	memcpy(sp + 12, val, sizeof(val));
	wf_ps_hdr h = {.op = WF_PS_OP_PUSH_PULL,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 1),
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = WF_PS_DTYPE_TOPK};
	uint8_t hb[WF_PS_HEADER_BYTES];
	float state[10] = {0};
	const void *f[3] = {hb, sp, state};
	size_t sz[3] = {sizeof(hb), sizeof(sp), sizeof(state)};
	wf_ps_msg m;
	wf_err e = {0};
	int reason = -1;
	wf_ps_hdr_encode(&h, hb, f + 1, sz + 1, 1);
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, &e), 0);
	WF_CHECK_INT(m.hdr.dtype, WF_PS_DTYPE_TOPK);
	float *dense = calloc(chunk_floats, sizeof(float));
	wf_ps_topk_decode(dense, chunk_floats, m.frame[0], m.size[0]);
	WF_CHECK(dense[0] == 0 && dense[1] == 0.5f && dense[5] == -2 &&
		 dense[chunk_floats - 1] == 7);
	free(dense);
	/* with the state frame (f32) after it */
	h.flags = WF_PS_FLAG_STATE;
	wf_ps_hdr_encode(&h, hb, f + 1, sz + 1, 2);
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 3, &lim, &reason, &e), 0);
	h.flags = 0;
	/* hostile frames */
	struct {
		uint32_t a, b, c;
		size_t bytes;
	} bad[] = {
		{1, 5, 9, 23},		  /* truncated: not a multiple of 8 */
		{1, 5, 9, 0},		  /* empty */
		{5, 1, 9, 24},		  /* out of order */
		{1, 1, 9, 24},		  /* repeated */
		{1, 5, chunk_floats, 24}, /* past the chunk */
		{1, 5, 0xffffffffu, 24},  /* far past it */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint32_t ix[3] = {bad[i].a, bad[i].b, bad[i].c};
		memcpy(sp, ix, sizeof(ix));
		sz[1] = bad[i].bytes;
		wf_ps_hdr_encode(&h, hb, f + 1, sz + 1, 1);
		reason = -1;
		WF_CHECK(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, &e) != 0);
		WF_CHECK_INT(reason, WF_PS_REJECT_BYTES);
		WF_CHECK(strstr(e.msg, "topk") != NULL);
	}
	/* more entries than the chunk holds */
	size_t nb = 8 * ((size_t)chunk_floats + 1);
	uint8_t *many = calloc(nb, 1);
	const void *fm[2] = {hb, many};
	size_t szm[2] = {sizeof(hb), nb};
	wf_ps_hdr_encode(&h, hb, fm + 1, szm + 1, 1);
	WF_CHECK(wf_ps_msg_parse(&m, fm, szm, 2, &lim, &reason, &e) != 0);
	WF_CHECK_INT(reason, WF_PS_REJECT_BYTES);
	free(many);
	/* a reply never carries topk */
	wf_ps_limits rl = server_limits();
	rl.is_reply = 1;
	h.flags = WF_PS_FLAG_REPLY;
	sz[1] = sizeof(sp);
	wf_ps_hdr_encode(&h, hb, f + 1, sz + 1, 1);
	WF_CHECK(wf_ps_msg_parse(&m, f, sz, 2, &rl, &reason, &e) != 0);
}

static void test_rejects_each_fault(void)
{
	float g[257] = {0};
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES], bad[WF_PS_HEADER_BYTES];
	int reason;
	make_push(&h, hb, g, 256, 0);

	memcpy(bad, hb, sizeof(bad));
	bad[0] ^= 0xff;
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_MAGIC);

	WF_CHECK_INT(parse2(hb, 40, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_HEADER);

	wf_ps_hdr v = h;
	v.version = 2;
	const void *f1[1] = {g};
	size_t s1[1] = {1024};
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_VERSION);

	v = h;
	v.job_id = JOB + 1;
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_JOB);

	v = h;
	v.op = 99;
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_OP);

	v = h;
	v.chunk = 9; /* out of range */
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_CHUNK);
	v.chunk = 3; /* held by another server */
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_CHUNK);

	v = h;
	v.sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 5); /* only 2 workers */
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_SENDER);

	/* a frame one float longer than the chunk, with a consistent header */
	size_t s2[1] = {1028};
	wf_ps_hdr_encode(&v, bad, f1, s2, 1);
	v = h;
	wf_ps_hdr_encode(&v, bad, f1, s2, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1028, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_BYTES);
	/* header byte count disagrees with the frames (truncated payload) */
	WF_CHECK_INT(parse2(hb, 64, g, 1024 - 4, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_BYTES);

	v = h;
	v.dtype = WF_PS_DTYPE_BYTES;
	wf_ps_hdr_encode(&v, bad, f1, s1, 1);
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_DTYPE);

	float g2[256] = {0};
	g2[7] = 1.0f; /* payload changed after the checksum */
	WF_CHECK_INT(parse2(hb, 64, g2, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_CHECKSUM);
	memcpy(bad, hb, sizeof(bad));
	bad[24] ^= 1; /* step changed after the checksum */
	WF_CHECK_INT(parse2(bad, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_CHECKSUM);

	/* extra frames: a second payload frame without the state flag */
	const void *f3[3] = {hb, g, g};
	size_t s3[3] = {64, 1024, 1024};
	const void *fe[2] = {g, g};
	size_t se[2] = {1024, 1024};
	v = h;
	wf_ps_hdr_encode(&v, bad, fe, se, 2);
	f3[0] = bad;
	wf_ps_msg m;
	wf_ps_limits lim = server_limits();
	WF_CHECK_INT(wf_ps_msg_parse(&m, f3, s3, 3, &lim, &reason, NULL), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_FRAMES);
	/* far too many frames */
	const void *f9[9] = {hb, g, g, g, g, g, g, g, g};
	size_t s9[9] = {64, 4, 4, 4, 4, 4, 4, 4, 4};
	WF_CHECK_INT(wf_ps_msg_parse(&m, f9, s9, 9, &lim, &reason, NULL), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_FRAMES);
	/* no frames */
	WF_CHECK_INT(wf_ps_msg_parse(&m, f9, s9, 0, &lim, &reason, NULL), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_FRAMES);
}

/* A header has one encoding: bytes 38-39 (after dtype) are reserved zero,
 * even under a matching checksum (found by fuzz_ps_msg). */
static void test_rejects_nonzero_reserved_bytes(void)
{
	float g[257] = {0};
	wf_ps_hdr h;
	uint8_t hb[WF_PS_HEADER_BYTES];
	int reason;
	make_push(&h, hb, g, 256, 0);
	hb[38] = 5;
	memset(hb + 56, 0, 4);
	const void *f[1] = {g};
	size_t sz[1] = {256 * sizeof(float)};
	uint32_t c = wf_ps_crc32c(wf_ps_payload_crc(f, sz, 1), hb, sizeof(hb));
	for (int i = 0; i < 4; i++)
		hb[56 + i] = (uint8_t)(c >> (8 * i));
	WF_CHECK_INT(parse2(hb, 64, g, 1024, &reason), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_HEADER);
}

static void test_state_and_replies(void)
{
	float g[256] = {0}, st[10] = {1, 2, 3};
	wf_ps_hdr h = {.op = WF_PS_OP_PUSH_PULL,
		       .flags = WF_PS_FLAG_STATE,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 0),
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = WF_PS_DTYPE_F32};
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *pf[2] = {g, st};
	size_t ps[2] = {1024, 40};
	wf_ps_hdr_encode(&h, hb, pf, ps, 2);
	const void *f[3] = {hb, g, st};
	size_t sz[3] = {64, 1024, 40};
	wf_ps_msg m;
	int reason;
	wf_ps_limits lim = server_limits();
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 3, &lim, &reason, NULL), 0);
	WF_CHECK_INT(m.nframes, 2);
	/* a request must not carry the reply flag */
	h.flags = WF_PS_FLAG_REPLY;
	wf_ps_hdr_encode(&h, hb, pf, ps, 1);
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, NULL), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_OP);
	/* an error reply parses on the client side */
	lim.is_reply = 1;
	const char *text = "boom";
	wf_ps_hdr e = {.op = WF_PS_OP_PULL,
		       .flags = WF_PS_FLAG_REPLY | WF_PS_FLAG_ERROR,
		       .job_id = JOB,
		       .dtype = WF_PS_DTYPE_BYTES,
		       .aux = (uint32_t)(-WF_EINVAL)};
	const void *tf[1] = {text};
	size_t ts[1] = {4};
	wf_ps_hdr_encode(&e, hb, tf, ts, 1);
	const void *rf[2] = {hb, text};
	size_t rs[2] = {64, 4};
	WF_CHECK_INT(wf_ps_msg_parse(&m, rf, rs, 2, &lim, &reason, NULL), 0);
	WF_CHECK_INT(-(int)m.hdr.aux, WF_EINVAL);
}

/* A push naming its chunk's frozen ranges (model.freeze): valid pairs parse;
 * pairs out of order, overlapping, past the chunk, empty or odd-sized are
 * refused; the flag is refused on other ops. */
static void test_frozen_ranges(void)
{
	float g[256] = {0};
	uint8_t r[48];
	struct {
		uint64_t pairs[6];
		size_t bytes;
		int ok;
	} cases[] = {
		{{0, 10, 20, 256}, 32, 1}, {{5, 6}, 16, 1},
		{{20, 30, 10, 15}, 32, 0}, /* out of order */
		{{0, 20, 10, 30}, 32, 0},  /* overlapping */
		{{0, 257}, 16, 0},	   /* past the chunk */
		{{7, 7}, 16, 0},	   /* empty */
		{{0, 10}, 8, 0},	   /* half a pair */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (int k = 0; k < 6; k++)
			wf_ps_put_u64(r + 8 * k, cases[i].pairs[k]);
		wf_ps_hdr h = {.op = WF_PS_OP_PUSH_PULL,
			       .flags = WF_PS_FLAG_FROZEN,
			       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 0),
			       .job_id = JOB,
			       .chunk = 0,
			       .dtype = WF_PS_DTYPE_F32};
		uint8_t hb[WF_PS_HEADER_BYTES];
		const void *pf[2] = {g, r};
		size_t ps[2] = {1024, cases[i].bytes};
		wf_ps_hdr_encode(&h, hb, pf, ps, 2);
		const void *f[3] = {hb, g, r};
		size_t sz[3] = {64, 1024, cases[i].bytes};
		wf_ps_msg m;
		int reason = -1;
		wf_ps_limits lim = server_limits();
		int rc = wf_ps_msg_parse(&m, f, sz, 3, &lim, &reason, NULL);
		WF_CHECK_MSG(rc == (cases[i].ok ? 0 : WF_EFORMAT), "case %zu: rc %d", i, rc);
		if (!cases[i].ok)
			WF_CHECK_INT(reason, WF_PS_REJECT_BYTES);
		else
			WF_CHECK_INT(m.nframes, 2);
	}
	/* the flag belongs to push_pull only */
	wf_ps_hdr h = {.op = WF_PS_OP_PULL,
		       .flags = WF_PS_FLAG_FROZEN,
		       .sender = WF_PS_SENDER(WF_PS_ROLE_WORKER, 0),
		       .job_id = JOB,
		       .chunk = 0};
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr_encode(&h, hb, NULL, NULL, 0);
	const void *f[1] = {hb};
	size_t sz[1] = {64};
	wf_ps_msg m;
	int reason = -1;
	wf_ps_limits lim = server_limits();
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 1, &lim, &reason, NULL), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_OP);
}

/* A units frame (op units, or flag units on a server's replicate/init) for
 * the 2 workers of server_limits: header, 2 units, 2 applied steps, Q queued,
 * E epochs applied and re-queued. */
static int parse_units(uint16_t op, uint32_t flags, int role, const int64_t *v, size_t n,
		       int *reason)
{
	uint8_t uf[8 * 32];
	float g[256] = {0};
	for (size_t i = 0; i < n; i++)
		wf_ps_put_u64(uf + 8 * i, (uint64_t)v[i]);
	wf_ps_hdr h = {.op = op,
		       .flags = flags,
		       .sender = WF_PS_SENDER(role, 1),
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = op == WF_PS_OP_UNITS ? WF_PS_DTYPE_BYTES : WF_PS_DTYPE_F32};
	const void *pf[2] = {g, uf};
	size_t ps[2] = {1024, 8 * n};
	int np = op == WF_PS_OP_UNITS ? 1 : 2;
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr_encode(&h, hb, pf + 2 - np, ps + 2 - np, np);
	const void *f[3] = {hb, pf[2 - np], pf[1]};
	size_t sz[3] = {64, ps[2 - np], ps[1]};
	wf_ps_msg m;
	wf_ps_limits lim = server_limits();
	*reason = -1;
	return wf_ps_msg_parse(&m, f, sz, np + 1, &lim, reason, NULL);
}

static void test_units_frame(void)
{
	int r;
	int64_t ok[] = {30, 12, 2, 1, 1, 8, -1, 4, -1, 11, 5, 2};
	size_t n = sizeof(ok) / sizeof(ok[0]);
	WF_CHECK_INT(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, ok, n, &r), 0);
	WF_CHECK_INT(
		parse_units(WF_PS_OP_REPLICATE, WF_PS_FLAG_UNITS, WF_PS_ROLE_SERVER, ok, n, &r), 0);
	WF_CHECK_INT(parse_units(WF_PS_OP_INIT, WF_PS_FLAG_UNITS, WF_PS_ROLE_SERVER, ok, n, &r), 0);
	/* only servers send units; only replicate and init carry the flag */
	WF_CHECK_INT(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_WORKER, ok, n, &r), WF_EFORMAT);
	WF_CHECK_INT(r, WF_PS_REJECT_SENDER);
	WF_CHECK_INT(parse_units(WF_PS_OP_REPLICATE, WF_PS_FLAG_UNITS, WF_PS_ROLE_CHIEF, ok, n, &r),
		     WF_EFORMAT);
	WF_CHECK_INT(
		parse_units(WF_PS_OP_PUSH_PULL, WF_PS_FLAG_UNITS, WF_PS_ROLE_SERVER, ok, n, &r),
		WF_EFORMAT);
	WF_CHECK_INT(r, WF_PS_REJECT_OP);
	struct {
		int at;
		int64_t v;
	} bad[] = {
		{2, 3},	       /* workers: not this job's 2 */
		{3, 2},	       /* two queued, one sent: sizes do not add up */
		{3, 1L << 30}, /* a queue past the limit */
		{4, -1},       /* negative epochs */
		{0, -5},       /* negative units per epoch */
		{5, -2},       /* a current unit below -1 */
		{9, -1},       /* a queued unit below 0 */
		{10, -3},      /* a negative count */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t v[12];
		memcpy(v, ok, sizeof(v));
		v[bad[i].at] = bad[i].v;
		WF_CHECK_MSG(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, v, n, &r) ==
					     WF_EFORMAT &&
				     r == WF_PS_REJECT_BYTES,
			     "case %zu", i);
	}
	WF_CHECK_INT(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, ok, n - 1, &r), WF_EFORMAT);
	WF_CHECK_INT(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, ok, 4, &r), WF_EFORMAT);
	/* elastic_batch global's tail: dealt, the 2 lists' lengths (2 and 0),
	 * worker 0's second unit */
	int64_t t[17];
	memcpy(t, ok, sizeof(ok));
	int64_t tail[] = {1, 2, 0, 9};
	memcpy(t + n, tail, sizeof(tail));
	WF_CHECK_INT(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, t, n + 4, &r), 0);
	WF_CHECK_INT(
		parse_units(WF_PS_OP_REPLICATE, WF_PS_FLAG_UNITS, WF_PS_ROLE_SERVER, t, n + 4, &r),
		0);
	struct {
		int at;
		int64_t v;
	} badt[] = {
		{0, 2},	   /* dealt neither 0 nor 1 */
		{1, 3},	   /* a length the units do not fill */
		{2, -1},   /* a negative length */
		{1, 5000}, /* a list past the limit */
		{3, -4},   /* a negative unit */
	};
	for (size_t i = 0; i < sizeof(badt) / sizeof(badt[0]); i++) {
		int64_t v[17];
		memcpy(v, t, sizeof(v));
		v[n + (size_t)badt[i].at] = badt[i].v;
		WF_CHECK_MSG(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, v, n + 4, &r) ==
					     WF_EFORMAT &&
				     r == WF_PS_REJECT_BYTES,
			     "tail case %zu", i);
	}
	WF_CHECK_INT(parse_units(WF_PS_OP_UNITS, 0, WF_PS_ROLE_SERVER, t, n + 2, &r), WF_EFORMAT);
}

/* A reply's unit list (elastic_batch global): flag UNITS, the last frame,
 * on a chunk's push_pull or pull reply only. */
static int parse_list_reply(uint16_t op, uint32_t flags, const int64_t *v, size_t n, int *reason)
{
	uint8_t uf[8 * 8];
	float g[256] = {0};
	for (size_t i = 0; i < n; i++)
		wf_ps_put_u64(uf + 8 * i, (uint64_t)v[i]);
	wf_ps_hdr h = {.op = op,
		       .flags = WF_PS_FLAG_REPLY | flags,
		       .sender = WF_PS_SENDER(0, 0),
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = WF_PS_DTYPE_F32};
	const void *pf[2] = {g, uf};
	size_t ps[2] = {1024, 8 * n};
	uint8_t hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr_encode(&h, hb, pf, ps, 2);
	const void *f[3] = {hb, g, uf};
	size_t sz[3] = {64, 1024, 8 * n};
	wf_ps_msg m;
	wf_ps_limits lim = server_limits();
	lim.is_reply = 1;
	*reason = -1;
	int rc = wf_ps_msg_parse(&m, f, sz, 3, &lim, reason, NULL);
	if (rc == 0 && (m.nframes != 2 || m.size[1] != 8 * n))
		return WF_EINTERNAL;
	return rc;
}

static void test_unit_list_reply(void)
{
	int r;
	int64_t ok[] = {12, 13, 7};
	WF_CHECK_INT(parse_list_reply(WF_PS_OP_PUSH_PULL, WF_PS_FLAG_UNITS, ok, 3, &r), 0);
	WF_CHECK_INT(parse_list_reply(WF_PS_OP_PULL, WF_PS_FLAG_UNITS, ok, 1, &r), 0);
	/* without the flag the frame is one too many */
	WF_CHECK_INT(parse_list_reply(WF_PS_OP_PULL, 0, ok, 3, &r), WF_EFORMAT);
	WF_CHECK_INT(r, WF_PS_REJECT_FRAMES);
	/* an empty list, a negative unit */
	WF_CHECK_INT(parse_list_reply(WF_PS_OP_PUSH_PULL, WF_PS_FLAG_UNITS, ok, 0, &r), WF_EFORMAT);
	WF_CHECK_INT(r, WF_PS_REJECT_BYTES);
	int64_t neg[] = {4, -1};
	WF_CHECK_INT(parse_list_reply(WF_PS_OP_PUSH_PULL, WF_PS_FLAG_UNITS, neg, 2, &r),
		     WF_EFORMAT);
	WF_CHECK_INT(r, WF_PS_REJECT_BYTES);
	/* only a chunk's push_pull or pull reply carries one */
	WF_CHECK_INT(parse_list_reply(WF_PS_OP_REPLICATE, WF_PS_FLAG_UNITS, ok, 3, &r), WF_EFORMAT);
	WF_CHECK_INT(r, WF_PS_REJECT_OP);
}

static void test_deferred_checksum_catches_corruption(void)
{
	/* a pull reply whose values are verified while being copied out */
	float v[256], out[256];
	for (int i = 0; i < 256; i++)
		v[i] = (float)i - 7.5f;
	wf_ps_hdr h = {.op = WF_PS_OP_PULL,
		       .flags = WF_PS_FLAG_REPLY,
		       .job_id = JOB,
		       .chunk = 0,
		       .dtype = WF_PS_DTYPE_F32};
	uint8_t hb[WF_PS_HEADER_BYTES];
	const void *pf[1] = {v};
	size_t ps[1] = {sizeof(v)};
	wf_ps_hdr_encode(&h, hb, pf, ps, 1);
	const void *f[2] = {hb, v};
	size_t sz[2] = {64, sizeof(v)};
	wf_ps_limits lim = server_limits();
	lim.is_reply = 1;
	lim.defer_checksum = 1;
	wf_ps_msg m;
	int reason;
	wf_err e = {0};
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, NULL), 0);
	WF_CHECK(m.deferred);
	uint32_t crc = wf_ps_crc32c_copy(0, out, m.frame[0], m.size[0]);
	WF_CHECK_INT(wf_ps_msg_verify(&m, crc, &e), 0);
	WF_CHECK(!memcmp(out, v, sizeof(v)));
	v[100] = 1e9f; /* a flipped payload passes the parse, fails the verify */
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, NULL), 0);
	crc = wf_ps_crc32c_copy(0, out, m.frame[0], m.size[0]);
	WF_CHECK_INT(wf_ps_msg_verify(&m, crc, &e), WF_EFORMAT);
	WF_CHECK(strstr(e.msg, "checksum") != NULL);
	/* without deferring, the parse itself rejects it */
	lim.defer_checksum = 0;
	WF_CHECK_INT(wf_ps_msg_parse(&m, f, sz, 2, &lim, &reason, NULL), WF_EFORMAT);
	WF_CHECK_INT(reason, WF_PS_REJECT_CHECKSUM);
}

static void test_stats_json_round_trip(void)
{
	long steps[2] = {4, -1};
	int alive[2] = {1, 0};
	wf_ps_stats s = {.server = 1,
			 .nservers = 2,
			 .uptime = 2.0,
			 .pushes = 10,
			 .pulls = 4,
			 .bytes_in = 1000,
			 .bytes_out = 2000,
			 .held = 3,
			 .version_min = 4,
			 .version_max = 5,
			 .nworkers = 2,
			 .worker_step = steps,
			 .worker_alive = alive};
	s.rejected[WF_PS_REJECT_CHECKSUM] = 2;
	char *json = NULL;
	WF_CHECK_INT(wf_ps_stats_to_json(&s, &json, NULL), 0);
	wf_ps_stats t;
	WF_CHECK_INT(wf_ps_stats_from_json(&t, json, strlen(json), NULL), 0);
	WF_CHECK_INT(t.pushes, 10);
	WF_CHECK_NEAR(t.push_rate, 5.0, 1e-9);
	WF_CHECK_INT(t.held, 3);
	WF_CHECK_INT(t.nworkers, 2);
	WF_CHECK_INT(t.worker_step[0], 4);
	WF_CHECK_INT(t.worker_alive[1], 0);
	WF_CHECK_INT(t.rejected[WF_PS_REJECT_CHECKSUM], 2);
	char line[1024];
	wf_ps_stats_format(&t, line, sizeof(line));
	WF_CHECK_MSG(strstr(line, "checksum=2") && strstr(line, "1:-1(dead)"), "%s", line);
	wf_ps_stats_free(&t);
	free(json);
	WF_CHECK_INT(wf_ps_stats_from_json(&t, "[1,2", 4, NULL), WF_EFORMAT);
}

/* ---- placement ---- */

static void make_views(wf_view *v, const size_t *counts, int n, size_t *total)
{
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		memset(&v[i], 0, sizeof(v[i]));
		snprintf(v[i].name, sizeof(v[i].name), "layer%d/kernel", i);
		v[i].trainable = 1;
		v[i].offset = off;
		v[i].count = counts[i];
		off += counts[i];
	}
	*total = off;
}

static void test_placement_respects_views(void)
{
	size_t counts[] = {100, 900, 50, 50, 5000, 10, 1024, 3, 700, 400};
	int nv = (int)WF_ARRAY_LEN(counts);
	wf_view v[16];
	size_t total;
	make_views(v, counts, nv, &total);
	wf_ps_placement p;
	WF_CHECK_INT(wf_ps_place(&p, v, nv, total, 3, 4096, NULL), 0);
	size_t pos = 0, maxc = 0;
	for (int i = 0; i < p.nchunks; i++) {
		WF_CHECK_INT(p.chunks[i].offset, pos);
		WF_CHECK(p.chunks[i].count <= 1024 && p.chunks[i].count > 0);
		WF_CHECK(p.chunks[i].server >= 0 && p.chunks[i].server < 3);
		pos += p.chunks[i].count;
		maxc = WF_MAX(maxc, p.chunks[i].count);
	}
	WF_CHECK_INT(pos, total);
	/* no view that fits in a chunk is split: each lies inside one chunk */
	for (int k = 0; k < nv; k++) {
		if (v[k].count > 1024)
			continue;
		int inside = 0;
		for (int i = 0; i < p.nchunks; i++)
			inside +=
				p.chunks[i].offset <= v[k].offset &&
				v[k].offset + v[k].count <= p.chunks[i].offset + p.chunks[i].count;
		WF_CHECK_MSG(inside == 1, "view %d split", k);
	}
	/* balance: loads differ by at most one chunk */
	size_t lo = p.load[0], hi = p.load[0], sum = 0;
	for (int s = 0; s < 3; s++) {
		lo = WF_MIN(lo, p.load[s]);
		hi = WF_MAX(hi, p.load[s]);
		sum += p.load[s];
	}
	WF_CHECK_INT(sum, total);
	WF_CHECK_MSG(hi - lo <= maxc, "loads %zu..%zu", lo, hi);
	/* deterministic */
	wf_ps_placement q;
	WF_CHECK_INT(wf_ps_place(&q, v, nv, total, 3, 4096, NULL), 0);
	WF_CHECK_INT(q.nchunks, p.nchunks);
	int same = q.nchunks == p.nchunks;
	for (int i = 0; same && i < p.nchunks; i++) /* field by field: the struct has padding */
		same = q.chunks[i].offset == p.chunks[i].offset &&
		       q.chunks[i].count == p.chunks[i].count &&
		       q.chunks[i].server == p.chunks[i].server;
	WF_CHECK(same);
	wf_ps_placement_free(&p);
	wf_ps_placement_free(&q);
}

static void test_placement_balance_many_servers(void)
{
	wf_ps_placement p;
	size_t n = 25ul << 20; /* 100 MB of floats */
	for (int ns = 1; ns <= 8; ns++) {
		WF_CHECK_INT(wf_ps_place(&p, NULL, 0, n, ns, 0, NULL), 0);
		WF_CHECK_INT(p.nchunks, 25);
		size_t lo = p.load[0], hi = p.load[0];
		for (int s = 0; s < ns; s++) {
			lo = WF_MIN(lo, p.load[s]);
			hi = WF_MAX(hi, p.load[s]);
		}
		WF_CHECK(hi - lo <= (1u << 20));
		wf_ps_placement_free(&p);
	}
}

static void test_placement_bad_input(void)
{
	wf_ps_placement p;
	wf_err e = {0};
	WF_CHECK_INT(wf_ps_place(&p, NULL, 0, 100, 0, 0, &e), WF_EINVAL);
	WF_CHECK(strstr(e.msg, "0 parameter servers") != NULL);
	WF_CHECK_INT(wf_ps_place(&p, NULL, 0, 0, 1, 0, &e), WF_EINVAL);
	wf_view v[2];
	size_t counts[] = {10, 10};
	size_t total;
	make_views(v, counts, 2, &total);
	v[1].offset = 5; /* overlaps */
	WF_CHECK_INT(wf_ps_place(&p, v, 2, total, 1, 0, &e), WF_EINVAL);
	WF_CHECK(strstr(e.msg, "layer1/kernel") != NULL);
}

int main(void)
{
	WF_RUN(test_crc32c_known_value);
	WF_RUN(test_crc32c_fast_paths_match_definition);
	WF_RUN(test_deferred_checksum_catches_corruption);
	WF_RUN(test_round_trip);
	WF_RUN(test_bf16_push);
	WF_RUN(test_topk_encode);
	WF_RUN(test_topk_push);
	WF_RUN(test_rejects_each_fault);
	WF_RUN(test_rejects_nonzero_reserved_bytes);
	WF_RUN(test_state_and_replies);
	WF_RUN(test_frozen_ranges);
	WF_RUN(test_units_frame);
	WF_RUN(test_unit_list_reply);
	WF_RUN(test_stats_json_round_trip);
	WF_RUN(test_placement_respects_views);
	WF_RUN(test_placement_balance_many_servers);
	WF_RUN(test_placement_bad_input);
	return wf_test_summary();
}
