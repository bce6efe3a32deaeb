/* test_modelfile.c: the model file. Save then load gives bitwise the same
 * forward outputs and metadata; no temporary file is left; truncated,
 * garbage, wrong-version files, a missing dataset and a wrong shape each
 * fail with a message naming the file and the cause. */
#include "model/model.h"
#include "tests/test.h"

#include "common/util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <hdf5.h>
#include <unistd.h>

static char dir[256];
static wf_backend *ref;

static void path_in(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", dir, name);
}

static wf_model *resnet(void)
{
	wf_model *m = NULL;
	wf_err err = {0};
	if (wf_model_zoo(&m, "resnet20", 8, 8, 3, 4, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return NULL;
	}
	wf_model_init_params(m, 99);
	for (size_t i = 0; i < m->nstate; i++) /* running stats as after training */
		m->state[i] = 0.5f + 0.001f * (float)(i % 97);
	return m;
}

/* Save a fresh model to dir/name; returns 0 on success. */
static int save_model(const char *name, char *path, size_t n)
{
	path_in(path, n, name);
	wf_model *m = resnet();
	wf_err err = {0};
	int rc = m ? wf_model_save(m, NULL, path, &err) : -1;
	if (rc)
		fprintf(stderr, "save: %s\n", err.msg);
	wf_model_free(m);
	return rc;
}

/* Loading path fails and the message contains a, b (and the path). */
static void expect_load_error(const char *path, const char *a, const char *b)
{
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	int rc = wf_model_load(&m, &meta, path, &err);
	WF_CHECK_MSG(rc < 0 && !m, "loaded %s", path);
	WF_CHECK_MSG(strstr(err.msg, path) != NULL, "path not in: %s", err.msg);
	if (a)
		WF_CHECK_MSG(strstr(err.msg, a) != NULL, "'%s' not in: %s", a, err.msg);
	if (b)
		WF_CHECK_MSG(strstr(err.msg, b) != NULL, "'%s' not in: %s", b, err.msg);
	wf_model_free(m);
}

static int logits_of(wf_model *m, float *out)
{
	wf_exec *ex = NULL;
	wf_err err = {0};
	float x[3 * 8 * 8 * 3];
	wf_rng r;
	wf_rng_seed(&r, 17);
	for (size_t i = 0; i < WF_ARRAY_LEN(x); i++)
		x[i] = (float)wf_rng_normal(&r);
	int rc = wf_exec_create(&ex, m, ref, 3, 0, &err);
	if (!rc)
		rc = wf_exec_forward(ex, x, 3, 0, 0);
	if (!rc)
		rc = wf_exec_logits(ex, out);
	wf_exec_free(ex);
	return rc;
}

static void test_save_load_round_trip(void)
{
	char path[512];
	path_in(path, sizeof(path), "model.h5");
	wf_model *a = resnet(), *b = NULL;
	wf_model_meta meta, back;
	wf_model_meta_init(&meta);
	char *names[4] = {"circle", "square", "triangle", "star"};
	meta.nclasses = 4;
	meta.class_names = names;
	meta.trained_steps = 1234567890123L;
	meta.scale = 0.5f;
	meta.mean[0] = 0.25f, meta.mean[1] = 0.5f, meta.mean[2] = 0.75f;
	meta.std[2] = 2.0f;
	snprintf(meta.channel_order, sizeof(meta.channel_order), "BGR");
	meta.pre_in_model = 1;
	wf_err err = {0};
	WF_CHECK(a != NULL);
	if (!a)
		return;
	WF_CHECK_MSG(wf_model_save(a, &meta, path, &err) == 0, "%s", err.msg);
	WF_CHECK_MSG(wf_model_load(&b, &back, path, &err) == 0, "%s", err.msg);
	if (b) {
		WF_CHECK(strcmp(a->graph_json, b->graph_json) == 0);
		WF_CHECK(a->nparams == b->nparams && a->nstate == b->nstate);
		WF_CHECK(memcmp(a->params, b->params, a->nparams * sizeof(float)) == 0);
		WF_CHECK(memcmp(a->state, b->state, a->nstate * sizeof(float)) == 0);
		float la[12], lb[12];
		WF_CHECK(logits_of(a, la) == 0 && logits_of(b, lb) == 0);
		WF_CHECK(memcmp(la, lb, sizeof(la)) == 0);
		WF_CHECK_INT(back.nclasses, 4);
		for (int i = 0; i < back.nclasses && i < 4; i++)
			WF_CHECK(strcmp(back.class_names[i], names[i]) == 0);
		WF_CHECK_INT(back.trained_steps, 1234567890123L);
		WF_CHECK(back.scale == 0.5f && back.mean[2] == 0.75f && back.std[2] == 2.0f);
		WF_CHECK(back.std[0] == 1.0f);
		WF_CHECK(strcmp(back.channel_order, "BGR") == 0);
		WF_CHECK_INT(back.pre_in_model, 1);
		wf_model_meta_free(&back);
	}
	/* no classes and default metadata also round-trip */
	WF_CHECK_MSG(wf_model_save(a, NULL, path, &err) == 0, "%s", err.msg);
	wf_model_free(b);
	b = NULL;
	WF_CHECK_MSG(wf_model_load(&b, &back, path, &err) == 0, "%s", err.msg);
	WF_CHECK(back.nclasses == 0 && back.trained_steps == 0);
	WF_CHECK_NEAR(back.scale, 1.0 / 255, 1e-9);
	WF_CHECK_INT(back.pre_in_model, 0);
	wf_model_meta_free(&back);
	/* nothing but model.h5 in the directory: the temporary was renamed */
	DIR *d = opendir(dir);
	struct dirent *e;
	int others = 0;
	while (d && (e = readdir(d)))
		others += e->d_name[0] != '.' && strcmp(e->d_name, "model.h5") != 0;
	if (d)
		closedir(d);
	WF_CHECK_INT(others, 0);
	wf_model_free(a);
	wf_model_free(b);
	unlink(path);
}

static void test_truncated_file_fails_cleanly(void)
{
	char path[512];
	struct stat st;
	if (save_model("trunc.h5", path, sizeof(path)) || stat(path, &st)) {
		WF_CHECK(0);
		return;
	}
	off_t sizes[] = {st.st_size - 1, st.st_size / 2, 600, 100, 8, 0};
	for (size_t i = 0; i < WF_ARRAY_LEN(sizes); i++) {
		WF_CHECK(truncate(path, sizes[i]) == 0);
		expect_load_error(path, "truncated", NULL);
	}
	unlink(path);
}

static void test_garbage_file_fails_cleanly(void)
{
	char path[512];
	path_in(path, sizeof(path), "garbage.h5");
	FILE *f = fopen(path, "wb");
	wf_rng r;
	wf_rng_seed(&r, 1);
	for (int i = 0; i < 4096; i++)
		fputc((int)(wf_rng_u64(&r) & 0xff), f);
	fclose(f);
	expect_load_error(path, "not an HDF5 file", NULL);
	unlink(path);
	path_in(path, sizeof(path), "missing.h5");
	expect_load_error(path, "No such file", NULL);
}

static void test_wrong_or_missing_format_attribute(void)
{
	char path[512];
	if (save_model("ver.h5", path, sizeof(path))) {
		WF_CHECK(0);
		return;
	}
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	hid_t a = H5Aopen(f, "weft_format", H5P_DEFAULT);
	int v = 99;
	WF_CHECK(H5Awrite(a, H5T_NATIVE_INT, &v) >= 0);
	H5Aclose(a);
	H5Fclose(f);
	expect_load_error(path, "weft_format 99", "version 1");
	f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	WF_CHECK(H5Adelete(f, "weft_format") >= 0);
	H5Fclose(f);
	expect_load_error(path, "not a weft model file", "weft_format");
	unlink(path);
	/* a valid HDF5 file of something else */
	path_in(path, sizeof(path), "other.h5");
	f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	H5Fclose(f);
	expect_load_error(path, "not a weft model file", NULL);
	unlink(path);
}

static void test_missing_dataset_and_wrong_shape(void)
{
	char path[512];
	if (save_model("ds.h5", path, sizeof(path))) {
		WF_CHECK(0);
		return;
	}
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	WF_CHECK(H5Ldelete(f, "weights/conv1/kernel", H5P_DEFAULT) >= 0);
	H5Fclose(f);
	expect_load_error(path, "weights/conv1/kernel", "missing");

	/* put it back with 8 filters instead of 16 */
	f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	hsize_t dims[4] = {3, 3, 3, 8};
	float zeros[3 * 3 * 3 * 8] = {0};
	hid_t sp = H5Screate_simple(4, dims, NULL);
	hid_t d = H5Dcreate2(f, "weights/conv1/kernel", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
			     H5P_DEFAULT, H5P_DEFAULT);
	WF_CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros) >= 0);
	H5Dclose(d);
	H5Sclose(sp);
	/* and drop a whole layer group of state */
	H5Fclose(f);
	expect_load_error(path, "weights/conv1/kernel: shape [3,3,3,8] expected [3,3,3,16]", NULL);
	f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	WF_CHECK(H5Ldelete(f, "weights/conv1_bn", H5P_DEFAULT) >= 0);
	H5Fclose(f);
	expect_load_error(path, "weights/conv1", NULL);
	unlink(path);
}

static void test_corrupt_graph_names_the_attribute(void)
{
	char path[512];
	if (save_model("graph.h5", path, sizeof(path))) {
		WF_CHECK(0);
		return;
	}
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	WF_CHECK(H5Adelete(f, "graph") >= 0);
	hid_t t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	hid_t sp = H5Screate(H5S_SCALAR);
	hid_t a = H5Acreate2(f, "graph", t, sp, H5P_DEFAULT, H5P_DEFAULT);
	const char *bad = "{\"format\": 1, \"layers\": ";
	WF_CHECK(H5Awrite(a, t, &bad) >= 0);
	H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
	H5Fclose(f);
	expect_load_error(path, "graph", "invalid JSON");
	unlink(path);
}

static void test_save_to_unwritable_place_fails(void)
{
	wf_model *m = resnet();
	wf_err err = {0};
	if (!m) {
		WF_CHECK(0);
		return;
	}
	WF_CHECK(wf_model_save(m, NULL, "/nonexistent-dir/x/model.h5", &err) == WF_EIO);
	WF_CHECK_MSG(strstr(err.msg, "/nonexistent-dir/x/model.h5") != NULL, "%s", err.msg);
	wf_model_free(m);
}

int main(void)
{
	wf_err err = {0};
	snprintf(dir, sizeof(dir), "/tmp/weft-test-modelfile-XXXXXX");
	if (!mkdtemp(dir) || wf_backend_create(&ref, "ref", 0, &err)) {
		fprintf(stderr, "setup failed: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_save_load_round_trip);
	WF_RUN(test_truncated_file_fails_cleanly);
	WF_RUN(test_garbage_file_fails_cleanly);
	WF_RUN(test_wrong_or_missing_format_attribute);
	WF_RUN(test_missing_dataset_and_wrong_shape);
	WF_RUN(test_corrupt_graph_names_the_attribute);
	WF_RUN(test_save_to_unwritable_place_fails);
	rmdir(dir);
	wf_backend_free(ref);
	return wf_test_summary();
}
