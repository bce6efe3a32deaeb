/* test_keras.c: the Keras .h5 importer against files written by Keras itself
 * (tests/model/fixtures, made by make_fixtures.py with TensorFlow from PyPI):
 * a functional model using every supported layer (Keras 3, Keras 2, and with
 * split attributes), Sequential models, and MobileNetV2(weights=None). The
 * imported model's predictions equal Keras's within 1e-4; wf_model_load
 * reads Keras files directly; unsupported layers fail with their name. Also
 * the transfer-learning model (a base model nested as a layer; Keras 3 and
 * 2) and Keras 3 .keras archives, whose corruptions are named errors. A
 * file listing many layers is read in time linear in its size, and one
 * listing more than a weft model may hold is refused before the walk. */
#include "model/fold.h"
#include "model/keras.h"
#include "model/model.h"
#include "tests/model/keras_layers_file.h"
#include "tests/test.h"

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#ifndef WF_FIXTURES
#define WF_FIXTURES "tests/model/fixtures"
#endif

static wf_backend *cpu;

typedef struct expected {
	int n, h, w, c, k;
	float *input;  /* [n,h,w,c] as given to Keras */
	float *logits; /* [n,k] */
	float *probs;  /* [n,k] */
} expected;

static float *read_set(hid_t f, const char *group, const char *name, int *dims, int want)
{
	char path[256];
	hsize_t d[4] = {0};
	snprintf(path, sizeof(path), "%s/%s", group, name);
	hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
	if (ds < 0)
		return NULL;
	hid_t sp = H5Dget_space(ds);
	int nd = H5Sget_simple_extent_ndims(sp);
	H5Sget_simple_extent_dims(sp, d, NULL);
	size_t cnt = 1;
	for (int i = 0; i < nd && i < 4; i++) {
		cnt *= d[i];
		if (i < want)
			dims[i] = (int)d[i];
	}
	float *buf = malloc(cnt * sizeof(float));
	if (buf && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
		free(buf);
		buf = NULL;
	}
	H5Sclose(sp);
	H5Dclose(ds);
	return nd == want ? buf : (free(buf), NULL);
}

static int load_expected(const char *name, expected *e)
{
	int d[4], dk[2];
	memset(e, 0, sizeof(*e));
	hid_t f = H5Fopen(WF_FIXTURES "/expected.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
	if (f < 0)
		return -1;
	e->input = read_set(f, name, "input", d, 4);
	e->logits = read_set(f, name, "logits", dk, 2);
	e->probs = read_set(f, name, "probs", dk, 2);
	H5Fclose(f);
	e->n = d[0], e->h = d[1], e->w = d[2], e->c = d[3], e->k = dk[1];
	return e->input && e->logits && e->probs ? 0 : -1;
}

static void expected_free(expected *e)
{
	free(e->input);
	free(e->logits);
	free(e->probs);
}

/* Forward n samples on cpu: logits and probs [n,K]. */
static int predict(wf_model *m, const float *x, int n, float *logits, float *probs)
{
	wf_exec *ex = NULL;
	wf_err err = {0};
	if (wf_exec_create(&ex, m, cpu, n, 0, &err)) {
		fprintf(stderr, "exec: %s\n", err.msg);
		return -1;
	}
	int rc = wf_exec_forward(ex, x, n, 0, 0);
	rc = rc ? rc : wf_exec_logits(ex, logits);
	rc = rc ? rc : wf_exec_probs(ex, probs);
	if (rc)
		fprintf(stderr, "forward: %s\n", wf_exec_error(ex));
	wf_exec_free(ex);
	return rc;
}

/* Import fixture file `file` (expected outputs `name`), run Keras's inputs
 * through the recorded preprocessing (raw) or as they are, and compare with
 * Keras. */
static void check_file_matches_keras(const char *file, const char *name, int apply_pre,
				     wf_model_meta *meta_out)
{
	char path[512];
	expected e;
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	snprintf(path, sizeof(path), WF_FIXTURES "/%s", file);
	WF_CHECK_MSG(load_expected(name, &e) == 0, "%s: no expected outputs", name);
	WF_CHECK_MSG(wf_keras_load(&m, &meta, path, &err) == 0, "%s", err.msg);
	if (!m || !e.input) {
		expected_free(&e);
		return;
	}
	WF_CHECK_INT(m->in_h, e.h);
	WF_CHECK_INT(m->in_c, e.c);
	WF_CHECK_INT(m->classes, e.k);
	size_t per = (size_t)e.h * e.w * e.c;
	float *x = malloc(per * e.n * sizeof(float));
	float *l = malloc(sizeof(float) * e.n * e.k), *p = malloc(sizeof(float) * e.n * e.k);
	for (size_t i = 0; i < per * e.n; i++) {
		int c = (int)(i % e.c);
		x[i] = apply_pre ? (e.input[i] * meta.scale - meta.mean[c]) / meta.std[c]
				 : e.input[i];
	}
	WF_CHECK(predict(m, x, e.n, l, p) == 0);
	double dl = 0, dp = 0;
	for (int i = 0; i < e.n * e.k; i++) {
		dl = fmax(dl, fabs(l[i] - e.logits[i]));
		dp = fmax(dp, fabs(p[i] - e.probs[i]));
	}
	WF_CHECK_MSG(dl <= 1e-4 && dp <= 1e-4, "%s: logits differ by %g, probabilities by %g", name,
		     dl, dp);
	fprintf(stderr, "  %-15s %3d layers: max |logit - keras| %.2g, |prob - keras| %.2g\n", name,
		m->nlayers, dl, dp);
	if (meta_out)
		*meta_out = meta;
	free(x);
	free(l);
	free(p);
	wf_model_free(m);
	expected_free(&e);
}

static void check_matches_keras(const char *name, int apply_pre, wf_model_meta *meta_out)
{
	char file[256];
	snprintf(file, sizeof(file), "%s.h5", name);
	check_file_matches_keras(file, name, apply_pre, meta_out);
}

static void test_every_layer_keras3(void)
{
	wf_model_meta meta;
	check_matches_keras("small_k3", 1, &meta);
	/* Rescaling(1/127.5, -1) then Normalization became the preprocessing */
	WF_CHECK_NEAR((255 * meta.scale - meta.mean[0]) / meta.std[0], (1.0 - 0.1) / sqrt(1.5),
		      1e-5);
	WF_CHECK_NEAR((0 * meta.scale - meta.mean[2]) / meta.std[2], (-1.0 - 0.3) / sqrt(0.5),
		      1e-5);
	WF_CHECK(strcmp(meta.channel_order, "RGB") == 0);
	/* ... which the model itself applies: it takes raw pixels, numbers too */
	WF_CHECK_INT(meta.pre_in_model, 1);
}

static void test_every_layer_keras3_split_attributes(void)
{
	check_matches_keras("small_k3_split", 1, NULL);
}

static void test_every_layer_keras2(void)
{
	check_matches_keras("small_k2", 1, NULL);
}

static void test_sequential_keras3_and_keras2(void)
{
	check_matches_keras("seq_k3", 1, NULL);
	check_matches_keras("seq_k2", 1, NULL);
}

static void test_mobilenetv2_matches_keras(void)
{
	wf_model_meta meta;
	memset(&meta, 0, sizeof(meta));
	check_matches_keras("mobilenetv2_k3", 0, &meta);
	/* no preprocessing layers: the Keras application's own, [-1, 1] */
	WF_CHECK_NEAR(meta.scale * 255 - meta.mean[0], 1.0, 1e-5);
	WF_CHECK_NEAR(-meta.mean[1], -1.0, 1e-5);
	/* preprocess_input is the caller's: the model takes preprocessed numbers */
	WF_CHECK_INT(meta.pre_in_model, 0);
}

/* weft-serve's path: wf_model_load on a Keras file, save as weft, reload. */
static void test_model_load_reads_keras_and_round_trips(void)
{
	wf_model *m = NULL, *back = NULL, *folded = NULL;
	wf_model_meta meta, meta2;
	wf_err err = {0};
	char out[] = "/tmp/weft-test-keras-XXXXXX";
	int fd = mkstemp(out);
	WF_CHECK(fd >= 0);
	close(fd);
	WF_CHECK_MSG(wf_model_load(&m, &meta, WF_FIXTURES "/mobilenetv2_k3.h5", &err) == 0, "%s",
		     err.msg);
	if (!m)
		return;
	WF_CHECK_MSG(wf_model_save(m, &meta, out, &err) == 0, "%s", err.msg);
	WF_CHECK_MSG(wf_model_load(&back, &meta2, out, &err) == 0, "%s", err.msg);
	WF_CHECK_MSG(wf_model_fold_for_inference(m, &folded, &err) == 0, "%s", err.msg);
	if (back && folded) {
		WF_CHECK_INT(back->nparams, m->nparams);
		WF_CHECK(memcmp(back->params, m->params, m->nparams * sizeof(float)) == 0);
		WF_CHECK_NEAR(meta2.scale, meta.scale, 0);
		expected e;
		WF_CHECK(load_expected("mobilenetv2_k3", &e) == 0);
		float *l = malloc(sizeof(float) * e.n * e.k),
		      *p = malloc(sizeof(float) * e.n * e.k);
		WF_CHECK(predict(folded, e.input, e.n, l, p) == 0);
		double dp = 0;
		for (int i = 0; i < e.n * e.k; i++)
			dp = fmax(dp, fabs(p[i] - e.probs[i]));
		WF_CHECK_MSG(dp <= 1e-4, "folded import: probabilities differ by %g", dp);
		free(l);
		free(p);
		expected_free(&e);
	}
	wf_model_free(m);
	wf_model_free(back);
	wf_model_free(folded);
	wf_model_meta_free(&meta);
	wf_model_meta_free(&meta2);
	unlink(out);
}

/* The Keras transfer-learning model: a functional base model called as a
 * layer inside a new model with its own head. Its layers are flattened under
 * their Keras names; the Rescaling inside the base is the preprocessing. */
static void test_nested_base_model_keras3_and_keras2(void)
{
	wf_model_meta meta;
	memset(&meta, 0, sizeof(meta));
	check_matches_keras("nested_k3", 1, &meta);
	WF_CHECK_NEAR(meta.scale * 255 - meta.mean[0], 1.0, 1e-5);
	WF_CHECK_INT(meta.pre_in_model, 1);
	check_matches_keras("nested_k2", 1, NULL);
	wf_model *m = NULL;
	wf_err err = {0};
	WF_CHECK_MSG(wf_keras_load(&m, NULL, WF_FIXTURES "/nested_k3.h5", &err) == 0, "%s",
		     err.msg);
	if (m) {
		int conv1 = 0, head = 0;
		for (int i = 0; i < m->nlayers; i++) {
			conv1 |= strcmp(m->layers[i].name, "Conv1") == 0;
			head |= strcmp(m->layers[i].name, "head") == 0;
		}
		WF_CHECK_MSG(conv1 && head, "base layer Conv1 %d, head %d", conv1, head);
		WF_CHECK(strcmp(m->layers[0].name, "image") == 0);
	}
	wf_model_free(m);
}

/* A Keras application as the base model, without preprocessing layers:
 * its preprocess_input ([-1, 1] for MobileNetV2) is the preprocessing. */
static void test_nested_application_keeps_its_preprocessing(void)
{
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	WF_CHECK_MSG(wf_keras_load(&m, &meta, WF_FIXTURES "/nested_app_k3.h5", &err) == 0, "%s",
		     err.msg);
	if (!m)
		return;
	WF_CHECK_NEAR(meta.scale * 255 - meta.mean[0], 1.0, 1e-5);
	WF_CHECK_NEAR(-meta.mean[1], -1.0, 1e-5);
	wf_model_meta_free(&meta);
	wf_model_free(m);
}

/* Keras 3 .keras archives: config.json + model.weights.h5 (layers/<name>/vars/<i>). */
static void test_keras_archive(void)
{
	check_file_matches_keras("nested_k3.keras", "nested_k3_keras", 1, NULL);
	check_file_matches_keras("small_k3.keras", "small_k3_keras", 1, NULL);
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	/* weft-serve's and weft eval's path */
	WF_CHECK_MSG(wf_model_load(&m, &meta, WF_FIXTURES "/nested_k3.keras", &err) == 0, "%s",
		     err.msg);
	if (m) {
		WF_CHECK_INT(m->classes, 3);
		wf_model_meta_free(&meta);
	}
	wf_model_free(m);
	WF_CHECK(wf_keras_check_archive(WF_FIXTURES "/nested_k3.keras", &err) == 0);
	WF_CHECK(wf_keras_is_archive(WF_FIXTURES "/nested_k3.keras") == 1);
	WF_CHECK(wf_keras_is_archive(WF_FIXTURES "/nested_k3.h5") == 0);
}

/* A copy of the .keras fixture: the first n bytes, one byte changed at
 * `at` (if >= 0), or the first `find` after `after` renamed. */
static int archive_copy(size_t n, long at, const char *find, char *path, size_t pn)
{
	FILE *in = fopen(WF_FIXTURES "/nested_k3.keras", "rb");
	if (!in)
		return -1;
	unsigned char *buf = malloc(1 << 20);
	size_t len = fread(buf, 1, 1 << 20, in);
	fclose(in);
	if (n > len)
		n = len;
	if (at >= 0 && (size_t)at < n)
		buf[at] ^= 0x5a;
	if (find) { /* the last occurrence: the central directory's */
		size_t fl = strlen(find);
		for (size_t i = n - fl; i > 0; i--)
			if (memcmp(buf + i, find, fl) == 0) {
				buf[i] = 'X';
				break;
			}
	}
	snprintf(path, pn, "/tmp/weft-test-keras-zip-%d.keras", (int)getpid());
	FILE *out = fopen(path, "wb");
	size_t w = out ? fwrite(buf, 1, n, out) : 0;
	if (out)
		fclose(out);
	free(buf);
	return w == n ? 0 : -1;
}

static void expect_archive_error(size_t n, long at, const char *find, const char *want)
{
	char path[256];
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	WF_CHECK(archive_copy(n, at, find, path, sizeof(path)) == 0);
	int rc = wf_model_load(&m, &meta, path, &err);
	WF_CHECK_MSG(rc < 0 && m == NULL, "bytes %zu, flip %ld: loaded", n, at);
	WF_CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, want), "message: %s (want %s)",
		     err.msg, want);
	wf_model_free(m);
	unlink(path);
}

static void test_corrupt_archives_are_clear_errors(void)
{
	FILE *f = fopen(WF_FIXTURES "/nested_k3.keras", "rb");
	WF_CHECK(f != NULL);
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size_t len = (size_t)ftell(f);
	fclose(f);
	expect_archive_error(len - 10, -1, NULL, "truncated");
	expect_archive_error(len / 2, -1, NULL, "truncated");
	expect_archive_error(100, -1, NULL, "truncated");
	expect_archive_error(len, -1, "config.json", "without config.json");
	expect_archive_error(len, -1, "model.weights.h5", "without model.weights.h5");
	expect_archive_error(len, (long)len / 2, NULL, "model.weights.h5");
}

/* Copy the small fixture with one substring of its model_config replaced. */
static int edited_copy(const char *from, const char *to, char *path, size_t n)
{
	char src[512];
	snprintf(src, sizeof(src), WF_FIXTURES "/small_k3.h5");
	snprintf(path, n, "/tmp/weft-test-keras-edit-%d.h5", (int)getpid());
	FILE *in = fopen(src, "rb"), *out = fopen(path, "wb");
	char buf[65536];
	size_t r;
	while (in && out && (r = fread(buf, 1, sizeof(buf), in)) > 0)
		fwrite(buf, 1, r, out);
	if (in)
		fclose(in);
	if (out)
		fclose(out);
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	if (f < 0)
		return -1;
	hid_t a = H5Aopen(f, "model_config", H5P_DEFAULT);
	hid_t t = H5Aget_type(a);
	char *cfg = NULL;
	H5Aread(a, t, &cfg);
	H5Aclose(a);
	char *hit = cfg ? strstr(cfg, from) : NULL;
	int rc = -1;
	if (hit) {
		size_t len = strlen(cfg) - strlen(from) + strlen(to) + 1;
		char *edited = malloc(len);
		snprintf(edited, len, "%.*s%s%s", (int)(hit - cfg), cfg, to, hit + strlen(from));
		H5Adelete(f, "model_config");
		hid_t sp = H5Screate(H5S_SCALAR);
		a = H5Acreate2(f, "model_config", t, sp, H5P_DEFAULT, H5P_DEFAULT);
		rc = H5Awrite(a, t, &edited) < 0 ? -1 : 0;
		H5Aclose(a);
		H5Sclose(sp);
		free(edited);
	}
	H5free_memory(cfg);
	H5Tclose(t);
	H5Fclose(f);
	return rc;
}

static void expect_import_error(const char *from, const char *to, const char *want1,
				const char *want2)
{
	char path[256];
	wf_model *m = NULL;
	wf_err err = {0};
	WF_CHECK(edited_copy(from, to, path, sizeof(path)) == 0);
	WF_CHECK(wf_keras_load(&m, NULL, path, &err) < 0);
	WF_CHECK(m == NULL);
	WF_CHECK_MSG(strstr(err.msg, want1) && strstr(err.msg, want2), "message: %s", err.msg);
	unlink(path);
}

static void test_unsupported_layers_are_named(void)
{
	expect_import_error("\"GlobalAveragePooling2D\"", "\"GlobalMaxPooling2D\"", "'gap'",
			    "GlobalMaxPooling2D");
	expect_import_error("\"activation\": \"relu\"", "\"activation\": \"tanh\"", "'conv1'",
			    "tanh");
	expect_import_error("\"max_value\": 6.0", "\"max_value\": 4.0", "'relu6_1'", "max_value");
}

static void test_not_a_keras_file(void)
{
	wf_model *m = NULL;
	wf_err err = {0};
	WF_CHECK(wf_keras_load(&m, NULL, WF_FIXTURES "/make_fixtures.py", &err) == WF_EFORMAT);
	WF_CHECK(strstr(err.msg, "make_fixtures.py") != NULL);
	WF_CHECK(wf_keras_load(&m, NULL, WF_FIXTURES "/expected.h5", &err) == WF_EFORMAT);
	WF_CHECK(strstr(err.msg, "model_config") != NULL);
}

/* Seconds one import of path takes (all fail: see above); its error into
 * err. */
static double import_seconds(const char *path, wf_err *err)
{
	wf_model *m = NULL;
	struct timespec t0, t1;
	memset(err, 0, sizeof(*err));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = wf_keras_load(&m, NULL, path, err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	WF_CHECK(rc < 0 && m == NULL);
	wf_model_free(m);
	return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Time against size, as ratios within this run (never absolute times): 4x
 * the layers may cost about 4x (quadratic would be 16x; under 10x passes);
 * 20x the layers, past the limit, are refused before the walk, at most
 * about as dear per byte as the walk of the small file. */
static void test_many_layers_linear_and_refused(void)
{
	char small[128], big[128], huge[128];
	snprintf(small, sizeof(small), "/tmp/weft-test-keras-2k-%d.h5", (int)getpid());
	snprintf(big, sizeof(big), "/tmp/weft-test-keras-8k-%d.h5", (int)getpid());
	snprintf(huge, sizeof(huge), "/tmp/weft-test-keras-40k-%d.h5", (int)getpid());
	WF_CHECK(wf_test_keras_layers_file(small, 2000) == 0);
	WF_CHECK(wf_test_keras_layers_file(big, 8000) == 0);
	WF_CHECK(wf_test_keras_layers_file(huge, 40000) == 0);
	/* the fastest of five rounds each, the sizes interleaved, so that other
	 * work on the machine (or a sanitizer's) weighs on all of them alike */
	wf_err es, eb, eh;
	double ts = 1e9, tb = 1e9, th = 1e9;
	for (int r = 0; r < 5; r++) {
		ts = fmin(ts, import_seconds(small, &es));
		tb = fmin(tb, import_seconds(big, &eb));
		th = fmin(th, import_seconds(huge, &eh));
	}
	WF_CHECK_MSG(strstr(es.msg, "'a1999'") || strstr(es.msg, "classes"), "%s", es.msg);
	WF_CHECK_MSG(strstr(eh.msg, "40000 layers") && strstr(eh.msg, "10000"), "%s", eh.msg);
	printf("  2000 layers %.4f s, 8000 %.4f s (x%.1f), 40000 refused %.4f s (x%.1f)\n", ts, tb,
	       tb / ts, th, th / ts);
	WF_CHECK_MSG(tb / ts < 10.0, "4x the layers took %.1fx the time (quadratic?)", tb / ts);
	WF_CHECK_MSG(th / ts < 40.0, "20x the layers took %.1fx the time before the refusal",
		     th / ts);
	unlink(small);
	unlink(big);
	unlink(huge);
}

int main(void)
{
	wf_err err = {0};
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	if (wf_backend_create(&cpu, "cpu", 0, &err) && wf_backend_create(&cpu, "ref", 0, &err)) {
		fprintf(stderr, "no backend: %s\n", err.msg);
		return 1;
	}
	WF_RUN(test_every_layer_keras3);
	WF_RUN(test_every_layer_keras3_split_attributes);
	WF_RUN(test_every_layer_keras2);
	WF_RUN(test_sequential_keras3_and_keras2);
	WF_RUN(test_mobilenetv2_matches_keras);
	WF_RUN(test_model_load_reads_keras_and_round_trips);
	WF_RUN(test_unsupported_layers_are_named);
	WF_RUN(test_not_a_keras_file);
	WF_RUN(test_nested_base_model_keras3_and_keras2);
	WF_RUN(test_nested_application_keeps_its_preprocessing);
	WF_RUN(test_keras_archive);
	WF_RUN(test_corrupt_archives_are_clear_errors);
	WF_RUN(test_many_layers_linear_and_refused);
	wf_backend_free(cpu);
	return wf_test_summary();
}
