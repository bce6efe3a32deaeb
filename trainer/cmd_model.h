/* cmd_model.h: the model commands of `weft`: `summary` (a Keras-like table of
 * a built-in model or a model file) and `import-keras` (a Keras .h5 file to a
 * weft model file). Same contract as commands.h. */
#ifndef WF_CMD_MODEL_H
#define WF_CMD_MODEL_H

#include "common/error.h"

int wf_cmd_summary(int argc, char **argv, wf_err *err);
int wf_cmd_import_keras(int argc, char **argv, wf_err *err);

#endif
