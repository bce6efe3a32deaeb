/* gpu_test.h: what the GPU tests share: opening the cuda backend or skipping
 * (exit 77, the reason on stderr) where no device is usable, and a tensor
 * comparison whose bound scales with the tensor's magnitude. */
#ifndef WF_TESTS_GPU_TEST_H
#define WF_TESTS_GPU_TEST_H

#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define WF_GPU_SKIP 77

/* The cuda backend, or exit(77) saying why none is usable. Tests only:
 * library code never exits. */
static inline wf_backend *wf_gpu_open_or_skip(const char *test)
{
	wf_backend *be = NULL;
	wf_err err = {0};
	if (wf_backend_create(&be, "cuda", 0, &err) != 0) {
		fprintf(stderr, "%s: skip: %s\n", test, err.msg);
		exit(WF_GPU_SKIP);
	}
	fprintf(stderr, "%s: %s\n", test, wf_backend_cuda_describe(be));
	return be;
}

/* |a[i] - b[i]| <= tol * max(1, max|b|) for every i. Prints the worst
 * element and returns 0 when the bound fails. */
static inline int wf_gpu_close(const char *what, const float *a, const float *b, size_t n,
			       double tol)
{
	double mx = 1.0, worst = 0.0;
	size_t at = 0;
	for (size_t i = 0; i < n; i++)
		mx = fmax(mx, fabs(b[i]));
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (!(d <= worst)) { /* NaN lands here too */
			worst = isnan(d) ? INFINITY : d;
			at = i;
		}
	}
	if (worst <= tol * mx)
		return 1;
	fprintf(stderr, "  %s: [%zu] cuda %.9g vs %.9g: |d| %.3g > %.3g (tol %.1g x max %.3g)\n",
		what, at, a[at], b[at], worst, tol * mx, tol, mx);
	return 0;
}

#endif
