/* test_tfevents.c: the TensorBoard writer produces TFRecord framing with
 * valid masked CRC32C and Event protobufs a reader can decode. */
#include "common/tfevents.h"
#include "common/util.h"
#include "tests/test.h"

#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

static void test_crc32c_known_vector(void)
{
	WF_CHECK_INT(wf_crc32c("123456789", 9), 0xe3069283u);
	WF_CHECK_INT(wf_crc32c("", 0), 0);
}

/* ---- a minimal protobuf reader for the test ---- */

static uint64_t varint(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	for (int s = 0; *p < end && s < 64; s += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			break;
	}
	return v;
}

typedef struct event {
	double wall;
	long step;
	char version[32];
	int nvalues;
	char tags[8][32];
	float values[8];
} event;

static int parse_value(const uint8_t *p, const uint8_t *end, event *e)
{
	int i = e->nvalues++;
	while (p < end) {
		uint64_t key = varint(&p, end);
		if (key == ((1 << 3) | 2)) {
			uint64_t n = varint(&p, end);
			snprintf(e->tags[i], sizeof(e->tags[i]), "%.*s", (int)n, (const char *)p);
			p += n;
		} else if (key == ((2 << 3) | 5)) {
			memcpy(&e->values[i], p, 4);
			p += 4;
		} else {
			return -1;
		}
	}
	return 0;
}

static int parse_event(const uint8_t *p, size_t n, event *e)
{
	const uint8_t *end = p + n;
	memset(e, 0, sizeof(*e));
	while (p < end) {
		uint64_t key = varint(&p, end);
		int field = (int)(key >> 3), wire = (int)(key & 7);
		if (field == 1 && wire == 1) {
			memcpy(&e->wall, p, 8);
			p += 8;
		} else if (field == 2 && wire == 0) {
			e->step = (long)varint(&p, end);
		} else if (field == 3 && wire == 2) {
			uint64_t len = varint(&p, end);
			snprintf(e->version, sizeof(e->version), "%.*s", (int)len, (const char *)p);
			p += len;
		} else if (field == 5 && wire == 2) {
			uint64_t len = varint(&p, end);
			const uint8_t *send = p + len;
			while (p < send) {
				uint64_t k = varint(&p, send);
				uint64_t vl = varint(&p, send);
				if (k != ((1 << 3) | 2) || parse_value(p, p + vl, e) != 0)
					return -1;
				p += vl;
			}
		} else {
			return -1;
		}
	}
	return 0;
}

static void test_events_decode(void)
{
	char dir[] = "/tmp/wf_tfevents_XXXXXX";
	WF_CHECK(mkdtemp(dir) != NULL);
	wf_tfevents *w = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_tfevents_open(&w, dir, &err), 0);
	if (!w)
		return;
	const char *tags[] = {"loss", "accuracy"};
	float vals[] = {0.25f, 0.875f};
	WF_CHECK_INT(wf_tfevents_scalars(w, 7, 2, tags, vals, &err), 0);
	vals[0] = 0.125f;
	WF_CHECK_INT(wf_tfevents_scalars(w, 8, 1, tags, vals, &err), 0);
	char path[4096];
	snprintf(path, sizeof(path), "%s", wf_tfevents_path(w));
	WF_CHECK(strstr(path, "/events.out.tfevents.") != NULL);
	wf_tfevents_close(w);

	char *data;
	size_t len;
	WF_CHECK_INT(wf_read_file(path, &data, &len), 0);
	event ev[4];
	int nev = 0;
	size_t off = 0;
	while (off + 12 <= len && nev < 4) {
		uint64_t n;
		uint32_t c;
		memcpy(&n, data + off, 8);
		memcpy(&c, data + off + 8, 4);
		WF_CHECK_INT(c, wf_crc32c_mask(wf_crc32c(data + off, 8)));
		WF_CHECK(off + 12 + n + 4 <= len);
		if (off + 12 + n + 4 > len)
			break;
		memcpy(&c, data + off + 12 + n, 4);
		WF_CHECK_INT(c, wf_crc32c_mask(wf_crc32c(data + off + 12, n)));
		WF_CHECK_INT(parse_event((const uint8_t *)data + off + 12, n, &ev[nev]), 0);
		nev++;
		off += 12 + n + 4;
	}
	WF_CHECK_INT(off, len);
	WF_CHECK_INT(nev, 3);
	WF_CHECK(strcmp(ev[0].version, "brain.Event:2") == 0);
	WF_CHECK(ev[0].wall > 1.5e9);
	WF_CHECK_INT(ev[1].step, 7);
	WF_CHECK_INT(ev[1].nvalues, 2);
	WF_CHECK(strcmp(ev[1].tags[0], "loss") == 0 && strcmp(ev[1].tags[1], "accuracy") == 0);
	WF_CHECK(ev[1].values[0] == 0.25f && ev[1].values[1] == 0.875f);
	WF_CHECK_INT(ev[2].step, 8);
	WF_CHECK_INT(ev[2].nvalues, 1);
	WF_CHECK(ev[2].values[0] == 0.125f);
	free(data);
	unlink(path);
	rmdir(dir);
}

static void test_open_fails_on_unwritable_dir(void)
{
	wf_tfevents *w = NULL;
	wf_err err = {0};
	int rc = wf_tfevents_open(&w, "/proc/wf_no_such_dir/logs", &err);
	WF_CHECK(rc < 0);
	WF_CHECK(w == NULL);
	WF_CHECK(strstr(err.msg, "/proc/wf_no_such_dir") != NULL);
}

int main(void)
{
	WF_RUN(test_crc32c_known_vector);
	WF_RUN(test_events_decode);
	WF_RUN(test_open_fails_on_unwritable_dir);
	return wf_test_summary();
}
