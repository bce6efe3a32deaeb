/* test_comm_thread.c: the MPI exchange's communication thread
 * (worker/exchange_mpi.h, wf_mpi_buckets) under a real `mpirun -np 2`:
 * handed a finished buffer, it completes the sums while the training thread
 * makes no MPI call at all, exactly, step after step; and when a peer stops
 * in the middle of a step while this rank still computes, the deadline runs
 * from the moment this rank waits: it then names the peer and the bucket
 * and exits 138 within the stall timeout, never hanging.
 *
 * Run by ctest, the program starts mpirun on itself once per case
 * (WEFT_TEST_CASE tells the ranks which); skips (77) without mpirun or in a
 * build without MPI. */
#include "common/error.h"
#include "common/util.h"
#include "tests/test.h"
#include "worker/exchange_mpi.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>

#define N	   (1 << 20) /* floats: 4 MiB */
#define BUCKET_MB  0.25	     /* 16 buckets */
#define STALL_S	   2.0	     /* the stall timeout of the ranks */
#define COMPUTE_S  3.0	     /* rank 0's modelled compute, longer than the timeout */
#define CASE_LIMIT 60	     /* seconds a case may take */

/* ---- the ranks ------------------------------------------------------------------- */

/* Rank r's value at i: the sum over 2 ranks is exact in floats. */
static float value(int rank, long step, size_t i)
{
	return (float)(i % 1000) + (float)rank * 0.5f + (float)step;
}

static int check_sums(const float *buf, long step)
{
	for (size_t i = 0; i < N; i++)
		if (buf[i] != value(0, step, i) + value(1, step, i)) {
			printf("step %ld: float %zu is %g, want %g\n", step, i, buf[i],
			       value(0, step, i) + value(1, step, i));
			return 1;
		}
	return 0;
}

/* Handed the whole buffer, the thread finishes while this thread only
 * looks at wf_mpi_buckets_done; then a step handed in halves. */
static int rank_progress(const wf_mpi_world *w, wf_mpi_buckets *b, float *buf)
{
	wf_err err = {0};
	for (long step = 0; step < 2; step++) {
		for (size_t i = 0; i < N; i++)
			buf[i] = value(w->rank, step, i);
		if (step == 0) {
			wf_mpi_buckets_ready(b, N, &err);
			double t0 = wf_now();
			while (!wf_mpi_buckets_done(b)) {
				if (wf_now() - t0 > CASE_LIMIT / 2) {
					printf("rank %d: the sums never completed without MPI "
					       "calls "
					       "from this thread\n",
					       w->rank);
					return 1;
				}
				nanosleep(&(struct timespec){0, 1000000}, NULL);
			}
		} else {
			wf_mpi_buckets_ready(b, N / 2, &err);
			wf_mpi_buckets_ready(b, N / 2 + 12345, &err);
		}
		int rc = wf_mpi_buckets_wait(b, &err);
		if (rc != 0) {
			printf("rank %d: step %ld: %s\n", w->rank, step, err.msg);
			return 1;
		}
		if (check_sums(buf, step) != 0)
			return 1;
	}
	printf("rank %d: sums ok\n", w->rank);
	return 0;
}

/* Rank 1 stops half-way through handing its buffer over; rank 0 hands all
 * of it, computes longer than the stall timeout, then waits. */
static int rank_stall(const wf_mpi_world *w, wf_mpi_buckets *b, float *buf)
{
	wf_err err = {0};
	for (size_t i = 0; i < N; i++)
		buf[i] = value(w->rank, 0, i);
	if (w->rank == 1) {
		wf_mpi_buckets_ready(b, N / 2, &err);
		printf("rank 1 pid %d stops\n", (int)getpid());
		fflush(stdout);
		raise(SIGSTOP);
		return 1; /* only when continued */
	}
	wf_mpi_buckets_ready(b, N, &err);
	nanosleep(&(struct timespec){(time_t)COMPUTE_S, 0}, NULL);
	double t0 = wf_now();
	int rc = wf_mpi_buckets_wait(b, &err);
	printf("rank 0: wait returned %d after %.1f s: %s\n", rc, wf_now() - t0, err.msg);
	fflush(stdout);
	if (rc == 0)
		return 1;
	wf_mpi_mark_failed();
	return wf_exit_status(rc);
}

static int run_rank(const char *name)
{
	wf_mpi_configure(&(wf_mpi_opts){.launched = 1, .stall_timeout = STALL_S});
	wf_mpi_world w;
	wf_err err = {0};
	if (wf_mpi_world_get(&w, &err) != 0) {
		printf("%s\n", err.msg);
		return 1;
	}
	float *buf = malloc(N * sizeof(float));
	wf_mpi_buckets *b = NULL;
	int rc = !buf || wf_mpi_buckets_create(&b, buf, N, BUCKET_MB, &err) != 0;
	if (rc == 0)
		rc = strcmp(name, "stall") ? rank_progress(&w, b, buf) : rank_stall(&w, b, buf);
	fflush(stdout);
	if (rc != 0)
		_exit(rc); /* a failed job: no MPI_Finalize with peers in a collective */
	wf_mpi_buckets_free(b);
	wf_mpi_world_finalize();
	free(buf);
	return 0;
}

/* ---- the launcher ------------------------------------------------------------------ */

static char out_path[] = "/tmp/weft-commthread-XXXXXX";

/* mpirun -np 2 this program with WEFT_TEST_CASE=name; its exit code (-1:
 * did not end within CASE_LIMIT s: killed) and *secs; output in out_path. */
static int mpirun_case(const char *name, double *secs, char *out, size_t n)
{
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return -1;
	self[len] = '\0';
	double t0 = wf_now();
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(out_path, O_WRONLY | O_TRUNC);
		dup2(fd, 1);
		dup2(fd, 2);
		setpgid(0, 0);
		setenv("WEFT_TEST_CASE", name, 1);
		setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
		setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
		execlp("mpirun", "mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x",
		       "WEFT_TEST_CASE", self, (char *)NULL);
		_exit(127);
	}
	int status = 0, rc = -1;
	while (wf_now() - t0 < CASE_LIMIT) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			break;
		}
		nanosleep(&(struct timespec){0, 20000000}, NULL);
	}
	if (rc < 0) {
		kill(-pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	*secs = wf_now() - t0;
	FILE *f = fopen(out_path, "r");
	size_t got = f ? fread(out, 1, n - 1, f) : 0;
	out[got] = '\0';
	if (f)
		fclose(f);
	/* a stopped rank outlives a job that failed: end it */
	const char *p = strstr(out, "rank 1 pid ");
	if (p && atoi(p + 11) > 0)
		kill(atoi(p + 11), SIGKILL);
	return rc;
}

static void test_thread_completes_the_sums_without_calls_from_the_trainer(void)
{
	char out[16384];
	double secs;
	int rc = mpirun_case("progress", &secs, out, sizeof(out));
	WF_CHECK_MSG(rc == 0, "mpirun exit %d:\n%s", rc, out);
	WF_CHECK_MSG(strstr(out, "rank 0: sums ok") && strstr(out, "rank 1: sums ok"), "%s", out);
}

static void test_a_peer_stopped_mid_step_is_named_once_this_rank_waits(void)
{
	char out[16384];
	double secs;
	int rc = mpirun_case("stall", &secs, out, sizeof(out));
	WF_CHECK_MSG(rc == 138, "mpirun exit %d, want 138:\n%s", rc, out);
	const char *line = strstr(out, "rank 0: wait returned");
	WF_CHECK_MSG(line != NULL, "rank 0 never returned from its wait:\n%s", out);
	if (!line)
		return;
	double waited = atof(strstr(line, "after ") + 6);
	/* the deadline runs from the wait, not from the hand-over before the
	 * compute; rank 0 waits the timeout itself */
	WF_CHECK_MSG(waited >= STALL_S - 0.1 && waited < STALL_S + 5, "waited %.1f s:\n%s", waited,
		     out);
	WF_CHECK_MSG(strstr(line, "rank 1 ") && strstr(line, "gradient bucket"),
		     "the message names neither rank 1 nor the bucket:\n%s", out);
	WF_CHECK_MSG(secs < CASE_LIMIT, "the job took %.0f s", secs);
}

int main(void)
{
	const char *name = getenv("WEFT_TEST_CASE");
	if (name && getenv("OMPI_COMM_WORLD_SIZE"))
		return run_rank(name);
	wf_err err = {0};
	if (wf_exchange_mpi_check(&err) != 0 || system("command -v mpirun >/dev/null 2>&1") != 0) {
		printf("SKIP: needs mpirun and a weft built with MPI\n");
		return 77;
	}
	int fd = mkstemp(out_path);
	if (fd < 0)
		return 1;
	close(fd);
	WF_RUN(test_thread_completes_the_sums_without_calls_from_the_trainer);
	WF_RUN(test_a_peer_stopped_mid_step_is_named_once_this_rank_waits);
	unlink(out_path);
	return wf_test_summary();
}
