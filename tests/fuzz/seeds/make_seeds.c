/* make_seeds.c: writes the generated seed inputs of the fuzz targets (wire
 * messages for fuzz_ps_msg, a shard file and DONE lists for fuzz_ckpt) into
 * tests/fuzz/seeds/<target>/. Not part of the build; after changing a format:
 *   cc -I. -I/usr/include/hdf5/serial tests/fuzz/seeds/make_seeds.c \
 *      build/libwf_ps.a build/libwf_common.a -L/usr/lib/x86_64-linux-gnu/hdf5/serial \
 *      -lhdf5 -ljansson -lzmq -lpthread -lm -o /tmp/make_seeds && /tmp/make_seeds tests/fuzz/seeds
 * The other seeds are files weft writes (configs, model and data files) or
 * hand-written requests, copied in. */
#include "common/ckptdir.h"
#include "common/util.h"
#include "ps/proto.h"
#include "ps/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *root;
static int sender_role = WF_PS_ROLE_WORKER;

static void put(const char *target, const char *name, const void *data, size_t n)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, target);
	wf_mkdirs(p);
	snprintf(p, sizeof(p), "%s/%s/%s", root, target, name);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(data, 1, n, f) != n)
		exit(1);
	fclose(f);
}

/* fuzz_ps_msg's framing: a 2-byte little-endian length before each frame;
 * payload and, when tail is not NULL, a second frame. */
static void msg2(const char *name, uint16_t op, uint32_t flags, uint32_t chunk, uint16_t dtype,
		 const void *payload, size_t plen, const void *tail, size_t tlen)
{
	uint8_t out[1024], hb[WF_PS_HEADER_BYTES];
	wf_ps_hdr h = {.version = WF_PS_VERSION,
		       .op = op,
		       .flags = flags,
		       .sender = WF_PS_SENDER(sender_role, 1),
		       .job_id = 7,
		       .step = 3,
		       .chunk = chunk,
		       .dtype = dtype,
		       .tag = 42};
	const void *frames[2] = {payload, tail};
	size_t sizes[2] = {plen, tlen};
	wf_ps_hdr_encode(&h, hb, frames, sizes, plen ? (tail ? 2 : 1) : 0);
	size_t n = 0;
	out[n++] = WF_PS_HEADER_BYTES;
	out[n++] = 0;
	memcpy(out + n, hb, WF_PS_HEADER_BYTES);
	n += WF_PS_HEADER_BYTES;
	if (plen) {
		out[n++] = (uint8_t)plen;
		out[n++] = (uint8_t)(plen >> 8);
		memcpy(out + n, payload, plen);
		n += plen;
	}
	if (plen && tail) {
		out[n++] = (uint8_t)tlen;
		out[n++] = (uint8_t)(tlen >> 8);
		memcpy(out + n, tail, tlen);
		n += tlen;
	}
	put("fuzz_ps_msg", name, out, n);
}

static void msg(const char *name, uint16_t op, uint32_t flags, uint32_t chunk, uint16_t dtype,
		const void *payload, size_t plen)
{
	msg2(name, op, flags, chunk, dtype, payload, plen, NULL, 0);
}

int main(int argc, char **argv)
{
	root = argc > 1 ? argv[1] : "tests/fuzz/seeds";
	float four[4] = {1, 2, 3, 4}, sixteen[16] = {0.5f}, two[2] = {-1, 1};
	msg("register", WF_PS_OP_REGISTER, 0, 0, WF_PS_DTYPE_NONE, NULL, 0);
	msg("push_pull", WF_PS_OP_PUSH_PULL, 0, 0, WF_PS_DTYPE_F32, four, sizeof(four));
	msg("push_pull_chunk1", WF_PS_OP_PUSH_PULL, 0, 1, WF_PS_DTYPE_F32, sixteen,
	    sizeof(sixteen));
	msg("pull_reply", WF_PS_OP_PULL, WF_PS_FLAG_REPLY, 0, WF_PS_DTYPE_F32, four, sizeof(four));
	msg("init_state", WF_PS_OP_INIT, WF_PS_FLAG_STATE, WF_PS_STATE_CHUNK, WF_PS_DTYPE_F32, two,
	    sizeof(two));
	msg("barrier", WF_PS_OP_BARRIER, 0, 0, WF_PS_DTYPE_NONE, NULL, 0);
	msg("heartbeat", WF_PS_OP_HEARTBEAT, 0, 0, WF_PS_DTYPE_NONE, NULL, 0);
	msg("leave", WF_PS_OP_LEAVE, 0, 0, WF_PS_DTYPE_NONE, NULL, 0);
	msg("error_reply", WF_PS_OP_PUSH_PULL, WF_PS_FLAG_REPLY | WF_PS_FLAG_ERROR, 0,
	    WF_PS_DTYPE_BYTES, "bad step", 8);
	msg("stats", WF_PS_OP_STATS, 0, 0, WF_PS_DTYPE_NONE, NULL, 0);
	msg("replicate", WF_PS_OP_REPLICATE, 0, 0, WF_PS_DTYPE_F32, four, sizeof(four));
	msg("join", WF_PS_OP_JOIN, WF_PS_FLAG_FAILOVER, 1, WF_PS_DTYPE_NONE, NULL, 0);
	/* topk pushes: chunk 0 (4 floats) with 2 entries, chunk 1 (16) with 3,
	 * and a hostile one whose indices run backwards past the chunk */
	uint32_t k2[4] = {1, 3, 0x3f800000u, 0xc0000000u};	  /* {1, 3}: {1.0, -2.0} */
	uint32_t k3[6] = {0, 7, 15, 0x3f000000u, 0x3f000000u, 0}; /* {0, 7, 15} */
	uint32_t kbad[4] = {9, 2, 0x3f800000u, 0x3f800000u};
	msg("push_pull_topk", WF_PS_OP_PUSH_PULL, 0, 0, WF_PS_DTYPE_TOPK, k2, sizeof(k2));
	msg("push_pull_topk_chunk1", WF_PS_OP_PUSH_PULL, 0, 1, WF_PS_DTYPE_TOPK, k3, sizeof(k3));
	msg("push_pull_topk_bad", WF_PS_OP_PUSH_PULL, 0, 0, WF_PS_DTYPE_TOPK, kbad, sizeof(kbad));
	msg("redirect_reply", WF_PS_OP_PUSH_PULL,
	    WF_PS_FLAG_REPLY | WF_PS_FLAG_ERROR | WF_PS_FLAG_REDIRECT, 0, WF_PS_DTYPE_BYTES,
	    "ps 1 is a backup of group 0", 27);
	/* a primary's data units for 4 workers: per epoch 30, next 12, W 4, Q 1,
	 * E 1; units, applied steps, the queue, applied and re-queued counts */
	int64_t units[16] = {30, 12, 4, 1, 1, 8, 9, -1, 11, 5, 5, -1, 5, 10, 8, 2};
	uint8_t uf[sizeof(units)];
	for (int i = 0; i < 16; i++)
		wf_ps_put_u64(uf + 8 * i, (uint64_t)units[i]);
	sender_role = WF_PS_ROLE_SERVER;
	msg("units", WF_PS_OP_UNITS, 0, 0, WF_PS_DTYPE_BYTES, uf, sizeof(uf));
	/* the same with elastic_batch global's tail: dealt, the lists' lengths
	 * (2, 1, 0, 1) and worker 0's second unit */
	int64_t tail[6] = {1, 2, 1, 0, 1, 12};
	uint8_t ut[sizeof(units) + sizeof(tail)];
	memcpy(ut, uf, sizeof(uf));
	for (int i = 0; i < 6; i++)
		wf_ps_put_u64(ut + sizeof(uf) + 8 * i, (uint64_t)tail[i]);
	msg("units_lists", WF_PS_OP_UNITS, 0, 0, WF_PS_DTYPE_BYTES, ut, sizeof(ut));
	sender_role = WF_PS_ROLE_WORKER;
	/* a pull reply handing out a worker's unit list (elastic_batch global) */
	uint8_t ul[16];
	wf_ps_put_u64(ul, 12);
	wf_ps_put_u64(ul + 8, 13);
	msg2("pull_reply_units", WF_PS_OP_PULL, WF_PS_FLAG_REPLY | WF_PS_FLAG_UNITS, 0,
	     WF_PS_DTYPE_F32, four, sizeof(four), ul, sizeof(ul));

	/* fuzz_ckpt: a shard of its fixed layout (byte 0 even) and DONE lists (odd) */
	char tmp[] = "/tmp/weft_seeds_XXXXXX", p[600];
	if (!mkdtemp(tmp))
		return 1;
	float vals[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, m[2][4] = {{0}}, v[2][4] = {{0}};
	float state[3] = {0.1f, 0.2f, 0.3f};
	wf_ps_shard_chunk c[2];
	for (int i = 0; i < 2; i++)
		c[i] = (wf_ps_shard_chunk){.index = i,
					   .offset = (size_t)(4 * i),
					   .count = 4,
					   .version = 3,
					   .values = vals[i],
					   .slot = {m[i], v[i]}};
	wf_err err = {0};
	snprintf(p, sizeof(p), "%s/step-1/ps-0-of-1.h5", tmp);
	if (wf_ps_shard_save(p, 0, 1, 1, c, 2, 2, state, 3, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	char *data;
	size_t n;
	if (wf_read_file(p, &data, &n) != 0)
		return 1;
	char *buf = malloc(n + 1);
	buf[0] = 0;
	memcpy(buf + 1, data, n);
	put("fuzz_ckpt", "shard", buf, n + 1);
	free(buf);
	free(data);
	unlink(p);
	snprintf(p, sizeof(p), "%s/step-1/model.h5", tmp);
	FILE *f = fopen(p, "wb");
	fputs("model bytes", f);
	fclose(f);
	snprintf(p, sizeof(p), "%s/step-1", tmp);
	if (wf_ckptdir_seal(p, 1, &err) != 0)
		return 1;
	snprintf(p, sizeof(p), "%s/step-1/DONE", tmp);
	if (wf_read_file(p, &data, &n) != 0)
		return 1;
	buf = malloc(n + 1);
	buf[0] = 1;
	memcpy(buf + 1, data, n);
	put("fuzz_ckpt", "done", buf, n + 1);
	put("fuzz_ckpt", "done-legacy-empty", "\x01", 1);
	free(buf);
	free(data);
	snprintf(p, sizeof(p), "rm -rf '%s'", tmp);
	return system(p) == 0 ? 0 : 1;
}
