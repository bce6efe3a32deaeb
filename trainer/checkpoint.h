/* checkpoint.h: training checkpoints (docs/formats.md). A checkpoint is
 * <dir>/step-<N>/ holding the strategy's optimizer state, model.h5 and, last,
 * DONE listing every file's size and CRC32C (layout: common/ckptdir); every
 * file is written atomically (common/atomicfile). A directory without DONE,
 * or whose files do not match it, is never loaded. */
#ifndef WF_CHECKPOINT_H
#define WF_CHECKPOINT_H

#include "common/error.h"
#include "model/model.h"
#include "worker/exchange.h"

#include <stddef.h>

/* Newest complete checkpoint under dir whose files verify against DONE:
 * returns 1 and fills *step and path (its directory), 0 when there is none
 * (or dir does not exist); newer ones skipped are logged with the reason. */
int wf_ckpt_latest(const char *dir, long *step, char *path, size_t n, wf_err *err);
/* As wf_ckpt_latest, and its model.h5 must also pass the file's own content
 * checksum (an empty DONE of an older weft verifies nothing, and a DONE can
 * be recomputed over a damaged file): a step whose model.h5 is corrupt is
 * skipped with a warning for the next older one. Reads the model once per
 * step tried: for a resume or an export, not for polling. */
int wf_ckpt_latest_loadable(const char *dir, long *step, char *path, size_t n, wf_err *err);
/* Write checkpoint `step` (steps completed) of executor ex: the exchange's
 * state, then (chief only) model.h5 with meta->trained_steps = step, then
 * DONE; then keep `keep` complete checkpoints, the newest below step
 * `healthy` among them (wf_ckptdir_prune). */
int wf_ckpt_save(const char *dir, long step, wf_exec *ex, wf_model *m, wf_model_meta *meta,
		 wf_exchange *x, int keep, long healthy, wf_err *err);
/* Load step_dir/model.h5 into m and the executor (params and state); the
 * file's graph must be m's. */
int wf_ckpt_load_model(const char *step_dir, wf_exec *ex, wf_model *m, wf_err *err);
/* Delete all but the newest keep complete checkpoints, and incomplete ones
 * older than the newest complete one. */
int wf_ckpt_prune(const char *dir, int keep, wf_err *err);

#endif
