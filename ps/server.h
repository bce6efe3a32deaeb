/* server.h: a parameter server. One process keeps its share of the chunks
 * (ps/placement.h) of the flat parameter vector: per chunk the values, the
 * optimizer slots and a version (steps applied). It binds a ZeroMQ ROUTER,
 * answers the ops of ps/proto.h in a single-threaded event loop, aggregates
 * gradients (sync, async or ssp:K), averages the non-trainable state (kept by
 * server 0), tracks worker membership by heartbeat, names stalled workers,
 * and writes/reads checkpoint shards (ps/shard.h) under its own checkpoint
 * directory. With keys, traffic is CURVE-encrypted and only holders of the
 * cluster's client key are admitted (ps/auth.h).
 *
 * Gradient scale: a push carries a sum of workers' mean gradients and, in
 * the header's aux field, how many (its contributors: 1 for a worker's own
 * push; 0: the configured batch). The server applies grad_scale = 1 / (the
 * contributors of the step), so W sync workers equal one process with
 * --accumulate W.
 *
 * Sync: a chunk advances when every worker not declared dead has pushed for
 * its current step; the replies (the new values) are held until then. With
 * backup_workers B > 0 it advances once all but B of them have (at least
 * one), summing only those pushes, in worker order. A push
 * for a past step is answered with the current values and flag STALE (with
 * B > 0: counted per worker as a late push). A
 * worker silent for heartbeat_timeout is declared dead (it leaves the count
 * at once, so the step in progress completes without it) and counts again
 * when it registers. Async: each push applies at once. ssp:K: each push
 * applies at once, but the reply to a push for step s is held while
 * s > (slowest live worker's step) + K. */
#ifndef WF_PS_SERVER_H
#define WF_PS_SERVER_H

#include "common/error.h"
#include "model/model.h"
#include "model/optim.h"
#include "ps/proto.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* The defaults of a server weft starts (the config keys ps.* use them). */
#define WF_PS_HEARTBEAT_TIMEOUT_DEFAULT 5.0  /* seconds of worker silence: dead */
#define WF_PS_STALL_TIMEOUT_DEFAULT	60.0 /* seconds before naming a stalled worker */
#define WF_PS_STATS_EVERY_DEFAULT	30.0 /* seconds between stats lines */

typedef struct wf_ps_server_cfg {
	const char *bind;    /* endpoint to bind, e.g. tcp://0.0.0.0:2222 */
	int index, nservers; /* this server among nservers */
	uint64_t job_id;     /* messages of other jobs are rejected */
	int nworkers;	     /* workers in the job */
	wf_ps_mode mode;
	int staleness; /* K of ssp:K */
	/* sync: a step completes without the last B workers' pushes (backup
	 * workers, 0 <= B < nworkers); the server holding the last chunk then
	 * hands out the data units (docs/architecture.md); 0: every worker */
	int backup_workers;
	/* sync, elastic membership: workers come and go (they join by
	 * registering, leave by op leave or by heartbeat silence); a worker not
	 * yet seen is not waited for, and a step completes only with at least
	 * min_workers alive (1 <= min_workers <= nworkers); the data go out in
	 * units as with backup workers. 0: every worker is awaited (not elastic). */
	int min_workers;
	/* elastic: seconds the job may have fewer than min_workers alive; then
	 * the held replies fail with a permanent error. 0: wait for ever. */
	double elastic_timeout;
	/* elastic, the learning rate per step: 1 scales it by the step's
	 * contributors / nworkers (the per-worker batch kept, as the linear
	 * scaling rule), 0 keeps it (the mean over whoever contributed). */
	int elastic_lr_linear;
	/* elastic, strategy.elastic_batch global: every step trains nworkers
	 * data units shared among the workers present (the server holding the
	 * last chunk hands each its list), and the update is the mean over the
	 * units (1 / the step's contributors, whatever elastic_lr_linear says).
	 * Not with backup workers or replicas. */
	int elastic_batch_global;
	wf_optim_cfg optim;
	const wf_view *views; /* the model's views (placement), may be NULL */
	int nviews;
	size_t nparams;		     /* trainable floats */
	size_t nstate;		     /* non-trainable floats (kept by server 0) */
	size_t chunk_bytes;	     /* 0: WF_PS_CHUNK_BYTES_DEFAULT */
	int batch;		     /* samples per push when a push says 0 */
	double heartbeat_timeout;    /* seconds; 0: never declare a worker dead */
	double stall_timeout;	     /* seconds; 0: no stall reports */
	double stats_every;	     /* seconds between stats log lines; 0: none */
	const char *backend;	     /* optimizer backend; NULL: "cpu" when built, else "ref" */
	int threads;		     /* backend threads; 0: 1 (the update is memory-bound and
				      * spinning OpenMP threads starve ZeroMQ's I/O thread) */
	volatile sig_atomic_t *stop; /* set non-zero (e.g. by a signal) to stop; may be NULL */

	/* the checkpoint root: shards are written and restored only here (never a
	 * path from the wire), and restored from at start; NULL: no checkpoints */
	const char *ckpt_dir;
	/* CURVE keys (ps/auth.h); NULL: plain TCP, anyone who reaches the port is
	 * served (--insecure) */
	const struct wf_ps_keys *keys;

	/* ps.replicas: servers that keep each chunk (1: no replication; at most
	 * nservers). With more, peers names every server's endpoint (server i
	 * at [i], this one's own included) and a peer silent for peer_timeout
	 * seconds (0: WF_PS_SERVER_TIMEOUT_DEFAULT of ps/client.h) stops
	 * counting as a backup (ps/proto.h: replication). */
	int replicas;
	const char *const *peers;
	double peer_timeout;
	/* ps.compression: how pushes carry the gradient (ps/proto.h); a push or
	 * a register that says otherwise is refused, naming both */
	wf_ps_compression compression;
	/* ps.priority_kb > 0: priority by layer. Sync, without replicas,
	 * backup workers or elastic membership: the chunks completed while one
	 * batch of received messages is handled are answered after it, highest
	 * chunk (first layers) first, instead of in completion order. */
	int priority;
} wf_ps_server_cfg;

/* Defaults: one server, one worker, sync, SGD defaults, and the
 * WF_PS_*_DEFAULT timeouts above. */
void wf_ps_server_cfg_default(wf_ps_server_cfg *c);
/* Run the server until a shutdown op (returns 0), *cfg->stop (WF_ESTOPPED)
 * or a fatal error (bind failure, bad cfg, restore failure). Bad messages are
 * never fatal. Call from one thread; it owns its own ZeroMQ context. */
int wf_ps_server_run(const wf_ps_server_cfg *cfg, wf_err *err);

#endif
