/* job.h: what every process of a cluster job derives alike from its config
 * and TF_CONFIG: the job id, the CURVE keys, the number of trainers, and the
 * parameter servers' addresses. Used by the roles (role.c) and by the
 * exchanges (strategy.c), so neither needs the other. */
#ifndef WF_JOB_H
#define WF_JOB_H

#include "common/error.h"
#include "trainer/cluster.h"
#include "trainer/config.h"

#include <stdint.h>

struct wf_ps_keys;
struct wf_model;

/* Apply --key-dir DIR (may be NULL) and --insecure to cfg. */
int wf_job_security_flags(wf_config *cfg, const char *key_dir, int insecure, wf_err *err);
/* The cluster's CURVE keys into *k from cluster.key_dir (or WEFT_KEY_DIR);
 * *out = k, or NULL with cluster.insecure. Neither: WF_EINVAL saying what to
 * do (`weft keygen`, --key-dir, --insecure). */
int wf_job_keys(const wf_config *cfg, struct wf_ps_keys *k, const struct wf_ps_keys **out,
		wf_err *err);
/* The job id every process of the cluster derives alike: the model, the
 * addresses and the job's random token (c->job_token, WEFT_JOB_TOKEN; warns
 * once when an --insecure job has none, its id then being guessable). */
uint64_t wf_job_id(const wf_config *cfg, const wf_cluster *c);
/* Trainers of a parameter-server job (chief + highest worker index + 1);
 * trainer rank r is chief 0, worker i -> i + chiefs. */
int wf_job_num_workers(const wf_cluster *c);
/* The cluster of a parameter-server job: TF_CONFIG with ps tasks, validated
 * for cfg's strategy; wf_cluster_free it. */
int wf_job_ps_cluster(wf_cluster *c, const wf_config *cfg, wf_err *err);
/* tcp:// endpoints of every ps task of c, resolved (with retries), into *out
 * (one string per ps task; wf_job_endpoints_free). */
int wf_job_ps_endpoints(const wf_cluster *c, char ***out, wf_err *err);
/* Free n endpoints from wf_job_ps_endpoints (ep may be NULL). */
void wf_job_endpoints_free(char **ep, int n);
/* The model the job trains (servers need its parameter layout): from
 * model.input_shape and model.classes when both are set (the servers then
 * never read the data), else from the training data's shape. */
int wf_job_model(const wf_config *cfg, struct wf_model **m, wf_err *err);

#endif
