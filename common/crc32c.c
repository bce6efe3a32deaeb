/* crc32c.c: CRC32C (Castagnoli), hardware-accelerated with SSE4.2 and, where
 * the build has it, AVX-512 VPCLMULQDQ folding; a table otherwise. Used by the
 * parameter-server wire protocol and the checksums of every file weft writes. */
#include "common/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

#ifdef __SSE4_2__
/* Three independent lanes of LANE bytes keep the crc32 unit busy (its
 * latency is 3 cycles, its throughput 1); the lanes are joined with the
 * linear "append LANE zero bytes" operator, precomputed as 4 byte tables. */
#define LANE 8192
static uint32_t shift_tab[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static uint32_t crc_raw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = _mm_crc32_u64(c64, w);
	}
	c = (uint32_t)c64;
	while (n--)
		c = _mm_crc32_u8(c, *p++);
	return c;
}

static void shift_init(void)
{
	static const uint8_t zeros[LANE];
	uint32_t col[32];
	for (int i = 0; i < 32; i++)
		col[i] = crc_raw(1u << i, zeros, LANE);
	for (int j = 0; j < 4; j++)
		for (int b = 0; b < 256; b++) {
			uint32_t v = 0;
			for (int k = 0; k < 8; k++)
				if (b & (1 << k))
					v ^= col[8 * j + k];
			shift_tab[j][b] = v;
		}
}

static uint32_t shift_lane(uint32_t x)
{
	return shift_tab[0][x & 0xff] ^ shift_tab[1][(x >> 8) & 0xff] ^
	       shift_tab[2][(x >> 16) & 0xff] ^ shift_tab[3][x >> 24];
}

/* Three crc32 lanes: ~8 bytes per cycle. */
static uint32_t crc_lanes(uint32_t c, const uint8_t *p, size_t n)
{
	if (n >= 3 * LANE) {
		pthread_once(&shift_once, shift_init);
		while (n >= 3 * LANE) {
			uint64_t a = c, b = 0, d = 0, w0, w1, w2;
			for (size_t i = 0; i < LANE; i += 8) {
				memcpy(&w0, p + i, 8);
				memcpy(&w1, p + LANE + i, 8);
				memcpy(&w2, p + 2 * LANE + i, 8);
				a = _mm_crc32_u64(a, w0);
				b = _mm_crc32_u64(b, w1);
				d = _mm_crc32_u64(d, w2);
			}
			c = shift_lane(shift_lane((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
			p += 3 * LANE;
			n -= 3 * LANE;
		}
	}
	return crc_raw(c, p, n);
}

#if defined(__VPCLMULQDQ__) && defined(__AVX512F__)
/* Carry-less multiply folding, 4 x 64 bytes per step with AVX-512
 * VPCLMULQDQ (several times the crc32 instruction's rate). A 16-byte block A
 * folded forward by D bytes is clmul(A.lo, K(8D + 32)) ^ clmul(A.hi,
 * K(8D - 32)), K(e) = reflect32(x^e mod P) << 1; the folded remainder is
 * finished with the crc32 instruction, which also takes the start value
 * (xored into the first 4 bytes). */
#include <immintrin.h>

static __m512i fold_k[4];  /* fold distances 64, 128, 192, 256 bytes, per 128-bit lane */
static __m512i fold_lanes; /* lanes 0..2 of a zmm onto lane 3: 48, 32, 16 bytes; lane 3: 0 */
static pthread_once_t fold_once = PTHREAD_ONCE_INIT;

static uint64_t fold_const(int e)
{
	uint64_t r = 1; /* x^e mod P, normal bit order */
	for (int i = 0; i < e; i++) {
		r <<= 1;
		if (r >> 32)
			r ^= 0x11edc6f41ull;
	}
	uint64_t v = 0;
	for (int i = 0; i < 32; i++)
		v |= ((r >> i) & 1) << (31 - i);
	return v << 1;
}

static __m128i fold_pair(int bytes)
{
	return _mm_set_epi64x((long long)fold_const(8 * bytes - 32),
			      (long long)fold_const(8 * bytes + 32));
}

static void fold_init(void)
{
	for (int i = 0; i < 4; i++)
		fold_k[i] = _mm512_broadcast_i32x4(fold_pair(64 * (i + 1)));
	fold_lanes = _mm512_inserti32x4(_mm512_setzero_si512(), fold_pair(48), 0);
	fold_lanes = _mm512_inserti32x4(fold_lanes, fold_pair(32), 1);
	fold_lanes = _mm512_inserti32x4(fold_lanes, fold_pair(16), 2);
}

/* x folded by k's distance, xored with y (0x96: three-way xor). */
static inline __m512i fold(__m512i x, __m512i k, __m512i y)
{
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
					 _mm512_clmulepi64_epi128(x, k, 0x11), y, 0x96);
}

/* CRC state c (not inverted) over n >= 256 bytes at p; when dst is not
 * NULL the bytes are also copied there (one pass over memory). Handles
 * n rounded down to 64 bytes; *done gets the bytes consumed. */
static uint32_t crc_fold(uint32_t c, const uint8_t *p, uint8_t *dst, size_t n, size_t *done)
{
	pthread_once(&fold_once, fold_init);
	__m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
	__m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
	if (dst) {
		_mm512_storeu_si512(dst, x0);
		_mm512_storeu_si512(dst + 64, x1);
		_mm512_storeu_si512(dst + 128, x2);
		_mm512_storeu_si512(dst + 192, x3);
	}
	x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
	size_t i = 256;
	for (; i + 256 <= n; i += 256) {
		__m512i y0 = _mm512_loadu_si512(p + i), y1 = _mm512_loadu_si512(p + i + 64);
		__m512i y2 = _mm512_loadu_si512(p + i + 128), y3 = _mm512_loadu_si512(p + i + 192);
		if (dst) {
			_mm512_storeu_si512(dst + i, y0);
			_mm512_storeu_si512(dst + i + 64, y1);
			_mm512_storeu_si512(dst + i + 128, y2);
			_mm512_storeu_si512(dst + i + 192, y3);
		}
		x0 = fold(x0, fold_k[3], y0);
		x1 = fold(x1, fold_k[3], y1);
		x2 = fold(x2, fold_k[3], y2);
		x3 = fold(x3, fold_k[3], y3);
	}
	__m512i x = fold(x0, fold_k[2], fold(x1, fold_k[1], fold(x2, fold_k[0], x3)));
	for (; i + 64 <= n; i += 64) {
		__m512i y = _mm512_loadu_si512(p + i);
		if (dst)
			_mm512_storeu_si512(dst + i, y);
		x = fold(x, fold_k[0], y);
	}
	/* lanes 0..2 onto lane 3 (lane 3's constant is 0, so it adds nothing) */
	__m512i f = fold(x, fold_lanes, _mm512_setzero_si512());
	__m128i r = _mm_xor_si128(
		_mm_xor_si128(_mm512_extracti32x4_epi32(f, 0), _mm512_extracti32x4_epi32(f, 1)),
		_mm_xor_si128(_mm512_extracti32x4_epi32(f, 2), _mm512_extracti32x4_epi32(x, 3)));
	uint64_t v = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
	v = _mm_crc32_u64(v, (uint64_t)_mm_extract_epi64(r, 1));
	*done = i;
	return (uint32_t)v;
}
#endif

uint32_t wf_crc32c_update(uint32_t crc, const void *data, size_t n)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;
#if defined(__VPCLMULQDQ__) && defined(__AVX512F__)
	if (n >= 256) {
		size_t done;
		c = crc_fold(c, p, NULL, n, &done);
		p += done;
		n -= done;
	}
#endif
	return ~crc_lanes(c, p, n);
}

uint32_t wf_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n)
{
#if defined(__VPCLMULQDQ__) && defined(__AVX512F__)
	const uint8_t *p = src;
	uint8_t *d = dst;
	uint32_t c = ~crc;
	if (n >= 256) {
		size_t done;
		c = crc_fold(c, p, d, n, &done);
		p += done;
		d += done;
		n -= done;
	}
	memcpy(d, p, n);
	return ~crc_lanes(c, p, n);
#else
	memcpy(dst, src, n);
	return wf_crc32c_update(crc, dst, n);
#endif
}
#else
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t wf_crc32c_update(uint32_t crc, const void *data, size_t n)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;
	pthread_once(&crc_once, crc_table_init);
	while (n--)
		c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return ~c;
}

uint32_t wf_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return wf_crc32c_update(crc, dst, n);
}
#endif

uint32_t wf_crc32c(const void *data, size_t n)
{
	return wf_crc32c_update(0, data, n);
}

int wf_crc32c_file(const char *path, uint32_t *crc, uint64_t *bytes, wf_err *err)
{
	enum { BUF = 1 << 20 };
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wf_errf(err, WF_EIO, "%s: cannot open: %s", path, strerror(errno));
	uint8_t *buf = malloc(BUF);
	uint32_t c = 0;
	uint64_t total = 0;
	int rc = 0;
	if (!buf) {
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory", path);
		goto done;
	}
	for (;;) {
		ssize_t got = read(fd, buf, BUF);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = wf_errf(err, WF_EIO, "%s: read error: %s", path, strerror(errno));
			goto done;
		}
		if (got == 0)
			break;
		c = wf_crc32c_update(c, buf, (size_t)got);
		total += (uint64_t)got;
	}
	*crc = c;
	*bytes = total;
done:
	free(buf);
	close(fd);
	return rc;
}
