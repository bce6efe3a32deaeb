/* proto.c: header encoding, CRC32C, message validation, stats JSON. */
#include "ps/proto.h"

#include "common/crc32c.h"

#include <errno.h>
#include <jansson.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ------------------------------------------------------------ */

static const char *const op_names[WF_PS_OP__COUNT] = {
	[0] = "none",
	[WF_PS_OP_REGISTER] = "register",
	[WF_PS_OP_INIT] = "init",
	[WF_PS_OP_PUSH_PULL] = "push_pull",
	[WF_PS_OP_PULL] = "pull",
	[WF_PS_OP_BARRIER] = "barrier",
	[WF_PS_OP_CHECKPOINT] = "checkpoint",
	[WF_PS_OP_RESTORE] = "restore",
	[WF_PS_OP_STATS] = "stats",
	[WF_PS_OP_SHUTDOWN] = "shutdown",
	[WF_PS_OP_HEARTBEAT] = "heartbeat",
	[WF_PS_OP_REPLICATE] = "replicate",
	[WF_PS_OP_JOIN] = "join",
	[WF_PS_OP_LEAVE] = "leave",
	[WF_PS_OP_UNITS] = "units",
	[WF_PS_OP_HANDOFF] = "handoff",
};

static const char *const reject_names[WF_PS_REJECT__COUNT] = {
	[WF_PS_REJECT_FRAMES] = "frames",
	[WF_PS_REJECT_HEADER] = "header",
	[WF_PS_REJECT_MAGIC] = "magic",
	[WF_PS_REJECT_VERSION] = "version",
	[WF_PS_REJECT_OP] = "op",
	[WF_PS_REJECT_JOB] = "job",
	[WF_PS_REJECT_SENDER] = "sender",
	[WF_PS_REJECT_CHUNK] = "chunk",
	[WF_PS_REJECT_BYTES] = "bytes",
	[WF_PS_REJECT_DTYPE] = "dtype",
	[WF_PS_REJECT_CHECKSUM] = "checksum",
	[WF_PS_REJECT_STATE] = "state",
};

const char *wf_ps_op_name(int op)
{
	if (op <= 0 || op >= WF_PS_OP__COUNT)
		return "unknown";
	return op_names[op];
}

const char *wf_ps_reject_name(int reason)
{
	if (reason < 0 || reason >= WF_PS_REJECT__COUNT)
		return "unknown";
	return reject_names[reason];
}

const char *wf_ps_mode_str(wf_ps_mode mode, int staleness, char *buf, size_t n)
{
	if (mode == WF_PS_MODE_SSP)
		snprintf(buf, n, "ssp:%d", staleness);
	else
		snprintf(buf, n, "%s", mode == WF_PS_MODE_ASYNC ? "async" : "sync");
	return buf;
}

/* ---- gradient compression ------------------------------------------------ */

int wf_ps_compression_parse(const char *name, wf_ps_compression *out, double *topk, wf_err *err)
{
	double f = 0;
	if (name && !strcmp(name, "none")) {
		*out = WF_PS_COMPRESSION_NONE;
	} else if (name && !strcmp(name, "bf16")) {
		*out = WF_PS_COMPRESSION_BF16;
	} else if (name && !strncmp(name, "topk:", 5)) {
		char *end;
		errno = 0;
		f = strtod(name + 5, &end);
		if (end == name + 5 || *end || errno || !(f > 0 && f <= 1))
			return wf_errf(err, WF_EINVAL,
				       "ps.compression: '%s': topk:F needs a fraction F with 0 < F "
				       "<= 1 (topk:0.01 pushes the largest 1%% of each chunk)",
				       name);
		*out = WF_PS_COMPRESSION_TOPK;
	} else {
		return wf_errf(err, WF_EINVAL, "ps.compression: expected %s, got '%s'",
			       WF_PS_COMPRESSIONS, name ? name : "");
	}
	if (topk)
		*topk = f;
	return 0;
}

const char *wf_ps_compression_name(wf_ps_compression c)
{
	return c == WF_PS_COMPRESSION_BF16 ? "bf16" : c == WF_PS_COMPRESSION_TOPK ? "topk" : "none";
}

void wf_ps_bf16_encode(uint16_t *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &src[i], 4);
		if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
			dst[i] = (uint16_t)((u >> 16) | 0x40);
		else /* round to nearest, ties to even */
			dst[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
	}
}

void wf_ps_bf16_decode(float *dst, const void *src, size_t n)
{
	const uint8_t *p = src; /* little-endian, at any alignment */
	for (size_t i = 0; i < n; i++) {
		uint32_t u = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
		memcpy(&dst[i], &u, 4);
	}
}

/* ---- CRC32C (common/crc32c) --------------------------------------------- */

uint32_t wf_ps_crc32c(uint32_t crc, const void *data, size_t n)
{
	return wf_crc32c_update(crc, data, n);
}

uint32_t wf_ps_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n)
{
	return wf_crc32c_copy(crc, dst, src, n);
}

/* ---- header ------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void hdr_write(const wf_ps_hdr *h, uint8_t *out, uint32_t checksum)
{
	memset(out, 0, WF_PS_HEADER_BYTES);
	put32(out + 0, WF_PS_MAGIC);
	put16(out + 4, h->version);
	put16(out + 6, h->op);
	put32(out + 8, h->flags);
	put32(out + 12, h->sender);
	put64(out + 16, h->job_id);
	put64(out + 24, (uint64_t)h->step);
	put32(out + 32, h->chunk);
	put16(out + 36, h->dtype);
	put64(out + 40, h->payload_bytes);
	put32(out + 48, h->tag);
	put32(out + 52, h->nframes);
	put32(out + 56, checksum);
	put32(out + 60, h->aux);
}

uint32_t wf_ps_payload_crc(const void *const *frames, const size_t *sizes, int nframes)
{
	uint32_t crc = 0;
	for (int i = 0; i < nframes; i++)
		crc = wf_ps_crc32c(crc, frames[i], sizes[i]);
	return crc;
}

/* The message checksum: the payload CRC continued over the header bytes
 * with the checksum field zeroed. */
static uint32_t hdr_checksum(const uint8_t *hdr, uint32_t payload_crc)
{
	uint8_t tmp[WF_PS_HEADER_BYTES];
	memcpy(tmp, hdr, sizeof(tmp));
	memset(tmp + 56, 0, 4);
	return wf_ps_crc32c(payload_crc, tmp, sizeof(tmp));
}

void wf_ps_hdr_encode_crc(wf_ps_hdr *h, uint8_t out[WF_PS_HEADER_BYTES], uint32_t payload_crc,
			  uint64_t payload_bytes, int nframes)
{
	if (!h->version)
		h->version = WF_PS_VERSION;
	h->payload_bytes = payload_bytes;
	h->nframes = (uint32_t)nframes;
	hdr_write(h, out, 0);
	h->checksum = hdr_checksum(out, payload_crc);
	put32(out + 56, h->checksum);
}

void wf_ps_hdr_encode(wf_ps_hdr *h, uint8_t out[WF_PS_HEADER_BYTES], const void *const *frames,
		      const size_t *sizes, int nframes)
{
	uint64_t total = 0;
	for (int i = 0; i < nframes; i++)
		total += sizes[i];
	wf_ps_hdr_encode_crc(h, out, wf_ps_payload_crc(frames, sizes, nframes), total, nframes);
}

void wf_ps_hdr_decode(wf_ps_hdr *h, const uint8_t in[WF_PS_HEADER_BYTES])
{
	h->version = get16(in + 4);
	h->op = get16(in + 6);
	h->flags = get32(in + 8);
	h->sender = get32(in + 12);
	h->job_id = get64(in + 16);
	h->step = (int64_t)get64(in + 24);
	h->chunk = get32(in + 32);
	h->dtype = get16(in + 36);
	h->payload_bytes = get64(in + 40);
	h->tag = get32(in + 48);
	h->nframes = get32(in + 52);
	h->checksum = get32(in + 56);
	h->aux = get32(in + 60);
}

/* ---- top-k pushes -------------------------------------------------------- */

size_t wf_ps_topk_count(double topk, size_t n)
{
	if (!n)
		return 0;
	double k = ceil(topk * (double)n - 1e-9); /* 0.01 x 100 is 1, not 2 */
	return k < 1 ? 1 : k >= (double)n ? n : (size_t)k;
}

/* |x|, NaN as the largest (a NaN gradient is sent, as uncompressed). */
static float magnitude(float x)
{
	return isnan(x) ? INFINITY : fabsf(x);
}

static float med3(float x, float y, float z)
{
	float lo = x < y ? x : y, hi = x < y ? y : x;
	return z < lo ? lo : z > hi ? hi : z;
}

/* The value at rank r (ascending) of a[0..n) (no NaN), reordering a: a
 * three-way quickselect, so a chunk of many equal entries (zeros) stays
 * linear. */
static float select_rank(float *a, size_t n, size_t r)
{
	size_t lo = 0, hi = n; /* rank r lies in a[lo..hi) */
	while (hi - lo > 1) {
		float p = med3(a[lo], a[lo + (hi - lo) / 2], a[hi - 1]), t;
		size_t lt = lo, i = lo, gt = hi;
		while (i < gt) {
			if (a[i] < p) {
				t = a[i], a[i++] = a[lt], a[lt++] = t;
			} else if (a[i] > p) {
				t = a[i], a[i] = a[--gt], a[gt] = t;
			} else {
				i++;
			}
		}
		if (r < lt)
			hi = lt;
		else if (r >= gt)
			lo = gt;
		else
			return p;
	}
	return a[lo];
}

void wf_ps_topk_encode(uint8_t *out, size_t k, float *resid, const float *grad, size_t n,
		       float *mag)
{
	for (size_t i = 0; i < n; i++) {
		resid[i] += grad[i];
		mag[i] = magnitude(resid[i]);
	}
	float t = select_rank(mag, n, n - k); /* the k-th largest magnitude */
	size_t above = 0, j = 0;
	for (size_t i = 0; i < n; i++)
		above += magnitude(resid[i]) > t;
	size_t ties = k - above; /* entries equal to t that go too: the first ones */
	for (size_t i = 0; i < n && j < k; i++) {
		float m = magnitude(resid[i]);
		if (m < t || (m == t && !ties))
			continue;
		if (m == t)
			ties--;
		uint32_t bits;
		memcpy(&bits, &resid[i], 4);
		put32(out + 4 * j, (uint32_t)i);
		put32(out + 4 * (k + j), bits);
		resid[i] = 0;
		j++;
	}
}

void wf_ps_topk_decode(float *dst, size_t n, const void *src, size_t bytes)
{
	const uint8_t *p = src;
	size_t k = bytes / 8;
	memset(dst, 0, n * sizeof(*dst));
	for (size_t j = 0; j < k; j++) {
		uint32_t i = get32(p + 4 * j), bits = get32(p + 4 * (k + j));
		if (i < n) /* the parser checked it; never write outside dst */
			memcpy(&dst[i], &bits, 4);
	}
}

/* ---- validation --------------------------------------------------------- */

#define REJECT(r, ...)                                                                             \
	do {                                                                                       \
		*reason = (r);                                                                     \
		return wf_errf(err, WF_EFORMAT, __VA_ARGS__);                                      \
	} while (0)

/* Expected payload shape of a message: frame counts, dtype and per-frame sizes. */
typedef struct shape {
	int min_frames, max_frames;
	int dtype;
	uint64_t frame_bytes[WF_PS_MAX_FRAMES]; /* 0 = any size up to max_text */
	int chunk_op;				/* chunk field must name a chunk */
	int ranges_frame;			/* index of the frozen frame, or -1 */
	int topk_frame;				/* index of a topk gradient frame, or -1 */
	int allow_state_chunk;
	int units_frame; /* the frame with the data units: -1 none, -2 the last */
	int list_frame;	 /* a reply's frame of a worker's unit numbers, or -1 */
	int fault;	 /* reason when the shape is invalid */
	const char *why;
} shape;

/* Floats of chunk c as seen by this receiver, 0 when not held. */
static uint64_t chunk_floats_of(const wf_ps_limits *lim, uint32_t c)
{
	if (c == WF_PS_STATE_CHUNK)
		return lim->state_floats;
	if (c >= lim->nchunks || !lim->chunk_floats)
		return 0;
	return lim->chunk_floats[c];
}

static void expected_shape(const wf_ps_hdr *h, const wf_ps_limits *lim, shape *s)
{
	memset(s, 0, sizeof(*s));
	s->ranges_frame = -1;
	s->units_frame = -1;
	s->list_frame = -1;
	s->topk_frame = -1;
	int reply = lim->is_reply;
	int state = (h->flags & WF_PS_FLAG_STATE) != 0;
	int frozen = (h->flags & WF_PS_FLAG_FROZEN) != 0;
	int units = (h->flags & WF_PS_FLAG_UNITS) != 0;
	uint64_t cb = 4 * chunk_floats_of(lim, h->chunk);
	uint64_t sb = 4 * lim->state_floats;
	s->dtype = WF_PS_DTYPE_NONE;
	if (reply && (h->flags & WF_PS_FLAG_ERROR)) {
		s->max_frames = 1;
		s->dtype = WF_PS_DTYPE_BYTES;
		return;
	}
	switch (h->op) {
	case WF_PS_OP_INIT:
		s->chunk_op = 1;
		s->allow_state_chunk = 1;
		if (reply)
			break;
		s->dtype = WF_PS_DTYPE_F32;
		s->min_frames = 1;
		s->max_frames = h->chunk == WF_PS_STATE_CHUNK ? 1 : 1 + lim->nslots;
		for (int i = 0; i < s->max_frames; i++)
			s->frame_bytes[i] = cb;
		if (units) { /* the last frame, after the slots */
			s->min_frames = 2;
			s->max_frames++;
			s->units_frame = -2;
		}
		break;
	case WF_PS_OP_PUSH_PULL:
	case WF_PS_OP_REPLICATE:
		s->chunk_op = 1;
		if (reply && h->op == WF_PS_OP_REPLICATE)
			break;
		s->dtype = WF_PS_DTYPE_F32;
		s->min_frames = s->max_frames = 1 + state + units + frozen;
		s->frame_bytes[0] = cb;
		if (!reply && h->op == WF_PS_OP_PUSH_PULL && h->dtype == WF_PS_DTYPE_BF16) {
			s->dtype = WF_PS_DTYPE_BF16; /* the gradient only: the state stays f32 */
			s->frame_bytes[0] = cb / 2;
		}
		if (!reply && h->op == WF_PS_OP_PUSH_PULL && h->dtype == WF_PS_DTYPE_TOPK) {
			s->dtype = WF_PS_DTYPE_TOPK; /* k entries, checked by check_topk */
			s->topk_frame = 0;
		}
		s->frame_bytes[1] = sb;
		if (units && reply)
			s->list_frame = 1 + state;
		else if (units)
			s->units_frame = 1 + state;
		if (frozen)
			s->ranges_frame = 1 + state + units;
		if (state && !lim->state_floats) {
			s->fault = WF_PS_REJECT_BYTES;
			s->why = "state frame but no state vector here";
		}
		break;
	case WF_PS_OP_UNITS:
		s->chunk_op = 1;
		if (reply)
			break;
		s->dtype = WF_PS_DTYPE_BYTES;
		s->min_frames = s->max_frames = 1;
		s->units_frame = 0;
		if (WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_SERVER) {
			s->fault = WF_PS_REJECT_SENDER;
			s->why = "units comes only from a parameter server";
		}
		break;
	case WF_PS_OP_PULL:
		s->chunk_op = 1;
		s->allow_state_chunk = 1;
		if (!reply)
			break;
		s->dtype = WF_PS_DTYPE_F32;
		s->min_frames = s->max_frames = 1 + units;
		s->frame_bytes[0] = cb;
		if (units)
			s->list_frame = 1;
		break;
	case WF_PS_OP_CHECKPOINT:
	case WF_PS_OP_RESTORE:
		if (reply)
			break;
		s->dtype = WF_PS_DTYPE_BYTES;
		s->min_frames = 0; /* a path payload parses, and the server refuses it */
		s->max_frames = 1;
		break;
	case WF_PS_OP_STATS:
		if (!reply)
			break;
		s->dtype = WF_PS_DTYPE_BYTES;
		s->min_frames = s->max_frames = 1;
		break;
	case WF_PS_OP_REGISTER:
		if (reply)
			break;
		s->dtype = WF_PS_DTYPE_BYTES; /* optional: the sender's optimizer settings */
		s->min_frames = 0;
		s->max_frames = 1;
		break;
	default: /* barrier, shutdown, heartbeat, join, handoff: no payload */ break;
	}
	if ((state || frozen) && h->op != WF_PS_OP_PUSH_PULL && h->op != WF_PS_OP_REPLICATE) {
		s->fault = WF_PS_REJECT_OP;
		s->why = "flag state or frozen on an op other than push_pull";
	}
	if (units && reply) {
		if ((h->op != WF_PS_OP_PUSH_PULL && h->op != WF_PS_OP_PULL) ||
		    h->chunk == WF_PS_STATE_CHUNK) {
			s->fault = WF_PS_REJECT_OP;
			s->why = "flag units on a reply other than a chunk's push_pull or pull";
		}
	} else if (units && ((h->op != WF_PS_OP_REPLICATE && h->op != WF_PS_OP_INIT) ||
			     h->chunk == WF_PS_STATE_CHUNK ||
			     WF_PS_SENDER_ROLE(h->sender) != WF_PS_ROLE_SERVER)) {
		s->fault = WF_PS_REJECT_OP;
		s->why = "flag units on other than a server's replicate or init of a chunk";
	}
}

uint64_t wf_ps_get_u64(const void *p)
{
	return get64(p);
}

void wf_ps_put_u64(void *p, uint64_t v)
{
	put64(p, v);
}

/* A frozen frame: u64 pairs [begin, end), ascending, disjoint, inside a
 * chunk of `floats`. */
static int check_ranges(const uint8_t *p, size_t bytes, uint64_t floats, const char **why)
{
	if (bytes == 0 || bytes % 16 || bytes / 16 > WF_PS_MAX_FROZEN) {
		*why = "frozen frame is not 1..65536 pairs of u64";
		return 0;
	}
	uint64_t last = 0;
	for (size_t i = 0; i < bytes / 16; i++) {
		uint64_t b = get64(p + 16 * i), e = get64(p + 16 * i + 8);
		if (b < last || b >= e || e > floats) {
			*why = "frozen ranges out of order or outside the chunk";
			return 0;
		}
		last = e;
	}
	return 1;
}

/* A units frame (proto.h) for nworkers workers: counts in range, sizes
 * that add up, the current units and applied steps >= -1, the rest >= 0. */
static int check_units(const uint8_t *p, size_t bytes, int nworkers, const char **why)
{
	*why = "units frame malformed (header, counts or sizes)";
	if (bytes % 8 || bytes < 8 * WF_PS_UNITS_HEADER)
		return 0;
	int64_t v[WF_PS_UNITS_HEADER];
	for (int i = 0; i < WF_PS_UNITS_HEADER; i++)
		v[i] = (int64_t)get64(p + 8 * i);
	int64_t w = v[2], q = v[3], e = v[4], n = (int64_t)(bytes / 8);
	if (v[0] < 0 || v[1] < 0 || w != nworkers || w <= 0 || q < 0 || q > WF_PS_UNITS_MAX_QUEUE ||
	    e < 0 || e > WF_PS_UNITS_MAX_EPOCH || n < WF_PS_UNITS_HEADER + 2 * w + q + 2 * e)
		return 0;
	int64_t base = WF_PS_UNITS_HEADER + 2 * w + q + 2 * e;
	for (int64_t i = WF_PS_UNITS_HEADER; i < base; i++)
		if ((int64_t)get64(p + 8 * i) < (i < WF_PS_UNITS_HEADER + 2 * w ? -1 : 0))
			return 0;
	if (n == base)
		return 1;
	/* the lists' tail (elastic_batch global): dealt, W lengths, the extra units */
	if (n < base + 1 + w || get64(p + 8 * base) > 1)
		return 0;
	int64_t extra = 0;
	for (int64_t i = 0; i < w; i++) {
		int64_t len = (int64_t)get64(p + 8 * (base + 1 + i));
		if (len < 0 || len > WF_PS_UNITS_MAX_LIST)
			return 0;
		extra += len > 1 ? len - 1 : 0;
	}
	if (n != base + 1 + w + extra)
		return 0;
	for (int64_t i = base + 1 + w; i < n; i++)
		if ((int64_t)get64(p + 8 * i) < 0)
			return 0;
	return 1;
}

/* A reply's unit list: 1..WF_PS_UNITS_MAX_LIST units of 8 bytes, none negative. */
static int check_unit_list(const uint8_t *p, size_t bytes, const char **why)
{
	*why = "unit list is not 1..WF_PS_UNITS_MAX_LIST non-negative 8-byte units";
	if (bytes == 0 || bytes % 8 || bytes / 8 > WF_PS_UNITS_MAX_LIST)
		return 0;
	for (size_t i = 0; i < bytes / 8; i++)
		if ((int64_t)get64(p + 8 * i) < 0)
			return 0;
	return 1;
}

/* A topk gradient frame: 1..floats entries of 8 bytes, the u32 indices
 * strictly ascending and inside a chunk of `floats`. */
static int check_topk(const uint8_t *p, size_t bytes, uint64_t floats, const char **why)
{
	if (bytes == 0 || bytes % 8 || bytes / 8 > floats) {
		*why = "topk frame is not 1..(chunk floats) entries of 8 bytes";
		return 0;
	}
	size_t k = bytes / 8;
	for (size_t j = 0; j < k; j++) {
		uint32_t i = get32(p + 4 * j);
		if (i >= floats || (j && i <= get32(p + 4 * (j - 1)))) {
			*why = "topk indices not strictly ascending or outside the chunk";
			return 0;
		}
	}
	return 1;
}

static int check_flags(const wf_ps_hdr *h, const wf_ps_limits *lim)
{
	if (h->flags & ~(uint32_t)WF_PS_FLAG__ALL)
		return 0;
	if (lim->is_reply)
		return (h->flags & WF_PS_FLAG_REPLY) != 0;
	return (h->flags & (WF_PS_FLAG_REPLY | WF_PS_FLAG_ERROR | WF_PS_FLAG_STALE |
			    WF_PS_FLAG_REDIRECT)) == 0;
}

int wf_ps_msg_parse(wf_ps_msg *msg, const void *const *frames, const size_t *sizes, int n,
		    const wf_ps_limits *lim, int *reason, wf_err *err)
{
	int dummy;
	if (!reason)
		reason = &dummy;
	memset(msg, 0, sizeof(*msg));
	if (n < 1)
		REJECT(WF_PS_REJECT_FRAMES, "message has no frames");
	if (n - 1 > WF_PS_MAX_FRAMES)
		REJECT(WF_PS_REJECT_FRAMES, "message has %d payload frames (at most %d)", n - 1,
		       WF_PS_MAX_FRAMES);
	if (sizes[0] != WF_PS_HEADER_BYTES)
		REJECT(WF_PS_REJECT_HEADER, "header frame is %zu bytes, expected %d", sizes[0],
		       WF_PS_HEADER_BYTES);
	const uint8_t *raw = frames[0];
	wf_ps_hdr *h = &msg->hdr;
	wf_ps_hdr_decode(h, raw);
	uint32_t magic = get32(raw);
	if (magic != WF_PS_MAGIC)
		REJECT(WF_PS_REJECT_MAGIC, "bad magic 0x%08x (expected \"WEFT\")", magic);
	if (h->version != WF_PS_VERSION)
		REJECT(WF_PS_REJECT_VERSION, "protocol version %u, this build speaks %d",
		       h->version, WF_PS_VERSION);
	if (raw[38] || raw[39]) /* reserved: zero, so a header has one encoding */
		REJECT(WF_PS_REJECT_HEADER, "reserved header bytes 38-39 are not zero");
	if (h->op < 1 || h->op >= WF_PS_OP__COUNT)
		REJECT(WF_PS_REJECT_OP, "unknown op %u", h->op);
	if (!check_flags(h, lim))
		REJECT(WF_PS_REJECT_OP, "flags 0x%x not valid on a %s %s", h->flags,
		       wf_ps_op_name(h->op), lim->is_reply ? "reply" : "request");
	if (h->job_id != lim->job_id)
		REJECT(WF_PS_REJECT_JOB, "job id %llu is not this job's",
		       (unsigned long long)h->job_id); /* never name the right one */
	if (!lim->is_reply) {
		int role = WF_PS_SENDER_ROLE(h->sender), idx = WF_PS_SENDER_INDEX(h->sender);
		if (role < WF_PS_ROLE_WORKER || role > WF_PS_ROLE_SERVER)
			REJECT(WF_PS_REJECT_SENDER, "sender role %d unknown", role);
		if (role == WF_PS_ROLE_WORKER && lim->nworkers > 0 && idx >= lim->nworkers)
			REJECT(WF_PS_REJECT_SENDER, "worker index %d out of range [0, %d)", idx,
			       lim->nworkers);
	}
	shape s;
	expected_shape(h, lim, &s);
	if (s.fault)
		REJECT(s.fault, "%s", s.why);
	if (s.chunk_op) {
		int is_state = h->chunk == WF_PS_STATE_CHUNK;
		if ((is_state && !s.allow_state_chunk) || chunk_floats_of(lim, h->chunk) == 0)
			REJECT(WF_PS_REJECT_CHUNK,
			       "chunk %u out of range or not held here (%u chunks)", h->chunk,
			       lim->nchunks);
	}
	int np = n - 1;
	if ((uint32_t)np != h->nframes)
		REJECT(WF_PS_REJECT_FRAMES, "header says %u payload frames, message has %d",
		       h->nframes, np);
	if (np < s.min_frames || np > s.max_frames)
		REJECT(WF_PS_REJECT_FRAMES, "%s %s takes %d..%d payload frames, got %d",
		       wf_ps_op_name(h->op), lim->is_reply ? "reply" : "request", s.min_frames,
		       s.max_frames, np);
	uint64_t total = 0;
	uint64_t max_text = lim->max_text ? lim->max_text : (1u << 20);
	int units_frame = s.units_frame == -2 ? np - 1 : s.units_frame;
	for (int i = 0; i < np; i++) {
		total += sizes[i + 1];
		if (i == units_frame) {
			const char *why = "";
			if (!check_units(frames[i + 1], sizes[i + 1], lim->nworkers, &why))
				REJECT(WF_PS_REJECT_BYTES, "%s", why);
			continue;
		}
		if (i == s.list_frame) {
			const char *why = "";
			if (!check_unit_list(frames[i + 1], sizes[i + 1], &why))
				REJECT(WF_PS_REJECT_BYTES, "%s", why);
			continue;
		}
		if (i == s.ranges_frame) {
			const char *why = "";
			if (!check_ranges(frames[i + 1], sizes[i + 1],
					  chunk_floats_of(lim, h->chunk), &why))
				REJECT(WF_PS_REJECT_BYTES, "%s", why);
			continue;
		}
		if (i == s.topk_frame) {
			const char *why = "";
			if (!check_topk(frames[i + 1], sizes[i + 1], chunk_floats_of(lim, h->chunk),
					&why))
				REJECT(WF_PS_REJECT_BYTES, "chunk %u: %s (%zu bytes)", h->chunk,
				       why, sizes[i + 1]);
			continue;
		}
		if ((s.dtype == WF_PS_DTYPE_F32 || s.dtype == WF_PS_DTYPE_BF16 ||
		     s.dtype == WF_PS_DTYPE_TOPK) &&
		    sizes[i + 1] != s.frame_bytes[i])
			REJECT(WF_PS_REJECT_BYTES,
			       "payload frame %d is %zu bytes, chunk %u needs %llu bytes", i,
			       sizes[i + 1], h->chunk, (unsigned long long)s.frame_bytes[i]);
		if (s.dtype == WF_PS_DTYPE_BYTES && sizes[i + 1] > max_text)
			REJECT(WF_PS_REJECT_BYTES, "text payload of %zu bytes (at most %llu)",
			       sizes[i + 1], (unsigned long long)max_text);
	}
	if (total != h->payload_bytes)
		REJECT(WF_PS_REJECT_BYTES, "header says %llu payload bytes, frames hold %llu",
		       (unsigned long long)h->payload_bytes, (unsigned long long)total);
	int want_dtype = np ? s.dtype : WF_PS_DTYPE_NONE;
	if (h->dtype != want_dtype)
		REJECT(WF_PS_REJECT_DTYPE, "dtype %u, %s expects %d", h->dtype,
		       wf_ps_op_name(h->op), want_dtype);
	if (lim->defer_checksum && np && s.dtype == WF_PS_DTYPE_F32) {
		msg->deferred = 1;
		memcpy(msg->raw, raw, WF_PS_HEADER_BYTES);
	} else {
		uint32_t crc = hdr_checksum(raw, wf_ps_payload_crc(frames + 1, sizes + 1, np));
		if (crc != h->checksum)
			REJECT(WF_PS_REJECT_CHECKSUM, "checksum 0x%08x, computed 0x%08x",
			       h->checksum, crc);
	}
	msg->nframes = np;
	for (int i = 0; i < np; i++) {
		msg->frame[i] = frames[i + 1];
		msg->size[i] = sizes[i + 1];
	}
	return 0;
}

int wf_ps_msg_verify(const wf_ps_msg *msg, uint32_t payload_crc, wf_err *err)
{
	if (!msg->deferred)
		return 0;
	uint32_t crc = hdr_checksum(msg->raw, payload_crc);
	if (crc != msg->hdr.checksum)
		return wf_errf(err, WF_EFORMAT, "checksum 0x%08x, computed 0x%08x",
			       msg->hdr.checksum, crc);
	return 0;
}

/* ---- stats ------------------------------------------------------------ */

/* Backup workers' fields of the stats (absent from the JSON when off). */
static json_t *jlongs(const long *v, long n)
{
	json_t *a = json_array();
	for (long i = 0; a && v && i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static void backup_to_json(const wf_ps_stats *s, json_t *o)
{
	json_object_set_new(o, "live_workers", json_integer(s->live_workers));
	if (s->backup_workers <= 0 && s->min_workers <= 0)
		return;
	json_object_set_new(o, "backup_workers", json_integer(s->backup_workers));
	json_object_set_new(o, "min_workers", json_integer(s->min_workers));
	json_object_set_new(o, "worker_late", jlongs(s->worker_late, s->nworkers));
	json_object_set_new(o, "worker_late_sum", jlongs(s->worker_late_sum, s->nworkers));
	json_object_set_new(o, "worker_late_max", jlongs(s->worker_late_max, s->nworkers));
	json_object_set_new(o, "units_per_epoch", json_integer(s->units_per_epoch));
	json_object_set_new(o, "units_applied", jlongs(s->units_applied, s->nepochs));
	json_object_set_new(o, "units_requeued", jlongs(s->units_requeued, s->nepochs));
}

/* [n] longs from a JSON array of n integers; NULL when absent or of another length. */
static long *longs_of(json_t *a, long n, int *oom)
{
	if (!json_is_array(a) || (long)json_array_size(a) != n || n <= 0)
		return NULL;
	long *v = calloc((size_t)n, sizeof(*v));
	if (!v) {
		*oom = 1;
		return NULL;
	}
	for (long i = 0; i < n; i++)
		v[i] = (long)json_integer_value(json_array_get(a, (size_t)i));
	return v;
}

static int backup_from_json(wf_ps_stats *s, json_t *o)
{
	int oom = 0;
	s->live_workers = (int)json_integer_value(json_object_get(o, "live_workers"));
	s->backup_workers = (int)json_integer_value(json_object_get(o, "backup_workers"));
	s->min_workers = (int)json_integer_value(json_object_get(o, "min_workers"));
	if (s->backup_workers <= 0 && s->min_workers <= 0)
		return 0;
	s->worker_late = longs_of(json_object_get(o, "worker_late"), s->nworkers, &oom);
	s->worker_late_sum = longs_of(json_object_get(o, "worker_late_sum"), s->nworkers, &oom);
	s->worker_late_max = longs_of(json_object_get(o, "worker_late_max"), s->nworkers, &oom);
	s->units_per_epoch = (long)json_integer_value(json_object_get(o, "units_per_epoch"));
	json_t *ap = json_object_get(o, "units_applied");
	long ne = (long)json_array_size(ap);
	s->units_applied = longs_of(ap, ne, &oom);
	s->units_requeued = longs_of(json_object_get(o, "units_requeued"), ne, &oom);
	s->nepochs = s->units_applied && s->units_requeued ? ne : 0;
	return oom ? WF_ENOMEM : 0;
}

int wf_ps_stats_to_json(const wf_ps_stats *s, char **out, wf_err *err)
{
	json_t *o = json_object(), *steps = json_array(), *alive = json_array(),
	       *rej = json_object();
	int rc = WF_ENOMEM;
	if (!o || !steps || !alive || !rej)
		goto cleanup;
	for (int w = 0; w < s->nworkers; w++) {
		json_array_append_new(steps, json_integer(s->worker_step[w]));
		json_array_append_new(alive, json_integer(s->worker_alive[w]));
	}
	for (int r = 0; r < WF_PS_REJECT__COUNT; r++)
		json_object_set_new(rej, wf_ps_reject_name(r),
				    json_integer((json_int_t)s->rejected[r]));
	json_object_set_new(o, "server", json_integer(s->server));
	json_object_set_new(o, "nservers", json_integer(s->nservers));
	json_object_set_new(o, "uptime", json_real(s->uptime));
	json_object_set_new(o, "pushes", json_integer((json_int_t)s->pushes));
	json_object_set_new(o, "pulls", json_integer((json_int_t)s->pulls));
	json_object_set_new(o, "bytes_in", json_integer((json_int_t)s->bytes_in));
	json_object_set_new(o, "bytes_out", json_integer((json_int_t)s->bytes_out));
	json_object_set_new(o, "held", json_integer(s->held));
	json_object_set_new(o, "version_min", json_integer(s->version_min));
	json_object_set_new(o, "version_max", json_integer(s->version_max));
	json_object_set_new(o, "worker_step", steps);
	json_object_set_new(o, "worker_alive", alive);
	json_object_set_new(o, "rejected", rej);
	json_object_set_new(o, "staleness", json_integer(s->staleness));
	json_object_set_new(o, "ssp_held", json_integer((json_int_t)s->ssp_held));
	json_object_set_new(o, "ssp_max_lead", json_integer(s->ssp_max_lead));
	backup_to_json(s, o);
	steps = alive = rej = NULL;
	*out = json_dumps(o, JSON_COMPACT);
	rc = *out ? 0 : WF_ENOMEM;
cleanup:
	json_decref(steps);
	json_decref(alive);
	json_decref(rej);
	json_decref(o);
	if (rc)
		wf_errf(err, rc, "stats: out of memory");
	return rc;
}

static long jint(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (long)json_integer_value(v) : 0;
}

int wf_ps_stats_from_json(wf_ps_stats *s, const char *json, size_t len, wf_err *err)
{
	memset(s, 0, sizeof(*s));
	json_error_t jerr;
	json_t *o = json_loadb(json, len, 0, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		return wf_errf(err, WF_EFORMAT, "stats reply is not a JSON object: %s", jerr.text);
	}
	s->server = (int)jint(o, "server");
	s->nservers = (int)jint(o, "nservers");
	s->uptime = json_number_value(json_object_get(o, "uptime"));
	s->pushes = (uint64_t)jint(o, "pushes");
	s->pulls = (uint64_t)jint(o, "pulls");
	s->bytes_in = (uint64_t)jint(o, "bytes_in");
	s->bytes_out = (uint64_t)jint(o, "bytes_out");
	s->held = (int)jint(o, "held");
	s->version_min = jint(o, "version_min");
	s->version_max = jint(o, "version_max");
	s->staleness = json_object_get(o, "staleness") ? (int)jint(o, "staleness") : -1;
	s->ssp_held = (uint64_t)jint(o, "ssp_held");
	s->ssp_max_lead = jint(o, "ssp_max_lead");
	if (s->uptime > 0) {
		s->push_rate = (double)s->pushes / s->uptime;
		s->pull_rate = (double)s->pulls / s->uptime;
	}
	json_t *steps = json_object_get(o, "worker_step");
	json_t *alive = json_object_get(o, "worker_alive");
	size_t nw = json_array_size(steps);
	if (nw && nw == json_array_size(alive)) {
		s->worker_step = calloc(nw, sizeof(*s->worker_step));
		s->worker_alive = calloc(nw, sizeof(*s->worker_alive));
		if (!s->worker_step || !s->worker_alive) {
			json_decref(o);
			wf_ps_stats_free(s);
			return wf_errf(err, WF_ENOMEM, "stats: out of memory");
		}
		s->nworkers = (int)nw;
		for (size_t i = 0; i < nw; i++) {
			s->worker_step[i] = (long)json_integer_value(json_array_get(steps, i));
			s->worker_alive[i] = (int)json_integer_value(json_array_get(alive, i));
		}
	}
	json_t *rej = json_object_get(o, "rejected");
	for (int r = 0; r < WF_PS_REJECT__COUNT; r++)
		s->rejected[r] = (uint64_t)jint(rej, wf_ps_reject_name(r));
	int brc = backup_from_json(s, o);
	json_decref(o);
	if (brc) {
		wf_ps_stats_free(s);
		return wf_errf(err, WF_ENOMEM, "stats: out of memory");
	}
	return 0;
}

void wf_ps_stats_free(wf_ps_stats *s)
{
	if (!s)
		return;
	free(s->worker_step);
	free(s->worker_alive);
	s->worker_step = NULL;
	s->worker_alive = NULL;
	free(s->worker_late);
	free(s->worker_late_sum);
	free(s->worker_late_max);
	free(s->units_applied);
	free(s->units_requeued);
	s->worker_late = s->worker_late_sum = s->worker_late_max = NULL;
	s->units_applied = s->units_requeued = NULL;
	s->nepochs = 0;
	s->nworkers = 0;
}

void wf_ps_stats_format(const wf_ps_stats *s, char *buf, size_t n)
{
	size_t k = 0;
#define OUT(...)                                                                                   \
	do {                                                                                       \
		if (k < n)                                                                         \
			k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__);                        \
	} while (0)
	OUT("ps %d/%d: up %.1f s, %.1f push/s, %.1f pull/s, in %.1f MB, out %.1f MB, held %d, "
	    "step %ld..%ld",
	    s->server, s->nservers, s->uptime, s->push_rate, s->pull_rate, s->bytes_in / 1e6,
	    s->bytes_out / 1e6, s->held, s->version_min, s->version_max);
	OUT(", workers [");
	for (int w = 0; w < s->nworkers; w++)
		OUT("%s%d:%ld%s", w ? " " : "", w, s->worker_step[w],
		    s->worker_alive[w] == 0  ? "(dead)"
		    : s->worker_alive[w] < 0 ? "(new)"
					     : "");
	OUT("]");
	if (s->staleness >= 0)
		OUT(", ssp:%d: %llu held, max lead %ld", s->staleness,
		    (unsigned long long)s->ssp_held, s->ssp_max_lead);
	if (s->backup_workers > 0 && s->worker_late) {
		OUT(", backup %d: late steps [", s->backup_workers);
		for (int w = 0; w < s->nworkers; w++)
			OUT("%s%d:%ld", w ? " " : "", w, s->worker_late[w]);
		OUT("]");
	}
	uint64_t total = 0;
	for (int r = 0; r < WF_PS_REJECT__COUNT; r++)
		total += s->rejected[r];
	if (total) {
		OUT(", rejected:");
		for (int r = 0; r < WF_PS_REJECT__COUNT; r++)
			if (s->rejected[r])
				OUT(" %s=%llu", wf_ps_reject_name(r),
				    (unsigned long long)s->rejected[r]);
	}
#undef OUT
}

static pthread_once_t tune_once = PTHREAD_ONCE_INIT;
static int tune_on = 1;

void wf_ps_tune_malloc_enable(int on)
{
	tune_on = on;
}

static void tune_malloc(void)
{
#ifdef __GLIBC__
	if (!tune_on)
		return;
	mallopt(M_MMAP_THRESHOLD, (int)WF_PS_RECV_POOL_BYTES);
	mallopt(M_TRIM_THRESHOLD, (int)(4 * WF_PS_RECV_POOL_BYTES));
#endif
}

void wf_ps_tune_malloc(void)
{
	pthread_once(&tune_once, tune_malloc);
}

const void *wf_ps_align(const void *p, size_t n, wf_ps_scratch *s)
{
	if (((uintptr_t)p & 3) == 0)
		return p;
	if (n > s->cap) {
		void *nb = realloc(s->buf, n);
		if (!nb)
			return NULL;
		s->buf = nb;
		s->cap = n;
	}
	memcpy(s->buf, p, n);
	return s->buf;
}

void wf_ps_scratch_free(wf_ps_scratch *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}
