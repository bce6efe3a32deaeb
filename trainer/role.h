/* role.h: what this process is in a training cluster (TF_CONFIG,
 * docs/formats.md) and running it: a chief or worker trains (wf_train), a ps
 * runs the server loop, an evaluator evaluates checkpoints as they appear.
 * `weft ps` is the ps role alone. Nothing below calls back up into here:
 * the exchanges find the job's keys and servers through job.h. */
#ifndef WF_ROLE_H
#define WF_ROLE_H

#include "common/error.h"
#include "trainer/cluster.h"
#include "trainer/config.h"
#include "trainer/train.h"

/* Become the role the environment says (TF_CONFIG, mpirun, Indexed Job, or
 * a single process) for a validated cfg. *trained is 1 when this process
 * trained (res is filled), 0 for a ps or evaluator. A wrong cluster spec
 * fails at once naming the field. */
int wf_role_run(const wf_config *cfg, const wf_train_opts *opts, wf_train_result *res, int *trained,
		wf_err *err);

/* `weft ps`: the ps role of TF_CONFIG on its own, printing stats periodically. */
int wf_cmd_ps(int argc, char **argv, wf_err *err);

#endif
