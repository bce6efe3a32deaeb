/* client.h: a worker's (or the chief's) connection to the parameter servers:
 * one ZeroMQ DEALER per server. Gradient chunks are pushed as soon as
 * backward has finished them (push_pull_async, zero-copy: the gradient
 * memory is sent in place) and the new values land straight in the caller's
 * parameter buffer when wait_all collects the replies.
 *
 * Threads: a client is used by one thread at a time. With
 * heartbeat_interval > 0 it runs one internal thread with its own sockets
 * that sends heartbeats; nothing of it is shared with the caller. */
#ifndef WF_PS_CLIENT_H
#define WF_PS_CLIENT_H

#include "common/error.h"
#include "model/optim.h"
#include "ps/placement.h"
#include "ps/proto.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_ps_client wf_ps_client;

/* The client's defaults, here once (the worker's exchange and the trainer's
 * roles use these names). */
#define WF_PS_TIMEOUT_DEFAULT		 300.0 /* seconds to wait for a reply */
#define WF_PS_CONNECT_TIMEOUT_DEFAULT	 120.0 /* seconds to wait for the servers */
#define WF_PS_HEARTBEAT_INTERVAL_DEFAULT 0.5   /* seconds between heartbeats */
#define WF_PS_SERVER_TIMEOUT_DEFAULT	 5.0   /* seconds of silence: server gone */
#define WF_PS_LEAVE_WAIT		 2.0   /* seconds a leave waits for the servers */
#define WF_PS_STEP_BACKUP		 (-2)  /* register: the server serves no group */

typedef struct wf_ps_client_cfg {
	int nservers;
	const char *const *endpoints; /* [nservers] "tcp://host:port", server i at [i] */
	uint64_t job_id;
	int role;		   /* WF_PS_ROLE_WORKER, _CHIEF or _TOOL */
	int index;		   /* worker index for role worker */
	const wf_ps_placement *pl; /* chunks and their servers (kept, not copied) */
	float *params;		   /* host [pl->nparams]: replies land here */
	float *state;		   /* host [nstate], or NULL */
	size_t nstate;		   /* non-trainable floats (kept by server 0) */
	int nslots;		   /* optimizer slots init may send */
	int contributors;	   /* workers' mean gradients a push sums (header aux) */
	double timeout;		   /* seconds to wait for a reply; 0: WF_PS_TIMEOUT_DEFAULT */
	double connect_timeout;	   /* seconds register keeps retrying; 0: the default */
	double heartbeat_interval; /* seconds; 0: no heartbeat thread */
	double server_timeout;	   /* seconds without heartbeat replies after which a
				    * server's outstanding requests fail; 0: max(5, 10 x
				    * heartbeat_interval). A restarted server (new
				    * incarnation) fails them at once. */

	const struct wf_ps_keys *keys; /* CURVE keys (ps/auth.h, copied); NULL: plain TCP */
	const char *key_origin;	       /* where the keys came from (the key directory),
					* named when a server refuses them (copied); may be NULL */
	/* model.freeze: the parameters' segments (offsets segs[0..nsegs], as
	 * wf_optim_cfg's) and frozen[s] = 1 for each frozen one; every push of a
	 * chunk holding frozen floats names them, so the servers leave them as
	 * they are. NULL: nothing frozen. */
	const size_t *segs;
	const unsigned char *frozen;
	int nsegs;
	/* the optimizer settings the servers must share (ps/proto.h: register),
	 * read at create; NULL: register sends none and is not checked */
	const wf_optim_cfg *optim;
	/* ps.replicas (ps/proto.h: replication); 0 or 1: none. With more, a
	 * request to a server that fails (restart, heartbeat silence) or that
	 * names another primary goes again to the group's next server, and
	 * server-wide requests wait for a restarted server instead of failing. */
	int replicas;
	/* ps.compression: how pushes carry the gradient (ps/proto.h); the
	 * servers must be configured alike (register names a difference when
	 * cfg.optim is given, a push is refused otherwise) */
	wf_ps_compression compression;
	/* compression topk: the fraction F of each chunk's entries a push
	 * carries, (0, 1]. The client keeps the rest of each gradient (its
	 * error-feedback residual, [nparams]) and adds it to the next push of
	 * the chunk; a push the servers drop as stale is lost whole, as an
	 * uncompressed one. */
	double topk;
	/* ps.priority_kb x 1024: priority by layer; 0: off. With it, a push is
	 * handed to ZeroMQ only while less than this many bytes of earlier
	 * pushes to its server wait in ZeroMQ's queue, and each connection
	 * keeps at most this many unsent in the kernel (TCP_NOTSENT_LOWAT); the
	 * others wait in the client, in the order they were pushed until the
	 * last chunk is pushed, then highest chunk first (the parameters are
	 * laid out in reverse layer order: the first layers first). They move
	 * whenever the client runs: at each push and while it waits. */
	size_t priority_bytes;
} wf_ps_client_cfg;

/* Create the sockets and connect (ZeroMQ connects in the background, so the
 * servers may come up later). Starts the heartbeat thread if asked. */
int wf_ps_client_create(wf_ps_client **out, const wf_ps_client_cfg *cfg, wf_err *err);
void wf_ps_client_free(wf_ps_client *c); /* accepts NULL */

/* Register with every server, retrying until connect_timeout (then
 * WF_ETRANSIENT). A server that speaks the other security mode (CURVE vs
 * plain TCP) or refuses the keys fails it at once with WF_EINVAL naming the
 * server and cfg.key_origin; so does one whose optimizer settings differ
 * from cfg.optim, naming each differing key and both values. steps
 * ([nservers], may be NULL) receives each server's step (-1: not yet
 * initialized; WF_PS_STEP_BACKUP: with replicas, a server that is the
 * primary of no group and so does not tell the job's step); *min_step the
 * lowest of the others (-1 if any is uninitialized). Every
 * send is bounded (ZMQ_SNDTIMEO: a round here, the reply timeout
 * elsewhere). joining: this worker joins a running job and will not push
 * until the servers agree on a step (an elastic job's servers then count it
 * only from its first push; WF_PS_FLAG_JOINING). */
int wf_ps_client_register(wf_ps_client *c, int joining, long *steps, long *min_step, wf_err *err);
/* Change how long register keeps retrying (0: the default); returns the old value. */
double wf_ps_client_set_connect_timeout(wf_ps_client *c, double seconds);
/* on: every wait gives up with WF_ESTOPPED on a stop signal (common/cancel.h),
 * dropping its open requests, as register's always do (a worker's start). */
void wf_ps_client_set_cancelable(wf_ps_client *c, int on);
/* Chief: seed every chunk with params (+ slots[k] [nparams] each, may be
 * NULL: zeros) at version step, and the state (if nstate) on server 0. */
int wf_ps_client_init(wf_ps_client *c, const float *params, const float *const *slots,
		      const float *state, long step, wf_err *err);
/* Push chunk's gradient (grads is the whole [nparams] buffer; only the
 * chunk's range is read, in place, so it must stay untouched until
 * wait_all returns) for step; with_state attaches cfg->state (the chunk must
 * live on server 0). Returns at once; the reply is collected by wait_all. */
int wf_ps_client_push_pull_async(wf_ps_client *c, int chunk, const float *grads, long step,
				 int with_state, wf_err *err);
/* Wait for every outstanding reply; values are copied into cfg->params
 * (and cfg->state). The first error is returned (WF_ETRANSIENT on timeout,
 * or, with heartbeats, when a server restarted or fell silent, naming it);
 * the wait ends at the first refusal, dropping the replies still open. */
int wf_ps_client_wait_all(wf_ps_client *c, wf_err *err);
/* Wait until chunk's reply (of its push or pull) has landed in cfg->params,
 * reading the replies that arrive meanwhile; the others stay outstanding
 * until wait_all, which still collects every reply. Returns that reply's
 * error, if any (wait_all returns it again). */
int wf_ps_client_wait_chunk(wf_ps_client *c, int chunk, wf_err *err);
/* Drive the client (read replies, hand held pushes to ZeroMQ as credit
 * frees: priority_bytes) until no push is held in it; the replies stay
 * outstanding until wait_chunk or wait_all. Returns a reply's error seen
 * meanwhile, or WF_ETRANSIENT after the reply timeout. */
int wf_ps_client_flush(wf_ps_client *c, wf_err *err);
/* When chunk's last push left the client for ZeroMQ and when its last
 * reply (of a push or pull) was read, in wf_now() seconds (0: not yet);
 * either may be NULL. Returns -1 for a chunk out of range. */
int wf_ps_client_chunk_times(const wf_ps_client *c, int chunk, double *sent, double *landed);
/* Replies of the last wait_all that were flagged stale (pushed step was past). */
int wf_ps_client_stale_count(const wf_ps_client *c);
/* Pull chunk (or -1: every chunk) into params; *version (may be NULL)
 * gets the lowest version seen. */
int wf_ps_client_pull(wf_ps_client *c, int chunk, long *version, wf_err *err);
/* As wf_ps_client_pull, the requests carrying aux (backup workers: the
 * worker's data units per epoch). */
int wf_ps_client_pull_aux(wf_ps_client *c, int chunk, uint32_t aux, long *version, wf_err *err);
/* The last reply to chunk's push or pull (valid until its next request):
 * 1 when flagged stale, else 0; *step its step (the chunk's version) and
 * *aux its aux field (backup workers: the next data unit + 1; 0: none).
 * Either may be NULL. */
int wf_ps_client_chunk_reply(const wf_ps_client *c, int chunk, long *step, uint32_t *aux);
/* The unit list of chunk's last reply (flag UNITS, elastic_batch global):
 * its count, the units in *units (valid until the next reply with a list);
 * 0 when the reply carried none. */
int wf_ps_client_chunk_units(const wf_ps_client *c, int chunk, const long **units);
/* The contributors the next pushes carry (cfg.contributors). */
void wf_ps_client_set_contributors(wf_ps_client *c, int n);
/* Pull the non-trainable state (kept by server 0) into cfg->state. */
int wf_ps_client_pull_state(wf_ps_client *c, wf_err *err);
/* Wait until every live worker reached the barrier on every server. */
int wf_ps_client_barrier(wf_ps_client *c, long step, wf_err *err);
/* Every server writes its shard of step under its own checkpoint.dir (see
 * ps/shard.h; no path goes over the wire). */
int wf_ps_client_checkpoint(wf_ps_client *c, long step, wf_err *err);
/* Every server restores step (-1: newest complete) from its own
 * checkpoint.dir; *restored gets the step (all servers must agree). */
int wf_ps_client_restore(wf_ps_client *c, long step, long *restored, wf_err *err);
/* Statistics of server s; free with wf_ps_stats_free. */
int wf_ps_client_stats(wf_ps_client *c, int s, wf_ps_stats *out, wf_err *err);
/* The server chunk k's requests go to now: the one placement gave it, or
 * with replicas its group's primary as far as this client knows. */
int wf_ps_client_server_of(const wf_ps_client *c, int chunk);
/* Elastic: tell every server this worker leaves the job for good (the
 * steps complete without it at once, rather than after the heartbeat
 * timeout). */
int wf_ps_client_leave(wf_ps_client *c, wf_err *err);
/* Tell every server to exit (each replies first). */
int wf_ps_client_shutdown(wf_ps_client *c, wf_err *err);

#endif
