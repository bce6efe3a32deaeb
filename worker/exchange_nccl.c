/* exchange_nccl.c: allreduce data parallelism over NCCL (GPUs).
 *
 * Gradients, statistics and optimizer slots live in device memory (the cuda
 * backend's). Each bucket of strategy.bucket_mb MiB is averaged by
 * ncclAllReduce(ncclAvg) on a dedicated stream as soon as backward has
 * queued it. The cuda backend's stream is private (and non-blocking), so the
 * order "bucket computed, then reduced" is kept by waiting for the backend
 * (wf_op_sync) before queuing a group of buckets; NCCL then runs on its
 * own stream while the host queues the rest of backward. (With an accessor
 * for the backend's stream this becomes an event wait, without the host
 * sync.) The optimizer is queued only after the host saw NCCL finish, so it
 * reads the averaged gradients. step() records
 * a completion event on the NCCL stream and polls it with the stall timeout
 * (WEFT_STALL_TIMEOUT); a timeout or an asynchronous NCCL error aborts the
 * communicator and fails with WF_ETRANSIENT (exit 138).
 *
 * The unique id comes from rank 0 over MPI (wf_mpi_bcast) under mpirun, or,
 * for pods with only TF_CONFIG, from the chief's TCP rendezvous
 * (worker/rendezvous.h); the starting step then travels by NCCL itself.
 * Each step also carries a one-int ncclMax allreduce of "this rank was
 * asked to stop", so all ranks stop after the same step (should_stop). */
#include "worker/exchange_nccl.h"

#include "common/log.h"
#include "kernels/ops.h"
#include "common/util.h"
#include "worker/exchange_mpi.h"
#include "worker/rendezvous.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_CHECK(call, err, what)                                                                \
	do {                                                                                       \
		cudaError_t cu_rc_ = (call);                                                       \
		if (cu_rc_ != cudaSuccess)                                                         \
			return wf_errf(err, WF_EINTERNAL, "%s: CUDA: %s (%s:%d)", what,            \
				       cudaGetErrorString(cu_rc_), __FILE__, __LINE__);            \
	} while (0)

#define NCCL_CHECK(call, err, what)                                                                \
	do {                                                                                       \
		ncclResult_t nc_rc_ = (call);                                                      \
		if (nc_rc_ != ncclSuccess) {                                                       \
			wf_mpi_mark_failed();                                                      \
			return wf_errf(err, WF_ETRANSIENT, "%s: NCCL: %s (%s:%d)", what,           \
				       ncclGetErrorString(nc_rc_), __FILE__, __LINE__);            \
		}                                                                                  \
	} while (0)

int wf_nccl_select_device(int local_rank, wf_err *err)
{
	int count = 0;
	CUDA_CHECK(cudaGetDeviceCount(&count), err, "counting GPUs");
	if (count < 1)
		return wf_errf(err, WF_ENOTSUP, "no usable GPU on this host");
	CUDA_CHECK(cudaSetDevice(local_rank % count), err, "selecting the GPU");
	return 0;
}

typedef struct nccl_ctx {
	wf_exec *ex;
	wf_backend *be;
	const wf_model *m;
	wf_optim_cfg cfg;
	wf_mpi_world w;
	size_t n, nstate; /* floats */
	int nslots;
	float *slot_m, *slot_v; /* device [n] or NULL */
	float *token;		/* device, SMALL_BYTES: float token, stop flag, step */
	int *flag_host;		/* pinned [2]: this rank's stop flag, the job's */
	size_t bucket;		/* floats per bucket */
	int nbuckets, posted, stats_posted;
	long cur_step;
	ncclComm_t comm;
	int have_comm;
	cudaStream_t stream;
	cudaEvent_t done;
	int failed, finished;
	double timeout; /* seconds */
	int pending_rc;
	wf_err pending;
	int stop_local;	 /* this rank was asked to stop (latched) */
	int stop_agreed; /* some rank asked: all stop after this step */
	int have_boot;	 /* the TF_CONFIG world (boot), not MPI's */
	wf_nccl_boot boot;
	char chief[256]; /* boot.chief's copy */
} nccl_ctx;

/* The small device buffer: the barrier's float, the stop flag, the step. */
#define SMALL_BYTES 16
#define FLAG_AT	    4 /* int32 */
#define STEP_AT	    8 /* int64 */

static void *small_at(nccl_ctx *c, size_t off)
{
	return (char *)c->token + off;
}

_Static_assert(sizeof(ncclUniqueId) == WF_RDV_ID_BYTES, "the rendezvous carries an ncclUniqueId");

/* Order the NCCL stream after everything queued so far on the backend. */
static int after_compute(nccl_ctx *c, wf_err *err)
{
	if (wf_op_sync(c->be) != 0)
		return wf_errf(err, WF_EINTERNAL, "waiting for backward: %s", c->be->err.msg);
	return 0;
}

/* Wait for the NCCL stream with the stall timeout. */
static int wait_stream(nccl_ctx *c, const char *what, wf_err *err)
{
	CUDA_CHECK(cudaEventRecord(c->done, c->stream), err, "recording the allreduce");
	double t0 = wf_now();
	for (long spins = 0;; spins++) {
		cudaError_t q = cudaEventQuery(c->done);
		if (q == cudaSuccess)
			return 0;
		if (q != cudaErrorNotReady)
			return wf_errf(err, WF_EINTERNAL, "%s: CUDA: %s", what,
				       cudaGetErrorString(q));
		ncclResult_t async = ncclSuccess;
		ncclCommGetAsyncError(c->comm, &async);
		if (async != ncclSuccess) {
			c->failed = 1;
			wf_mpi_mark_failed();
			ncclCommAbort(c->comm);
			c->have_comm = 0;
			return wf_errf(err, WF_ETRANSIENT,
				       "rank %d: %s: NCCL: %s (a peer vanished?)", c->w.rank, what,
				       ncclGetErrorString(async));
		}
		double waited = wf_now() - t0;
		if (waited > c->timeout) {
			c->failed = 1;
			wf_mpi_mark_failed();
			ncclCommAbort(c->comm);
			c->have_comm = 0;
			int rc = wf_errf(
				err, WF_ETRANSIENT,
				"stall: %s did not complete within %.0f s on rank %d of %d: a "
				"peer did not reach it. Exiting 138 (transient)",
				what, waited, c->w.rank, c->w.size);
			wf_error("%s", err ? err->msg : "stall");
			return rc;
		}
		if (spins > 256)
			sched_yield();
	}
}

static size_t bucket_lo(const nccl_ctx *c, int b)
{
	return (size_t)b * c->bucket;
}

static size_t bucket_hi(const nccl_ctx *c, int b)
{
	return WF_MIN(c->n, (size_t)(b + 1) * c->bucket);
}

static int post(nccl_ctx *c, size_t done, wf_err *err)
{
	if (!c->stats_posted) {
		c->stats_posted = 1;
		if (c->nstate) {
			int rc = after_compute(c, err);
			if (rc != 0)
				return rc;
			float *st = wf_exec_state(c->ex);
			NCCL_CHECK(ncclAllReduce(st, st, c->nstate, ncclFloat, ncclAvg, c->comm,
						 c->stream),
				   err, "averaging batch-norm statistics");
		}
	}
	if (c->posted >= c->nbuckets || bucket_hi(c, c->posted) > done)
		return 0;
	int rc = after_compute(c, err);
	if (rc != 0)
		return rc;
	float *g = wf_exec_grads(c->ex);
	while (c->posted < c->nbuckets && bucket_hi(c, c->posted) <= done) {
		size_t lo = bucket_lo(c, c->posted), hi = bucket_hi(c, c->posted);
		NCCL_CHECK(ncclAllReduce(g + lo, g + lo, hi - lo, ncclFloat, ncclAvg, c->comm,
					 c->stream),
			   err, "gradient allreduce");
		c->posted++;
	}
	return 0;
}

/* Queue the stop flag's max-allreduce after the step's buckets; the host
 * reads flag_host[1] once the stream is done. */
static int post_stop_flag(nccl_ctx *c, wf_err *err)
{
	int *dflag = small_at(c, FLAG_AT);
	c->flag_host[0] = c->stop_local;
	CUDA_CHECK(cudaMemcpyAsync(dflag, &c->flag_host[0], sizeof(int), cudaMemcpyHostToDevice,
				   c->stream),
		   err, "the stop flag");
	NCCL_CHECK(ncclAllReduce(dflag, dflag, 1, ncclInt32, ncclMax, c->comm, c->stream), err,
		   "the stop flag");
	CUDA_CHECK(cudaMemcpyAsync(&c->flag_host[1], dflag, sizeof(int), cudaMemcpyDeviceToHost,
				   c->stream),
		   err, "the stop flag");
	return 0;
}

static void nccl_grad_ready(wf_exchange *x, size_t done)
{
	nccl_ctx *c = x->ctx;
	if (c->w.size > 1 && c->pending_rc == 0)
		c->pending_rc = post(c, done, &c->pending);
}

static int nccl_step(wf_exchange *x, long step, long *to, wf_err *err)
{
	nccl_ctx *c = x->ctx;
	(void)to; /* the workers never move to another step */
	if (c->w.size > 1) {
		if (c->pending_rc != 0) {
			*err = c->pending;
			return c->pending_rc;
		}
		char what[96];
		snprintf(what, sizeof(what), "the allreduce of step %ld", step + 1);
		int rc = post(c, c->n, err);
		if (rc == 0)
			rc = post_stop_flag(c, err);
		if (rc == 0)
			rc = wait_stream(c, what, err);
		c->posted = c->stats_posted = 0;
		if (rc != 0)
			return rc;
		c->stop_agreed = c->flag_host[1];
	}
	/* ncclAvg already averaged: the optimizer takes the gradient as is. */
	int rc = wf_exec_optim_step(c->ex, &c->cfg, step, c->slot_m, c->slot_v, 1.0f);
	if (rc != 0)
		return wf_errf(err, rc, "optimizer step %ld: %s", step + 1, c->be->err.msg);
	return 0;
}

/* Every rank reaches this point (a one-float allreduce), with the timeout. */
static int barrier(nccl_ctx *c, const char *what, wf_err *err)
{
	if (c->w.size < 2)
		return 0;
	int rc = after_compute(c, err);
	if (rc != 0)
		return rc;
	NCCL_CHECK(ncclAllReduce(c->token, c->token, 1, ncclFloat, ncclSum, c->comm, c->stream),
		   err, what);
	return wait_stream(c, what, err);
}

static int bcast_dev(nccl_ctx *c, float *p, size_t count, wf_err *err)
{
	if (count == 0)
		return 0;
	NCCL_CHECK(ncclBroadcast(p, p, count, ncclFloat, 0, c->comm, c->stream), err,
		   "start-up broadcast from rank 0");
	return 0;
}

static int nccl_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		      wf_err *err)
{
	nccl_ctx *c = x->ctx;
	size_t bytes = c->n * sizeof(float);
	*start_step = 0;
	if (c->slot_m && wf_op_zero(c->be, c->slot_m, bytes) != 0)
		return wf_errf(err, WF_EINTERNAL, "zeroing slots: %s", c->be->err.msg);
	if (c->slot_v && wf_op_zero(c->be, c->slot_v, bytes) != 0)
		return wf_errf(err, WF_EINTERNAL, "zeroing slots: %s", c->be->err.msg);
	long step = 0;
	if (resume_dir && c->w.rank == 0) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", resume_dir, WF_OPTIM_FILE);
		float *hm = c->slot_m ? malloc(bytes ? bytes : 1) : NULL;
		float *hv = c->slot_v ? malloc(bytes ? bytes : 1) : NULL;
		int rc = (c->slot_m && !hm) || (c->slot_v && !hv)
				 ? wf_errf(err, WF_ENOMEM, "out of memory for optimizer slots")
				 : wf_optim_state_load(path, &c->cfg, c->n, c->nslots, hm, hv,
						       &step, err);
		if (rc == 0 && step != resume_step)
			rc = wf_errf(err, WF_EFORMAT, "%s: holds step %ld, its directory says %ld",
				     path, step, resume_step);
		if (rc == 0 && hm && wf_op_to_device(c->be, c->slot_m, hm, bytes) != 0)
			rc = wf_errf(err, WF_EINTERNAL, "restoring slots: %s", c->be->err.msg);
		if (rc == 0 && hv && wf_op_to_device(c->be, c->slot_v, hv, bytes) != 0)
			rc = wf_errf(err, WF_EINTERNAL, "restoring slots: %s", c->be->err.msg);
		free(hm);
		free(hv);
		if (rc != 0)
			return rc;
	}
	if (c->w.size < 2) {
		*start_step = step;
		return 0;
	}
	/* Rank 0's step, parameters, statistics and slots, so every rank starts equal. */
	int64_t s64 = step, *dstep = small_at(c, STEP_AT);
	if (wf_op_to_device(c->be, dstep, &s64, sizeof(s64)) != 0)
		return wf_errf(err, WF_EINTERNAL, "the starting step: %s", c->be->err.msg);
	int rc = after_compute(c, err);
	if (rc != 0)
		return rc;
	NCCL_CHECK(ncclGroupStart(), err, "start-up broadcast");
	NCCL_CHECK(ncclBroadcast(dstep, dstep, 1, ncclInt64, 0, c->comm, c->stream), err,
		   "start-up broadcast of the step");
	rc = bcast_dev(c, wf_exec_params_begin(c->ex), c->n, err);
	wf_exec_params_end(c->ex);
	if (rc == 0)
		rc = bcast_dev(c, wf_exec_state(c->ex), c->nstate, err);
	if (rc == 0 && c->slot_m)
		rc = bcast_dev(c, c->slot_m, c->n, err);
	if (rc == 0 && c->slot_v)
		rc = bcast_dev(c, c->slot_v, c->n, err);
	NCCL_CHECK(ncclGroupEnd(), err, "start-up broadcast");
	if (rc == 0)
		rc = wait_stream(c, "the start-up broadcast from rank 0", err);
	if (rc == 0 && wf_op_to_host(c->be, &s64, dstep, sizeof(s64)) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "the starting step: %s", c->be->err.msg);
	if (rc != 0)
		return rc;
	if (c->w.rank != 0 && resume_dir && s64 != resume_step)
		wf_warn("rank %d: my checkpoint is at step %ld, rank 0's at %lld: using rank 0's",
			c->w.rank, resume_step, (long long)s64);
	*start_step = (long)s64;
	return 0;
}

static int nccl_save(wf_exchange *x, const char *dir, long step, wf_err *err)
{
	nccl_ctx *c = x->ctx;
	char what[96];
	snprintf(what, sizeof(what), "the checkpoint of step %ld", step);
	int rc = barrier(c, what, err);
	if (rc != 0 || c->w.rank != 0)
		return rc;
	size_t bytes = c->n * sizeof(float);
	float *hm = c->slot_m ? malloc(bytes ? bytes : 1) : NULL;
	float *hv = c->slot_v ? malloc(bytes ? bytes : 1) : NULL;
	if ((c->slot_m && !hm) || (c->slot_v && !hv))
		rc = wf_errf(err, WF_ENOMEM, "out of memory for optimizer slots");
	if (rc == 0 && hm && wf_op_to_host(c->be, hm, c->slot_m, bytes) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "reading slots: %s", c->be->err.msg);
	if (rc == 0 && hv && wf_op_to_host(c->be, hv, c->slot_v, bytes) != 0)
		rc = wf_errf(err, WF_EINTERNAL, "reading slots: %s", c->be->err.msg);
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WF_OPTIM_FILE);
	if (rc == 0)
		rc = wf_optim_state_save(path, &c->cfg, step, c->n, c->nslots, hm, hv, err);
	free(hm);
	free(hv);
	return rc;
}

static int nccl_finish(wf_exchange *x, long *to, wf_err *err)
{
	nccl_ctx *c = x->ctx;
	(void)to; /* the workers never move to another step */
	int rc = barrier(c, "the end of training", err);
	if (rc == 0)
		c->finished = 1;
	return rc;
}

/* A request seen after step N's allreduce was queued travels with step
 * N + 1's; every rank returns the reduced flag of the step just done. */
static int nccl_should_stop(wf_exchange *x, long step, int requested)
{
	nccl_ctx *c = x->ctx;
	c->stop_local |= requested != 0;
	return c->w.size < 2 ? c->stop_local : c->stop_agreed;
}

static void nccl_free(wf_exchange *x)
{
	nccl_ctx *c = x->ctx;
	if (c) {
		/* An agreed stop: every rank checkpointed and is leaving; meet once
		 * more so the communicator is destroyed, not aborted. */
		wf_err unused;
		if (c->stop_agreed && !c->finished && !c->failed && c->have_comm &&
		    barrier(c, "the stop of the job", &unused) == 0)
			c->finished = 1;
		if (c->have_comm) {
			if (c->finished && !c->failed)
				ncclCommDestroy(c->comm);
			else
				ncclCommAbort(c->comm);
		}
		if (c->done)
			cudaEventDestroy(c->done);
		if (c->stream)
			cudaStreamDestroy(c->stream);
		if (c->slot_m)
			wf_op_free(c->be, c->slot_m);
		if (c->slot_v)
			wf_op_free(c->be, c->slot_v);
		if (c->token)
			wf_op_free(c->be, c->token);
		if (c->flag_host)
			cudaFreeHost(c->flag_host);
		if (!c->finished)
			wf_mpi_mark_failed();
		free(c);
		wf_mpi_world_finalize();
	}
	free(x);
}

static const wf_exchange_ops nccl_ops = {
	.start = nccl_start,
	.grad_ready = nccl_grad_ready,
	.step = nccl_step,
	.save = nccl_save,
	.finish = nccl_finish,
	.free = nccl_free,
	.should_stop = nccl_should_stop,
};

/* Device, stream, events and the communicator (collective over all ranks). */
static int nccl_setup(nccl_ctx *c, wf_err *err)
{
	/* Use the GPU that holds the executor's buffers; it should be local_rank's. */
	struct cudaPointerAttributes attr;
	CUDA_CHECK(cudaPointerGetAttributes(&attr, wf_exec_params(c->ex)), err,
		   "locating the parameters");
	int count = 0;
	CUDA_CHECK(cudaGetDeviceCount(&count), err, "counting GPUs");
	if (attr.type != cudaMemoryTypeDevice)
		return wf_errf(err, WF_EINVAL, "allreduce: the parameters are not in GPU memory");
	if (count > 0 && attr.device != c->w.local_rank % count)
		wf_warn("rank %d (local rank %d) trains on GPU %d, not GPU %d: ranks of one host "
			"should each pick their own (NCCL refuses two ranks on one GPU)",
			c->w.rank, c->w.local_rank, attr.device, c->w.local_rank % count);
	CUDA_CHECK(cudaSetDevice(attr.device), err, "selecting the GPU");
	CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err,
		   "creating the NCCL stream");
	CUDA_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), err, "events");

	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	if (c->w.rank == 0)
		NCCL_CHECK(ncclGetUniqueId(&id), err, "creating the NCCL id");
	int rc;
	if (c->have_boot) {
		wf_rdv_cfg rv = {.rank = c->w.rank,
				 .size = c->w.size,
				 .chief = c->chief,
				 .job = c->boot.job,
				 .timeout = c->boot.timeout,
				 .key = c->boot.keyed ? c->boot.key : NULL};
		rc = wf_rdv_exchange(&rv, (uint8_t *)&id, err);
	} else {
		rc = wf_mpi_bcast(&id, sizeof(id), 0, "the NCCL unique id", err);
	}
	if (rc != 0)
		return rc;
	NCCL_CHECK(ncclCommInitRank(&c->comm, c->w.size, id, c->w.rank), err,
		   "joining the NCCL communicator");
	c->have_comm = 1;
	return 0;
}

int wf_exchange_nccl_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			    const wf_optim_cfg *cfg, double bucket_mb, const wf_nccl_boot *boot,
			    wf_err *err)
{
	*out = NULL;
	wf_mpi_world w = {0};
	int rc = 0;
	if (boot && boot->chief) {
		if (boot->size < 1 || boot->rank < 0 || boot->rank >= boot->size || !boot->chief ||
		    strlen(boot->chief) >= 256)
			return wf_errf(err, WF_EINVAL,
				       "allreduce: rank %d of %d with chief \"%s\" is not a valid "
				       "NCCL world",
				       boot->rank, boot->size,
				       boot->chief ? boot->chief : "(none)");
		w = (wf_mpi_world){.rank = boot->rank,
				   .size = boot->size,
				   .local_rank = boot->local_rank,
				   .active = 0};
	} else if ((rc = wf_mpi_world_get(&w, err)) != 0) {
		return rc;
	}
	wf_exchange *x = calloc(1, sizeof(*x));
	nccl_ctx *c = calloc(1, sizeof(*c));
	if (!x || !c) {
		free(x);
		free(c);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	x->name = "allreduce";
	x->ops = &nccl_ops;
	x->ctx = c;
	x->rank = w.rank;
	x->workers = w.size;
	x->is_chief = w.rank == 0;
	c->ex = ex;
	c->be = wf_exec_backend(ex);
	c->m = m;
	c->cfg = *cfg;
	c->w = w;
	if (boot && boot->chief) {
		c->have_boot = 1;
		c->boot = *boot;
		snprintf(c->chief, sizeof(c->chief), "%s", boot->chief);
		c->boot.chief = c->chief;
	}
	c->n = m->nparams;
	c->nstate = m->nstate;
	c->nslots = wf_optim_slots(cfg);
	c->timeout = boot && boot->stall_timeout > 0 ? boot->stall_timeout
						     : WF_MPI_STALL_TIMEOUT_DEFAULT;
	double floats = bucket_mb * 1024.0 * 1024.0 / sizeof(float);
	c->bucket = floats < 1024 ? 1024 : (size_t)floats;
	c->nbuckets = c->n ? (int)((c->n + c->bucket - 1) / c->bucket) : 0;
	size_t bytes = (c->n ? c->n : 1) * sizeof(float);
	c->finished = 1; /* until set-up is over, nothing is in flight */
	if ((c->nslots >= 1 && !(c->slot_m = wf_op_alloc(c->be, bytes))) ||
	    (c->nslots >= 2 && !(c->slot_v = wf_op_alloc(c->be, bytes))) ||
	    !(c->token = wf_op_alloc(c->be, SMALL_BYTES))) {
		rc = wf_errf(err, WF_ENOMEM,
			     "out of GPU memory for %d optimizer slots of %zu floats", c->nslots,
			     c->n);
		goto fail;
	}
	if (cudaMallocHost((void **)&c->flag_host, 2 * sizeof(int)) != cudaSuccess) {
		c->flag_host = NULL;
		rc = wf_errf(err, WF_ENOMEM, "out of pinned host memory for the stop flag");
		goto fail;
	}
	c->flag_host[0] = c->flag_host[1] = 0;
	if ((rc = nccl_setup(c, err)) != 0)
		goto fail;
	c->finished = 0;
	*out = x;
	return 0;
fail:
	c->failed = 1;
	nccl_free(x);
	return rc;
}
