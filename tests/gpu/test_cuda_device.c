/* test_cuda_device.c: choosing the cuda device. Runs everywhere: where no
 * GPU is usable it checks that asking for "cuda" fails with the message
 * users see ("no usable CUDA device: ...") and a permanent exit status, and
 * that "auto" falls back to the host; where one is, that it describes
 * itself and takes a precision by name (wf_backend_set_precision). Precision
 * names and the guard against setting a precision on a host backend are
 * checked in both cases. */
#include "tests/gpu/gpu_test.h"
#include "tests/test.h"

#include <string.h>

static void test_precision_names_round_trip(void)
{
	wf_err err = {0};
	const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
	for (int i = 0; i < 4; i++) {
		wf_precision p;
		WF_CHECK(wf_precision_parse(names[i], &p, &err) == 0);
		WF_CHECK(strcmp(wf_precision_name(p), names[i]) == 0);
	}
	wf_precision p;
	WF_CHECK_INT(wf_precision_parse("int8", &p, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "int8") != NULL);
}

static void test_precision_needs_the_cuda_device(void)
{
	wf_err err = {0};
	wf_backend *be = NULL;
	WF_CHECK(wf_backend_create(&be, "ref", 0, &err) == 0);
	WF_CHECK_INT(wf_backend_cuda_set_precision(be, WF_PREC_BF16, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "cuda") != NULL);
	WF_CHECK(wf_backend_cuda_precision(be) == WF_PREC_FP32);
	wf_backend_free(be);
}

static void test_cuda_is_usable_or_says_why_not(void)
{
	wf_err err = {0};
	wf_backend *be = NULL;
	WF_CHECK(strstr(wf_backend_list(), "cuda") != NULL);
	int rc = wf_backend_create(&be, "cuda", 0, &err);
	if (rc != 0) {
		fprintf(stderr, "  (no GPU here: %s)\n", err.msg);
		WF_CHECK_INT(rc, WF_ENOTSUP);
		WF_CHECK(strncmp(err.msg, "no usable CUDA device: ", 23) == 0);
		int status = wf_exit_status(rc);
		WF_CHECK(status >= 1 && status <= 127);
		/* auto falls back to the host */
		WF_CHECK(wf_backend_create(&be, "auto", 0, &err) == 0);
		WF_CHECK(be && strcmp(be->name, "cuda") != 0);
		wf_backend_free(be);
		return;
	}
	WF_CHECK(strcmp(be->name, "cuda") == 0);
	WF_CHECK(strlen(wf_backend_cuda_describe(be)) > 0);
	wf_backend_free(be);
	/* the precision weft resolves from --precision / train.precision /
	 * WEFT_PRECISION, in any spelling, set by name */
	WF_CHECK(wf_backend_create(&be, "cuda", 0, &err) == 0);
	WF_CHECK(be && wf_backend_cuda_precision(be) == WF_PREC_FP32);
	const char *used = NULL;
	WF_CHECK(wf_backend_set_precision(be, "bfloat16", &used, &err) == 0);
	WF_CHECK(wf_backend_cuda_precision(be) == WF_PREC_BF16 && strcmp(used, "bf16") == 0);
	WF_CHECK(wf_backend_set_precision(be, "tf32", &used, &err) == 0);
	WF_CHECK(wf_backend_cuda_precision(be) == WF_PREC_TF32 && strcmp(used, "tf32") == 0);
	WF_CHECK_INT(wf_backend_set_precision(be, "fp8", &used, &err), WF_EINVAL);
	WF_CHECK(strstr(err.msg, "fp8") != NULL && strstr(err.msg, WF_PRECISIONS) != NULL);
	wf_backend_free(be);
	WF_CHECK(wf_backend_create(&be, "auto", 0, &err) == 0);
	WF_CHECK(be && strcmp(be->name, "cuda") == 0);
	wf_backend_free(be);
}

int main(void)
{
	/* The CUDA driver keeps descriptors (/dev/nvidia*, an eventfd, a pipe)
	 * open for the life of the process once a context exists: open it once
	 * before the tests so that the leak check counts only what they open. */
	wf_backend *warm = NULL;
	wf_err err = {0};
	if (wf_backend_create(&warm, "cuda", 0, &err) == 0)
		wf_backend_free(warm);
	WF_RUN(test_precision_names_round_trip);
	WF_RUN(test_precision_needs_the_cuda_device);
	WF_RUN(test_cuda_is_usable_or_says_why_not);
	return wf_test_summary();
}
