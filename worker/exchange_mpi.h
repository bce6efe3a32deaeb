/* exchange_mpi.h: the allreduce exchange on CPUs (docs/architecture.md) and the
 * process's MPI world, which the NCCL exchange also uses to bootstrap.
 * Every rank holds all parameters; each step the gradient buffer is
 * averaged across ranks in buckets started while backward still runs, then
 * every rank applies the same optimizer step, so ranks stay identical.
 * Only exchange_mpi.c includes <mpi.h>; a build without MPI gets the stubs
 * below, which say so.
 *
 * Threads: MPI is initialised with MPI_THREAD_SERIALIZED: a step's MPI
 * calls come from a communication thread (one per exchange or bucket set),
 * the others from the training thread while that thread is idle; every
 * function here must be called from the training thread. */
#ifndef WF_EXCHANGE_MPI_H
#define WF_EXCHANGE_MPI_H

#include "worker/exchange.h"

#include <stddef.h>

/* Seconds a rank waits for its peers inside one collective before naming
 * the missing rank(s) and failing with WF_ETRANSIENT (exit 138) by default
 * (the program passes strategy.stall_timeout / WEFT_STALL_TIMEOUT). */
#define WF_MPI_STALL_TIMEOUT_DEFAULT 60.0

/* Settings of the MPI world, resolved by the program (the library reads no
 * environment). */
typedef struct wf_mpi_opts {
	int launched;	      /* 1: started by mpirun (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE) */
	double stall_timeout; /* seconds; <= 0: WF_MPI_STALL_TIMEOUT_DEFAULT */
} wf_mpi_opts;

/* This process's place in the job. */
typedef struct wf_mpi_world {
	int rank;	/* in [0, size) */
	int size;	/* processes in the job (1 without mpirun) */
	int local_rank; /* rank among the processes of this host (GPU choice) */
	int active;	/* 1: MPI is initialised and used; 0: a world of one, no MPI */
} wf_mpi_world;

#ifdef WEFT_HAVE_MPI

/* 0: the allreduce strategy is built in. */
static inline int wf_exchange_mpi_check(wf_err *err)
{
	return 0;
}
/* Settings for the world wf_mpi_world_get creates; call it before the
 * first wf_mpi_world_get (without it: not launched, default timeout). */
void wf_mpi_configure(const wf_mpi_opts *o);
/* Initialise MPI once (MPI_Init_thread when opts.launched, i.e. started by
 * mpirun; otherwise a world of one without MPI) and describe the world.
 * Later calls return the same world. */
int wf_mpi_world_get(wf_mpi_world *w, wf_err *err);
/* Broadcast bytes from root to every rank, waiting at most the stall
 * timeout; what names the data in errors. No-op in a world of one. */
int wf_mpi_bcast(void *buf, size_t bytes, int root, const char *what, wf_err *err);
/* Mark the job failed: free() will then not call MPI_Finalize (which would
 * wait for peers that are gone), so the process can exit with its code. */
void wf_mpi_mark_failed(void);
/* MPI_Finalize if this module initialised MPI and nothing failed. */
void wf_mpi_world_finalize(void);

/* A flat float buffer summed across ranks in buckets of bucket_mb MiB,
 * each started by the communication thread once [0, done) covers it: the
 * exchange's own machinery, for the cluster benchmark's modelled backward. */
typedef struct wf_mpi_buckets wf_mpi_buckets;
int wf_mpi_buckets_create(wf_mpi_buckets **out, float *buf, size_t n, double bucket_mb,
			  wf_err *err);
/* [0, done) of this step's buffer is final (returns at once). */
int wf_mpi_buckets_ready(wf_mpi_buckets *b, size_t done, wf_err *err);
/* The whole buffer is final: wait for all (the stall timeout applies). */
int wf_mpi_buckets_wait(wf_mpi_buckets *b, wf_err *err);
/* 1 once the communication thread has finished this step's sums (or
 * failed): wf_mpi_buckets_wait then returns at once; else 0. */
int wf_mpi_buckets_done(wf_mpi_buckets *b);
void wf_mpi_buckets_free(wf_mpi_buckets *b);

/* The allreduce exchange over executor ex (a host-memory backend: ref or
 * cpu) of model m, applying cfg on every rank. bucket_mb: gradient bucket
 * size in MiB (strategy.bucket_mb). layer_ready (strategy.layer_ready, more
 * than one rank, no gradient clipping): the buckets are posted first
 * layers first among those completed together, each is updated as it is
 * summed, and step returns once all is handed over (exchange.h: layer by
 * layer). rank 0 is the chief; its checkpoint
 * file is <dir>/optimizer.h5, the same file the local exchange writes. */
int wf_exchange_mpi_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			   const wf_optim_cfg *cfg, double bucket_mb, int layer_ready, wf_err *err);

#else /* built without MPI */

#define WF_MPI_MISSING                                                                             \
	"strategy.name: allreduce needs MPI; this weft was built without it (install "             \
	"libopenmpi-dev: scripts/setup-deps.sh, then rebuild)"

static inline int wf_exchange_mpi_check(wf_err *err)
{
	return wf_errf(err, WF_ENOTSUP, WF_MPI_MISSING);
}
static inline void wf_mpi_configure(const wf_mpi_opts *o)
{
	(void)o;
}
static inline int wf_mpi_world_get(wf_mpi_world *w, wf_err *err)
{
	w->rank = 0;
	w->size = 1;
	w->local_rank = 0;
	w->active = 0;
	return 0;
}
static inline int wf_mpi_bcast(void *buf, size_t bytes, int root, const char *what, wf_err *err)
{
	return 0;
}
static inline void wf_mpi_mark_failed(void)
{
}
static inline void wf_mpi_world_finalize(void)
{
}
typedef struct wf_mpi_buckets wf_mpi_buckets;
static inline int wf_mpi_buckets_create(wf_mpi_buckets **out, float *buf, size_t n,
					double bucket_mb, wf_err *err)
{
	*out = NULL;
	return wf_errf(err, WF_ENOTSUP, WF_MPI_MISSING);
}
static inline int wf_mpi_buckets_ready(wf_mpi_buckets *b, size_t done, wf_err *err)
{
	return 0;
}
static inline int wf_mpi_buckets_wait(wf_mpi_buckets *b, wf_err *err)
{
	return 0;
}
static inline int wf_mpi_buckets_done(wf_mpi_buckets *b)
{
	return 1;
}
static inline void wf_mpi_buckets_free(wf_mpi_buckets *b)
{
}
static inline int wf_exchange_mpi_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
					 const wf_optim_cfg *cfg, double bucket_mb, int layer_ready,
					 wf_err *err)
{
	*out = NULL;
	return wf_errf(err, WF_ENOTSUP, WF_MPI_MISSING);
}

#endif

#endif
