/* test_h5.c: the shared HDF5 helpers. Fixed-length strings keep every
 * character whatever their padding; string lists read whole or split as Keras
 * writes them; strings and integers round-trip; every failure names the file
 * and the attribute, carries HDF5's cause, clears HDF5's stack and prints
 * nothing; any kind of id closes. */
#include "common/h5.h"
#include "common/util.h"
#include "tests/test.h"

#include <fcntl.h>
#include <unistd.h>

static char dir[256];

static const char *tpath(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static hid_t new_file(const char *name)
{
	return H5Fcreate(tpath(name), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
}

/* A 1-D attribute of n fixed-length strings of size bytes, padded as pad. */
static void write_fixed(hid_t obj, const char *name, size_t size, H5T_str_t pad, const char *data,
			hsize_t n)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, size);
	H5Tset_strpad(t, pad);
	hid_t sp = H5Screate_simple(1, &n, NULL);
	hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
	WF_CHECK(H5Awrite(a, t, data) >= 0);
	H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
}

static int has(const char *msg, const char *part)
{
	return strstr(msg, part) != NULL;
}

/* The list s of n strings is want (nwant of them); frees s. */
static void expect_strs(char **s, int n, const char *const *want, int nwant)
{
	WF_CHECK_INT(n, nwant);
	for (int i = 0; i < n && n == nwant; i++)
		WF_CHECK_MSG(strcmp(s[i], want[i]) == 0, "%d: got '%s', want '%s'", i, s[i],
			     want[i]);
	wf_h5_strs_free(s, n);
}

static void test_fixed_length_string_filling_its_field_keeps_last_char(void)
{
	wf_err err = {0};
	char **s = NULL, *one = NULL;
	int n = 0;
	hid_t f = new_file("fixed.h5");
	/* numpy's 'S5' as h5py writes it: NUL padded, "hello" fills the field */
	write_fixed(f, "nullpad", 5, H5T_STR_NULLPAD,
		    "hello"
		    "ab\0\0\0",
		    2);
	write_fixed(f, "nullterm", 5, H5T_STR_NULLTERM, "world", 1);
	write_fixed(f, "spacepad", 6, H5T_STR_SPACEPAD, "ab    conv2d", 2);
	WF_CHECK_INT(wf_h5_attr_read_strs(f, "nullpad", &s, &n, "fixed.h5", &err), 0);
	expect_strs(s, n, (const char *[]){"hello", "ab"}, 2);
	WF_CHECK_INT(wf_h5_attr_read_str(f, "nullterm", &one, "fixed.h5", &err), 0);
	WF_CHECK_MSG(one && strcmp(one, "world") == 0, "got '%s'", one ? one : "(null)");
	free(one);
	WF_CHECK_INT(wf_h5_attr_read_str_list(f, "spacepad", &s, &n, "fixed.h5", &err), 0);
	expect_strs(s, n, (const char *[]){"ab", "conv2d"}, 2);
	H5Fclose(f);
}

static void test_vlen_strings_round_trip(void)
{
	wf_err err = {0};
	const char *names[] = {"cat", "café", ""};
	char **s = NULL, *one = NULL;
	int n = -1;
	hid_t f = new_file("vlen.h5");
	WF_CHECK_INT(wf_h5_attr_write_str(f, "graph", "{\"layers\": []}", "vlen.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_write_strs(f, "classes", names, 3, "vlen.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_write_strs(f, "none", names, 0, "vlen.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_read_str(f, "graph", &one, "vlen.h5", &err), 0);
	WF_CHECK(one && strcmp(one, "{\"layers\": []}") == 0);
	free(one);
	WF_CHECK_INT(wf_h5_attr_read_strs(f, "classes", &s, &n, "vlen.h5", &err), 0);
	expect_strs(s, n, names, 3);
	WF_CHECK_INT(wf_h5_attr_read_strs(f, "none", &s, &n, "vlen.h5", &err), 0);
	WF_CHECK_INT(n, 0);
	wf_h5_strs_free(s, n);
	/* one string wanted, three there */
	WF_CHECK_INT(wf_h5_attr_read_str(f, "classes", &one, "vlen.h5", &err), WF_EFORMAT);
	WF_CHECK(one == NULL);
	WF_CHECK_MSG(has(err.msg, "vlen.h5: attribute classes: expected one string, got 3"), "%s",
		     err.msg);
	/* an attribute that exists already is not overwritten */
	WF_CHECK_INT(wf_h5_attr_write_str(f, "graph", "again", "vlen.h5", &err), WF_EIO);
	WF_CHECK_MSG(has(err.msg, "vlen.h5: writing attribute graph (HDF5: "), "%s", err.msg);
	H5Fclose(f);
}

static void test_string_list_whole_or_split_as_keras_writes(void)
{
	wf_err err = {0};
	const char *whole[] = {"conv/kernel:0"};
	const char *part0[] = {"bn/gamma:0", "bn/beta:0"};
	const char *part1[] = {"bn/moving_mean:0"};
	char **s = NULL;
	int n = -1;
	hid_t f = new_file("split.h5");
	hid_t g = H5Gcreate2(f, "layer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	WF_CHECK_INT(wf_h5_attr_write_strs(g, "weight_names", whole, 1, "split.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_write_strs(g, "weight_names0", part0, 2, "split.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_write_strs(g, "weight_names1", part1, 1, "split.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_read_str_list(g, "weight_names", &s, &n, "split.h5", &err), 0);
	expect_strs(
		s, n,
		(const char *[]){"conv/kernel:0", "bn/gamma:0", "bn/beta:0", "bn/moving_mean:0"},
		4);
	/* absent: an empty list */
	WF_CHECK_INT(wf_h5_attr_read_str_list(g, "layer_names", &s, &n, "split.h5", &err), 0);
	WF_CHECK_INT(n, 0);
	WF_CHECK(s == NULL);
	/* Keras 3: an empty float64 array for a layer without weights */
	WF_CHECK_INT(wf_h5_attr_write(g, "empty", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, NULL,
				      "split.h5", &err),
		     0);
	WF_CHECK_INT(wf_h5_attr_read_str_list(g, "empty", &s, &n, "split.h5", &err), 0);
	WF_CHECK_INT(n, 0);
	wf_h5_strs_free(s, n);
	/* numbers are not strings: the message names file and attribute */
	double x = 1.5;
	WF_CHECK_INT(wf_h5_attr_write(g, "number", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, -1, &x,
				      "split.h5", &err),
		     0);
	WF_CHECK_INT(wf_h5_attr_read_str_list(g, "number", &s, &n, "split.h5", &err), WF_EFORMAT);
	WF_CHECK(s == NULL && n == 0);
	WF_CHECK_MSG(has(err.msg, "split.h5: attribute number: expected strings"), "%s", err.msg);
	H5Gclose(g);
	H5Fclose(f);
}

static void test_integer_attributes(void)
{
	wf_err err = {0};
	int shape[3] = {32, 24, 3};
	int64_t v[3] = {0}, big = (int64_t)1 << 40;
	uint64_t hash = 0xfedcba9876543210ull, back = 0;
	hid_t f = new_file("ints.h5");
	WF_CHECK_INT(wf_h5_attr_write_i64(f, "steps", big, "ints.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_write(f, "shape", H5T_STD_I32LE, H5T_NATIVE_INT, 3, shape,
				      "ints.h5", &err),
		     0);
	WF_CHECK_INT(wf_h5_attr_write(f, "hash", H5T_NATIVE_UINT64, H5T_NATIVE_UINT64, -1, &hash,
				      "ints.h5", &err),
		     0);
	WF_CHECK_INT(wf_h5_attr_write_str(f, "name", "x", "ints.h5", &err), 0);
	WF_CHECK_INT(wf_h5_attr_read_i64(f, "steps", v, 1, "ints.h5", &err), 0);
	WF_CHECK_INT(v[0], big);
	WF_CHECK_INT(wf_h5_attr_read_i64(f, "shape", v, 3, "ints.h5", &err), 0);
	WF_CHECK(v[0] == 32 && v[1] == 24 && v[2] == 3);
	WF_CHECK_INT(wf_h5_attr_read(f, "hash", H5T_NATIVE_UINT64, 1, &back, "ints.h5", &err), 0);
	WF_CHECK(back == hash);
	/* wrong count, wrong type, missing: each names the file and the attribute */
	WF_CHECK_INT(wf_h5_attr_read_i64(f, "shape", v, 1, "ints.h5", &err), WF_EFORMAT);
	WF_CHECK_MSG(has(err.msg, "ints.h5: attribute shape: expected 1 value, got 3"), "%s",
		     err.msg);
	WF_CHECK_INT(wf_h5_attr_read_i64(f, "name", v, 1, "ints.h5", &err), WF_EFORMAT);
	WF_CHECK_MSG(has(err.msg, "ints.h5: attribute name: expected an integer"), "%s", err.msg);
	WF_CHECK_INT(wf_h5_attr_read_i64(f, "absent", v, 1, "ints.h5", &err), WF_EFORMAT);
	WF_CHECK_MSG(has(err.msg, "ints.h5: attribute absent: cannot be opened (HDF5: "), "%s",
		     err.msg);
	WF_CHECK_MSG(has(err.msg, "h5.c:"), "no source location: %s", err.msg);
	H5Fclose(f);
}

static void test_float_dataset_writes_and_refuses_a_second_time(void)
{
	wf_err err = {0};
	float data[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
	hsize_t dims[2] = {2, 3};
	hid_t f = new_file("f32.h5");
	H5Gclose(H5Gcreate2(f, "weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
	WF_CHECK_INT(wf_h5_write_f32(f, "weights/k", 2, dims, data, "f32.h5", &err), 0);
	hid_t d = H5Dopen2(f, "weights/k", H5P_DEFAULT);
	WF_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0);
	WF_CHECK(memcmp(back, data, sizeof(data)) == 0);
	H5Dclose(d);
	WF_CHECK_INT(wf_h5_write_f32(f, "weights/k", 2, dims, data, "f32.h5", &err), WF_EIO);
	WF_CHECK_MSG(has(err.msg, "f32.h5: writing weights/k (HDF5: "), "%s", err.msg);
	WF_CHECK_INT(H5Eget_num(H5E_DEFAULT), 0); /* the stack was cleared */
	H5Fclose(f);
}

/* Run wf_h5_open on path with stderr sent to a file; returns the bytes
 * printed to stderr. */
static long open_capturing_stderr(const char *path, hid_t *file, int *rc, wf_err *err)
{
	const char *cap = tpath("stderr.txt");
	fflush(stderr);
	int saved = dup(2), fd = open(cap, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	dup2(fd, 2);
	close(fd);
	*rc = wf_h5_open(path, H5F_ACC_RDONLY, file, err);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	FILE *f = fopen(cap, "rb");
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fclose(f);
	return n;
}

static void test_open_is_silent_and_names_the_file(void)
{
	wf_err err = {0};
	hid_t file = 7;
	int rc = 0;
	const char *garbage = tpath("garbage.h5");
	FILE *g = fopen(garbage, "wb");
	fputs("not HDF5 at all, just text that is long enough to look like a file\n", g);
	fclose(g);
	WF_CHECK_INT(open_capturing_stderr(garbage, &file, &rc, &err), 0);
	WF_CHECK_INT(rc, WF_EFORMAT);
	WF_CHECK(file < 0);
	WF_CHECK_MSG(has(err.msg, garbage) && has(err.msg, "not an HDF5 file"), "%s", err.msg);

	/* a real file cut short: HDF5 says why */
	hid_t f = new_file("cut.h5");
	H5Gclose(H5Gcreate2(f, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
	H5Fclose(f);
	WF_CHECK(truncate(tpath("cut.h5"), 100) == 0);
	WF_CHECK_INT(open_capturing_stderr(tpath("cut.h5"), &file, &rc, &err), 0);
	WF_CHECK_INT(rc, WF_EFORMAT);
	WF_CHECK_MSG(has(err.msg, "cut.h5") && has(err.msg, "truncated"), "%s", err.msg);

	/* a good one opens, and HDF5's own printing is back on afterwards */
	f = new_file("good.h5");
	H5Fclose(f);
	WF_CHECK_INT(wf_h5_open(tpath("good.h5"), H5F_ACC_RDWR, &file, &err), 0);
	WF_CHECK(file >= 0);
	WF_CHECK_INT(wf_h5_close(&file), 0);
	H5E_auto2_t fn = NULL;
	void *data = NULL;
	H5Eget_auto2(H5E_DEFAULT, &fn, &data);
	WF_CHECK(fn != NULL);
}

static herr_t my_printer(hid_t stack, void *data)
{
	return 0;
}

static void test_quiet_saves_and_restores_the_printer(void)
{
	wf_h5_quiet q;
	H5E_auto2_t fn = NULL, old_fn = NULL;
	void *data = NULL, *old_data = NULL;
	int tag = 0;
	H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
	H5Eset_auto2(H5E_DEFAULT, my_printer, &tag);
	wf_h5_quiet_begin(&q);
	H5Eget_auto2(H5E_DEFAULT, &fn, &data);
	WF_CHECK(fn == NULL);
	WF_CHECK(H5Dopen2(H5I_INVALID_HID, "x", H5P_DEFAULT) < 0);
	wf_h5_quiet_end(&q);
	WF_CHECK_INT(H5Eget_num(H5E_DEFAULT), 0);
	H5Eget_auto2(H5E_DEFAULT, &fn, &data);
	WF_CHECK(fn == my_printer && data == &tag);
	H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
}

static void test_fail_without_an_hdf5_cause_is_the_message_alone(void)
{
	wf_err err = {0};
	H5Eclear2(H5E_DEFAULT);
	WF_CHECK_INT(WF_H5_FAIL(&err, WF_EIO, "x.h5: %s", "writing"), WF_EIO);
	WF_CHECK_MSG(strcmp(err.msg, "x.h5: writing") == 0, "%s", err.msg);
	WF_CHECK_INT(err.code, WF_EIO);
	WF_CHECK_INT(WF_H5_FAIL(NULL, WF_EIO, "no err"), WF_EIO);
}

static void test_close_takes_any_id(void)
{
	hid_t f = new_file("close.h5");
	hid_t g = H5Gcreate2(f, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	hsize_t n = 4;
	hid_t sp = H5Screate_simple(1, &n, NULL);
	hid_t d = H5Dcreate2(g, "d", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
	hid_t a = H5Acreate2(g, "a", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT);
	hid_t t = H5Tcopy(H5T_C_S1);
	hid_t p = H5Pcreate(H5P_DATASET_ACCESS);
	hid_t ids[] = {a, d, g, sp, t, p, f};
	for (size_t i = 0; i < WF_ARRAY_LEN(ids); i++) {
		hid_t id = ids[i];
		WF_CHECK(H5Iis_valid(id) > 0);
		WF_CHECK_INT(wf_h5_close(&id), 0);
		WF_CHECK(id == H5I_INVALID_HID);
		WF_CHECK(H5Iis_valid(ids[i]) <= 0);
		WF_CHECK_INT(wf_h5_close(&id), 0); /* twice: nothing left to close */
	}
	/* the file really was closed: it opens again read-write */
	WF_CHECK((f = H5Fopen(tpath("close.h5"), H5F_ACC_RDWR, H5P_DEFAULT)) >= 0);
	WF_CHECK_INT(wf_h5_close(&f), 0);
}

int main(void)
{
	H5E_auto2_t print_fn;
	void *print_data;
	snprintf(dir, sizeof(dir), "/tmp/weft-test-h5-XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	H5Eget_auto2(H5E_DEFAULT, &print_fn, &print_data); /* HDF5's default printer */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the set-up code checks its own calls */
	WF_RUN(test_fixed_length_string_filling_its_field_keeps_last_char);
	WF_RUN(test_vlen_strings_round_trip);
	WF_RUN(test_string_list_whole_or_split_as_keras_writes);
	WF_RUN(test_integer_attributes);
	WF_RUN(test_float_dataset_writes_and_refuses_a_second_time);
	H5Eset_auto2(H5E_DEFAULT, print_fn, print_data); /* printing on: open must silence it */
	WF_RUN(test_open_is_silent_and_names_the_file);
	WF_RUN(test_quiet_saves_and_restores_the_printer);
	WF_RUN(test_fail_without_an_hdf5_cause_is_the_message_alone);
	WF_RUN(test_close_takes_any_id);
	const char *files[] = {"fixed.h5",   "vlen.h5", "split.h5", "ints.h5",	"f32.h5",
			       "garbage.h5", "cut.h5",	"good.h5",  "close.h5", "stderr.txt"};
	for (size_t i = 0; i < WF_ARRAY_LEN(files); i++)
		unlink(tpath(files[i]));
	rmdir(dir);
	return wf_test_summary();
}
