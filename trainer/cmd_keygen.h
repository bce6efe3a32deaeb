/* cmd_keygen.h: `weft keygen`, which writes a parameter-server cluster's
 * CURVE key files (ps/auth.h) into a directory. */
#ifndef WF_CMD_KEYGEN_H
#define WF_CMD_KEYGEN_H

#include "common/error.h"

/* `weft keygen --out DIR [--force]`; 1 after --help. */
int wf_cmd_keygen(int argc, char **argv, wf_err *err);

#endif
