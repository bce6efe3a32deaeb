/* role.h: what this process is in a training cluster (TF_CONFIG,
 * docs/formats.md) and running it: a chief or worker trains (wf_train with the
 * parameter-server exchange), a ps runs the server loop, an evaluator
 * evaluates checkpoints as they appear. `weft ps` is the ps role alone. */
#ifndef WF_ROLE_H
#define WF_ROLE_H

#include "common/error.h"
#include "trainer/cluster.h"
#include "trainer/config.h"
#include "trainer/train.h"
#include "worker/exchange.h"

#include <stdint.h>

/* Become the role the environment says (TF_CONFIG, mpirun, Indexed Job, or
 * a single process) for a validated cfg. *trained is 1 when this process
 * trained (res is filled), 0 for a ps or evaluator. A wrong cluster spec
 * fails at once naming the field. */
int wf_role_run(const wf_config *cfg, const wf_train_opts *opts, wf_train_result *res, int *trained,
		wf_err *err);

/* The job id every process of the cluster derives alike: the model, the
 * addresses and the job's random token (c->job_token, WEFT_JOB_TOKEN; warns
 * once when an --insecure job has none, its id then being guessable). */
uint64_t wf_role_job_id(const wf_config *cfg, const wf_cluster *c);
/* Trainers of a parameter-server job (chief + highest worker index + 1);
 * trainer rank r is chief 0, worker i -> i + chiefs. */
int wf_role_num_workers(const wf_cluster *c);

/* The cluster's CURVE keys into *k from cluster.key_dir (or WEFT_KEY_DIR);
 * *out = k, or NULL with cluster.insecure. Neither: WF_EINVAL saying what to
 * do (`weft keygen`, --key-dir, --insecure). */
struct wf_ps_keys;
/* Apply --key-dir DIR (may be NULL) and --insecure to cfg. */
int wf_role_security_flags(wf_config *cfg, const char *key_dir, int insecure, wf_err *err);
int wf_role_keys(const wf_config *cfg, struct wf_ps_keys *k, const struct wf_ps_keys **out,
		 wf_err *err);

/* The parameter-server exchange of this trainer: reads the cluster from
 * the environment, resolves the ps addresses (with retries) and connects.
 * optim's frozen segments (model.freeze) go with every push. */
int wf_role_ps_exchange_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex,
			       const wf_model *m, const wf_optim_cfg *optim, wf_err *err);

/* `weft ps`: the ps role of TF_CONFIG on its own, printing stats periodically. */
int wf_cmd_ps(int argc, char **argv, wf_err *err);

#endif
