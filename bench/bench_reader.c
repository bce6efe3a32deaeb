/* bench_reader: images/s the dataset reader delivers (decode of an encoded
 * dataset + augmentation + preprocessing, on --threads), medians of --reps
 * runs of --steps batches after one warm-up batch.
 *
 *   bench_reader DATASET [--threads 2] [--batch 32] [--steps 20] [--reps 3]
 *                [--no-augment]
 */
#include "common/util.h"
#include "worker/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	const char *path = NULL;
	int threads = 2, batch = 32, steps = 20, reps = 3, augment = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--threads") && v)
			threads = atoi(argv[++i]);
		else if (!strcmp(a, "--batch") && v)
			batch = atoi(argv[++i]);
		else if (!strcmp(a, "--steps") && v)
			steps = atoi(argv[++i]);
		else if (!strcmp(a, "--reps") && v)
			reps = atoi(argv[++i]);
		else if (!strcmp(a, "--no-augment"))
			augment = 0;
		else if (a[0] != '-' && !path)
			path = a;
		else {
			fprintf(stderr, "usage: bench_reader DATASET [--threads N] [--batch N] "
					"[--steps N] [--reps N] [--no-augment]\n");
			return 2;
		}
	}
	if (!path || threads < 1 || batch < 1 || steps < 1 || reps < 1 || reps > 64) {
		fprintf(stderr,
			"bench_reader: DATASET and positive --threads/--batch/--steps/--reps\n");
		return 2;
	}
	wf_err err = {0};
	wf_dataset *ds = NULL;
	if (wf_dataset_open(&ds, path, &err)) {
		fprintf(stderr, "bench_reader: %s\n", err.msg);
		return 1;
	}
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	double t[64];
	for (int r = 0; r < reps; r++) {
		wf_reader_cfg c;
		wf_reader_cfg_default(&c);
		c.batch = batch;
		c.threads = threads;
		c.prefetch = 1;
		c.seed = (uint64_t)r + 1;
		if (augment) {
			c.flip = c.rrc = 1;
			c.brightness = c.contrast = c.saturation = 0.2f;
		}
		wf_reader *rd = NULL;
		wf_batch *b = NULL;
		if (wf_reader_create(&rd, ds, &c, &err) || wf_reader_next(rd, &b, &err) != 1) {
			fprintf(stderr, "bench_reader: %s\n", err.msg);
			return 1;
		}
		double t0 = wf_now();
		for (int s = 0; s < steps; s++)
			if (wf_reader_next(rd, &b, &err) != 1) {
				fprintf(stderr, "bench_reader: %s\n", err.msg);
				return 1;
			}
		t[r] = (double)steps * batch / (wf_now() - t0);
		wf_reader_free(rd);
	}
	printf("reader: %s (%ld samples %dx%dx%d, %s), %d threads, batch %d, augment %s: "
	       "%.1f images/s (median of %d)\n",
	       path, in->count, in->h, in->w, in->c, in->encoded ? "encoded" : "pixels", threads,
	       batch, augment ? "flip+rrc+jitter" : "off", wf_median(t, reps), reps);
	wf_dataset_close(ds);
	return 0;
}
