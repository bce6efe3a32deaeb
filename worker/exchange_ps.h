/* exchange_ps.h: the parameter-server exchange (docs/architecture.md). Each
 * worker pushes a gradient chunk as soon as backward has finished it and gets
 * the chunk's new values back in the same round trip; the optimizer runs on
 * the servers. The chief seeds the servers (or has them restore a
 * checkpoint), checkpoints them and shuts them down at the end. When a
 * server restarts from its last checkpoint, the chief rolls every server back
 * to that step and every worker follows (WF_EXCHANGE_MOVED).
 *
 * Gradient scale: the trainer leaves each worker's MEAN gradient in the
 * buffer; pushes carry it with weight 1 (aux = 1), so the servers average
 * over the workers that contributed: W sync workers of batch B equal one
 * process with --accumulate W (same samples, same order of operations up to
 * exact scalings by powers of two when B is one).
 *
 * Threads: driven by the training thread; the client's heartbeat thread is
 * internal. */
#ifndef WF_EXCHANGE_PS_H
#define WF_EXCHANGE_PS_H

#include "ps/proto.h"
#include "worker/exchange.h"

#include <stdint.h>

typedef struct wf_exchange_ps_cfg {
	int nservers;
	const char *const *endpoints; /* [nservers] "tcp://ip:port", ps i at [i] */
	uint64_t job_id;	      /* the same in every process of the job */
	int rank;		      /* this trainer: chief 0, worker i -> i + chiefs */
	int workers;		      /* trainers in the job */
	int is_chief;
	wf_ps_mode mode;      /* as the servers aggregate (strategy.mode) */
	int staleness;	      /* K of ssp:K */
	const char *ckpt_dir; /* checkpoint root (servers write shards under it) */
	size_t chunk_bytes;   /* 0: WF_PS_CHUNK_BYTES_DEFAULT (servers must agree) */
	/* 0: the WF_PS_*_DEFAULT of ps/client.h */
	double timeout;		       /* seconds to wait for a reply */
	double connect_timeout;	       /* seconds to wait for servers to come up */
	double heartbeat_interval;     /* seconds */
	double server_timeout;	       /* seconds of heartbeat silence = server gone */
	int replicas;		       /* ps.replicas: servers that keep each chunk */
	wf_ps_compression compression; /* ps.compression: how pushes carry the gradient */
	double topk;		       /* topk:F's F (compression topk) */
	size_t priority_bytes;	       /* ps.priority_kb in bytes: priority by layer; 0 off */
	/* "rank:step:seconds" (ps.debug_stall, WEFT_PS_DEBUG_STALL): worker
	 * `rank` sleeps before pushing that step (to see stall reports; not for
	 * production); NULL: never */
	const char *debug_stall;
	/* sync: steps complete without the last backup_workers pushes, and the
	 * servers hand out data units (exchange.h: wf_exchange_feed); 0: none */
	int backup_workers;
	/* sync, elastic membership (strategy.min_workers; ps/server.h): the
	 * servers hand out data units too, and a stopped worker other than the
	 * chief leaves the job (exchange.h: leave); 0: not elastic */
	int min_workers;
	/* > 1: this worker takes that many times as long per step (it sleeps
	 * before pushing; ps.debug_slow: a straggler); <= 1: as it is */
	double slow_factor;
	/* strategy.layer_ready, sync (without backup workers or elastic
	 * membership, on a host-memory backend): step returns once the pushes
	 * are out, and the next forward waits per layer for its chunks
	 * (exchange.h: layer by layer); 0: step waits for every reply */
	int layer_ready;

	const struct wf_ps_keys *keys; /* CURVE keys (ps/auth.h); NULL: plain TCP */
	const char *key_origin;	       /* where they came from, named when a server
					* refuses them (ps/client.h); may be NULL */
	/* > 0: checkpoint.dir holds the job's final checkpoint of this step, so
	 * the job may be over: a process that then finds no server within a short
	 * wait (10 s) does nothing and succeeds; 0: not known to be over */
	long done_step;
	/* model.freeze: the trainer's optimizer segments and frozen flags
	 * (wf_optim_cfg segs/frozen/nsegs); the servers leave those floats as
	 * they are. NULL: nothing frozen. */
	const size_t *segs;
	const unsigned char *frozen;
	int nsegs;
	/* the trainer's optimizer settings: register refuses servers whose own
	 * differ (ps/client.h); NULL: not checked */
	const struct wf_optim_cfg *optim;
} wf_exchange_ps_cfg;

/* An exchange over executor ex of model m (both outlive it). optim must be
 * the servers' optimizer (for the learning-rate log only). Connects in the
 * background; start() registers, waiting for the servers to come up. */
int wf_exchange_ps_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			  const wf_exchange_ps_cfg *cfg, wf_err *err);

#endif
