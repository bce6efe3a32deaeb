/* cluster.h: who is who in a training cluster. Parses TF_CONFIG exactly as
 * TensorFlow and Kubeflow write it (chief/worker/ps/evaluator lists, the
 * sparse worker map, "environment"), builds one from a pod's identity when
 * none is given (WEFT_ROLE, the index from JOB_COMPLETION_INDEX or the
 * StatefulSet ordinal of the host name, peers from the service names), or
 * derives the role and index without a cluster (mpirun's OMPI_COMM_WORLD_*,
 * a bare Indexed Job's JOB_COMPLETION_INDEX), and resolves host names into
 * tcp:// endpoints with retries and backoff (pods come up before their DNS
 * does). */
#ifndef WF_CLUSTER_H
#define WF_CLUSTER_H

#include "common/error.h"

#include <stddef.h>

typedef enum {
	WF_ROLE_NONE = 0,
	WF_ROLE_CHIEF,
	WF_ROLE_WORKER,
	WF_ROLE_PS,
	WF_ROLE_EVALUATOR,
	WF_ROLE__COUNT
} wf_role;

/* Where the role and index came from. A TF_CONFIG built from the pod's
 * identity (WEFT_ROLE) is a TF_CONFIG source too, with `derived` set: every
 * consumer of a TF_CONFIG cluster treats both alike. */
typedef enum {
	WF_CLUSTER_SRC_NONE = 0,  /* single process */
	WF_CLUSTER_SRC_TF_CONFIG, /* given, or built from WEFT_ROLE (derived = 1) */
	WF_CLUSTER_SRC_MPI,	  /* OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK */
	WF_CLUSTER_SRC_JOB_INDEX  /* JOB_COMPLETION_INDEX (Indexed Job) */
} wf_cluster_source;

/* The environment variable holding a random value every process of one job
 * shares (`weft launch` makes one per run); the job id mixes it in, so an
 * outsider who knows the model and the addresses cannot compute the id. */
#define WF_JOB_TOKEN_ENV "WEFT_JOB_TOKEN"
#define WF_JOB_TOKEN_MAX 129 /* bytes with the NUL */

/* Addresses of one job type. Kubeflow's sparse form may leave holes: addr[i]
 * is NULL for an index the map does not list. */
typedef struct wf_cluster_job {
	int n;	     /* tasks: the list's length, or the count given for an index map */
	char **addr; /* [n] "host:port" as written, or NULL */
} wf_cluster_job;

typedef struct wf_cluster {
	wf_cluster_source source;
	wf_cluster_job jobs[WF_ROLE__COUNT]; /* indexed by wf_role; [NONE] unused */
	wf_role role;			     /* this process */
	int index;			     /* within its role */
	int is_chief;			     /* the chief, or worker 0 when there is no chief */
	int world_size; /* MPI / Indexed Job: processes; TF_CONFIG: chief + workers */
	int rank;	/* MPI / Indexed Job rank; TF_CONFIG: chief 0, worker i -> i + nchief */
	int local_rank; /* MPI local rank (GPU choice), else 0 */
	char environment[64]; /* TF_CONFIG "environment" ("cloud"), or "" */
	int derived;	      /* TF_CONFIG built from the pod's identity (WEFT_ROLE) */
	char origin[160];     /* where role and index came from, for `weft tfconfig` */
	/* WEFT_JOB_TOKEN: the job's random value ("": none) */
	char job_token[WF_JOB_TOKEN_MAX];
} wf_cluster;

/* Name of a role as TF_CONFIG spells it ("chief", "worker", "ps", "evaluator"). */
const char *wf_role_name(wf_role r);
/* Parse a TF_CONFIG document. Errors name the field: not JSON, missing
 * cluster or task, unknown task type, index out of range or not a whole
 * number (1.0 is 1), index missing where the job has more than one task,
 * duplicate address, malformed host:port. */
int wf_cluster_parse_tf_config(wf_cluster *c, const char *json, wf_err *err);
/* Task counts per role given beside TF_CONFIG (the pod's WEFT_NUM_CHIEF,
 * WEFT_NUM_WORKERS, WEFT_NUM_PS, WEFT_NUM_EVALUATORS); -1: not given. */
typedef struct wf_cluster_counts {
	long n[WF_ROLE__COUNT]; /* indexed by wf_role; [NONE] unused */
} wf_cluster_counts;
/* As wf_cluster_parse_tf_config with counts (NULL: none given). A job given
 * as Kubeflow's index map ({"3": "w3:2222"}) may be one task's partial view,
 * which does not say how many tasks the job has: its size is counts->n[r],
 * and without it the spec is refused naming the variable to set, so that no
 * two processes of one job disagree about the world. A list needs no count
 * (and wins over one). */
int wf_cluster_parse_tf_config_counts(wf_cluster *c, const char *json,
				      const wf_cluster_counts *counts, wf_err *err);
/* The wf_cluster_counts of the environment (WEFT_NUM_*); errors name the
 * variable. */
int wf_cluster_counts_from_env(wf_cluster_counts *counts, wf_err *err);
/* From the environment: TF_CONFIG if set, else the TF_CONFIG of
 * wf_cluster_pod_tf_config when WEFT_ROLE is set, else OMPI_COMM_WORLD_*,
 * else JOB_COMPLETION_INDEX, else a single process (source NONE, worker 0,
 * chief); job_token from WF_JOB_TOKEN_ENV in every case. */
int wf_cluster_from_env(wf_cluster *c, wf_err *err);
/* n random bytes as hex into out [2n + 1] (a job token); WF_EINTERNAL when
 * the system has no randomness to give. */
int wf_cluster_new_token(char *out, size_t n, wf_err *err);
/* The TF_CONFIG of this pod when WEFT_ROLE is set and TF_CONFIG is not:
 * task i of role R is "<name>-<i>.<service>[.<WEFT_DOMAIN>]:<WEFT_PORT>" with
 * name/service from WEFT_<R>_NAME / WEFT_<R>_SERVICE (default: the role,
 * "ps", "worker", "chief", "evaluator") and counts WEFT_NUM_PS,
 * WEFT_NUM_WORKERS, WEFT_NUM_CHIEF, WEFT_NUM_EVALUATORS (default 0). The
 * index is WEFT_INDEX, else JOB_COMPLETION_INDEX, else N of a host name
 * "<name>-<N>" (StatefulSet ordinal), else 0 when the role has one task.
 * *json (malloc'd) is NULL when WEFT_ROLE is unset; origin (may be NULL)
 * receives where the index came from. Errors name the variable. */
int wf_cluster_pod_tf_config(char **json, char *origin, size_t n, wf_err *err);
/* Check the cluster fits the strategy ("parameter_server", "allreduce",
 * "local"): a parameter_server strategy needs ps tasks and a worker or chief. */
int wf_cluster_validate(const wf_cluster *c, const char *strategy, wf_err *err);
/* Workers that train: chief (if any) + workers listed. */
int wf_cluster_num_trainers(const wf_cluster *c);
/* Resolve "host:port" into "tcp://ip:port", trying `attempts` times with
 * exponential backoff starting at backoff seconds. WF_ETRANSIENT naming the
 * host when it never resolves; WF_EINVAL when malformed. */
int wf_cluster_resolve(const char *hostport, int attempts, double backoff, char *endpoint, size_t n,
		       wf_err *err);
void wf_cluster_free(wf_cluster *c);

#endif
