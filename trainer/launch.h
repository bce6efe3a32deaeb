/* launch.h: `weft launch`, a local cluster on this machine
 * (docs/architecture.md): parameter servers and workers as child processes
 * on free loopback ports, each given its TF_CONFIG, their log lines
 * prefixed with their role and index, signals forwarded, processes that
 * die of a signal or exit 138 restarted, and everything stopped when one
 * fails permanently. */
#ifndef WF_LAUNCH_H
#define WF_LAUNCH_H

#include "common/error.h"
#include "trainer/config.h"

#include <stdio.h>

/* `weft launch --ps N --workers M [--chief] --config FILE ...`; exits with
 * the chief's status. */
int wf_cmd_launch(int argc, char **argv, wf_err *err);
/* `--dry-run`: the job's model, the servers' shares of it (placement, with
 * the copies of ps.replicas) and the bytes of a step on every link, to out
 * (trainer/launch_plan.c). */
int wf_launch_plan(FILE *out, const wf_config *cfg, int nps, int ntrainers, wf_err *err);

#endif
