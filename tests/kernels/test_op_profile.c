/* test_op_profile.c: the op profiler (ops.h wf_op_profile_*) counts each op
 * by name, reports per step, and costs nothing once stopped. */
#include "kernels/ops.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_profile_counts_ops_per_step(void)
{
	wf_err err = {0};
	wf_backend *be = NULL;
	WF_CHECK(wf_backend_create(&be, "ref", 0, &err) == 0);
	float x[64], y[64];
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i - 32);
	WF_CHECK(wf_op_profile_start(be) == 0);
	for (int step = 0; step < 2; step++) {
		for (int k = 0; k < 3; k++)
			WF_CHECK(wf_op_act_forward(be, WF_ACT_RELU, 64, y, x) == 0);
		WF_CHECK(wf_op_add(be, 64, y, x, x) == 0);
	}
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	wf_op_profile_print(be, f, 2);
	fclose(f);
	fputs(text, stderr);
	/* per step: 3 relus, 1 add; nothing else */
	const char *relu = strstr(text, "act_forward"), *add = strstr(text, "\n  add ");
	WF_CHECK(relu && strtod(relu + strlen("act_forward"), NULL) == 3.0);
	WF_CHECK(add && strtod(add + strlen("\n  add "), NULL) == 1.0);
	WF_CHECK(strstr(text, "conv2d") == NULL);
	free(text);
	wf_op_profile_stop(be);
	WF_CHECK(be->prof == NULL);
	WF_CHECK(wf_op_act_forward(be, WF_ACT_RELU, 64, y, x) == 0); /* still works unprofiled */
	wf_backend_free(be);
}

int main(void)
{
	WF_RUN(test_profile_counts_ops_per_step);
	return wf_test_summary();
}
