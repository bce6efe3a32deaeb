/* test_checkpoint.c: the DONE rule: only complete step directories are
 * found and kept; pruning keeps the newest `keep` complete ones. */
#include "trainer/checkpoint.h"
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

int main(void)
{
	WF_RUN(test_latest_ignores_incomplete);
	WF_RUN(test_missing_dir_has_no_checkpoint);
	return wf_test_summary();
}
