/* fuzz_data.c: libFuzzer target for the data inputs a user hands weft: the
 * CIFAR-10 batch parser and the dataset file opener (then a read, a gather
 * and a reader pass over whatever opened). The first input byte picks the
 * parser; the rest is written to a temporary file and opened as such. */
#include "worker/data.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char in_path[256], out_path[256];

/* libhdf5 is not ours: it asks malloc for absurd sizes on corrupt headers
 * (and copes with NULL), and leaks when an open of a corrupt object fails. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1:detect_leaks=0";
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	snprintf(in_path, sizeof(in_path), "/tmp/weft_fuzz_data_%ld.in", (long)getpid());
	snprintf(out_path, sizeof(out_path), "/tmp/weft_fuzz_data_%ld.h5", (long)getpid());
	/* stream every file: exercises the gather path and bounds memory */
	wf_dataset_set_memory_mb(0); /* WEFT_DATA_MEMORY_MB=0 */
	return 0;
}

static int write_input(const uint8_t *data, size_t size)
{
	FILE *f = fopen(in_path, "wb");
	if (!f)
		return -1;
	size_t n = size ? fwrite(data, 1, size, f) : 0;
	fclose(f);
	return n == size ? 0 : -1;
}

/* Everything a worker does with an opened dataset, bounded. */
static void exercise(const char *path)
{
	wf_err err;
	wf_dataset *ds = NULL;
	if (wf_dataset_open(&ds, path, &err) != 0)
		return;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	size_t sb = (size_t)in->h * in->w * in->c;
	if (in->count < 1 || sb > (1 << 20))
		goto out;
	long n = in->count < 4 ? in->count : 4;
	uint8_t *img = malloc(sb * (size_t)n);
	int32_t lab[4];
	if (img) {
		long idx[4] = {in->count - 1, 0, in->count / 2, 0};
		wf_dataset_read(ds, 0, n, img, lab, &err);
		wf_dataset_gather(ds, idx, n, img, lab, &err);
		free(img);
	}
	wf_reader_cfg cfg;
	wf_reader_cfg_default(&cfg);
	cfg.batch = (int)n;
	cfg.augment = 1;
	cfg.pad = 2;
	wf_reader *r = NULL;
	if (wf_reader_create(&r, ds, &cfg, &err) == 0) {
		wf_batch *b;
		for (int s = 0; s < 2 && wf_reader_next(r, &b, &err) == 1; s++)
			;
		wf_reader_free(r);
	}
out:
	wf_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1 << 20))
		return 0;
	wf_err err;
	if (write_input(data + 1, size - 1) != 0)
		return 0;
	if (data[0] & 1) {
		const char *files[] = {in_path};
		if (wf_data_cifar10(out_path, files, 1, &err) == 0)
			exercise(out_path);
		unlink(out_path);
	} else {
		exercise(in_path);
	}
	unlink(in_path);
	return 0;
}
