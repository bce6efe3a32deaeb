/* cmd_tfconfig.h: `weft tfconfig`, which prints who this process is in its
 * training cluster: the TF_CONFIG given, or the one built from the pod's
 * identity (WEFT_ROLE ...), or the rank mpirun gave it. */
#ifndef WF_CMD_TFCONFIG_H
#define WF_CMD_TFCONFIG_H

#include "common/error.h"

/* `weft tfconfig [--json | --tf-config] [--resolve]`; 1 after --help. */
int wf_cmd_tfconfig(int argc, char **argv, wf_err *err);

#endif
