/* test_data.c: the dataset file, its writer, and the synth and cifar10
 * converters: round trips, determinism, streaming vs in-memory reads, and the
 * errors a user sees for bad files (each must name the file). */
#include "worker/data.h"

#include "common/util.h"
#include "tests/test.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tpath(const char *name)
{
	static char buf[8][512];
	static int k;
	char *p = buf[k++ % 8];
	snprintf(p, 512, "%s/%s", tmpdir, name);
	return p;
}

/* Reads all samples of a dataset file; caller frees. */
static int read_all(const char *path, wf_dataset_info *info, uint8_t **img, int32_t **lab)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	int rc = wf_dataset_open(&ds, path, &err);
	if (rc) {
		fprintf(stderr, "open %s: %s\n", path, err.msg);
		return rc;
	}
	*info = *wf_dataset_info_get(ds);
	size_t sb = (size_t)info->h * info->w * info->c;
	*img = malloc(sb * (size_t)info->count);
	*lab = malloc(sizeof(int32_t) * (size_t)info->count);
	rc = wf_dataset_read(ds, 0, info->count, *img, *lab, &err);
	info->classes = NULL; /* owned by ds */
	wf_dataset_close(ds);
	return rc;
}

static void test_synth_round_trip_counts_classes_and_labels(void)
{
	wf_err err = {0};
	wf_synth_cfg cfg = {.count = 300, .size = 32, .seed = 7, .classes = 10};
	const char *p = tpath("synth.h5");
	WF_CHECK_INT(wf_data_synth(p, &cfg, &err), 0);
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, p, &err), 0);
	if (!ds)
		return;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	WF_CHECK_INT(in->count, 300);
	WF_CHECK_INT(in->h, 32);
	WF_CHECK_INT(in->w, 32);
	WF_CHECK_INT(in->c, 3);
	WF_CHECK_INT(in->nclasses, 10);
	WF_CHECK(strcmp(in->classes[0], "square") == 0);
	WF_CHECK(strcmp(in->classes[2], "circle") == 0);
	int32_t lab[300];
	int seen[10] = {0};
	WF_CHECK_INT(wf_dataset_read(ds, 0, 300, NULL, lab, &err), 0);
	for (int i = 0; i < 300; i++)
		seen[lab[i]]++;
	for (int k = 0; k < 10; k++)
		WF_CHECK_MSG(seen[k] >= 10, "class %d has %d samples of 300", k, seen[k]);
	/* images are not flat: foreground and background differ in every image */
	uint8_t img[32 * 32 * 3];
	WF_CHECK_INT(wf_dataset_read(ds, 5, 1, img, NULL, &err), 0);
	int lo = 255, hi = 0;
	for (size_t i = 0; i < sizeof(img); i++) {
		lo = WF_MIN(lo, img[i]);
		hi = WF_MAX(hi, img[i]);
	}
	WF_CHECK_MSG(hi - lo > 60, "image 5 spans only %d..%d", lo, hi);
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", p, (long)getpid());
	WF_CHECK(!wf_exists(tmp));
	wf_dataset_close(ds);
}

static void test_synth_is_deterministic_from_seed(void)
{
	wf_err err = {0};
	wf_synth_cfg cfg = {.count = 100, .size = 16, .seed = 3, .classes = 10};
	WF_CHECK_INT(wf_data_synth(tpath("s3a.h5"), &cfg, &err), 0);
	WF_CHECK_INT(wf_data_synth(tpath("s3b.h5"), &cfg, &err), 0);
	cfg.seed = 4;
	WF_CHECK_INT(wf_data_synth(tpath("s4.h5"), &cfg, &err), 0);
	wf_dataset_info ia, ib, ic;
	uint8_t *a = NULL, *b = NULL, *c = NULL;
	int32_t *la = NULL, *lb = NULL, *lc = NULL;
	WF_CHECK_INT(read_all(tpath("s3a.h5"), &ia, &a, &la), 0);
	WF_CHECK_INT(read_all(tpath("s3b.h5"), &ib, &b, &lb), 0);
	WF_CHECK_INT(read_all(tpath("s4.h5"), &ic, &c, &lc), 0);
	size_t n = (size_t)100 * 16 * 16 * 3;
	if (a && b && c) {
		WF_CHECK(memcmp(a, b, n) == 0);
		WF_CHECK(memcmp(la, lb, 100 * sizeof(int32_t)) == 0);
		WF_CHECK(memcmp(a, c, n) != 0);
		WF_CHECK(memcmp(la, lc, 100 * sizeof(int32_t)) != 0);
	}
	free(a), free(b), free(c), free(la), free(lb), free(lc);
}

static void test_streaming_reads_equal_in_memory_reads(void)
{
	wf_err err = {0};
	wf_synth_cfg cfg = {.count = 700, .size = 12, .seed = 11, .classes = 5};
	const char *p = tpath("stream.h5");
	WF_CHECK_INT(wf_data_synth(p, &cfg, &err), 0);
	wf_dataset *mem = NULL, *str = NULL;
	WF_CHECK_INT(wf_dataset_open(&mem, p, &err), 0);
	wf_dataset_set_memory_mb(0); /* WEFT_DATA_MEMORY_MB=0 */
	WF_CHECK_INT(wf_dataset_open(&str, p, &err), 0);
	wf_dataset_set_memory_mb(-1); /* the default */
	if (!mem || !str)
		return;
	size_t sb = 12 * 12 * 3;
	/* indices across several chunks, unsorted, with a repeat and a run */
	long idx[] = {699, 3, 256, 255, 4, 5, 6, 512, 3, 100, 0, 511, 698};
	long n = (long)WF_ARRAY_LEN(idx);
	uint8_t *a = malloc(sb * n), *b = malloc(sb * n);
	int32_t la[32], lb[32];
	WF_CHECK_INT(wf_dataset_gather(mem, idx, n, a, la, &err), 0);
	WF_CHECK_INT(wf_dataset_gather(str, idx, n, b, lb, &err), 0);
	WF_CHECK(memcmp(a, b, sb * n) == 0);
	WF_CHECK(memcmp(la, lb, sizeof(int32_t) * n) == 0);
	/* gather agrees with reading sample by sample */
	uint8_t one[12 * 12 * 3];
	WF_CHECK_INT(wf_dataset_read(str, 256, 1, one, NULL, &err), 0);
	WF_CHECK(memcmp(one, b + 2 * sb, sb) == 0);
	WF_CHECK_INT(wf_dataset_read(mem, 250, 10, a, la, &err), 0);
	WF_CHECK_INT(wf_dataset_read(str, 250, 10, b, lb, &err), 0);
	WF_CHECK(memcmp(a, b, sb * 10) == 0);
	/* out of range is an error, not a crash */
	long bad = 700;
	WF_CHECK(wf_dataset_gather(str, &bad, 1, a, la, &err) < 0);
	WF_CHECK(strstr(err.msg, "stream.h5") != NULL);
	WF_CHECK(wf_dataset_read(mem, 695, 10, a, la, &err) < 0);
	free(a);
	free(b);
	wf_dataset_close(mem);
	wf_dataset_close(str);
}

static void test_writer_counts_must_match(void)
{
	wf_err err = {0};
	const char *names[] = {"a", "b"};
	uint8_t img[4 * 2 * 2 * 1] = {0};
	int32_t lab[4] = {0, 1, 1, 0};
	wf_dataset_writer *wr = NULL;
	const char *p = tpath("short.h5");
	WF_CHECK_INT(wf_dataset_create(&wr, p, 4, 2, 2, 1, 2, names, &err), 0);
	WF_CHECK_INT(wf_dataset_append(wr, img, lab, 3, &err), 0);
	WF_CHECK(wf_dataset_append(wr, img, lab, 2, &err) < 0); /* 5 > 4 */
	WF_CHECK(strstr(err.msg, "short.h5") != NULL);
	WF_CHECK(wf_dataset_writer_close(wr, &err) < 0); /* 3 < 4 */
	WF_CHECK(strstr(err.msg, "short.h5") != NULL);
	WF_CHECK(!wf_exists(p));
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", p, (long)getpid());
	WF_CHECK(!wf_exists(tmp));

	/* a label outside the class list is refused */
	WF_CHECK_INT(wf_dataset_create(&wr, p, 4, 2, 2, 1, 2, names, &err), 0);
	int32_t badlab[4] = {0, 1, 2, 0};
	WF_CHECK(wf_dataset_append(wr, img, badlab, 4, &err) < 0);
	WF_CHECK(strstr(err.msg, "sample 2") != NULL);
	WF_CHECK_INT(wf_dataset_append(wr, img, lab, 4, &err), 0);
	WF_CHECK_INT(wf_dataset_writer_close(wr, &err), 0);
	WF_CHECK(wf_exists(p));
}

/* ---- CIFAR-10 ---- */

static void write_cifar(const char *path, int nrec, int bad_label_at)
{
	FILE *f = fopen(path, "wb");
	uint8_t rec[3073];
	for (int i = 0; i < nrec; i++) {
		rec[0] = (uint8_t)(i == bad_label_at ? 10 : i % 10);
		for (int j = 0; j < 3072; j++)
			rec[1 + j] = (uint8_t)((j * 7 + i * 13) & 0xff);
		fwrite(rec, 1, sizeof(rec), f);
	}
	fclose(f);
}

static void test_cifar10_conversion_is_nhwc(void)
{
	wf_err err = {0};
	const char *b1 = tpath("data_batch_1.bin"), *b2 = tpath("data_batch_2.bin");
	write_cifar(b1, 3, -1);
	write_cifar(b2, 2, -1);
	const char *files[] = {b1, b2};
	const char *out = tpath("cifar.h5");
	WF_CHECK_INT(wf_data_cifar10(out, files, 2, &err), 0);
	wf_dataset_info in;
	uint8_t *img = NULL;
	int32_t *lab = NULL;
	WF_CHECK_INT(read_all(out, &in, &img, &lab), 0);
	if (!img)
		return;
	WF_CHECK_INT(in.count, 5);
	WF_CHECK_INT(in.h, 32);
	WF_CHECK_INT(in.w, 32);
	WF_CHECK_INT(in.c, 3);
	WF_CHECK_INT(in.nclasses, 10);
	WF_CHECK_INT(lab[0], 0);
	WF_CHECK_INT(lab[2], 2);
	WF_CHECK_INT(lab[3], 0); /* first record of the second file */
	/* record 1, row 5, column 7, channel c is byte 1 + c*1024 + 5*32 + 7 of the record */
	int i = 1, y = 5, x = 7;
	for (int c = 0; c < 3; c++) {
		int j = c * 1024 + y * 32 + x;
		uint8_t want = (uint8_t)((j * 7 + i * 13) & 0xff);
		WF_CHECK_INT(img[(((size_t)i * 32 + y) * 32 + x) * 3 + c], want);
	}
	/* the second file's record 0 is sample 3 */
	WF_CHECK_INT(img[((size_t)3 * 32 * 32 + 31) * 3 + 2], (uint8_t)(((2048 + 31) * 7) & 0xff));
	free(img);
	free(lab);

	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, out, &err), 0);
	if (ds) {
		WF_CHECK(strcmp(wf_dataset_info_get(ds)->classes[0], "airplane") == 0);
		WF_CHECK(strcmp(wf_dataset_info_get(ds)->classes[9], "truck") == 0);
	}
	wf_dataset_close(ds);
}

static void test_cifar10_errors_name_the_file(void)
{
	wf_err err = {0};
	const char *out = tpath("cifar_bad.h5");

	const char *missing[] = {tpath("no_such_batch.bin")};
	WF_CHECK(wf_data_cifar10(out, missing, 1, &err) < 0);
	WF_CHECK_MSG(strstr(err.msg, "no_such_batch.bin") != NULL, "%s", err.msg);

	const char *odd = tpath("odd_size.bin");
	FILE *f = fopen(odd, "wb");
	uint8_t junk[3000] = {1};
	fwrite(junk, 1, sizeof(junk), f);
	fclose(f);
	const char *odd_files[] = {odd};
	WF_CHECK(wf_data_cifar10(out, odd_files, 1, &err) < 0);
	WF_CHECK_MSG(strstr(err.msg, "odd_size.bin") != NULL, "%s", err.msg);

	const char *badlab = tpath("bad_label.bin");
	write_cifar(badlab, 4, 2);
	const char *bad_files[] = {badlab};
	WF_CHECK(wf_data_cifar10(out, bad_files, 1, &err) < 0);
	WF_CHECK_MSG(strstr(err.msg, "bad_label.bin") != NULL && strstr(err.msg, "record 2"), "%s",
		     err.msg);
	WF_CHECK(!wf_exists(out));
}

/* ---- bad dataset files, written with the HDF5 API ---- */

/* A small file of 4x4x3 images; each argument breaks one thing. */
static void write_h5(const char *path, hid_t img_type, int img_rank, long n_img, hid_t lab_type,
		     long n_lab, int with_classes, int bad_label, int write_images)
{
	hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	hsize_t idims[4] = {(hsize_t)n_img, 4, 4, 3};
	if (img_type >= 0) {
		hid_t s = H5Screate_simple(img_rank, idims, NULL);
		hid_t d =
			H5Dcreate2(f, "images", img_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
		uint8_t zeros[16 * 48] = {0};
		if (write_images)
			H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros);
		H5Dclose(d);
		H5Sclose(s);
	}
	hsize_t ldims[1] = {(hsize_t)n_lab};
	hid_t s = H5Screate_simple(1, ldims, NULL);
	hid_t d = H5Dcreate2(f, "labels", lab_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	int32_t lab[16] = {0};
	if (bad_label >= 0)
		lab[bad_label] = 3;
	if (H5Tget_class(lab_type) == H5T_INTEGER)
		H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab);
	H5Dclose(d);
	H5Sclose(s);
	if (with_classes) {
		const char *names[] = {"zero", "one", "two"};
		hsize_t nc = 3;
		hid_t t = H5Tcopy(H5T_C_S1);
		H5Tset_size(t, H5T_VARIABLE);
		hid_t as = H5Screate_simple(1, &nc, NULL);
		hid_t a = H5Acreate2(f, "classes", t, as, H5P_DEFAULT, H5P_DEFAULT);
		H5Awrite(a, t, names);
		H5Aclose(a);
		H5Sclose(as);
		H5Tclose(t);
	}
	H5Fclose(f);
}

static void expect_open_error(const char *path, const char *what)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	int rc = wf_dataset_open(&ds, path, &err);
	WF_CHECK_MSG(rc < 0 && ds == NULL, "%s opened", path);
	const char *base = strrchr(path, '/') + 1;
	WF_CHECK_MSG(strstr(err.msg, base) != NULL, "message does not name the file: %s", err.msg);
	WF_CHECK_MSG(strstr(err.msg, what) != NULL, "message does not say `%s`: %s", what, err.msg);
	wf_dataset_close(ds);
}

static void test_open_errors_name_file_and_field(void)
{
	expect_open_error(tpath("missing.h5"), "no such");

	const char *garbage = tpath("garbage.h5");
	FILE *f = fopen(garbage, "wb");
	fputs("this is not an HDF5 file at all, just some text\n", f);
	fclose(f);
	expect_open_error(garbage, "not an HDF5");

	const char *p = tpath("float_images.h5");
	write_h5(p, H5T_IEEE_F32LE, 4, 4, H5T_STD_I32LE, 4, 1, -1, 1);
	expect_open_error(p, "`images`");

	p = tpath("rank3_images.h5");
	write_h5(p, H5T_STD_U8LE, 3, 4, H5T_STD_I32LE, 4, 1, -1, 1);
	expect_open_error(p, "rank 3");

	p = tpath("float_labels.h5");
	write_h5(p, H5T_STD_U8LE, 4, 4, H5T_IEEE_F64LE, 4, 1, -1, 1);
	expect_open_error(p, "`labels`");

	p = tpath("no_images.h5");
	write_h5(p, -1, 4, 4, H5T_STD_I32LE, 4, 1, -1, 1);
	expect_open_error(p, "`images` is missing");

	p = tpath("count_mismatch.h5");
	write_h5(p, H5T_STD_U8LE, 4, 4, H5T_STD_I32LE, 5, 1, -1, 1);
	expect_open_error(p, "`labels` has 5");

	p = tpath("no_classes.h5");
	write_h5(p, H5T_STD_U8LE, 4, 4, H5T_STD_I32LE, 4, 0, -1, 1);
	expect_open_error(p, "`classes`");

	p = tpath("label_range.h5");
	write_h5(p, H5T_STD_U8LE, 4, 6, H5T_STD_I32LE, 6, 1, 4, 1);
	expect_open_error(p, "`labels`[4] = 3");

	p = tpath("unwritten_images.h5");
	write_h5(p, H5T_STD_U8LE, 4, 4, H5T_STD_I32LE, 4, 1, -1, 0);
	expect_open_error(p, "`images` stores 0 of its 192 bytes");

	/* a good file written the same way opens (and int64 labels are accepted) */
	p = tpath("good.h5");
	write_h5(p, H5T_STD_U8LE, 4, 4, H5T_STD_I64LE, 4, 1, -1, 1);
	wf_err err = {0};
	wf_dataset *ds = NULL;
	WF_CHECK_INT(wf_dataset_open(&ds, p, &err), 0);
	if (ds)
		WF_CHECK(strcmp(wf_dataset_info_get(ds)->classes[2], "two") == 0);
	wf_dataset_close(ds);
}

static void test_synth_rejects_bad_config(void)
{
	wf_err err = {0};
	wf_synth_cfg cfg = {.count = 10, .size = 32, .seed = 1, .classes = 11};
	WF_CHECK(wf_data_synth(tpath("x.h5"), &cfg, &err) < 0);
	WF_CHECK(strstr(err.msg, "classes") != NULL);
	cfg.classes = 10;
	cfg.size = 2;
	WF_CHECK(wf_data_synth(tpath("x.h5"), &cfg, &err) < 0);
	WF_CHECK(strstr(err.msg, "size") != NULL);
	/* the output directory does not exist: an error naming the path */
	cfg.size = 16;
	WF_CHECK(wf_data_synth(tpath("nodir/x.h5"), &cfg, &err) < 0);
	WF_CHECK(strstr(err.msg, "nodir/x.h5") != NULL);
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft_test_data_XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	WF_RUN(test_synth_round_trip_counts_classes_and_labels);
	WF_RUN(test_synth_is_deterministic_from_seed);
	WF_RUN(test_streaming_reads_equal_in_memory_reads);
	WF_RUN(test_writer_counts_must_match);
	WF_RUN(test_cifar10_conversion_is_nhwc);
	WF_RUN(test_cifar10_errors_name_the_file);
	WF_RUN(test_open_errors_name_file_and_field);
	WF_RUN(test_synth_rejects_bad_config);
	int rc = wf_test_summary();
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return rc;
}
