/* cuda.h: what the CUDA backend offers beyond the op table of kernels.h:
 * the compute precision of convolutions and dense layers. The backend itself
 * is created through wf_backend_create(&be, "cuda", ...). This header is
 * plain C (no CUDA headers); it exists only in builds with WEFT_HAVE_CUDA.
 *
 * Precision (docs/architecture.md): master weights, gradients and activations
 * between ops stay float32 always. Convolutions and dense layers compute in
 *   fp32 (default) exact float32 (no TF32), what the op tests compare to ref;
 *   tf32  float32 tensors on TF32 tensor cores;
 *   bf16  operands cast to bfloat16, tensor cores, float32 accumulation;
 *   fp16  operands cast to half, tensor cores, float32 accumulation.
 * A new backend computes in fp32; wf_backend_set_precision (kernels.h) sets
 * it by name, as every program does from its one precision setting.
 * TODO(fp16): dynamic loss scaling lives in the trainer (scale the loss,
 * unscale through wf_opt_desc.grad_scale, skip steps with inf/nan). */
#ifndef WF_CUDA_H
#define WF_CUDA_H

#include "common/error.h"
#include "kernels/kernels.h"

typedef enum {
	WF_PREC_FP32 = 0,
	WF_PREC_TF32,
	WF_PREC_BF16,
	WF_PREC_FP16,
} wf_precision;

/* Parse "fp32", "tf32", "bf16", "fp16" (or an alias that
 * wf_backend_precision_canon knows) into *out; fails naming the value. */
int wf_precision_parse(const char *name, wf_precision *out, wf_err *err);
/* "fp32", "tf32", "bf16" or "fp16". */
const char *wf_precision_name(wf_precision p);

/* Set the compute precision of a "cuda" backend. Plans built before keep
 * theirs until rebuilt, so call it before the first op. Fails (WF_EINVAL)
 * when be is not a cuda backend. */
int wf_backend_cuda_set_precision(wf_backend *be, wf_precision p, wf_err *err);
/* Current precision of a cuda backend (WF_PREC_FP32 for any other). */
wf_precision wf_backend_cuda_precision(const wf_backend *be);
/* One line about the device in use ("NVIDIA H200, sm_90, 141 GB, cuDNN
 * 9.19.0, cuBLAS 13.0"), or the reason none is usable. */
const char *wf_backend_cuda_describe(const wf_backend *be);

#endif
