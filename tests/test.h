/* test.h: the smallest test harness that does the job. A test file defines
 * static void test_*(void) functions and lists them in main() with
 * WF_RUN(test_name); a failed check prints file:line and the values and
 * marks the test failed; main returns wf_test_summary(). */
#ifndef WF_TEST_H
#define WF_TEST_H

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int wf_test_failed_checks;
static int wf_test_failed_tests;
static int wf_test_passed_tests;
static int wf_test_skipped_tests;
static int wf_test_skip_flag;

#define WF_CHECK(cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
			wf_test_failed_checks++;                                                   \
		}                                                                                  \
	} while (0)

#define WF_CHECK_MSG(cond, ...)                                                                    \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			wf_test_failed_checks++;                                                   \
		}                                                                                  \
	} while (0)

#define WF_CHECK_INT(a, b)                                                                         \
	do {                                                                                       \
		long long va_ = (long long)(a), vb_ = (long long)(b);                              \
		if (va_ != vb_) {                                                                  \
			fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__,        \
				__LINE__, #a, #b, va_, vb_);                                       \
			wf_test_failed_checks++;                                                   \
		}                                                                                  \
	} while (0)

#define WF_CHECK_NEAR(a, b, tol)                                                                   \
	do {                                                                                       \
		double va_ = (double)(a), vb_ = (double)(b);                                       \
		if (!(fabs(va_ - vb_) <= (tol))) {                                                 \
			fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, \
				__LINE__, #a, #b, (double)(tol), va_, vb_);                        \
			wf_test_failed_checks++;                                                   \
		}                                                                                  \
	} while (0)

/* Mark the running test skipped, with a reason, and return from it. */
#define WF_SKIP(...)                                                                               \
	do {                                                                                       \
		fprintf(stderr, "skip: ");                                                         \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		wf_test_skip_flag = 1;                                                             \
		return;                                                                            \
	} while (0)

/* The descriptors this process has open, as a bit set over fds < 1024
 * (libuv's tests check at the end of each test that it closed what it
 * opened; this is the same check for files, sockets, pipes and eventfds). */
typedef struct {
	unsigned char open[128];
} wf_test_fds;

static inline void wf_test_fds_now(wf_test_fds *s)
{
	memset(s, 0, sizeof *s);
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		if (e->d_name[0] != '.' && fd != self && fd >= 0 && fd < 1024)
			s->open[fd / 8] |= (unsigned char)(1u << (fd % 8));
	}
	closedir(d);
}

/* Report (and count as failed checks) every descriptor open now that was not
 * open in `before`, and any child process not yet waited for. */
static inline void wf_test_check_leaks(const char *name, const wf_test_fds *before)
{
	wf_test_fds now;
	wf_test_fds_now(&now);
	for (int fd = 0; fd < 1024; fd++) {
		unsigned char bit = (unsigned char)(1u << (fd % 8));
		if ((now.open[fd / 8] & bit) && !(before->open[fd / 8] & bit)) {
			char link[64], target[PATH_MAX] = "?";
			snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
			ssize_t n = readlink(link, target, sizeof target - 1);
			target[n > 0 ? n : 1] = 0;
			fprintf(stderr, "%s: leaked descriptor %d (%s)\n", name, fd, target);
			wf_test_failed_checks++;
		}
	}
	int status;
	pid_t child = waitpid(-1, &status, WNOHANG);
	if (child >= 0) {
		fprintf(stderr, "%s: left a child process %s\n", name,
			child > 0 ? "exited but not waited for" : "running");
		wf_test_failed_checks++;
	}
}

/* Run one test; it fails on a failed check or on what it left open.
 * WF_TEST_ONLY=name runs only the tests whose name contains it. */
#define WF_RUN(fn)                                                                                 \
	do {                                                                                       \
		const char *only_ = getenv("WF_TEST_ONLY");                                        \
		if (only_ && *only_ && !strstr(#fn, only_))                                        \
			break;                                                                     \
		int before_ = wf_test_failed_checks;                                               \
		wf_test_fds fds_;                                                                  \
		wf_test_fds_now(&fds_);                                                            \
		wf_test_skip_flag = 0;                                                             \
		fn();                                                                              \
		wf_test_check_leaks(#fn, &fds_);                                                   \
		if (wf_test_failed_checks != before_) {                                            \
			wf_test_failed_tests++;                                                    \
			fprintf(stderr, "FAIL %s\n", #fn);                                         \
		} else if (wf_test_skip_flag) {                                                    \
			wf_test_skipped_tests++;                                                   \
			fprintf(stderr, "SKIP %s\n", #fn);                                         \
		} else {                                                                           \
			wf_test_passed_tests++;                                                    \
			fprintf(stderr, "ok   %s\n", #fn);                                         \
		}                                                                                  \
	} while (0)

/* 1 when a test failed; 77 (ctest's SKIP_RETURN_CODE) when any test skipped, so a
 * binary that did not run all its tests never reads as passed; else 0. */
static inline int wf_test_summary(void)
{
	fprintf(stderr, "%d passed, %d failed, %d skipped\n", wf_test_passed_tests,
		wf_test_failed_tests, wf_test_skipped_tests);
	if (wf_test_failed_tests)
		return 1;
	if (wf_test_skipped_tests) /* what did not run did not pass: ctest says SKIP */
		return 77;
	return 0;
}

#endif
