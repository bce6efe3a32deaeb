/* server_impl.h: the parameter server's state, shared by server.c (event
 * loop, timers, set-up), server_agg.c (value buffers, sending, aggregation)
 * and server_ops.c (the ops). Private to ps/server*.c. */
#ifndef WF_PS_SERVER_IMPL_H
#define WF_PS_SERVER_IMPL_H

#include "ps/server.h"

#include "common/log.h"
#include "common/util.h"
#include "ps/auth.h"
#include "ps/placement.h"
#include "ps/proto.h"
#include "ps/shard.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define RID_MAX	   256
#define MAX_RECV   (2 + WF_PS_MAX_FRAMES) /* routing id + header + payload */
#define PATH_BYTES 4096

/* replication connections a server polls at most: the other members of its
 * groups, 2 x (replicas - 1) */
#define WF_PS_MAX_PEERS 64

/* ZeroMQ status check: records file, line and zmq's own message. */
#define ZCHECK(call, what)                                                                         \
	do {                                                                                       \
		if ((call) < 0) {                                                                  \
			rc = wf_errf(err, WF_EINTERNAL, "%s:%d: %s: %s", __FILE__, __LINE__, what, \
				     zmq_strerror(zmq_errno()));                                   \
			goto cleanup;                                                              \
		}                                                                                  \
	} while (0)

/* ---- state ------------------------------------------------------------ */

/* A reply the server owes and sends later (sync completion, ssp bound, barrier). */
typedef struct held {
	int used;
	uint8_t rid[RID_MAX]; /* ROUTER routing id of the requester */
	size_t rid_len;
	uint32_t tag;
	uint16_t op;
	int want_state;	     /* reply carries the state frame */
	long step;	     /* the step pushed */
	double since;	     /* when it was held */
	int stale;	     /* the reply carries flag STALE */
	long need;	     /* replication: answer once every live backup acknowledged
			      * the chunk's replicate number `need` (0: nothing to wait for) */
	uint32_t aux;	     /* the reply's aux: backup workers' next unit + 1; 0 none */
	const uint8_t *list; /* elastic_batch global: the worker's unit list (a last
			      * frame, flag UNITS; wf_pss_units_list), NULL none */
	size_t list_bytes;
} held;

/* A chunk's values, shared with the replies that send them zero-copy:
 * one reference for the chunk, one per reply ZeroMQ has not sent yet
 * (released by its free callback, on ZeroMQ's I/O thread). The values are
 * changed in place only while the chunk holds the sole reference; otherwise
 * the chunk moves to a copy first, and the last reply frees the old buffer. */
typedef struct vbuf {
	atomic_int refs;
	float *data; /* [count] */
} vbuf;

/* Sync: a sum of the workers' vectors for one step, added in worker order
 * whatever order they arrive in, so the result never depends on timing. A
 * vector that arrives before a required predecessor waits as a copy in
 * park[w] (memory: at most one copy per worker) until the predecessor has
 * been added or is known not to come. */
typedef struct osum {
	float *acc;	 /* [n] the sum of the vectors added so far */
	size_t n;	 /* floats */
	int next;	 /* workers [0, next) are added or do not contribute */
	int added;	 /* vectors in acc */
	uint8_t *in;	 /* [nworkers] contributed this step (added or parked) */
	float **park;	 /* [nworkers] parked copies, allocated on first use */
	uint8_t *parked; /* [nworkers] park[w] holds this step's vector */
} osum;

typedef struct schunk {
	int gidx;	/* global chunk index */
	size_t offset;	/* floats */
	size_t count;	/* floats */
	vbuf *vb;	/* holds values */
	float *values;	/* [count] = vb->data */
	uint32_t crc;	/* CRC32C of values, valid when crc_ok */
	int crc_ok;	/* values unchanged since crc was computed */
	float *slot[2]; /* [count] optimizer slots */
	osum sum;	/* sync gradient sum of the step */
	long version;	/* steps applied = the step being aggregated */
	int initialized;
	int ncontrib;	   /* pushes summed into acc for `version` */
	long contributors; /* workers' mean gradients summed in acc */
	int direct;	   /* the single contribution was applied already */
	double first_push; /* seconds: first contribution to `version` */
	uint8_t *pushed;   /* [nworkers] */
	held *held;	   /* [nworkers] */
	/* model.freeze: the frozen ranges of the last push, as the optimizer's
	 * segments (wf_optim_cfg segs/frozen, chunk-relative); nfsegs 0: none */
	size_t *fsegs;
	unsigned char *ffrozen;
	int nfsegs, fcap;
	/* replication */
	int group;    /* the chunk's group: the server placement gave it */
	long rseq;    /* replicates (and inits) sent to the backups so far */
	long *racked; /* [nservers] the last one each backup acknowledged */
	int synced;   /* backup: holds the primary's copy (installed, then kept up) */
	/* the chief's init of this chunk ([0]) and of the state ([1], on the
	 * first chunk of group 0), answered once every live backup holds it */
	held init[2];
} schunk;

/* Another server of a group this one belongs to: the replication connection
 * (a DEALER to its ROUTER) and what its heartbeat replies say. */
typedef struct peer {
	void *sock;	   /* NULL: no group in common */
	void *mon;	   /* sock's monitor: a closed connection (the process ended) */
	int up;		   /* sock's handshake completed, and it has not closed since */
	double last_seen;  /* seconds: last reply, 0 none */
	uint32_t inc;	   /* its incarnation, 0 not known */
	uint32_t join_inc; /* the incarnation its latest join named, 0 none */
	uint32_t claims;   /* its last heartbeat reply's chunk (wf_pss_repl_unbacked) */
} peer;

/* This server's part in group g (it is a member). */
typedef enum {
	GRP_JOINING, /* asking the other members who the primary is */
	GRP_PRIMARY, /* answers the workers, sends updates to the backups */
	GRP_BACKUP,  /* applies the primary's updates; answers nothing else */
	GRP_WAITING, /* joined; waiting for the primary's inits of join id */
} grp_role;

typedef struct group {
	int member; /* this server keeps the group */
	grp_role role;
	int primary;	      /* the primary as this server knows it, -1 not known */
	uint8_t *live;	      /* [nservers] primary: the backups that acknowledge */
	uint8_t *asked;	      /* [nservers] joining: members that answered */
	uint32_t join_id;     /* the id this server's join requests and their inits carry */
	int installs;	      /* waiting: inits the primary said it sends */
	int got;	      /* inits of join_id received (they may come before the answer) */
	double since;	      /* when joining started */
	double last_ask;      /* when join requests were last sent */
	double handoff_at;    /* primary of another server's group: hand it back from then on */
	double handoff_sent;  /* when this server's unanswered handoff went out, 0: none */
	uint32_t handoff_seq; /* the tag of the last handoff it sent */
} group;

typedef struct worker {
	int alive;	  /* -1 never seen, 1 alive, 0 declared dead */
	int awaited;	  /* elastic: a step's sum waits for it (see worker_message) */
	double last_seen; /* seconds */
	long last_step;	  /* highest step pushed, -1 none */
	long stall_step;  /* step last reported stalled */
	double stall_log; /* when a stall of this worker was last logged */
	long ssp_logged;  /* ssp: last step whose long wait was logged */
	held barrier;
	/* backup workers: steps whose push came after the step had completed */
	long late_steps; /* steps dropped as late */
	long late_sum;	 /* sum over them of (the chunk's step then - the step pushed) */
	long late_max;	 /* the largest such difference */
	long late_last;	 /* the last step counted (a step counts once, whatever its chunks) */
} worker;

/* Backup workers: the server holding the job's last chunk (the one every
 * worker pushes last) hands out data units, a unit being one worker's batch
 * of one step: unit u is slice u % W of global batch u / W of the data
 * order (worker/data.h), so units [e * per_epoch, (e + 1) * per_epoch) are
 * epoch e. Each reply of that chunk to a worker carries the next unit it
 * trains (aux = unit + 1). When the chunk's step completes, the units of the
 * workers whose push made it are applied; the others are re-queued, and the
 * re-queued ones are handed out before fresh ones. */
typedef struct units {
	int setup;	/* the fields below are set */
	int chunk;	/* local index of the chunk handing out units; -1: not here */
	long per_epoch; /* units per epoch (the workers' pull says); 0: not known */
	long next;	/* next fresh unit */
	long *queue;	/* [qcap] re-queued units, a ring from qhead */
	long qhead, qlen, qcap;
	long *unit; /* [nworkers] the unit each worker trains now; -1 none */
	long *done; /* [nworkers] the step of each worker's last applied push; -1 none */
	/* elastic_batch global: a step's nworkers units are shared among the
	 * workers present; worker w trains the nlist[w] units of list[w] (u64
	 * little-endian, as its reply carries them; list[w] starts with unit[w]) */
	uint8_t **list; /* [nworkers] each [lcap[w] x 8 bytes] */
	int *nlist;	/* [nworkers] */
	int *lcap;	/* [nworkers] */
	int dealt;	/* a step's units were shared out: before that, pulls wait */
	long *applied;	/* [nepochs] units applied per epoch */
	long *requeued; /* [nepochs] units re-queued per epoch */
	long nepochs;
	uint8_t *frame; /* the copy a replicate carries (wf_pss_units_frame), reused */
	size_t frame_cap;
} units;

typedef struct server {
	const wf_ps_server_cfg *cfg;
	void *zctx, *sock;
	wf_backend *be;
	wf_ps_placement pl;
	int nslots;
	int nchunks; /* owned */
	schunk *chunks;
	int *local;		   /* [pl.nchunks] global -> owned index or -1 */
	uint64_t *floats;	   /* [pl.nchunks] for the parser: 0 when not owned */
	wf_ps_shard_chunk *shards; /* [nchunks] views for checkpoints */
	wf_ps_limits lim;
	size_t nstate; /* state floats kept here (server 0 only) */
	float *state;
	osum state_sum; /* sync: the workers' state of the step (server 0) */
	int state_initialized;
	int nworkers;
	worker *workers;
	uint64_t pushes, pulls, bytes_in, bytes_out, rejected[WF_PS_REJECT__COUNT];
	uint64_t rejected_total;
	int held_count;
	int *due; /* [nchunks] priority: owned chunks completed, answers not sent; NULL off */
	int ndue;
	uint64_t ssp_held; /* ssp: pushes whose reply waited for the bound */
	long ssp_max_lead; /* ssp: largest (step - slowest step) of an answered push */
	units units;	   /* backup workers */
	long restored_step;
	double short_since;    /* elastic: since when fewer than min_workers are alive, 0 not */
	uint32_t incarnation;  /* random per process: heartbeat replies carry it in aux */
	int replicas;	       /* cfg->replicas, at least 1 */
	group *groups;	       /* [nservers] */
	peer *peers;	       /* [nservers] */
	wf_ps_limits peer_lim; /* replies on the replication connections */
	uint8_t *rframe;       /* a replicate's frozen frame, grown once and reused */
	size_t rframe_cap;     /* bytes */
	double last_peer_hb;
	double start, last_stats, last_stall_check;
	int running;
	zmq_msg_t frames[MAX_RECV];
	wf_ps_scratch align[MAX_RECV]; /* aligned copies of misaligned payload frames */
	wf_ps_scratch dense;	       /* a bf16 or topk push's gradient as floats */
	char text[PATH_BYTES];
} server;

/* Sync: worker w's pushes are awaited: it is alive or, without elastic
 * membership, not seen yet (the job waits for every worker at start). */
static inline int wf_pss_required(const server *s, int w)
{
	int a = s->workers[w].alive;
	if (s->cfg->min_workers > 0) /* elastic: a member, awaited */
		return a == 1 && s->workers[w].awaited;
	return a != 0;
}

/* Data units are handed out (backup workers or elastic membership). */
static inline int wf_pss_units_on(const server *s)
{
	return s->cfg->backup_workers > 0 || s->cfg->min_workers > 0;
}

/* Workers alive now. */
int wf_pss_live(const server *s);

vbuf *wf_pss_vbuf_new(size_t n, float *data);
void wf_pss_vbuf_unref(vbuf *b);
void wf_pss_values_writable(server *s, schunk *c);
void wf_pss_send_raw(server *s, const uint8_t *rid, size_t rid_len, const uint8_t *hdr,
		     const void *const *frames, const size_t *sizes, int nf, vbuf *zc);
void wf_pss_reply_hdr(server *s, wf_ps_hdr *h, uint16_t op, uint32_t tag, uint32_t chunk,
		      long step);
void wf_pss_send_ok(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req, long step,
		    uint32_t aux);
void wf_pss_send_error(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
		       int code, const char *text);
/* An error reply with flag REDIRECT: primary (-1: not known) in the reply step. */
void wf_pss_send_redirect(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
			  int primary, const char *text);
void wf_pss_send_errorf(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req,
			int code, int reason, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));
void wf_pss_send_values(server *s, schunk *c, const held *to, int nto, int stale);
void wf_pss_hold(server *s, held *h, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *req);
void wf_pss_release(server *s, held *h);
void wf_pss_fail_held(server *s, schunk *c, int code, const char *why);
/* Fail them with a redirect to the group's new primary. */
void wf_pss_fail_held_redirect(server *s, schunk *c, int primary);
int wf_pss_apply(server *s, schunk *c, const float *grad, long contributors, long step);
/* Take the frozen ranges of push m (none without flag FROZEN) for chunk c;
 * -1 when out of memory (the push is refused). */
int wf_pss_take_frozen(schunk *c, const wf_ps_msg *m);
int wf_pss_osum_init(osum *o, size_t n, int nworkers);
void wf_pss_osum_free(osum *o, int nworkers);
/* Worker w's vector x of this step: added now if every earlier required
 * worker's is in, else parked (a copy); then whatever parked is next.
 * WF_ENOMEM when a park copy cannot be made. */
int wf_pss_osum_push(server *s, osum *o, int w, const float *x);
/* Add what is parked, skipping workers that will not contribute: those
 * declared dead and, with final (the step completes now), any not in. */
void wf_pss_osum_flush(server *s, osum *o, int final);
void wf_pss_osum_reset(osum *o, int nworkers);
int wf_pss_missing(const server *s, const schunk *c, int skip);
/* Sync: 1 when chunk c's step is complete without the pushes still
 * missing (other than skip's): at most backup_workers of them. */
int wf_pss_quorum(const server *s, const schunk *c, int skip);
/* Backup workers (server_units.c). The reply aux for worker w: its next
 * unit + 1 when chunk c hands out units (its current unit is re-queued if
 * it had one), else 0. per_epoch > 0: the workers' units per epoch. */
uint32_t wf_pss_units_assign(server *s, const schunk *c, int w, long per_epoch);
/* Chunk c's sync step completed with the workers of c->pushed: their units
 * are applied, the others' re-queued; each held reply gets its next unit
 * (elastic_batch global: the held workers share the next nworkers units). */
void wf_pss_units_step_done(server *s, schunk *c);
/* elastic_batch global: worker w's unit list for a reply of chunk c (the
 * frame, *bytes), NULL when c does not hand out units or w has none. */
const uint8_t *wf_pss_units_list(server *s, const schunk *c, int w, size_t *bytes);
/* elastic_batch global, before the first step's units are shared out: a
 * worker's pull of chunk c waits (held in c->held[w]) until every live
 * member pulled and at least min_workers are alive; then they share the
 * step's units. 1 when the pull r (held, not answered) was taken over,
 * else 0. per_epoch as for wf_pss_units_assign. */
int wf_pss_units_hold_pull(server *s, schunk *c, int w, long per_epoch, const held *r);
/* Share out the held pulls' units when they may go (see above). */
void wf_pss_units_pulls_ready(server *s);
/* Worker w's push of `step` to chunk c, which is past: the reply aux when
 * that push was applied (a retry, e.g. to the new primary after a failover
 * lost the reply), the unit it was given then + 1; else 0 (dropped as late). */
uint32_t wf_pss_units_retry(server *s, const schunk *c, int w, long step);
/* The primary of chunk c, which hands out units, changed them between steps
 * (a late push, a pull): send them to its backups (op units, in order with
 * its replicates). The update number a reply that hands out a unit waits
 * for (held.need); 0 when there is nothing to wait for. */
long wf_pss_replicate_units(server *s, schunk *c);
/* A push of a past step from worker w on chunk c (dropped as late). */
void wf_pss_units_late(server *s, const schunk *c, int w, long step);
void wf_pss_units_free(server *s);
/* With ps.replicas > 1 the units go with their chunk: the frame a replicate
 * or an install of chunk c carries (docs/formats.md, units frame), NULL
 * when c does not hand out units or memory ran out (the backup then keeps
 * its older copy); *bytes its length. */
const uint8_t *wf_pss_units_frame(server *s, const schunk *c, size_t *bytes);
/* A backup of chunk c takes the primary's units from such a frame
 * (wf_ps_msg_parse checked its shape). */
void wf_pss_units_take(server *s, const schunk *c, const uint8_t *p, size_t bytes);
void wf_pss_sync_try_complete(server *s, schunk *c);
/* Priority: answer the chunks completed since the last call, highest
 * chunk first (see wf_ps_server_cfg.priority). */
void wf_pss_send_due(server *s);
long wf_pss_slowest_step(const server *s);
void wf_pss_ssp_answered(server *s, long step);
void wf_pss_ssp_release(server *s);
void wf_pss_barrier_try_release(server *s);
void wf_pss_barriers_rolled_back(server *s);
void wf_pss_membership_changed(server *s);
long wf_pss_server_step(const server *s);
/* This server answers the workers for chunk c (without replicas: always). */
int wf_pss_serving(const server *s, const schunk *c);
void wf_pss_op_init(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
void wf_pss_op_push_pull(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m, int w);
void wf_pss_op_pull(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
void wf_pss_op_checkpoint(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
int wf_pss_restore(server *s, const char *root, long want_step, long *step, wf_err *err);
void wf_pss_op_restore(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
void wf_pss_op_stats(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h);
void wf_pss_log_stats(server *s);

/* Receive one multipart message from sock into frames[MAX_RECV] (frames
 * past that are dropped and set *overflow); returns the frames stored, 0
 * when none is waiting, -1 on a socket error. */
int wf_pss_recv(server *s, void *sock, zmq_msg_t *frames, int *overflow);

/* ---- replication (server_repl.c) ---- */
int wf_pss_repl_init(server *s, wf_err *err);
void wf_pss_repl_free(server *s);
/* The replication sockets to poll next to the ROUTER (up to nservers). */
int wf_pss_repl_poll_items(server *s, zmq_pollitem_t *items);
/* Read the peers' replies, send heartbeats and join requests. */
void wf_pss_repl_tick(server *s);
/* Check a worker's request for chunk c (or the state when c is NULL, group
 * 0): 0 when this server is the primary of its group (a FAILOVER request
 * may make it so), else the request was answered with a redirect. */
int wf_pss_repl_route(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_hdr *h, int group);
/* Primary: send an applied update (grad of step, contributors) or, with
 * grad NULL, chunk c's values and slots to every live backup; returns the
 * number a reply must wait for (0: no backup). */
long wf_pss_replicate(server *s, schunk *c, const float *grad, long contributors, long step,
		      int with_state);
/* Primary of group 0: the state the chief set, to the backups; returns the
 * chunk whose acknowledgement (of number rseq) says they hold it, NULL when
 * there is nothing to wait for. */
schunk *wf_pss_replicate_state(server *s);
/* Send the held replies of chunk c whose replicate every live backup has
 * acknowledged. */
void wf_pss_answer_ready(server *s, schunk *c);
void wf_pss_op_replicate(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
void wf_pss_op_join(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
/* The primary of a group that failed over hands it back to the group's own
 * server once that one is its backup again (server_repl.c). */
void wf_pss_op_handoff(server *s, const uint8_t *rid, size_t rid_len, const wf_ps_msg *m);
/* An init from another server: the primary's state of a chunk (join). */
void wf_pss_repl_installed(server *s, const wf_ps_hdr *h);
/* The first group this server is still joining, -1 none. */
int wf_pss_repl_joining(const server *s);
/* The groups (bit g, g < 32) this server is the primary of whose live
 * backups leave out member p: p's heartbeat reply names them, so that a
 * backup its primary dropped joins again. */
uint32_t wf_pss_repl_unbacked(const server *s, int p);
/* A bitmap of the groups this server is the primary of (bit g; groups >= 32 not shown). */
uint32_t wf_pss_primary_bits(const server *s);

#endif
