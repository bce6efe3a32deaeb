/* exchange_ring.h: elastic allreduce without MPI (the Horovod elastic
 * model): the gradients are averaged over a ring of TCP connections
 * (ring.h) whose members a membership service (membership.h) numbers by
 * generation. Each worker keeps the committed state (parameters, batch-norm
 * statistics, optimizer slots, step, data position) in memory; when a peer
 * fails, the survivors restore it, form the next generation with the
 * service and take the state of its root, without restarting; a worker
 * that joins or leaves is taken in or let go at a step boundary the same
 * way. docs/architecture.md has the whole story.
 *
 * Host memory only (the ref and cpu backends), as the MPI exchange. */
#ifndef WF_EXCHANGE_RING_H
#define WF_EXCHANGE_RING_H

#include "worker/exchange.h"

#include <stdint.h>

typedef struct wf_exchange_ring_cfg {
	const char *service;	/* "host:port" of the membership service */
	int slot;		/* this worker's slot (TF_CONFIG index; the chief's is 0) */
	int slots;		/* the cluster's worker slots (MAX: linear learning rate) */
	const char *listen;	/* this worker's "host:port": its ring listens on the port
				 * and the others reach it at this address */
	uint64_t job;		/* the job tag, alike everywhere */
	const uint8_t *key;	/* the job key (WF_RDV_KEY_BYTES), or NULL (--insecure) */
	int is_chief;		/* writes checkpoints, metrics and the model */
	double stall_timeout;	/* seconds one ring call waits for a peer */
	double elastic_timeout; /* seconds with fewer than MIN (the service's verdict) */
	double connect_timeout; /* seconds to reach the service at start */
	long commit_every;	/* steps between commits (>= 1) */
	int linear_lr;		/* 1: grad scale 1 / slots (elastic_lr linear), 0: 1 / workers */
	int global_batch;	/* 1: a step trains slots workers' batches, whoever is present
				 * (elastic_batch global; grad scale 1 / slots) */
	double bucket_mb;	/* MiB of gradient summed at a time, as backward finishes it */
	int host_copy;		/* 1: sum a host copy of the gradient on host memory too, as
				 * on a device (tests of the device path) */
} wf_exchange_ring_cfg;

/* The exchange over executor ex of model m, applying optim (on a device
 * the ring sums a host copy of the gradient). Nothing is connected before
 * start. */
int wf_exchange_ring_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			    const wf_optim_cfg *optim, const wf_exchange_ring_cfg *cfg,
			    wf_err *err);

/* The checkpoint file beside optimizer.h5 that keeps the data position. */
#define WF_RING_POSITION_FILE "data_position.json"

#endif
