/* test_reader.c: the reader's promises from data.h: W readers of one slice
 * each see exactly what one reader of W slices sees; a resumed reader sees what
 * it would have seen; evaluation covers every sample once; augmentation is a
 * deterministic crop/flip; streaming equals in-memory; thread errors surface. */
#include "worker/data.h"

#include "common/util.h"
#include "tests/test.h"

#include <hdf5.h>

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[256];
static char indexed_path[512]; /* images carry their own index: bytes 0, 1 */
static char synth_path[512];

#define IDX_N	 100
#define IDX_SIDE 4

static int make_indexed(const char *path, long n)
{
	wf_err err = {0};
	const char *names[] = {"a", "b", "c"};
	wf_dataset_writer *wr = NULL;
	int rc = wf_dataset_create(&wr, path, n, IDX_SIDE, IDX_SIDE, 1, 3, names, &err);
	for (long i = 0; i < n && !rc; i++) {
		uint8_t img[IDX_SIDE * IDX_SIDE];
		for (int j = 0; j < IDX_SIDE * IDX_SIDE; j++)
			img[j] = (uint8_t)(j + 2);
		img[0] = (uint8_t)(i & 0xff);
		img[1] = (uint8_t)(i >> 8);
		int32_t lab = (int32_t)(i % 3);
		rc = wf_dataset_append(wr, img, &lab, 1, &err);
	}
	int rc2 = wf_dataset_writer_close(wr, &err);
	if (rc || rc2)
		fprintf(stderr, "make_indexed: %s\n", err.msg);
	return rc ? rc : rc2;
}

/* A reader config that leaves pixel values as they are. */
static wf_reader_cfg raw_cfg(int batch, int first, int slices, int total)
{
	wf_reader_cfg c;
	wf_reader_cfg_default(&c);
	c.batch = batch;
	c.first = first;
	c.slices = slices;
	c.total_slices = total;
	c.seed = 42;
	c.scale = 1.0f;
	return c;
}

static long sample_index(const wf_batch *b, int k)
{
	const float *img = b->images + (size_t)k * IDX_SIDE * IDX_SIDE;
	return (long)img[0] + 256 * (long)img[1];
}

static size_t sample_floats(wf_dataset *ds)
{
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	return (size_t)in->h * in->w * in->c;
}

/* Copy the next batch's images and labels out of the reader. */
static int next_copy(wf_reader *r, size_t floats, float *img, int32_t *lab, wf_batch *meta)
{
	wf_err err = {0};
	wf_batch *b = NULL;
	int rc = wf_reader_next(r, &b, &err);
	if (rc != 1) {
		fprintf(stderr, "wf_reader_next: %d %s\n", rc, err.msg);
		return rc;
	}
	memcpy(img, b->images, sizeof(float) * floats * (size_t)b->n);
	memcpy(lab, b->labels, sizeof(int32_t) * (size_t)b->n);
	*meta = *b;
	return 1;
}

static void test_one_reader_of_two_slices_equals_two_readers(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, synth_path, &err), 0);
	if (!ds)
		return;
	size_t fl = sample_floats(ds);
	const int batch = 8;
	wf_reader_cfg c2 = raw_cfg(batch, 0, 2, 2), ca = raw_cfg(batch, 0, 1, 2),
		      cb = raw_cfg(batch, 1, 1, 2);
	c2.augment = ca.augment = cb.augment = 1;
	c2.prefetch = 1;
	ca.prefetch = 3;
	wf_reader *r2 = NULL, *ra = NULL, *rb = NULL;
	WF_CHECK_INT(wf_reader_create(&r2, ds, &c2, &err), 0);
	WF_CHECK_INT(wf_reader_create(&ra, ds, &ca, &err), 0);
	WF_CHECK_INT(wf_reader_create(&rb, ds, &cb, &err), 0);
	if (!r2 || !ra || !rb)
		goto out;
	long spe = wf_reader_steps_per_epoch(r2);
	WF_CHECK_INT(spe, 160 / 16);
	WF_CHECK_INT(wf_reader_steps_per_epoch(ra), spe);
	float *i2 = malloc(sizeof(float) * fl * 2 * batch),
	      *ia = malloc(sizeof(float) * fl * batch), *ib = malloc(sizeof(float) * fl * batch);
	int32_t l2[16], la[8], lb[8];
	wf_batch m2, ma, mb;
	for (long s = 0; s < spe + 3; s++) { /* across the epoch boundary */
		if (next_copy(r2, fl, i2, l2, &m2) != 1 || next_copy(ra, fl, ia, la, &ma) != 1 ||
		    next_copy(rb, fl, ib, lb, &mb) != 1) {
			WF_CHECK(0);
			break;
		}
		WF_CHECK_INT(m2.step, s);
		WF_CHECK_INT(m2.epoch, s / spe);
		WF_CHECK_INT(ma.epoch, s / spe);
		WF_CHECK_INT(m2.n, 2 * batch);
		WF_CHECK_INT(ma.n, batch);
		WF_CHECK_MSG(memcmp(i2, ia, sizeof(float) * fl * batch) == 0, "step %ld slice 0",
			     s);
		WF_CHECK_MSG(memcmp(i2 + fl * batch, ib, sizeof(float) * fl * batch) == 0,
			     "step %ld slice 1", s);
		WF_CHECK(memcmp(l2, la, sizeof(la)) == 0);
		WF_CHECK(memcmp(l2 + batch, lb, sizeof(lb)) == 0);
	}
	free(i2);
	free(ia);
	free(ib);
out:
	wf_reader_free(r2);
	wf_reader_free(ra);
	wf_reader_free(rb);
	wf_dataset_close(ds);
}

static void test_epoch_is_a_permutation_and_epochs_differ(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, indexed_path, &err), 0);
	if (!ds)
		return;
	wf_reader_cfg c = raw_cfg(10, 0, 1, 3); /* G = 30: 3 steps per epoch, 10 dropped */
	wf_reader *r = NULL;
	WF_CHECK_INT(wf_reader_create(&r, ds, &c, &err), 0);
	if (!r)
		goto out;
	WF_CHECK_INT(wf_reader_steps_per_epoch(r), 3);
	/* take all three slices by running three readers */
	wf_reader *rs[3] = {r, NULL, NULL};
	for (int k = 1; k < 3; k++) {
		wf_reader_cfg ck = raw_cfg(10, k, 1, 3);
		WF_CHECK_INT(wf_reader_create(&rs[k], ds, &ck, &err), 0);
	}
	long order[2][90];
	for (int e = 0; e < 2; e++) {
		int seen[IDX_N] = {0};
		for (int s = 0; s < 3; s++) {
			for (int k = 0; k < 3; k++) {
				wf_batch *b = NULL;
				if (!rs[k] || wf_reader_next(rs[k], &b, &err) != 1) {
					WF_CHECK(0);
					goto free_readers;
				}
				for (int j = 0; j < b->n; j++) {
					long i = sample_index(b, j);
					WF_CHECK(i >= 0 && i < IDX_N);
					if (i < 0 || i >= IDX_N)
						continue;
					seen[i]++;
					order[e][s * 30 + k * 10 + j] = i;
					WF_CHECK_INT(b->labels[j], i % 3);
				}
			}
		}
		int distinct = 0;
		for (int i = 0; i < IDX_N; i++) {
			WF_CHECK(seen[i] <= 1);
			distinct += seen[i] == 1;
		}
		WF_CHECK_INT(distinct, 90);
	}
	WF_CHECK(memcmp(order[0], order[1], sizeof(order[0])) != 0);
free_readers:
	for (int k = 0; k < 3; k++)
		wf_reader_free(rs[k]);
out:
	wf_dataset_close(ds);
}

static void test_resume_at_step_reads_the_same_batch(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, synth_path, &err), 0);
	if (!ds)
		return;
	size_t fl = sample_floats(ds);
	wf_reader_cfg c = raw_cfg(16, 0, 1, 1);
	c.augment = 1;
	wf_reader *r0 = NULL;
	WF_CHECK_INT(wf_reader_create(&r0, ds, &c, &err), 0);
	long spe = r0 ? wf_reader_steps_per_epoch(r0) : 0;
	const long s = spe + 2; /* in the second epoch */
	float *a = malloc(sizeof(float) * fl * 16), *b = malloc(sizeof(float) * fl * 16);
	int32_t la[16], lb[16];
	wf_batch ma = {0}, mb = {0};
	for (long i = 0; r0 && i <= s; i++)
		WF_CHECK_INT(next_copy(r0, fl, a, la, &ma), 1);
	c.start_step = s;
	wf_reader *rs = NULL;
	WF_CHECK_INT(wf_reader_create(&rs, ds, &c, &err), 0);
	if (rs)
		WF_CHECK_INT(next_copy(rs, fl, b, lb, &mb), 1);
	WF_CHECK_INT(ma.step, s);
	WF_CHECK_INT(mb.step, s);
	WF_CHECK_INT(mb.epoch, 1);
	WF_CHECK(memcmp(a, b, sizeof(float) * fl * 16) == 0);
	WF_CHECK(memcmp(la, lb, sizeof(la)) == 0);
	free(a);
	free(b);
	wf_reader_free(r0);
	wf_reader_free(rs);
	wf_dataset_close(ds);
}

static void test_eval_covers_every_sample_once_in_file_order(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, indexed_path, &err), 0);
	if (!ds)
		return;
	wf_reader_cfg c = raw_cfg(16, 0, 1, 1);
	c.shuffle = 0;
	wf_reader *r = NULL;
	WF_CHECK_INT(wf_reader_create(&r, ds, &c, &err), 0);
	if (!r)
		goto out;
	WF_CHECK_INT(wf_reader_steps_per_epoch(r), 7);
	long next = 0;
	int batches = 0;
	wf_batch *b = NULL;
	int rc;
	while ((rc = wf_reader_next(r, &b, &err)) == 1) {
		WF_CHECK_INT(b->step, batches);
		WF_CHECK_INT(b->n, batches < 6 ? 16 : 4);
		for (int j = 0; j < b->n; j++, next++)
			WF_CHECK_INT(sample_index(b, j), next);
		batches++;
	}
	WF_CHECK_INT(rc, 0);
	WF_CHECK_INT(batches, 7);
	WF_CHECK_INT(next, IDX_N);
	WF_CHECK_INT(wf_reader_next(r, &b, &err), 0); /* stays at the end */
	wf_reader_free(r);

	/* split over two readers (total_slices 2), still every sample once */
	int seen[IDX_N] = {0};
	for (int k = 0; k < 2; k++) {
		wf_reader_cfg ck = raw_cfg(16, k, 1, 2);
		ck.shuffle = 0;
		WF_CHECK_INT(wf_reader_create(&r, ds, &ck, &err), 0);
		while (r && wf_reader_next(r, &b, &err) == 1)
			for (int j = 0; j < b->n; j++)
				seen[sample_index(b, j)]++;
		wf_reader_free(r);
	}
	for (int i = 0; i < IDX_N; i++)
		WF_CHECK_MSG(seen[i] == 1, "sample %d seen %d times", i, seen[i]);
out:
	wf_dataset_close(ds);
}

/* 1 when aug is a crop (offsets in [0, 2*pad] of the zero-padded image),
 * maybe flipped, of orig; both preprocessed with scale 1. */
static int is_crop_flip(const float *orig, const float *aug, int h, int w, int c, int pad)
{
	for (int flip = 0; flip < 2; flip++)
		for (int oy = 0; oy <= 2 * pad; oy++)
			for (int ox = 0; ox <= 2 * pad; ox++) {
				int ok = 1;
				for (int y = 0; y < h && ok; y++)
					for (int x = 0; x < w && ok; x++) {
						int sy = y + oy - pad;
						int sx = (flip ? w - 1 - x : x) + ox - pad;
						for (int ch = 0; ch < c && ok; ch++) {
							float want = 0.0f;
							if (sy >= 0 && sy < h && sx >= 0 && sx < w)
								want = orig[(sy * w + sx) * c + ch];
							ok = aug[(y * w + x) * c + ch] == want;
						}
					}
				if (ok)
					return 1;
			}
	return 0;
}

static void test_augmentation_is_deterministic_and_crops_and_flips(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, synth_path, &err), 0);
	if (!ds)
		return;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	size_t fl = sample_floats(ds);
	const int batch = 32;
	wf_reader_cfg cp = raw_cfg(batch, 0, 1, 1), ca = raw_cfg(batch, 0, 1, 1);
	ca.augment = 1;
	ca.pad = 3;
	wf_reader *rp = NULL, *ra = NULL, *ra2 = NULL;
	WF_CHECK_INT(wf_reader_create(&rp, ds, &cp, &err), 0);
	WF_CHECK_INT(wf_reader_create(&ra, ds, &ca, &err), 0);
	WF_CHECK_INT(wf_reader_create(&ra2, ds, &ca, &err), 0);
	float *p = malloc(sizeof(float) * fl * batch), *a = malloc(sizeof(float) * fl * batch),
	      *a2 = malloc(sizeof(float) * fl * batch);
	int32_t lp[32], la[32], la2[32];
	wf_batch m;
	int changed = 0;
	for (int s = 0; s < 3 && rp && ra && ra2; s++) {
		WF_CHECK_INT(next_copy(rp, fl, p, lp, &m), 1);
		WF_CHECK_INT(next_copy(ra, fl, a, la, &m), 1);
		WF_CHECK_INT(next_copy(ra2, fl, a2, la2, &m), 1);
		WF_CHECK(memcmp(a, a2, sizeof(float) * fl * batch) == 0);
		WF_CHECK(memcmp(lp, la, sizeof(lp)) == 0); /* same samples, same order */
		for (int k = 0; k < batch; k++) {
			const float *o = p + fl * k, *g = a + fl * k;
			int diff = memcmp(o, g, sizeof(float) * fl) != 0;
			changed += diff;
			WF_CHECK_MSG(is_crop_flip(o, g, in->h, in->w, in->c, ca.pad),
				     "step %d sample %d is not a crop/flip of the original", s, k);
		}
	}
	WF_CHECK_MSG(changed > 3 * batch / 2, "only %d of %d images changed", changed, 3 * batch);

	/* a different seed augments differently */
	wf_reader *rb = NULL;
	ca.seed = 43;
	WF_CHECK_INT(wf_reader_create(&rb, ds, &ca, &err), 0);
	if (rb) {
		WF_CHECK_INT(next_copy(rb, fl, a2, la2, &m), 1);
		WF_CHECK(memcmp(la, la2, sizeof(la)) != 0 ||
			 memcmp(a, a2, sizeof(float) * fl * batch) != 0);
	}
	free(p);
	free(a);
	free(a2);
	wf_reader_free(rp);
	wf_reader_free(ra);
	wf_reader_free(ra2);
	wf_reader_free(rb);
	wf_dataset_close(ds);
}

static void test_preprocessing_applies_scale_mean_std(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, indexed_path, &err), 0);
	if (!ds)
		return;
	wf_reader_cfg c = raw_cfg(4, 0, 1, 1);
	c.shuffle = 0;
	c.scale = 0.5f;
	c.mean[0] = 1.0f;
	c.std[0] = 4.0f;
	wf_reader *r = NULL;
	wf_batch *b = NULL;
	WF_CHECK_INT(wf_reader_create(&r, ds, &c, &err), 0);
	if (r && wf_reader_next(r, &b, &err) == 1) {
		/* sample 3: byte 0 = 3, byte 5 = 7 */
		float *img = b->images + 3 * IDX_SIDE * IDX_SIDE;
		WF_CHECK_NEAR(img[0], (3 * 0.5 - 1.0) / 4.0, 1e-6);
		WF_CHECK_NEAR(img[5], (7 * 0.5 - 1.0) / 4.0, 1e-6);
	} else {
		WF_CHECK(0);
	}
	wf_reader_free(r);
	wf_dataset_close(ds);
}

static void test_streaming_reader_equals_in_memory_reader(void)
{
	wf_err err = {0};
	wf_dataset *mem = NULL, *str = NULL;
	WF_CHECK_INT(wf_dataset_open(&mem, synth_path, &err), 0);
	wf_dataset_set_memory_mb(0); /* WEFT_DATA_MEMORY_MB=0 */
	WF_CHECK_INT(wf_dataset_open(&str, synth_path, &err), 0);
	wf_dataset_set_memory_mb(-1); /* the default */
	if (!mem || !str)
		goto out;
	size_t fl = sample_floats(mem);
	wf_reader_cfg c = raw_cfg(24, 1, 2, 3);
	c.augment = 1;
	wf_reader *rm = NULL, *rs = NULL;
	WF_CHECK_INT(wf_reader_create(&rm, mem, &c, &err), 0);
	WF_CHECK_INT(wf_reader_create(&rs, str, &c, &err), 0);
	float *a = malloc(sizeof(float) * fl * 48), *b = malloc(sizeof(float) * fl * 48);
	int32_t la[48], lb[48];
	wf_batch m;
	for (int s = 0; s < 6 && rm && rs; s++) {
		WF_CHECK_INT(next_copy(rm, fl, a, la, &m), 1);
		WF_CHECK_INT(next_copy(rs, fl, b, lb, &m), 1);
		WF_CHECK(memcmp(a, b, sizeof(float) * fl * 48) == 0);
		WF_CHECK(memcmp(la, lb, sizeof(la)) == 0);
	}
	free(a);
	free(b);
	wf_reader_free(rm);
	wf_reader_free(rs);
out:
	wf_dataset_close(mem);
	wf_dataset_close(str);
}

static void test_free_while_thread_blocked_or_busy(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, synth_path, &err), 0);
	if (!ds)
		return;
	wf_reader_cfg c = raw_cfg(16, 0, 1, 1);
	c.prefetch = 1;
	for (int i = 0; i < 20; i++) {
		wf_reader *r = NULL;
		WF_CHECK_INT(wf_reader_create(&r, ds, &c, &err), 0);
		wf_batch *b = NULL;
		if (i % 2 == 0)
			WF_CHECK_INT(wf_reader_next(r, &b, &err), 1);
		if (i % 4 == 0) { /* the thread fills the ring and blocks */
			int slots = 1, ready = 0;
			for (double t0 = wf_now(); wf_now() - t0 < 10; usleep(1000))
				if ((ready = wf_reader_ready(r, &slots)) == slots)
					break;
			WF_CHECK_MSG(ready == slots, "the ring never filled (%d of %d)", ready,
				     slots);
		}
		wf_reader_free(r);
	}
	wf_dataset_close(ds);
}

static void test_bad_configs_are_errors(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, indexed_path, &err), 0);
	if (!ds)
		return;
	wf_reader *r = NULL;
	wf_reader_cfg c = raw_cfg(8, 2, 1, 2);
	WF_CHECK(wf_reader_create(&r, ds, &c, &err) < 0 && r == NULL);
	WF_CHECK(strstr(err.msg, "total_slices") != NULL);
	c = raw_cfg(64, 0, 1, 2); /* G = 128 > 100 samples */
	WF_CHECK(wf_reader_create(&r, ds, &c, &err) < 0 && r == NULL);
	WF_CHECK(strstr(err.msg, "100 samples") != NULL);
	c = raw_cfg(8, 0, 1, 1);
	c.std[0] = 0.0f;
	WF_CHECK(wf_reader_create(&r, ds, &c, &err) < 0 && r == NULL);
	WF_CHECK(strstr(err.msg, "std") != NULL);
	c = raw_cfg(8, 0, 1, 1);
	c.prefetch = 0;
	WF_CHECK(wf_reader_create(&r, ds, &c, &err) < 0 && r == NULL);
	wf_dataset_close(ds);
}

/* A dataset whose last images chunk is corrupt: deflate-compressed chunks,
 * the last one replaced by bytes that do not inflate. Opening it streaming
 * succeeds (the chunk is only read with the samples in it). */
static void write_corrupt_chunk_file(const char *path)
{
	hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	hsize_t dims[4] = {32, 4, 4, 3}, chunk[4] = {8, 4, 4, 3};
	hid_t s = H5Screate_simple(4, dims, NULL), p = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_chunk(p, 4, chunk);
	H5Pset_deflate(p, 1);
	hid_t d = H5Dcreate2(f, "images", H5T_STD_U8LE, s, H5P_DEFAULT, p, H5P_DEFAULT);
	uint8_t img[32 * 48];
	for (size_t i = 0; i < sizeof(img); i++)
		img[i] = (uint8_t)i;
	H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, img);
	uint8_t junk[64];
	memset(junk, 0xa5, sizeof(junk));
	hsize_t off[4] = {24, 0, 0, 0};
	H5Dwrite_chunk(d, H5P_DEFAULT, 0, off, sizeof(junk), junk);
	H5Dclose(d);
	H5Pclose(p);
	H5Sclose(s);
	hsize_t n = 32, nc = 1;
	int32_t lab[32] = {0};
	s = H5Screate_simple(1, &n, NULL);
	d = H5Dcreate2(f, "labels", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab);
	H5Dclose(d);
	H5Sclose(s);
	const char *names[] = {"only"};
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	s = H5Screate_simple(1, &nc, NULL);
	hid_t a = H5Acreate2(f, "classes", t, s, H5P_DEFAULT, H5P_DEFAULT);
	H5Awrite(a, t, names);
	H5Aclose(a);
	H5Sclose(s);
	H5Tclose(t);
	H5Fclose(f);
}

static void test_thread_error_is_reported_by_next(void)
{
	wf_err err = {0};
	char path[600];
	snprintf(path, sizeof(path), "%s/corrupt_chunk.h5", tmpdir);
	write_corrupt_chunk_file(path);
	wf_dataset *ds = NULL;
	/* loading it whole fails at open, naming the file */
	WF_CHECK(wf_dataset_open(&ds, path, &err) < 0 && ds == NULL);
	WF_CHECK_MSG(strstr(err.msg, "corrupt_chunk.h5") != NULL, "%s", err.msg);
	wf_dataset_set_memory_mb(0); /* WEFT_DATA_MEMORY_MB=0 */
	WF_CHECK_INT(wf_dataset_open(&ds, path, &err), 0);
	wf_dataset_set_memory_mb(-1); /* the default */
	if (!ds)
		return;
	wf_reader_cfg c = raw_cfg(32, 0, 1, 1); /* every batch needs the bad chunk */
	wf_reader *r = NULL;
	WF_CHECK_INT(wf_reader_create(&r, ds, &c, &err), 0);
	wf_batch *b = NULL;
	int rc = r ? wf_reader_next(r, &b, &err) : 0;
	WF_CHECK_MSG(rc < 0, "next returned %d", rc);
	WF_CHECK_MSG(strstr(err.msg, "corrupt_chunk.h5") != NULL, "%s", err.msg);
	if (r)
		WF_CHECK(wf_reader_next(r, &b, &err) < 0); /* and keeps saying so */
	wf_reader_free(r);
	wf_dataset_close(ds);
}

/* Each augmentation switch on its own: deterministic from the seed, the same
 * bytes whatever the thread count, and it changes the images; flip alone
 * gives each image or its mirror. */
static void test_each_augmentation_switch_on_its_own(void)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, synth_path, &err), 0);
	if (!ds)
		return;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	size_t fl = sample_floats(ds);
	const int batch = 16;
	float *p = malloc(sizeof(float) * fl * batch), *a = malloc(sizeof(float) * fl * batch),
	      *a2 = malloc(sizeof(float) * fl * batch);
	int32_t lp[16], la[16];
	wf_batch m;
	for (int sw = 0; sw < 6; sw++) {
		wf_reader_cfg cp = raw_cfg(batch, 0, 1, 1), ca = cp;
		const char *name[] = {"flip",	    "crop",	"random_resized_crop",
				      "brightness", "contrast", "saturation"};
		switch (sw) {
		case 0: ca.flip = 1; break;
		case 1: ca.crop = 1; break;
		case 2: ca.rrc = 1; break;
		case 3: ca.brightness = 0.4f; break;
		case 4: ca.contrast = 0.4f; break;
		default: ca.saturation = 0.6f; break;
		}
		wf_reader_cfg cb = ca;
		cb.threads = 3;
		wf_reader *rp = NULL, *ra = NULL, *rb = NULL;
		WF_CHECK_INT(wf_reader_create(&rp, ds, &cp, &err), 0);
		WF_CHECK_INT(wf_reader_create(&ra, ds, &ca, &err), 0);
		WF_CHECK_INT(wf_reader_create(&rb, ds, &cb, &err), 0);
		int changed = 0;
		for (int s = 0; s < 2 && rp && ra && rb; s++) {
			WF_CHECK_INT(next_copy(rp, fl, p, lp, &m), 1);
			WF_CHECK_INT(next_copy(ra, fl, a, la, &m), 1);
			WF_CHECK_INT(next_copy(rb, fl, a2, la, &m), 1);
			WF_CHECK_MSG(memcmp(a, a2, sizeof(float) * fl * batch) == 0,
				     "%s: 1 and 3 threads differ", name[sw]);
			for (int k = 0; k < batch; k++) {
				const float *o = p + fl * k, *g = a + fl * k;
				changed += memcmp(o, g, sizeof(float) * fl) != 0;
				if (sw == 0)
					WF_CHECK(is_crop_flip(o, g, in->h, in->w, in->c, 0));
			}
		}
		WF_CHECK_MSG(changed >= batch / 2, "%s changed only %d of %d images", name[sw],
			     changed, 2 * batch);
		wf_reader_free(rp);
		wf_reader_free(ra);
		wf_reader_free(rb);
	}
	free(p);
	free(a);
	free(a2);
	wf_dataset_close(ds);
}

int main(void)
{
	wf_err err = {0};
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft_test_reader_XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(indexed_path, sizeof(indexed_path), "%s/indexed.h5", tmpdir);
	snprintf(synth_path, sizeof(synth_path), "%s/synth.h5", tmpdir);
	wf_synth_cfg sc = {.count = 170, .size = 12, .seed = 9, .classes = 10};
	if (make_indexed(indexed_path, IDX_N) || wf_data_synth(synth_path, &sc, &err)) {
		fprintf(stderr, "set-up failed: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_one_reader_of_two_slices_equals_two_readers);
	WF_RUN(test_epoch_is_a_permutation_and_epochs_differ);
	WF_RUN(test_resume_at_step_reads_the_same_batch);
	WF_RUN(test_eval_covers_every_sample_once_in_file_order);
	WF_RUN(test_augmentation_is_deterministic_and_crops_and_flips);
	WF_RUN(test_each_augmentation_switch_on_its_own);
	WF_RUN(test_preprocessing_applies_scale_mean_std);
	WF_RUN(test_streaming_reader_equals_in_memory_reader);
	WF_RUN(test_free_while_thread_blocked_or_busy);
	WF_RUN(test_bad_configs_are_errors);
	WF_RUN(test_thread_error_is_reported_by_next);
	int rc = wf_test_summary();
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return rc;
}
