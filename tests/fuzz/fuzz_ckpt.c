/* fuzz_ckpt.c: libFuzzer target for the checkpoint readers: a parameter
 * server's shard file (ps/shard.c, wf_ps_shard_load against a fixed layout
 * of 2 chunks of 4 floats, 2 optimizer slots and 3 state floats) and a step
 * directory's DONE list (common/ckptdir, wf_ckptdir_verify over one file).
 * The first byte picks the reader; the rest is the file. Any input gives 0
 * or an error with a message, never a crash. */
#include "common/ckptdir.h"
#include "common/util.h"
#include "ps/shard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1:detect_leaks=0";
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	char p[300];
	snprintf(dir, sizeof(dir), "/tmp/weft_fuzz_ckpt_%ld/step-1", (long)getpid());
	wf_mkdirs(dir);
	snprintf(p, sizeof(p), "%s/model.h5", dir); /* what the DONE seeds describe */
	FILE *f = fopen(p, "wb");
	if (f) {
		fputs("model bytes", f);
		fclose(f);
	}
	return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return;
	if (size)
		fwrite(data, 1, size, f);
	fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1 << 20))
		return 0;
	char path[300];
	wf_err err = {0};
	if (data[0] & 1) {
		snprintf(path, sizeof(path), "%s/DONE", dir);
		write_file(path, data + 1, size - 1);
		if (wf_ckptdir_verify(dir, "model.h5", &err) != 0 && !err.msg[0])
			__builtin_trap();
		unlink(path);
		return 0;
	}
	snprintf(path, sizeof(path), "%s/ps-0-of-1.h5", dir);
	write_file(path, data + 1, size - 1);
	float values[2][4], m[2][4], v[2][4], state[3];
	wf_ps_shard_chunk c[2];
	for (int i = 0; i < 2; i++)
		c[i] = (wf_ps_shard_chunk){.index = i,
					   .offset = (size_t)(4 * i),
					   .count = 4,
					   .values = values[i],
					   .slot = {m[i], v[i]}};
	long step = -1;
	if (wf_ps_shard_load(path, 0, 1, c, 2, 2, state, 3, &step, &err) != 0 && !err.msg[0])
		__builtin_trap();
	unlink(path);
	return 0;
}
