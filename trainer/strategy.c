#include "trainer/strategy.h"

#include "kernels/ops.h"

#include "common/log.h"
#include "ps/auth.h"
#include "ps/client.h"
#include "trainer/checkpoint.h"
#include "trainer/cluster.h"
#include "trainer/job.h"
#include "worker/exchange_mpi.h"
#include "worker/exchange_nccl.h"
#include "worker/exchange_ps.h"
#include "worker/exchange_ring.h"
#include "worker/rendezvous.h"

#include <stdlib.h>
#include <string.h>

int wf_strategy_check(const wf_config *cfg, wf_err *err)
{
	if (strcmp(cfg->strategy.name, "local") == 0)
		return 0;
	if (strcmp(cfg->strategy.name, "allreduce") == 0 && cfg->strategy.min_workers > 0)
		return 0; /* elastic: the TCP ring, no MPI */
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
	if (!launched_by_mpirun())
		return;
	/* measured on the emulated cluster (weft bench cluster, 2 ranks, 10 MB
	 * at 1 Gbit/s, bound 82 ms): libnbc's own choice 175 ms, the ring 90 */
	setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
	/* a ring step's message goes whole, without the rendezvous handshake
	 * TCP's BTL makes past 64 KiB (a round trip through the receiver's
	 * progress each step): 8 ranks of ResNet50 x 0.05 at 100 Mbit/s, 1142
	 * ms a step with the handshake, 1074-1086 without (PyTorch DDP 1080) */
	setenv("OMPI_MCA_btl_tcp_eager_limit", "1048576", 0);
	setenv("OMPI_MCA_btl_tcp_rndv_eager_limit", "1048576", 0);
	setenv("OMPI_MCA_btl_tcp_max_send_size", "1048576", 0);
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
			       .job = wf_job_id(cfg, &c),
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
	return wf_exchange_mpi_create(out, ex, m, optim, cfg->strategy.bucket_mb,
				      cfg->strategy.layer_ready, err);
}

/* Elastic allreduce (strategy.min_workers > 0): the TCP ring, its members
 * numbered by the membership service of strategy.elastic_service. This
 * worker's slot and ring address are its TF_CONFIG task's; the cluster's
 * workers are the slots (MAX). */
static int ring_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex, const wf_model *m,
		       const wf_optim_cfg *optim, wf_err *err)
{
	if (!cfg->strategy.elastic_service[0])
		return wf_errf(err, WF_EINVAL,
			       "strategy.elastic_service: elastic allreduce (strategy.min_workers "
			       "%ld) needs the membership service's host:port: run the job with "
			       "`weft launch --elastic MIN:MAX` (which runs one), or set "
			       "WEFT_ELASTIC_SERVICE to a `weft membership` service",
			       cfg->strategy.min_workers);
	wf_cluster c;
	int rc = wf_cluster_from_env(&c, err);
	if (rc != 0)
		return rc;
	const char *self = NULL;
	if (c.source == WF_CLUSTER_SRC_TF_CONFIG && c.index >= 0 &&
	    (c.role == WF_ROLE_CHIEF || c.role == WF_ROLE_WORKER) && c.index < c.jobs[c.role].n)
		self = c.jobs[c.role].addr[c.index];
	if (!self) {
		rc = wf_errf(err, WF_EINVAL,
			     "TF_CONFIG: elastic allreduce needs this worker's task (chief or "
			     "worker) and its address in the cluster spec: the ring listens there");
		goto cleanup;
	}
	if ((rc = wf_config_check_workers(cfg, c.world_size, err)) != 0)
		goto cleanup;
	uint8_t key[WF_RDV_KEY_BYTES];
	wf_ps_keys keys;
	const wf_ps_keys *kp = NULL;
	if ((rc = wf_job_keys(cfg, &keys, &kp, err)) != 0)
		goto cleanup;
	if (kp)
		wf_rdv_key_derive(key, kp->client_secret);
	else
		wf_warn("cluster.insecure: the elastic allreduce ring and its membership service "
			"accept anyone who reaches their ports");
	memset(&keys, 0, sizeof(keys));
	wf_exchange_ring_cfg rc_cfg = {
		.service = cfg->strategy.elastic_service,
		.slot = c.rank,
		.slots = c.world_size,
		.listen = self,
		.job = wf_job_id(cfg, &c),
		.key = kp ? key : NULL,
		.is_chief = c.is_chief,
		.stall_timeout = cfg->strategy.stall_timeout > 0 ? cfg->strategy.stall_timeout
								 : WF_MPI_STALL_TIMEOUT_DEFAULT,
		.elastic_timeout = cfg->strategy.elastic_timeout,
		.connect_timeout = cfg->strategy.rendezvous_timeout,
		.commit_every = cfg->strategy.commit_every,
		.linear_lr = strcmp(cfg->strategy.elastic_lr, "linear") == 0,
		.global_batch = strcmp(cfg->strategy.elastic_batch, "global") == 0,
		.bucket_mb = cfg->strategy.bucket_mb,
		.host_copy = cfg->strategy.debug_host_copy,
	};
	rc = wf_exchange_ring_create(out, ex, m, optim, &rc_cfg, err);
	memset(key, 0, sizeof(key));
cleanup:
	wf_cluster_free(&c);
	return rc;
}

/* Push-pull with the parameter servers of TF_CONFIG: resolves their
 * addresses (with retries) and connects. optim's frozen segments
 * (model.freeze) go with every push. */
static int ps_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex, const wf_model *m,
		     const wf_optim_cfg *optim, wf_err *err)
{
	wf_cluster c;
	char **ep = NULL;
	int rc = wf_job_ps_cluster(&c, cfg, err);
	if (rc != 0)
		return rc;
	if (c.role != WF_ROLE_CHIEF && c.role != WF_ROLE_WORKER) {
		rc = wf_errf(err, WF_EINVAL, "TF_CONFIG: task.type %s does not train",
			     wf_role_name(c.role));
		goto cleanup;
	}
	if ((rc = wf_config_check_workers(cfg, wf_job_num_workers(&c), err)) != 0)
		goto cleanup;
	wf_ps_keys keys;
	const wf_ps_keys *kp = NULL;
	if ((rc = wf_job_keys(cfg, &keys, &kp, err)) != 0)
		goto cleanup;
	if ((rc = wf_job_ps_endpoints(&c, &ep, err)) != 0)
		goto cleanup;
	long done = 0, ck;
	char ckdir[4200], origin[WF_CFG_PATH_MAX + 64];
	if (!strncmp(cfg->cluster.key_dir, "fd:", 3))
		snprintf(origin, sizeof(origin),
			 "`weft launch`'s keys for this run (cluster.key_dir=%s)",
			 cfg->cluster.key_dir);
	else
		snprintf(origin, sizeof(origin), "%s (cluster.key_dir)", cfg->cluster.key_dir);
	wf_err ce = {0};
	if (wf_ckpt_latest(cfg->checkpoint.dir, &ck, ckdir, sizeof(ckdir), &ce) == 1 &&
	    ck >= cfg->train.steps)
		done = ck;
	wf_exchange_ps_cfg pc = {
		.keys = kp,
		.key_origin = kp ? origin : NULL,
		.done_step = done,
		.nservers = c.jobs[WF_ROLE_PS].n,
		.endpoints = (const char *const *)ep,
		.job_id = wf_job_id(cfg, &c),
		.rank = c.rank,
		.workers = wf_job_num_workers(&c),
		.is_chief = c.is_chief,
		.mode = cfg->ps.mode,
		.staleness = (int)cfg->strategy.staleness,
		.ckpt_dir = cfg->checkpoint.dir,
		.chunk_bytes = (size_t)cfg->ps.chunk_bytes,
		.timeout = cfg->ps.timeout,
		.connect_timeout = cfg->ps.connect_timeout,
		.heartbeat_interval = WF_PS_HEARTBEAT_INTERVAL_DEFAULT,
		.server_timeout = cfg->ps.server_timeout,
		.replicas = (int)cfg->ps.replicas,
		.compression = cfg->ps.comp,
		.topk = cfg->ps.topk,
		.priority_bytes = (size_t)cfg->ps.priority_kb * 1024,
		.layer_ready = cfg->strategy.layer_ready,
		.debug_stall = cfg->ps.debug_stall[0] ? cfg->ps.debug_stall : NULL,
		.backup_workers = (int)cfg->strategy.backup_workers,
		.min_workers = (int)cfg->strategy.min_workers,
		.slow_factor = wf_config_slow_factor(cfg, c.rank),
		.segs = optim->segs,
		.frozen = optim->frozen,
		.nsegs = optim->nsegs,
		.optim = optim,
	};
	rc = wf_exchange_ps_create(out, ex, m, &pc, err);
	memset(&keys, 0, sizeof(keys));
cleanup:
	wf_job_endpoints_free(ep, c.jobs[WF_ROLE_PS].n);
	wf_cluster_free(&c);
	return rc;
}

int wf_strategy_exchange_create(wf_exchange **out, const wf_config *cfg, wf_exec *ex,
				const wf_model *m, const wf_optim_cfg *optim, wf_err *err)
{
	int rc = wf_strategy_check(cfg, err);
	if (rc != 0)
		return rc;
	if (strcmp(cfg->strategy.name, "allreduce") == 0 && cfg->strategy.min_workers > 0)
		return ring_create(out, cfg, ex, m, optim, err);
	if (strcmp(cfg->strategy.name, "allreduce") == 0)
		return allreduce_create(out, cfg, ex, m, optim, err);
	if (strcmp(cfg->strategy.name, "parameter_server") == 0)
		return ps_create(out, cfg, ex, m, optim, err);
	return wf_exchange_local_create(out, ex, m, optim, err);
}
