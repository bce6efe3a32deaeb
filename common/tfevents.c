#include "common/tfevents.h"

#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct wf_tfevents {
	FILE *f;
	char path[4096];
	uint8_t buf[8192]; /* one encoded event (scalars only: small) */
};

/* ---- CRC-32C (common/crc32c), masked as TFRecord does ------------- */

uint32_t wf_crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding ------------------------------------------------ */

typedef struct pb {
	uint8_t *p;
	size_t n, cap;
	int overflow;
} pb;

static void pb_byte(pb *b, uint8_t v)
{
	if (b->n < b->cap)
		b->p[b->n++] = v;
	else
		b->overflow = 1;
}

static void pb_varint(pb *b, uint64_t v)
{
	while (v >= 0x80) {
		pb_byte(b, (uint8_t)(v | 0x80));
		v >>= 7;
	}
	pb_byte(b, (uint8_t)v);
}

static void pb_key(pb *b, int field, int wire)
{
	pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

static void pb_fixed(pb *b, const void *v, int bytes)
{
	const uint8_t *s = v; /* little-endian host (x86, arm64) */
	for (int i = 0; i < bytes; i++)
		pb_byte(b, s[i]);
}

static void pb_bytes(pb *b, int field, const void *data, size_t n)
{
	pb_key(b, field, 2);
	pb_varint(b, n);
	for (size_t i = 0; i < n; i++)
		pb_byte(b, ((const uint8_t *)data)[i]);
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* ---- records ----------------------------------------------------------- */

static double wall_time(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static int write_record(wf_tfevents *w, const uint8_t *data, size_t n, wf_err *err)
{
	uint8_t head[12], tail[4];
	uint64_t len = n;
	memcpy(head, &len, 8);
	uint32_t c = wf_crc32c_mask(wf_crc32c(head, 8));
	memcpy(head + 8, &c, 4);
	c = wf_crc32c_mask(wf_crc32c(data, n));
	memcpy(tail, &c, 4);
	if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n ||
	    fwrite(tail, 1, 4, w->f) != 4)
		return wf_errf(err, WF_EIO, "%s: write failed: %s", w->path, strerror(errno));
	return 0;
}

/* Event header: wall_time (1, double) and step (2, int64). */
static void event_head(pb *b, long step)
{
	double t = wall_time();
	pb_key(b, 1, 1);
	pb_fixed(b, &t, 8);
	pb_key(b, 2, 0);
	pb_varint(b, (uint64_t)(int64_t)step);
}

int wf_tfevents_open(wf_tfevents **out, const char *dir, wf_err *err)
{
	*out = NULL;
	if (wf_mkdirs(dir) != 0)
		return wf_errf(err, WF_EIO, "%s: cannot create directory: %s", dir,
			       strerror(errno));
	wf_tfevents *w = calloc(1, sizeof(*w));
	if (!w)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	char host[256] = "localhost";
	if (gethostname(host, sizeof(host) - 1) != 0)
		strcpy(host, "localhost");
	snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%ld.%s", dir, (long)time(NULL),
		 host);
	w->f = fopen(w->path, "ab");
	if (!w->f) {
		int rc = wf_errf(err, WF_EIO, "%s: cannot open: %s", w->path, strerror(errno));
		free(w);
		return rc;
	}
	pb b = {w->buf, 0, sizeof(w->buf), 0};
	event_head(&b, 0);
	pb_bytes(&b, 3, "brain.Event:2", 13);
	int rc = write_record(w, b.p, b.n, err);
	if (rc == 0)
		rc = wf_tfevents_flush(w, err);
	if (rc != 0) {
		wf_tfevents_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

int wf_tfevents_scalars(wf_tfevents *w, long step, int n, const char *const *tags,
			const float *values, wf_err *err)
{
	pb b = {w->buf, 0, sizeof(w->buf), 0};
	event_head(&b, step);
	/* summary (5): repeated value (1) { tag (1), simple_value (2) } */
	size_t sum_len = 0;
	for (int i = 0; i < n; i++) {
		size_t tl = strlen(tags[i]);
		size_t vl = 1 + varint_len(tl) + tl + 1 + 4;
		sum_len += 1 + varint_len(vl) + vl;
	}
	pb_key(&b, 5, 2);
	pb_varint(&b, sum_len);
	for (int i = 0; i < n; i++) {
		size_t tl = strlen(tags[i]);
		size_t vl = 1 + varint_len(tl) + tl + 1 + 4;
		pb_key(&b, 1, 2);
		pb_varint(&b, vl);
		pb_bytes(&b, 1, tags[i], tl);
		pb_key(&b, 2, 5);
		pb_fixed(&b, &values[i], 4);
	}
	if (b.overflow)
		return wf_errf(err, WF_EINVAL, "tfevents: event at step %ld too large (%d tags)",
			       step, n);
	return write_record(w, b.p, b.n, err);
}

int wf_tfevents_flush(wf_tfevents *w, wf_err *err)
{
	if (fflush(w->f) != 0)
		return wf_errf(err, WF_EIO, "%s: write failed: %s", w->path, strerror(errno));
	return 0;
}

const char *wf_tfevents_path(const wf_tfevents *w)
{
	return w->path;
}

void wf_tfevents_close(wf_tfevents *w)
{
	if (!w)
		return;
	if (w->f)
		fclose(w->f);
	free(w);
}
