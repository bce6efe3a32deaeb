/* export.h: `weft export` (docs/formats.md): a training checkpoint
 * becomes a serving model. Batch norm is folded into the convolution before
 * it, dropout is dropped, class labels and preprocessing are kept, and the
 * result is written as BASE/NAME/<version>/model.h5 through a hidden
 * temporary directory renamed into place last, so weft-serve, polling
 * BASE/NAME, never sees a half-written version. A version is never replaced. */
#ifndef WF_EXPORT_H
#define WF_EXPORT_H

#include "common/error.h"
#include "model/model.h"

#include <stddef.h>

/* Fold m (a training model, parameters on the host) and write it with meta
 * as version `version` of the model directory base (BASE/NAME, created when
 * missing); version 0 takes one more than the highest numeric entry. Fills
 * *written with the version and, when path is not NULL, the model file's
 * path. Fails, naming it, when the version already exists. */
int wf_export_model(const wf_model *m, const wf_model_meta *meta, const char *base, long version,
		    long *written, char *path, size_t n, wf_err *err);

/* Split an --out argument: "BASE/NAME/VERSION" (last component all digits,
 * >= 1) gives base "BASE/NAME" and *version; "BASE/NAME" gives *version 0
 * (the next one). */
int wf_export_parse_out(const char *out, char *base, size_t n, long *version, wf_err *err);

/* End of training: copy ex's parameters to the host and export m as the
 * next version under dir (logs the version written). step_dir (NULL: none)
 * is the complete checkpoint of the final step: the export is recorded in
 * step_dir/EXPORTED, and a checkpoint recorded there is not exported again
 * (a chief restarted after, or during, the export exports it exactly once;
 * a kill between the version's rename and the record leaves two versions
 * of the same weights, never none). */
int wf_export_after_training(wf_exec *ex, const wf_model *m, const wf_model_meta *meta,
			     const char *dir, const char *step_dir, wf_err *err);

/* The `weft export` command (argv[0] = "export"); 1 when --help printed. */
int wf_cmd_export(int argc, char **argv, wf_err *err);

#endif
