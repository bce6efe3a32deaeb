/* test.h: the smallest test harness that does the job. A test file defines
 * static void test_*(void) functions and lists them in main() with
 * WF_RUN(test_name); a failed check prints file:line and the values and
 * marks the test failed; main returns wf_test_summary(). */
#ifndef WF_TEST_H
#define WF_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define WF_RUN(fn)                                                                                 \
	do {                                                                                       \
		int before_ = wf_test_failed_checks;                                               \
		wf_test_skip_flag = 0;                                                             \
		fn();                                                                              \
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

/* ctest treats exit code 77 as skipped (SKIP_RETURN_CODE). */
static inline int wf_test_summary(void)
{
	fprintf(stderr, "%d passed, %d failed, %d skipped\n", wf_test_passed_tests,
		wf_test_failed_tests, wf_test_skipped_tests);
	if (wf_test_failed_tests)
		return 1;
	if (wf_test_skipped_tests && !wf_test_passed_tests)
		return 77;
	return 0;
}

#endif
