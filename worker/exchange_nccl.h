/* exchange_nccl.h: the allreduce exchange on GPUs (docs/architecture.md): the
 * same contract as the MPI exchange (exchange_mpi.h), with gradients,
 * statistics and optimizer slots in device memory and averaged by NCCL on a
 * dedicated stream. The NCCL unique id is broadcast over MPI under mpirun,
 * or handed out by the chief over TCP (worker/rendezvous.h) when the ranks
 * are pods that only have TF_CONFIG.
 * Only exchange_nccl.c includes <nccl.h> and the CUDA runtime; a build
 * without NCCL gets the stubs below, which say so.
 *
 * Threads: call everything from the training thread. */
#ifndef WF_EXCHANGE_NCCL_H
#define WF_EXCHANGE_NCCL_H

#include "worker/exchange.h"
#include "worker/rendezvous.h"

#include <stdint.h>

/* How the ranks find each other without MPI (Kubernetes pods with
 * TF_CONFIG): the trainer fills it from the cluster spec. */
typedef struct wf_nccl_boot {
	int rank;	      /* chief 0, worker i -> i + chiefs */
	int size;	      /* chief + workers */
	int local_rank;	      /* GPU choice on this host */
	const char *chief;    /* "host:port" of rank 0; its port serves the rendezvous */
	uint64_t job;	      /* job tag every rank derives alike */
	double timeout;	      /* rendezvous seconds (<= 0: WF_RDV_TIMEOUT_DEFAULT) */
	double stall_timeout; /* seconds (<= 0: WF_MPI_STALL_TIMEOUT_DEFAULT); read under mpirun too
			       */
	int keyed;	      /* key holds the job key (worker/rendezvous.h); 0: --insecure */
	uint8_t key[WF_RDV_KEY_BYTES];
} wf_nccl_boot;

#ifdef WEFT_HAVE_NCCL

/* Make GPU (local_rank mod the number of GPUs) current; call it before any
 * other CUDA call of the process (the cuda backend's creation). */
int wf_nccl_select_device(int local_rank, wf_err *err);

/* The NCCL allreduce exchange over executor ex (the cuda backend) of model
 * m, applying cfg on every rank; bucket_mb as strategy.bucket_mb. boot:
 * NULL or without chief under mpirun (the MPI world, id broadcast over
 * MPI), else the TF_CONFIG world (id from the chief's rendezvous). Joins the NCCL
 * communicator of all ranks (a collective call). */
int wf_exchange_nccl_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			    const wf_optim_cfg *cfg, double bucket_mb, const wf_nccl_boot *boot,
			    wf_err *err);

#else /* built without NCCL */

#define WF_NCCL_MISSING                                                                            \
	"strategy.name: allreduce on cuda needs NCCL; this weft was built without it "             \
	"(it needs the CUDA toolkit, NCCL and MPI at build time)"

static inline int wf_nccl_select_device(int local_rank, wf_err *err)
{
	return wf_errf(err, WF_ENOTSUP, WF_NCCL_MISSING);
}
static inline int wf_exchange_nccl_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
					  const wf_optim_cfg *cfg, double bucket_mb,
					  const wf_nccl_boot *boot, wf_err *err)
{
	*out = NULL;
	return wf_errf(err, WF_ENOTSUP, WF_NCCL_MISSING);
}

#endif

#endif
