#include "trainer/strategy.h"

#include "kernels/ops.h"

#include "trainer/cluster.h"
#include "trainer/role.h"
#include "common/log.h"
#include "ps/auth.h"
#include "worker/exchange_mpi.h"
#include "worker/exchange_nccl.h"

#include <stdlib.h>
#include <string.h>

int wf_strategy_check(const wf_config *cfg, wf_err *err)
{
	if (strcmp(cfg->strategy.name, "local") == 0)
		return 0;
	if (strcmp(cfg->strategy.name, "allreduce") == 0)
		return wf_exchange_mpi_check(err);
	if (strcmp(cfg->strategy.name, "parameter_server") == 0)
		return 0;
	return wf_errf(err, WF_ENOTSUP,
		       "strategy.name: '%s' is not available yet in this build (use \"local\")",
		       cfg->strategy.name);
}

/* Started by mpirun (Open MPI, PMIx or PMI set these). */
static int launched_by_mpirun(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

void wf_strategy_mpi_defaults(void)
{
	/* measured on the emulated cluster (weft bench cluster, 2 ranks, 10 MB
	 * at 1 Gbit/s, bound 82 ms): libnbc's own choice 175 ms, the ring 90 */
	if (launched_by_mpirun())
		setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
}

/* The allreduce world of pods that have TF_CONFIG but no mpirun: rank and
 * size from the cluster (chief 0, worker i -> i + chiefs) and rank 0's
 * address for the NCCL rendezvous. *found is 0 under mpirun or without a
 * TF_CONFIG cluster (the MPI world, or a world of one). */
static int allreduce_boot(const wf_config *cfg, wf_nccl_boot *boot, char *chief, size_t n,
			  int *found, wf_err *err)
{
	*found = 0;
	*boot = (wf_nccl_boot){.timeout = cfg->strategy.rendezvous_timeout,
			       .stall_timeout = cfg->strategy.stall_timeout};
	if (launched_by_mpirun())
		return 0;
	wf_cluster c;
	int rc = wf_cluster_from_env(&c, err);
	if (rc != 0)
		return rc;
	if (c.source != WF_CLUSTER_SRC_TF_CONFIG)
		goto cleanup;
	static const wf_role trainers[] = {WF_ROLE_CHIEF, WF_ROLE_WORKER};
	for (int t = 0; t < 2; t++)
		for (int i = 0; i < c.jobs[trainers[t]].n; i++)
			if (!c.jobs[trainers[t]].addr[i]) {
				rc = wf_errf(err, WF_EINVAL,
					     "TF_CONFIG: cluster.%s has no task %d: every rank of "
					     "an allreduce job needs an address",
					     wf_role_name(trainers[t]), i);
				goto cleanup;
			}
	const wf_cluster_job *j =
		c.jobs[WF_ROLE_CHIEF].n > 0 ? &c.jobs[WF_ROLE_CHIEF] : &c.jobs[WF_ROLE_WORKER];
	if (j->n < 1 || c.rank < 0) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: strategy.name allreduce needs cluster.chief or "
			     "cluster.worker, and task.type chief or worker");
		goto cleanup;
	}
	snprintf(chief, n, "%s", j->addr[0]);
	*boot = (wf_nccl_boot){.rank = c.rank,
			       .size = c.world_size,
			       .local_rank = c.local_rank,
			       .chief = chief,
			       .job = wf_role_job_id(cfg, &c),
			       .timeout = cfg->strategy.rendezvous_timeout,
			       .stall_timeout = cfg->strategy.stall_timeout};
	*found = 1;
cleanup:
	wf_cluster_free(&c);
	return rc;
}

/* The NCCL rendezvous through the TF_CONFIG chief is authenticated with the
 * job key, derived from the cluster's client key (cluster.key_dir), as the
 * parameter servers' CURVE traffic is; --insecure hands the id out in the
 * clear. */
static int rendezvous_key(const wf_config *cfg, wf_nccl_boot *boot, wf_err *err)
{
	if (cfg->cluster.insecure) {
		wf_warn("cluster.insecure: the NCCL rendezvous hands the job's NCCL id to anyone "
			"who reaches the chief's port");
		return 0;
	}
	if (!cfg->cluster.key_dir[0])
		return wf_errf(err, WF_EINVAL,
			       "cluster.key_dir: the chief hands the job's NCCL id to the ranks "
			       "only when both prove they hold the cluster's keys, and none were "
			       "given: make them once with `weft keygen --out DIR` and give every "
			       "rank --key-dir DIR (or --set cluster.key_dir=DIR, or "
			       "WEFT_KEY_DIR=DIR); to hand the id out unauthenticated, pass "
			       "--insecure");
	wf_ps_keys k;
	int rc = wf_ps_keys_load(&k, cfg->cluster.key_dir, err);
	if (rc == 0) {
		wf_rdv_key_derive(boot->key, k.client_secret);
		boot->keyed = 1;
	}
	memset(&k, 0, sizeof(k));
	return rc;
}

/* GPUs: NCCL on device memory, its id over MPI (mpirun) or from the TF_CONFIG
 * chief; CPUs: MPI on host memory, so only under mpirun. */
static int allreduce_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex, const wf_model *m,
			    const wf_optim_cfg *optim, wf_err *err)
{
	wf_nccl_boot boot;
	char chief[256];
	int tf_world = 0;
	int rc = allreduce_boot(cfg, &boot, chief, sizeof(chief), &tf_world, err);
	if (rc != 0)
		return rc;
	wf_strategy_mpi_defaults();
	wf_mpi_configure(&(wf_mpi_opts){.launched = launched_by_mpirun(),
					.stall_timeout = cfg->strategy.stall_timeout});
	/* device memory (a GPU backend): NCCL; host memory: MPI */
	const wf_backend *be = wf_exec_backend(ex);
	const char *dev = be->name;
	if (!wf_backend_host_memory(be)) {
		if (tf_world && (rc = rendezvous_key(cfg, &boot, err)) != 0)
			return rc;
		rc = wf_exchange_nccl_create(out, ex, m, optim, cfg->strategy.bucket_mb, &boot,
					     err);
		memset(boot.key, 0, sizeof(boot.key));
		return rc;
	}
	if (tf_world && boot.size > 1)
		return wf_errf(err, WF_EINVAL,
			       "strategy.name allreduce on device %s: TF_CONFIG describes %d "
			       "trainers, but on CPUs the ranks exchange over MPI and this "
			       "process was not started by mpirun: launch the ranks with mpirun "
			       "(or a Kubeflow MPIJob), train on GPUs (NCCL bootstraps through "
			       "the TF_CONFIG chief), or use strategy.name parameter_server",
			       dev, boot.size);
	return wf_exchange_mpi_create(out, ex, m, optim, cfg->strategy.bucket_mb, err);
}

int wf_strategy_exchange_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex,
				const wf_model *m, const wf_optim_cfg *optim, wf_err *err)
{
	int rc = wf_strategy_check(cfg, err);
	if (rc != 0)
		return rc;
	if (strcmp(cfg->strategy.name, "allreduce") == 0)
		return allreduce_create(out, cfg, ex, m, optim, err);
	if (strcmp(cfg->strategy.name, "parameter_server") == 0)
		return wf_role_ps_exchange_create(out, cfg, ex, m, optim, err);
	return wf_exchange_local_create(out, ex, m, optim, err);
}
