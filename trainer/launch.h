/* launch.h: `weft launch`, a local cluster on this machine
 * (docs/architecture.md): parameter servers and workers as child processes
 * on free loopback ports, each given its TF_CONFIG, their log lines
 * prefixed with their role and index, signals forwarded, processes that
 * die of a signal or exit 138 restarted, and everything stopped when one
 * fails permanently. */
#ifndef WF_LAUNCH_H
#define WF_LAUNCH_H

#include "common/error.h"

/* `weft launch --ps N --workers M [--chief] --config FILE ...`; exits with
 * the chief's status. */
int wf_cmd_launch(int argc, char **argv, wf_err *err);

#endif
