/* test_checkpoint.c: the DONE rule: only complete step directories are
 * found and kept; pruning keeps the newest `keep` complete ones. */
#include "trainer/checkpoint.h"
#include "common/atomicfile.h"
#include "common/ckptdir.h"
#include "ps/shard.h"
#include "common/util.h"
#include "tests/test.h"

#include <fcntl.h>
#include <unistd.h>

static void make_step(const char *dir, long step, int done)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/step-%ld", dir, step);
	wf_mkdirs(p);
	snprintf(p, sizeof(p), "%s/step-%ld/model.h5", dir, step);
	close(open(p, O_WRONLY | O_CREAT, 0644));
	if (done) {
		snprintf(p, sizeof(p), "%s/step-%ld/DONE", dir, step);
		close(open(p, O_WRONLY | O_CREAT, 0644));
	}
}

static int has_step(const char *dir, long step)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/step-%ld", dir, step);
	return wf_exists(p);
}

static void test_latest_ignores_incomplete(void)
{
	char dir[] = "/tmp/wf_ckpt_XXXXXX";
	WF_CHECK(mkdtemp(dir) != NULL);
	wf_err err = {0};
	long step = -1;
	char path[4200];
	WF_CHECK_INT(wf_ckpt_latest(dir, &step, path, sizeof(path), &err), 0);
	make_step(dir, 5, 1);
	make_step(dir, 10, 1);
	make_step(dir, 20, 1);
	make_step(dir, 30, 0);
	make_step(dir, 15, 0);
	WF_CHECK_INT(wf_ckpt_latest(dir, &step, path, sizeof(path), &err), 1);
	WF_CHECK_INT(step, 20);
	char want[4200];
	snprintf(want, sizeof(want), "%s/step-20", dir);
	WF_CHECK(strcmp(path, want) == 0);

	WF_CHECK_INT(wf_ckpt_prune(dir, 2, &err), 0);
	WF_CHECK(!has_step(dir, 5));
	WF_CHECK(has_step(dir, 10));
	WF_CHECK(!has_step(dir, 15)); /* incomplete and older than a complete one */
	WF_CHECK(has_step(dir, 20));
	WF_CHECK(has_step(dir, 30)); /* may be in progress */

	WF_CHECK_INT(wf_ckpt_prune(dir, 1, &err), 0);
	WF_CHECK(!has_step(dir, 10));
	WF_CHECK(has_step(dir, 20));
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	WF_CHECK_INT(system(cmd), 0);
}

static void test_missing_dir_has_no_checkpoint(void)
{
	wf_err err = {0};
	long step = -1;
	char path[64];
	WF_CHECK_INT(wf_ckpt_latest("/tmp/wf_no_such_ckpt_dir/x", &step, path, sizeof(path), &err),
		     0);
}

static void write_bytes(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	WF_CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

/* DONE lists checksums; a step whose files do not match is skipped by the
 * trainer (wf_ckpt_latest) and by the servers (wf_ps_ckpt_find) alike. */
static void test_checksums_fall_back(void)
{
	char dir[] = "/tmp/wf_ckpt_XXXXXX", p[4400], sd[4200];
	WF_CHECK(mkdtemp(dir) != NULL);
	wf_err err = {0};
	for (long s = 10; s <= 30; s += 10) {
		wf_ckptdir_step_path(sd, sizeof(sd), dir, s);
		WF_CHECK_INT(wf_mkdirs(sd), 0);
		snprintf(p, sizeof(p), "%s/model.h5", sd);
		write_bytes(p, "model bytes");
		snprintf(p, sizeof(p), "%s/ps-0-of-1.h5", sd);
		write_bytes(p, "shard bytes");
		WF_CHECK_INT(wf_ckptdir_seal(sd, s, &err), 0);
		WF_CHECK_INT(wf_ckptdir_verify(sd, "model.h5", &err), 0);
	}
	long step = -1;
	char path[4200];
	WF_CHECK_INT(wf_ckpt_latest(dir, &step, path, sizeof(path), &err), 1);
	WF_CHECK_INT(step, 30);
	snprintf(p, sizeof(p), "%s/step-30/ps-0-of-1.h5", dir);
	write_bytes(p, "shard bytez"); /* same size, one byte changed */
	snprintf(p, sizeof(p), "%s/step-20/model.h5", dir);
	write_bytes(p, "model"); /* truncated */
	wf_ckptdir_step_path(sd, sizeof(sd), dir, 30);
	WF_CHECK(wf_ckptdir_verify(sd, NULL, &err) == WF_EFORMAT);
	WF_CHECK_MSG(strstr(err.msg, "checksum mismatch"), "%s", err.msg);
	wf_ckptdir_step_path(sd, sizeof(sd), dir, 20);
	WF_CHECK(wf_ckptdir_verify(sd, NULL, &err) == WF_EFORMAT);
	WF_CHECK_MSG(strstr(err.msg, "truncated"), "%s", err.msg);
	WF_CHECK_INT(wf_ckpt_latest(dir, &step, path, sizeof(path), &err), 1);
	WF_CHECK_INT(step, 10);
	WF_CHECK_INT(wf_ps_ckpt_find(dir, 0, 1, -1, &step, path, sizeof(path), &err), 0);
	WF_CHECK_INT(step, 10);
	WF_CHECK(wf_ps_ckpt_find(dir, 0, 1, 30, &step, path, sizeof(path), &err) != 0);
	WF_CHECK_MSG(strstr(err.msg, "checksum mismatch"), "%s", err.msg);
	/* a shard not listed in DONE is not trusted */
	snprintf(p, sizeof(p), "%s/step-10/ps-0-of-2.h5", dir);
	write_bytes(p, "late shard");
	WF_CHECK(wf_ps_ckpt_find(dir, 0, 2, -1, &step, path, sizeof(path), &err) != 0);
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	WF_CHECK_INT(system(cmd), 0);
}

/* wf_ckptdir_check_fn for the test below: arg is the step to call corrupt
 * (WF_EFORMAT) or, negated, unreadable (WF_EIO). */
static int refuse_step(const char *step_dir, void *arg, wf_err *err)
{
	long bad = *(const long *)arg;
	char want[64];
	snprintf(want, sizeof(want), "/step-%ld", bad < 0 ? -bad : bad);
	if (!strstr(step_dir, want))
		return 0;
	return bad < 0 ? wf_errf(err, WF_EIO, "%s: cannot read", step_dir)
		       : wf_errf(err, WF_EFORMAT, "%s/model.h5: content checksum mismatch",
				 step_dir);
}

/* A reader's own check (the model file's checksum) after DONE verified: a
 * step it calls corrupt is skipped for the one before, under an empty DONE
 * as under a full one; any other failure stops the search with its code. */
static void test_own_check_falls_back(void)
{
	char dir[] = "/tmp/wf_ckpt_XXXXXX", p[4400], sd[4200];
	WF_CHECK(mkdtemp(dir) != NULL);
	wf_err err = {0};
	for (long s = 10; s <= 30; s += 10) {
		wf_ckptdir_step_path(sd, sizeof(sd), dir, s);
		WF_CHECK_INT(wf_mkdirs(sd), 0);
		snprintf(p, sizeof(p), "%s/model.h5", sd);
		write_bytes(p, "model bytes");
		WF_CHECK_INT(wf_ckptdir_seal(sd, s, &err), 0);
	}
	snprintf(p, sizeof(p), "%s/step-30/DONE", dir);
	write_bytes(p, ""); /* an older weft's DONE: nothing to verify */
	long step = -1, bad = 30;
	char path[4200];
	WF_CHECK_INT(wf_ckptdir_newest_checked(dir, -1, "model.h5", refuse_step, &bad, &step, path,
					       sizeof(path), &err),
		     1);
	WF_CHECK_INT(step, 20);
	bad = 20; /* a full DONE, recomputed over a damaged file */
	WF_CHECK_INT(wf_ckptdir_newest_checked(dir, -1, "model.h5", refuse_step, &bad, &step, path,
					       sizeof(path), &err),
		     1);
	WF_CHECK_INT(step, 30);
	bad = 30;
	WF_CHECK(wf_ckptdir_newest_checked(dir, 30, "model.h5", refuse_step, &bad, &step, path,
					   sizeof(path), &err) == 0);
	WF_CHECK_MSG(strstr(err.msg, "checksum mismatch"), "%s", err.msg);
	bad = -30;
	memset(&err, 0, sizeof(err));
	WF_CHECK_INT(wf_ckptdir_newest_checked(dir, -1, "model.h5", refuse_step, &bad, &step, path,
					       sizeof(path), &err),
		     WF_EIO);
	WF_CHECK_MSG(strstr(err.msg, "cannot read"), "%s", err.msg);
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	WF_CHECK_INT(system(cmd), 0);
}

/* atomic replacement: the target is the new content, no temporary is left. */
static void test_atomic_write(void)
{
	char dir[] = "/tmp/wf_atomic_XXXXXX", p[4200];
	WF_CHECK(mkdtemp(dir) != NULL);
	wf_err err = {0};
	snprintf(p, sizeof(p), "%s/f", dir);
	WF_CHECK_INT(wf_atomic_write(p, "old", 3, &err), 0);
	WF_CHECK_INT(wf_atomic_write(p, "new!", 4, &err), 0);
	char *text;
	size_t n;
	WF_CHECK_INT(wf_read_file(p, &text, &n), 0);
	WF_CHECK(n == 4 && memcmp(text, "new!", 4) == 0);
	free(text);
	/* an unwritable place: an error naming the path (full disks: test_files_robust.sh) */
	snprintf(p, sizeof(p), "%s/no-such-dir/f", dir);
	WF_CHECK(wf_atomic_write(p, "x", 1, &err) == WF_EIO);
	WF_CHECK_MSG(strstr(err.msg, p), "%s", err.msg);
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	WF_CHECK_INT(system(cmd), 0);
}

int main(void)
{
	WF_RUN(test_checksums_fall_back);
	WF_RUN(test_own_check_falls_back);
	WF_RUN(test_atomic_write);
	WF_RUN(test_latest_ignores_incomplete);
	WF_RUN(test_missing_dir_has_no_checkpoint);
	return wf_test_summary();
}
