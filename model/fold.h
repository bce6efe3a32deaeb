/* fold.h: the export transform. Folds each batch norm into the conv2d or
 * dense layer that feeds only it (w' = w * gamma/sqrt(var+eps) per output
 * channel, b' = (b - mean) * gamma/sqrt(var+eps) + beta) and drops dropout,
 * giving a smaller model whose inference forward equals the original's. */
#ifndef WF_MODEL_FOLD_H
#define WF_MODEL_FOLD_H

#include "common/error.h"
#include "model/model.h"

/* Build *out (a new model with its own graph JSON, parameters and state)
 * from in, which is left unchanged. Batch norms that do not directly follow
 * a conv2d/dense used by nothing else, or a concat of such layers (folded
 * slice by slice), are kept. */
int wf_model_fold_for_inference(const wf_model *in, wf_model **out, wf_err *err);
/* Layers the fold would remove (folded batch norms + dropouts). */
int wf_model_fold_count(const wf_model *in);
/* Replace *m by its folded form when the fold removes anything (the old
 * model is freed); returns the number of layers removed (0: *m unchanged),
 * or a negative WF_E* code with *m unchanged. For inference-only users of a
 * model file that was not exported (weft-serve, weft-bench-infer). */
int wf_model_fold_replace(wf_model **m, wf_err *err);

#endif
