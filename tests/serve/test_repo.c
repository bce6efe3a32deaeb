/* test_repo.c: serve/repo.c on real model files in a temporary directory:
 * the latest version is served and a new one swapped in while a request
 * still holds the old one, foreign version folders are skipped, a missing
 * base path is an error naming it, TF Serving's config file (specific
 * versions, labels) and a Triton repository with explicit load/unload. */
#include "common/util.h"
#include "serve/repo.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/weft-test-repo-XXXXXX";

/* DIR/<sub>/<version>/model.h5, written in DIR/staging and renamed into
 * place (the poller never sees half a file). */
static int put_model(const char *sub, long version)
{
	char stage[512], final[512], path[600];
	wf_err err = {0};
	wf_model *m = NULL;
	wf_model_meta meta;
	snprintf(stage, sizeof(stage), "%s/staging/%ld", dir, version);
	snprintf(final, sizeof(final), "%s/%s", dir, sub);
	wf_mkdirs(stage);
	wf_mkdirs(final);
	snprintf(final, sizeof(final), "%s/%s/%ld", dir, sub, version);
	snprintf(path, sizeof(path), "%s/model.h5", stage);
	if (wf_model_zoo(&m, "smallcnn", 32, 32, 3, 10, &err))
		goto fail;
	wf_model_init_params(m, (uint64_t)version);
	wf_model_meta_init(&meta);
	int rc = wf_model_save(m, &meta, path, &err);
	wf_model_meta_free(&meta);
	wf_model_free(m);
	if (rc)
		goto fail;
	if (rename(stage, final) != 0) {
		fprintf(stderr, "rename %s %s failed\n", stage, final);
		return 1;
	}
	return 0;
fail:
	fprintf(stderr, "put_model %s/%ld: %s\n", sub, version, err.msg);
	return 1;
}

static wf_serve_repo_opts base_opts(void)
{
	return (wf_serve_repo_opts){.name = "m",
				    .device = "cpu",
				    .threads = 1,
				    .nslots = 1,
				    .max_batch = 2,
				    .poll_seconds = 0.1};
}

/* Wait (up to 60 s) until `name` resolves to `version` (0: to anything). */
static long wait_version(wf_serve_repo *r, const char *name, long version)
{
	long got = -1;
	for (double t0 = wf_now(); wf_now() - t0 < 60; usleep(50 * 1000)) {
		wf_serve_find why;
		wf_err err = {0};
		wf_serve_version *v = wf_serve_repo_find(r, name, 0, NULL, &why, &err);
		got = v ? v->version : -1;
		wf_serve_version_release(v);
		if (v && (version == 0 || got == version))
			break;
	}
	return got;
}

static const char *state_of(wf_serve_repo *r, const char *name, long version)
{
	static char st[32];
	int n = 0;
	wf_serve_version_state *s = wf_serve_repo_status(r, name, &n);
	snprintf(st, sizeof(st), "absent");
	for (int i = 0; i < n; i++)
		if (s[i].version == version)
			snprintf(st, sizeof(st), "%s", s[i].state);
	free(s);
	return st;
}

static void test_latest_version_and_swap(void)
{
	char base[512];
	snprintf(base, sizeof(base), "%s/single", dir);
	WF_CHECK_INT(put_model("single", 1), 0);
	WF_CHECK_INT(put_model("single", 2), 0);
	wf_serve_repo_opts o = base_opts();
	o.kind = WF_SERVE_SINGLE;
	o.base_path = base;
	wf_serve_repo *r = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_repo_create(&r, &o, &err), 0);
	if (!r)
		return;
	WF_CHECK_INT(wait_version(r, "m", 0), 2);
	WF_CHECK(wf_serve_repo_ready(r));
	WF_CHECK_MSG(!strcmp(state_of(r, "m", 2), "AVAILABLE"), "%s", state_of(r, "m", 2));
	/* latest (num_versions 1): version 1 is not served */
	wf_serve_find why = WF_SERVE_FOUND;
	wf_serve_version *v1 = wf_serve_repo_find(r, "m", 1, NULL, &why, &err);
	WF_CHECK(v1 == NULL && why != WF_SERVE_FOUND);
	wf_serve_version_release(v1);
	/* an unknown model: 404 naming it */
	wf_serve_version *nope = wf_serve_repo_find(r, "nope", 0, NULL, &why, &err);
	WF_CHECK(nope == NULL && why == WF_SERVE_NOT_FOUND);
	WF_CHECK_MSG(strstr(err.msg, "nope") != NULL, "%s", err.msg);
	/* a request holds version 2 while version 3 arrives and is swapped in */
	wf_serve_version *held = wf_serve_repo_find(r, "m", 0, NULL, &why, &err);
	WF_CHECK(held && held->version == 2);
	long swaps = wf_serve_repo_swaps(r);
	WF_CHECK_INT(put_model("single", 3), 0);
	WF_CHECK_INT(wait_version(r, "m", 3), 3);
	WF_CHECK(wf_serve_repo_swaps(r) > swaps);
	wf_serve_version *v3 = wf_serve_repo_find(r, "m", 0, NULL, &why, &err);
	if (held && v3) { /* loaded beside version 2, of the same graph: its times */
		WF_CHECK(held->timed && !v3->timed);
		for (int b = 0; b < v3->slots[0].plan->nsizes; b++)
			WF_CHECK(v3->slots[0].plan->secs[b] == held->slots[0].plan->secs[b]);
	}
	wf_serve_version_release(v3);
	if (held) { /* still whole: its executors run */
		WF_CHECK(held->model != NULL && held->nslots == 1 && held->slots[0].be != NULL);
		WF_CHECK(atomic_load(&held->refs) >= 1);
		wf_serve_version_release(held);
	}
	/* a foreign version folder (a SavedModel) is skipped */
	char foreign[600];
	snprintf(foreign, sizeof(foreign), "%s/4", base);
	wf_mkdirs(foreign);
	snprintf(foreign, sizeof(foreign), "%s/4/saved_model.pb", base);
	long scans = wf_serve_repo_scans(r);
	FILE *f = fopen(foreign, "w");
	if (f) {
		fputs("not weft", f);
		fclose(f);
	}
	/* two passes: the second began after the folder was complete */
	for (double t0 = wf_now(); wf_serve_repo_scans(r) < scans + 2 && wf_now() - t0 < 60;)
		usleep(10 * 1000);
	WF_CHECK_MSG(wf_serve_repo_scans(r) >= scans + 2, "the poller did not run");
	WF_CHECK_INT(wait_version(r, "m", 0), 3);
	WF_CHECK_MSG(strcmp(state_of(r, "m", 4), "AVAILABLE"), "a SavedModel folder was served");
	wf_serve_repo_free(r);
}

static void test_missing_base_path(void)
{
	char base[512];
	snprintf(base, sizeof(base), "%s/no-such-dir", dir);
	wf_serve_repo_opts o = base_opts();
	o.kind = WF_SERVE_SINGLE;
	o.base_path = base;
	wf_serve_repo *r = NULL;
	wf_err err = {0};
	WF_CHECK(wf_serve_repo_create(&r, &o, &err) != 0);
	WF_CHECK(r == NULL);
	WF_CHECK_MSG(strstr(err.msg, "no-such-dir") != NULL, "%s", err.msg);
	wf_serve_repo_free(r);
}

/* TF Serving's --model_config_file: two versions of "a" by a specific
 * policy with labels, and "b". */
static void test_config_file_versions_and_labels(void)
{
	WF_CHECK_INT(put_model("a", 1), 0);
	WF_CHECK_INT(put_model("a", 2), 0);
	WF_CHECK_INT(put_model("a", 3), 0);
	WF_CHECK_INT(put_model("b", 1), 0);
	char cfg[512], text[2048];
	snprintf(cfg, sizeof(cfg), "%s/models.config", dir);
	snprintf(text, sizeof(text),
		 "model_config_list {\n"
		 "  config {\n"
		 "    name: 'a'\n"
		 "    base_path: '%s/a'\n"
		 "    model_platform: 'tensorflow'\n"
		 "    model_version_policy { specific { versions: 1 versions: 2 } }\n"
		 "    version_labels { key: 'stable' value: 1 }\n"
		 "    version_labels { key: 'canary' value: 2 }\n"
		 "  }\n"
		 "  config { name: 'b' base_path: '%s/b' model_platform: 'tensorflow' }\n"
		 "}\n",
		 dir, dir);
	FILE *f = fopen(cfg, "w");
	WF_CHECK(f != NULL);
	if (!f)
		return;
	fputs(text, f);
	fclose(f);
	wf_serve_repo_opts o = base_opts();
	o.kind = WF_SERVE_CONFIG_FILE;
	o.config_file = cfg;
	wf_serve_repo *r = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_repo_create(&r, &o, &err), 0);
	if (!r)
		return;
	WF_CHECK_INT(wait_version(r, "b", 0), 1);
	WF_CHECK_INT(wait_version(r, "a", 2), 2); /* the highest listed, not 3 */
	for (double t0 = wf_now(); !wf_serve_repo_ready(r) && wf_now() - t0 < 60;)
		usleep(50 * 1000);
	const struct {
		long version;
		const char *label;
		long want; /* 0: not found */
	} cases[] = {{0, "stable", 1}, {0, "canary", 2}, {1, NULL, 1},
		     {2, NULL, 2},     {3, NULL, 0},	 {0, "nope", 0}};
	for (size_t i = 0; i < WF_ARRAY_LEN(cases); i++) {
		wf_serve_find why = WF_SERVE_FOUND;
		wf_serve_version *v =
			wf_serve_repo_find(r, "a", cases[i].version, cases[i].label, &why, &err);
		WF_CHECK_MSG((v ? v->version : 0) == cases[i].want, "case %zu: got %ld (%s)", i,
			     v ? v->version : 0L, v ? "" : err.msg);
		if (!cases[i].want)
			WF_CHECK_MSG(why != WF_SERVE_FOUND, "case %zu", i);
		wf_serve_version_release(v);
	}
	int n = 0;
	wf_serve_version_state *idx = wf_serve_repo_index(r, &n);
	int seen_a = 0, seen_b = 0;
	for (int i = 0; i < n; i++) {
		seen_a |= !strcmp(idx[i].name, "a");
		seen_b |= !strcmp(idx[i].name, "b");
	}
	free(idx);
	WF_CHECK(seen_a && seen_b);
	wf_serve_repo_free(r);
}

/* A Triton --model_repository in explicit mode: x loaded at start, y on
 * request, x unloaded; an unknown model fails to load, naming it. */
static void test_repository_explicit_load_unload(void)
{
	WF_CHECK_INT(put_model("repo/x", 1), 0);
	WF_CHECK_INT(put_model("repo/y", 1), 0);
	char repo[512];
	snprintf(repo, sizeof(repo), "%s/repo", dir);
	const char *load[] = {"x"};
	wf_serve_repo_opts o = base_opts();
	o.kind = WF_SERVE_REPOSITORY;
	o.repository = repo;
	o.control = WF_SERVE_CONTROL_EXPLICIT;
	o.load_models = load;
	o.nload_models = 1;
	wf_serve_repo *r = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_repo_create(&r, &o, &err), 0);
	if (!r)
		return;
	WF_CHECK_INT(wait_version(r, "x", 0), 1);
	wf_serve_find why;
	wf_serve_version *y = wf_serve_repo_find(r, "y", 0, NULL, &why, &err);
	WF_CHECK(y == NULL);
	wf_serve_version_release(y);
	WF_CHECK_INT(wf_serve_repo_load(r, "y", NULL, &err), 0);
	y = wf_serve_repo_find(r, "y", 0, NULL, &why, &err);
	WF_CHECK(y && y->version == 1);
	wf_serve_version_release(y);
	WF_CHECK_INT(wf_serve_repo_unload(r, "x", &err), 0);
	wf_serve_version *x = wf_serve_repo_find(r, "x", 0, NULL, &why, &err);
	WF_CHECK(x == NULL);
	wf_serve_version_release(x);
	WF_CHECK(wf_serve_repo_load(r, "zzz", NULL, &err) != 0);
	WF_CHECK_MSG(strstr(err.msg, "zzz") != NULL, "%s", err.msg);
	wf_serve_repo_free(r);
}

/* A version whose weights and executors exceed its model's weft_memory_mb
 * fails to load, saying so; within the budget it loads and reports what it
 * takes (a smallcnn at 32x32, max batch 64: a few MiB). */
static void test_memory_budget(void)
{
	WF_CHECK_INT(put_model("mem", 1), 0);
	char path[600];
	snprintf(path, sizeof(path), "%s/mem/1/model.h5", dir);
	wf_serve_repo_opts o = base_opts();
	o.max_batch = 64;
	o.nslots = 2;
	o.memory_mb = 1;
	wf_serve_version *v = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_version_load(&v, path, 1, &o, NULL, &err), WF_ENOMEM);
	WF_CHECK_MSG(strstr(err.msg, "memory budget (weft_memory_mb 1)") &&
			     strstr(err.msg, "max_batch_size 64"),
		     "%s", err.msg);
	o.memory_mb = 512;
	WF_CHECK_INT(wf_serve_version_load(&v, path, 1, &o, NULL, &err), 0);
	if (v) {
		WF_CHECK_MSG(v->memory_bytes > (1u << 20) && v->memory_bytes < (512u << 20),
			     "%zu bytes", v->memory_bytes);
		wf_serve_version_release(v);
	}
}

/* A version loaded beside one of the same graph, run the same way, takes
 * its batch plan's times; any difference (the graph, the batch sizes, the
 * threads) and it times its own. */
static void test_times_of_the_same_graph(void)
{
	WF_CHECK_INT(put_model("alike", 1), 0);
	WF_CHECK_INT(put_model("alike", 2), 0);
	char p1[600], p2[600];
	snprintf(p1, sizeof(p1), "%s/alike/1/model.h5", dir);
	snprintf(p2, sizeof(p2), "%s/alike/2/model.h5", dir);
	wf_serve_repo_opts o = base_opts();
	o.max_batch = 4;
	wf_serve_version *a = NULL, *b = NULL;
	wf_err err = {0};
	WF_CHECK_INT(wf_serve_version_load(&a, p1, 1, &o, NULL, &err), 0);
	if (!a)
		return;
	WF_CHECK(a->timed);
	a->slots[0].plan->secs[0] = 123.0; /* not what a forward takes */
	WF_CHECK_INT(wf_serve_version_load(&b, p2, 2, &o, a, &err), 0);
	WF_CHECK(b && !b->timed && b->slots[0].plan->secs[0] == 123.0);
	wf_serve_version_release(b);
	b = NULL;
	o.threads = 2;
	WF_CHECK_INT(wf_serve_version_load(&b, p2, 2, &o, a, &err), 0);
	WF_CHECK(b && b->timed && b->slots[0].plan->secs[0] < 123.0);
	wf_serve_version_release(b);
	b = NULL;
	o.threads = 1;
	o.max_batch = 2;
	WF_CHECK_INT(wf_serve_version_load(&b, p2, 2, &o, a, &err), 0);
	WF_CHECK(b && b->timed);
	wf_serve_version_release(b);
	wf_serve_version_release(a);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	WF_RUN(test_latest_version_and_swap);
	WF_RUN(test_missing_base_path);
	WF_RUN(test_config_file_versions_and_labels);
	WF_RUN(test_repository_explicit_load_unload);
	WF_RUN(test_memory_budget);
	WF_RUN(test_times_of_the_same_graph);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return wf_test_summary();
}
