/* exchange.h: gradient exchange, the part of a training step that differs
 * between strategies. A wf_exchange is a table of functions plus a context
 * (backends: local, mpi, nccl, ps), chosen once at start; the training loop
 * calls only the wrappers below and knows nothing of the strategy.
 *
 * One step, as the trainer drives it:
 *   zero grads; for each micro-batch: forward, loss, backward(grad_scale =
 *   1 / (batch * accumulate)), the last backward passing wf_exchange_grad_ready
 *   so a finished gradient prefix [0, done) can be shipped early;
 *   then wf_exchange_step(step), after which the executor's parameters are
 *   the ones to use for the next step; then wf_exchange_should_stop(step,
 *   signalled) says whether to checkpoint and stop there.
 * Layer by layer (x->layer_ready set by the exchange at create): step may
 * return once the gradient is on its way, before the new parameters are all
 * in. The trainer then passes wf_exchange_layer_hook to the executor
 * (wf_exec_set_layer_hook), so each layer of the next training forward
 * waits for its own parameters, and calls wf_exchange_settle before
 * anything else that reads them (evaluation, checkpoint, the end, a stop).
 * Each worker's gradient is thus the mean over its own samples; exchanges
 * that combine workers AVERAGE them (allreduce mean, parameter-server mean).
 *
 * Threads: an exchange is driven by one thread (grad_ready is called from
 * inside wf_exec_backward on that thread). */
#ifndef WF_EXCHANGE_H
#define WF_EXCHANGE_H

#include "common/error.h"
#include "model/model.h"
#include "model/optim.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_exchange wf_exchange;
struct wf_exchange_feed;
struct wf_exchange_backup;

typedef struct wf_exchange_ops {
	/* Bring params and optimizer state to the starting point. resume_dir is
	 * a complete checkpoint step directory whose model.h5 the trainer has
	 * already loaded into the executor (NULL: fresh start, params freshly
	 * initialised from the seed; then resume_step -1 says a resume was
	 * asked and found no checkpoint, else 0). Sets *start_step to the
	 * 0-based step to run next (the checkpoint's step, or 0). */
	int (*start)(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		     wf_err *err);
	/* The gradient prefix [0, done) floats is final for this step. May be NULL. */
	void (*grad_ready)(wf_exchange *x, size_t done);
	/* Finish step (0-based): combine gradients, update params (and, where
	 * workers differ, batch-norm state) in the executor. Returns 0, an
	 * error, or WF_EXCHANGE_MOVED with *to set (see below). */
	int (*step)(wf_exchange *x, long step, long *to, wf_err *err);
	/* Write this strategy's optimizer state for `step` completed steps into
	 * the checkpoint directory dir (before the trainer writes model.h5 and
	 * DONE). Called on every worker; writes only where the strategy wants. */
	int (*save)(wf_exchange *x, const char *dir, long step, wf_err *err);
	/* The run ended normally (ps: tell servers to shut down). May be NULL.
	 * Returns 0, an error, or WF_EXCHANGE_MOVED with *to set. */
	int (*finish)(wf_exchange *x, long *to, wf_err *err);
	void (*free)(wf_exchange *x); /* frees x and its context */
	/* After step() of `step`: whether the run stops now. requested is this
	 * worker's own stop request (a signal); exchanges whose workers must
	 * stop together (allreduce) agree on it, so every worker answers the
	 * same after the same step. May be NULL: requested as is. */
	int (*should_stop)(wf_exchange *x, long step, int requested);
	/* Backup workers: what to train next (see wf_exchange_feed). May be NULL. */
	int (*feed)(wf_exchange *x, struct wf_exchange_feed *f);
	/* Backup workers: the job's statistics (see wf_exchange_backup_stats). May be NULL. */
	int (*backup_stats)(wf_exchange *x, struct wf_exchange_backup *out, wf_err *err);
	/* The run was stopped: leave the job for good if this worker may (ps,
	 * elastic, not the chief; the others go on without it): *left 1, else
	 * 0 (stop as usual). Returns 0 or an error. May be NULL. */
	int (*leave)(wf_exchange *x, int *left, wf_err *err);
	/* Layer by layer: before the next forward's layer reads parameters
	 * [lo, hi) floats (and, when state is 1, the non-trainable state), wait
	 * until the last step's values of those are in the executor. Never
	 * fails: a failure is kept and returned by the next step (or settle).
	 * May be NULL. */
	void (*layer_wait)(wf_exchange *x, size_t lo, size_t hi, int state);
	/* Layer by layer: wait until every value of the last step is in the
	 * executor. Returns 0, an error, or WF_EXCHANGE_MOVED with *to set.
	 * May be NULL. */
	int (*settle)(wf_exchange *x, long *to, wf_err *err);
} wf_exchange_ops;

struct wf_exchange {
	const char *name; /* "local", "parameter_server", "allreduce" */
	const wf_exchange_ops *ops;
	void *ctx;    /* backend-private */
	int rank;     /* this worker's index in [0, workers) */
	int workers;  /* data-parallel workers (reader slices) */
	int is_chief; /* writes checkpoints, metrics and the model */
	/* backup workers: the data units of an epoch (wf_reader_units_per_epoch),
	 * set by the trainer before start; 0: not known */
	long units_per_epoch;
	/* elastic allreduce (by_position 1): the reader starts at a data
	 * position, not at its step's: sample data_offset of epoch data_epoch's
	 * order (a global batch past what is left of it: the next epoch's
	 * start), set by the exchange at start and whenever the ring re-forms;
	 * rank and workers change then too */
	int by_position;
	long data_epoch, data_offset;
	long samples;	   /* set by the trainer before start: training samples */
	long worker_batch; /* set by the trainer before start: one worker's samples a step */
	/* elastic allreduce with elastic_batch global: a step trains this many
	 * workers' batches (the cluster's slots), shared among the workers
	 * present; set by the exchange at create; 0: each worker its own */
	int batch_slots;
	/* step returns before the new parameters are all in (see above); set by
	 * the exchange at create */
	int layer_ready;
};

/* Backup workers (parameter_server sync, strategy.backup_workers > 0): a
 * step completes without the last B workers' pushes, and the data are
 * handed out in units (one worker's batch of one step, worker/data.h) by
 * the servers, so that the unit of a gradient dropped as late is trained
 * again, by whichever worker asks next. */
typedef struct wf_exchange_feed {
	long unit;	/* the data unit to train at next_step; -1: none handed out (the
			 * trainer then takes the step's own batch) */
	long next_step; /* 0-based step to run next: a worker whose push came too late
			 * continues at the servers' step */
	int dropped;	/* the last step's gradient came too late (on the chunk that
			 * decides, the last one): not counted as applied, its unit was
			 * re-queued; 0 after a start */
	int partial;	/* chunks of the last step whose fate differed from that chunk's */
	long late_by;	/* dropped: steps the servers were ahead when it arrived */
	/* elastic_batch global: a worker trains nunits units a step, units[0]
	 * == unit (the exchange's memory, valid until the next step or
	 * start); nunits <= 1: units may be NULL, the one unit is `unit` */
	const long *units;
	int nunits;
} wf_exchange_feed;

/* The job's backup-worker statistics (the servers' count; arrays owned by
 * the exchange, valid until the next call). */
typedef struct wf_exchange_backup {
	int workers;
	const long *late;     /* [workers] steps dropped as late */
	const long *late_sum; /* [workers] sum of how many steps late they were */
	const long *late_max; /* [workers] the most steps late */
	long units_per_epoch;
	long nepochs;
	const long *applied;  /* [nepochs] units applied per epoch */
	const long *requeued; /* [nepochs] units re-queued per epoch */
} wf_exchange_backup;

/* What step() and finish() return when the job moved to another step
 * instead of finishing this one (ps: a server restarted from a checkpoint
 * and every worker goes back to it): not an error; the executor holds the
 * model of step *to (0-based: the step to run next) and the trainer
 * restarts its reader there. */
#define WF_EXCHANGE_MOVED 1

/* Wrappers: the trainer calls these, never the table directly. */
int wf_exchange_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		      wf_err *err);
/* A wf_grad_ready_fn: pass it to wf_exec_backward with arg = the exchange. */
void wf_exchange_grad_ready(void *x, size_t done);
int wf_exchange_step(wf_exchange *x, long step, long *to, wf_err *err);
int wf_exchange_save(wf_exchange *x, const char *dir, long step, wf_err *err);
int wf_exchange_finish(wf_exchange *x, long *to, wf_err *err);
/* 1 when the run stops after `step` (see should_stop), else 0. */
int wf_exchange_should_stop(wf_exchange *x, long step, int requested);
/* 1 with *f filled when the exchange hands out data units (backup
 * workers): after start and after each step; 0 when the trainer reads
 * batches by step. */
int wf_exchange_get_feed(wf_exchange *x, wf_exchange_feed *f);
/* Backup workers' statistics (chief); WF_EINVAL when the exchange has none. */
int wf_exchange_backup_stats(wf_exchange *x, wf_exchange_backup *out, wf_err *err);
/* See leave above. */
int wf_exchange_leave(wf_exchange *x, int *left, wf_err *err);
/* A wf_layer_hook_fn (model/model.h) with arg = the exchange: see
 * layer_wait above; returns 0. */
int wf_exchange_layer_hook(void *x, int layer, size_t lo, size_t hi, int state);
/* See settle above (0 at once where the exchange has none). */
int wf_exchange_settle(wf_exchange *x, long *to, wf_err *err);
void wf_exchange_free(wf_exchange *x); /* accepts NULL */

/* ---- local: one process, the optimizer applied in place ---------------- */

/* An exchange over executor ex of model m (both must outlive it) applying
 * cfg with wf_optim_apply over the whole vector; slots m, v in backend
 * memory. Its checkpoint file is <dir>/optimizer.h5. */
int wf_exchange_local_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			     const wf_optim_cfg *cfg, wf_err *err);

/* ---- the optimizer-state file (shared by local and allreduce) ----------- */

#define WF_OPTIM_FILE "optimizer.h5"

/* Hash of everything in cfg that shapes the update (kind, hyper-parameters,
 * schedule): stored beside the slots to detect a changed config on resume. */
uint64_t wf_optim_cfg_hash(const wf_optim_cfg *cfg);
/* Write slots (host memory; nslots of m, v used, n floats each), the step and
 * cfg's hash to path: temporary file, fsync, rename. */
int wf_optim_state_save(const char *path, const wf_optim_cfg *cfg, long step, size_t n, int nslots,
			const float *m, const float *v, wf_err *err);
/* Read them back into host buffers of n floats; fails naming the file when
 * the file is corrupt or n / nslots / the optimizer kind differ; warns when
 * only hyper-parameters changed. *step receives the stored step. */
int wf_optim_state_load(const char *path, const wf_optim_cfg *cfg, size_t n, int nslots, float *m,
			float *v, long *step, wf_err *err);

#endif
