/* exchange_mpi.c: allreduce data parallelism over MPI (CPUs), the MPI world
 * of the process, and the stall inspector.
 *
 * A step: the training thread hands the finished prefix of the flat
 * gradient buffer to a communication thread as backward produces it (the
 * first grad_ready call: forward is over). That thread makes the step's
 * MPI calls: a non-blocking sum of the batch-norm running statistics and
 * the stop flag first, then each gradient bucket's MPI_Iallreduce (in
 * place, sum; a bucket is a contiguous range of strategy.bucket_mb MiB) as
 * soon as backward has finished it, progressing them every PROGRESS_US
 * while any is in flight (Open MPI's non-blocking collectives advance only
 * inside MPI calls). step() hands over the rest and waits for the thread,
 * divides the statistics by the world size and applies the optimizer with
 * grad_scale = 1/size: the mean of the ranks' mean gradients. The
 * statistics are thus averaged every step (a few KiB), so ranks stay
 * identical and evaluation or a checkpoint on any rank sees the same model.
 *
 * Stopping together: mpirun forwards SIGINT/SIGTERM to every rank, and the
 * ranks see it at different steps. Beside the statistics each step carries
 * a one-int MPI_MAX allreduce of "this rank was asked to stop" (as it was
 * when the step's exchange began), so every rank learns the same answer
 * after the same step: all of them checkpoint (rank 0 writes) and return
 * WF_ESTOPPED, and free() ends with a barrier so MPI is finalised cleanly.
 *
 * Stall inspector: every wait is a loop over MPI_Test with a deadline (the
 * step's, on the communication thread, runs from when step() waits).
 * Before waiting, a rank tells the coordinator (rank 0) the sequence number
 * of the collective it has reached, and rank 0 tells everyone; so when the
 * deadline passes, rank 0 names the ranks that never arrived (and the bucket
 * it waits on), the other ranks name rank 0 when it is the one missing, and
 * the step fails with WF_ETRANSIENT: the process exits 138 and mpirun ends
 * the job instead of hanging. */
#include "worker/exchange_mpi.h"

#include "common/events.h"
#include "common/log.h"
#include "kernels/ops.h"
#include "common/util.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_HEARTBEAT 7301
#define MAX_NAMED     16 /* ranks listed by name in a stall message */

/* ---- the MPI world ----------------------------------------------------- */

static struct {
	int ready;	   /* wf_mpi_world_get succeeded once */
	int we_init;	   /* this module called MPI_Init_thread */
	atomic_int failed; /* a collective failed: never MPI_Finalize (set by either thread) */
	wf_mpi_world w;
	MPI_Comm comm;	  /* a duplicate of MPI_COMM_WORLD, errors returned */
	double timeout;	  /* stall timeout, seconds */
	wf_mpi_opts opts; /* wf_mpi_configure's */
} g;

/* Record an MPI failure: file, line, the call and MPI's own text. */
#define MPI_CHECK(call, err, ...)                                                                  \
	do {                                                                                       \
		int mpi_rc_ = (call);                                                              \
		if (mpi_rc_ != MPI_SUCCESS)                                                        \
			return mpi_fail(err, mpi_rc_, __FILE__, __LINE__, __VA_ARGS__);            \
	} while (0)

static int mpi_fail(wf_err *err, int mpi_rc, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int mpi_fail(wf_err *err, int mpi_rc, const char *file, int line, const char *fmt, ...)
{
	char what[512], text[MPI_MAX_ERROR_STRING];
	int len = 0;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS)
		snprintf(text, sizeof(text), "MPI error %d", mpi_rc);
	g.failed = 1;
	/* A failed MPI call here means a peer vanished or the network broke. */
	return wf_errf(err, WF_ETRANSIENT, "rank %d: %s: %s (%s:%d)", g.w.rank, what, text, file,
		       line);
}

void wf_mpi_configure(const wf_mpi_opts *o)
{
	g.opts = *o;
}

int wf_mpi_world_get(wf_mpi_world *w, wf_err *err)
{
	if (g.ready) {
		*w = g.w;
		return 0;
	}
	int inited = 0;
	MPI_Initialized(&inited);
	int launched = g.opts.launched;
	g.timeout = g.opts.stall_timeout > 0 ? g.opts.stall_timeout : WF_MPI_STALL_TIMEOUT_DEFAULT;
	if (!inited && !launched) {
		g.w = (wf_mpi_world){.rank = 0, .size = 1, .local_rank = 0, .active = 0};
		g.ready = 1;
		*w = g.w;
		return 0;
	}
	int provided = 0;
	if (!inited) {
		if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
			return wf_errf(err, WF_ETRANSIENT, "MPI_Init_thread failed");
		g.we_init = 1;
	} else {
		MPI_Query_thread(&provided);
	}
	/* the step's MPI calls come from the communication thread, the others
	 * from the training thread, never both at once */
	if (provided < MPI_THREAD_SERIALIZED)
		return wf_errf(err, WF_ENOTSUP,
			       "this MPI provides thread level %d, below MPI_THREAD_SERIALIZED "
			       "(%d), which weft's allreduce needs (its communication thread "
			       "makes the step's MPI calls)",
			       provided, MPI_THREAD_SERIALIZED);
	MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g.comm), err, "duplicating MPI_COMM_WORLD");
	MPI_CHECK(MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN), err, "MPI error handler");
	MPI_CHECK(MPI_Comm_rank(g.comm, &g.w.rank), err, "MPI_Comm_rank");
	MPI_CHECK(MPI_Comm_size(g.comm, &g.w.size), err, "MPI_Comm_size");
	MPI_Comm local;
	MPI_CHECK(
		MPI_Comm_split_type(g.comm, MPI_COMM_TYPE_SHARED, g.w.rank, MPI_INFO_NULL, &local),
		err, "splitting the ranks of this host");
	MPI_Comm_rank(local, &g.w.local_rank);
	MPI_Comm_free(&local);
	g.w.active = 1;
	g.ready = 1;
	*w = g.w;
	if (g.w.size > 1) {
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "rank %d", g.w.rank);
		wf_log_set_prefix(prefix);
	}
	return 0;
}

void wf_mpi_mark_failed(void)
{
	g.failed = 1;
}

/* ---- heartbeats: who reached which collective -------------------------- */

/* Each rank numbers the collectives it enters (seq: 1, 2, ...); every rank
 * enters the same ones in the same order. Non-zero ranks send their seq to
 * rank 0 and rank 0 sends its seq to all, so at a timeout rank 0 knows every
 * rank's progress and the others know rank 0's. */
typedef struct heartbeat {
	long seq;	   /* collectives this rank has entered */
	int npeers;	   /* ranks tracked: all others (rank 0), or rank 0 */
	int *peer;	   /* [npeers] rank numbers */
	long *last;	   /* [npeers] newest seq heard from each */
	double *heard;	   /* [npeers] wf_now() of the last message from each */
	double sent_at;	   /* wf_now() of our last heartbeat */
	long *rbuf;	   /* [npeers] receive buffers */
	MPI_Request *rreq; /* [npeers] persistent receives */
	long *sbuf;	   /* [npeers] send buffers */
	MPI_Request *sreq; /* [npeers] sends in flight (or MPI_REQUEST_NULL) */
	int started;
} heartbeat;

static void hb_free(heartbeat *h)
{
	for (int i = 0; h->rreq && i < h->npeers; i++) {
		if (h->rreq[i] == MPI_REQUEST_NULL)
			continue;
		if (h->started && !g.failed) {
			MPI_Cancel(&h->rreq[i]);
			MPI_Wait(&h->rreq[i], MPI_STATUS_IGNORE);
		}
		if (!g.failed)
			MPI_Request_free(&h->rreq[i]);
	}
	for (int i = 0; h->sreq && i < h->npeers && !g.failed; i++)
		if (h->sreq[i] != MPI_REQUEST_NULL)
			MPI_Wait(&h->sreq[i], MPI_STATUS_IGNORE);
	free(h->peer);
	free(h->last);
	free(h->heard);
	free(h->rbuf);
	free(h->rreq);
	free(h->sbuf);
	free(h->sreq);
	memset(h, 0, sizeof(*h));
}

static int hb_init(heartbeat *h, wf_err *err)
{
	memset(h, 0, sizeof(*h));
	if (g.w.size < 2)
		return 0;
	int n = g.w.rank == 0 ? g.w.size - 1 : 1;
	h->peer = calloc((size_t)n, sizeof(*h->peer));
	h->last = calloc((size_t)n, sizeof(*h->last));
	h->heard = calloc((size_t)n, sizeof(*h->heard));
	h->rbuf = calloc((size_t)n, sizeof(*h->rbuf));
	h->rreq = calloc((size_t)n, sizeof(*h->rreq));
	h->sbuf = calloc((size_t)n, sizeof(*h->sbuf));
	h->sreq = calloc((size_t)n, sizeof(*h->sreq));
	if (!h->peer || !h->last || !h->heard || !h->rbuf || !h->rreq || !h->sbuf || !h->sreq) {
		hb_free(h);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	h->npeers = n;
	double now = wf_now();
	for (int i = 0; i < n; i++) {
		h->peer[i] = g.w.rank == 0 ? i + 1 : 0;
		h->rreq[i] = h->sreq[i] = MPI_REQUEST_NULL;
		h->heard[i] = now;
	}
	for (int i = 0; i < n; i++)
		MPI_CHECK(MPI_Recv_init(&h->rbuf[i], 1, MPI_LONG, h->peer[i], TAG_HEARTBEAT, g.comm,
					&h->rreq[i]),
			  err, "heartbeat receive from rank %d", h->peer[i]);
	MPI_CHECK(MPI_Startall(n, h->rreq), err, "starting heartbeat receives");
	h->started = 1;
	return 0;
}

/* Take in every heartbeat that has arrived. */
static int hb_poll(heartbeat *h, wf_err *err)
{
	for (;;) {
		int any = 0;
		for (int i = 0; i < h->npeers; i++) {
			int flag = 0;
			MPI_CHECK(MPI_Test(&h->rreq[i], &flag, MPI_STATUS_IGNORE), err,
				  "heartbeat from rank %d", h->peer[i]);
			if (!flag)
				continue;
			if (h->rbuf[i] > h->last[i])
				h->last[i] = h->rbuf[i];
			h->heard[i] = wf_now();
			MPI_CHECK(MPI_Start(&h->rreq[i]), err, "heartbeat receive");
			any = 1;
		}
		if (!any)
			return 0;
	}
}

/* Tell the tracked peers our seq (on entering a collective, and every
 * HB_PERIOD while waiting in one, so a rank that stops is noticed). */
#define HB_PERIOD 0.5 /* seconds */

static int hb_send(heartbeat *h, wf_err *err)
{
	h->sent_at = wf_now();
	for (int i = 0; i < h->npeers; i++) {
		if (h->sreq[i] != MPI_REQUEST_NULL) {
			int done = 0;
			MPI_CHECK(MPI_Test(&h->sreq[i], &done, MPI_STATUS_IGNORE), err,
				  "heartbeat to rank %d", h->peer[i]);
			if (!done) /* still in flight: the next one carries a newer seq */
				continue;
		}
		h->sbuf[i] = h->seq;
		MPI_CHECK(MPI_Isend(&h->sbuf[i], 1, MPI_LONG, h->peer[i], TAG_HEARTBEAT, g.comm,
				    &h->sreq[i]),
			  err, "heartbeat to rank %d", h->peer[i]);
	}
	return hb_poll(h, err);
}

/* Enter the next collective. */
static int hb_enter(heartbeat *h, wf_err *err)
{
	h->seq++;
	return hb_send(h, err);
}

/* "1, 3": the tracked ranks that have not entered collective seq (silent =
 * 0), or that entered it but have not been heard of for `silent` seconds.
 * *their_seq: the lowest seq among them; *quiet: the longest silence. */
static int hb_missing(const heartbeat *h, long seq, double silent, char *buf, size_t n,
		      long *their_seq, double *quiet)
{
	int count = 0;
	size_t len = 0;
	double now = wf_now();
	buf[0] = '\0';
	*their_seq = seq;
	*quiet = 0;
	for (int i = 0; i < h->npeers; i++) {
		if (silent > 0 ? h->last[i] < seq || now - h->heard[i] < silent : h->last[i] >= seq)
			continue;
		if (h->last[i] < *their_seq)
			*their_seq = h->last[i];
		if (now - h->heard[i] > *quiet)
			*quiet = now - h->heard[i];
		if (count < MAX_NAMED && len < n)
			len += (size_t)snprintf(buf + len, n - len, "%s%d", count ? ", " : "",
						h->peer[i]);
		else if (count == MAX_NAMED && len < n)
			len += (size_t)snprintf(buf + len, n - len, ", ...");
		count++;
	}
	return count;
}

/* ---- waiting with a deadline ------------------------------------------ */

typedef struct waiter {
	heartbeat hb;
	char phase[160]; /* what the current collective is, for messages */
	long phase_seq;	 /* its heartbeat seq */
} waiter;

/* Describe why the requests did not complete in time; idx is the first one
 * still pending. Names the ranks that never reached the collective, then
 * those that reached it but fell silent (stopped, or stuck inside MPI).
 * Fills err (WF_ETRANSIENT) and logs it. */
static int stall_report(waiter *wt, int idx, const char *(*label)(void *, int, char *, size_t),
			void *arg, double waited, wf_err *err)
{
	char lbuf[160] = "it", late[256], mute[256], what[600] = "";
	if (label)
		label(arg, idx, lbuf, sizeof(lbuf));
	long late_seq = 0, mute_seq = 0;
	double quiet = 0, unused = 0;
	double silent = WF_MIN(2.0, 0.5 * g.timeout);
	int nlate = hb_missing(&wt->hb, wt->phase_seq, 0, late, sizeof(late), &late_seq, &unused);
	int nmute =
		hb_missing(&wt->hb, wt->phase_seq, silent, mute, sizeof(mute), &mute_seq, &quiet);
	size_t len = 0;
	if (nlate > 0)
		len += (size_t)snprintf(what, sizeof(what),
					"rank%s %s did not reach %s (%s last reached collective "
					"%ld, rank %d is at %ld)",
					nlate > 1 ? "s" : "", late, wt->phase,
					nlate > 1 ? "the slowest" : "it", late_seq, g.w.rank,
					wt->phase_seq);
	if (nmute > 0 && len < sizeof(what))
		len += (size_t)snprintf(what + len, sizeof(what) - len,
					"%srank%s %s reached %s but stopped responding (silent for "
					"%.0f s)",
					len ? "; " : "", nmute > 1 ? "s" : "", mute, wt->phase,
					quiet);
	if (!len)
		snprintf(what, sizeof(what), "%s did not complete: %s", wt->phase,
			 g.w.rank == 0 ? "every rank reached it and is alive; the network may be "
					 "stuck"
				       : "rank 0 is alive and names the missing rank");
	g.failed = 1;
	int rc = wf_errf(err, WF_ETRANSIENT,
			 "stall: %s; rank %d waited %.0f s on %s. Exiting 138 (transient)", what,
			 g.w.rank, waited, lbuf);
	wf_error("%s", err ? err->msg : "stall");
	return rc;
}

/* The first of reqs[0..n) still pending (Testall is all-or-nothing). */
static int first_pending(int n, MPI_Request *reqs)
{
	int first = 0;
	for (; first < n - 1; first++) {
		int f = 1;
		if (reqs[first] != MPI_REQUEST_NULL)
			MPI_Test(&reqs[first], &f, MPI_STATUS_IGNORE);
		if (!f)
			break;
	}
	return first;
}

/* Wait for reqs[0..n) (MPI_REQUEST_NULL entries are done) with the stall
 * timeout; label(arg, i, ...) describes request i in a stall message. Rank 0
 * waits the timeout, the others a little longer, so that when rank 0 is
 * alive it is the one that names the missing rank. */
static int wait_all(waiter *wt, int n, MPI_Request *reqs,
		    const char *(*label)(void *, int, char *, size_t), void *arg, wf_err *err)
{
	double t0 = wf_now();
	double limit = g.timeout + (g.w.rank == 0 ? 0 : WF_MIN(5.0, 0.25 * g.timeout));
	for (long spins = 0;; spins++) {
		int done = 0;
		MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), err, "waiting for %s",
			  wt->phase);
		if (done)
			return 0;
		if ((spins & 63) == 0) {
			int rc = wf_now() - wt->hb.sent_at > HB_PERIOD ? hb_send(&wt->hb, err)
								       : hb_poll(&wt->hb, err);
			if (rc != 0)
				return rc;
			double waited = wf_now() - t0;
			if (waited > limit) {
				return stall_report(wt, first_pending(n, reqs), label, arg, waited,
						    err);
			}
		}
		if (spins > 256)
			sched_yield(); /* leave the core to a peer when oversubscribed */
	}
}

/* Enter a collective named by fmt: number it and tell the peers. */
static int enter_phase(waiter *wt, wf_err *err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int enter_phase(waiter *wt, wf_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(wt->phase, sizeof(wt->phase), fmt, ap);
	va_end(ap);
	int rc = hb_enter(&wt->hb, err);
	wt->phase_seq = wt->hb.seq;
	return rc;
}

/* A whole-job barrier (non-blocking, with the stall timeout). */
static int barrier(waiter *wt, const char *what, wf_err *err)
{
	if (g.w.size < 2)
		return 0;
	int rc = enter_phase(wt, err, "%s", what);
	if (rc != 0)
		return rc;
	MPI_Request r;
	MPI_CHECK(MPI_Ibarrier(g.comm, &r), err, "%s", what);
	return wait_all(wt, 1, &r, NULL, NULL, err);
}

/* Broadcast n floats/bytes in pieces MPI's int counts can hold. */
static int bcast_chunks(waiter *wt, void *buf, size_t bytes, int root, wf_err *err)
{
	char *p = buf;
	const size_t piece = (size_t)1 << 30;
	while (bytes > 0) {
		size_t k = WF_MIN(bytes, piece);
		MPI_Request r;
		MPI_CHECK(MPI_Ibcast(p, (int)k, MPI_BYTE, root, g.comm, &r), err, "%s", wt->phase);
		int rc = wait_all(wt, 1, &r, NULL, NULL, err);
		if (rc != 0)
			return rc;
		p += k;
		bytes -= k;
	}
	return 0;
}

/* The world's own waiter for wf_mpi_bcast (the NCCL bootstrap). */
static waiter world_waiter;
static int world_waiter_ready;

int wf_mpi_bcast(void *buf, size_t bytes, int root, const char *what, wf_err *err)
{
	if (!g.ready || !g.w.active || g.w.size < 2)
		return 0;
	if (!world_waiter_ready) {
		int rc = hb_init(&world_waiter.hb, err);
		if (rc != 0)
			return rc;
		world_waiter_ready = 1;
	}
	int rc = enter_phase(&world_waiter, err, "the broadcast of %s", what);
	return rc != 0 ? rc : bcast_chunks(&world_waiter, buf, bytes, root, err);
}

/* ---- buckets summed by a communication thread ------------------------ */

/* A step's gradient exchange: a flat float buffer summed across ranks in
 * buckets (contiguous ranges), after up to two small collectives that the
 * exchange sends with each step (batch-norm statistics, the stop flag).
 * The training thread hands over the finished prefix [0, ready) while
 * backward runs (buckets_hand), then waits for the step (buckets_finish).
 * The communication thread makes every MPI call in between: it starts a
 * bucket's MPI_Iallreduce once the prefix covers it and, while anything
 * is in flight, calls MPI every PROGRESS_US (Open MPI's libnbc advances a
 * non-blocking collective only inside an MPI call), sleeping on a
 * condition variable between calls and when nothing is in flight. Once the
 * training thread waits, the exchange's thread polls without sleeping, as
 * a blocking MPI wait would (that core has nothing else to do). Between
 * steps it is idle and the training thread makes its own MPI calls
 * (broadcasts, barriers): hence MPI_THREAD_SERIALIZED. The stall deadline
 * runs from the moment the training thread waits, as a blocking wait's
 * would; the training thread's wait ends when the thread's does. */

/* Microseconds between MPI calls while collectives are in flight: short
 * against a bucket's transfer (a 1.25 MiB bucket takes ~180 ms at 100
 * Mbit/s), long against the call (a few microseconds). */
#define PROGRESS_US 200

typedef struct small_coll {
	const void *send; /* MPI_IN_PLACE: in place */
	void *recv;
	int count;
	MPI_Datatype type;
	MPI_Op op;
	char what[64]; /* names it in stall messages */
} small_coll;

enum { BK_IDLE, BK_RUNNING, BK_DONE };

struct wf_mpi_buckets {
	float *buf;
	size_t n, bucket; /* floats */
	int nbuckets;
	int nsmall;
	small_coll small[2];
	int spin;	   /* 1: once the training thread waits, poll without sleeping (its
			    * core is free then); 0: nap (ranks that share cores) */
	waiter *wt;	   /* the stall inspector's state: the owner's, or own */
	waiter own;	   /* wf_mpi_buckets_create's */
	MPI_Request *reqs; /* [nsmall + nbuckets]: the small ones, then the buckets */
	long nsteps;	   /* steps exchanged (wf_mpi_buckets_wait's step numbers) */
	wf_err terr;	   /* the thread's error (read once it is BK_DONE) */
	pthread_t thread;
	int thread_started;
	pthread_mutex_t mu;
	pthread_cond_t wake; /* to the thread: work, or quit */
	pthread_cond_t idle; /* to the training thread: the step is done */
	/* under mu */
	int state; /* BK_* */
	int quit;
	long step;	 /* the step exchanged (0-based), for messages */
	size_t ready;	 /* floats: [0, ready) is final */
	double waits_at; /* wf_now() when the training thread began to wait; 0: not yet */
	int rc;		 /* the step's outcome */
	/* priority by layer (wf_mpi_buckets prio): the buckets are summed in a
	 * copy of the gradient (the trainer zeroes its own while they travel)
	 * and posted in the order the training thread queued them: as backward
	 * completes them, those completed together highest first (the first
	 * layers': the parameters are laid out in reverse layer order). That
	 * order follows the backward's deterministic prefixes, never timing,
	 * so every rank posts the same collectives in the same order. */
	int prio;
	const float *src; /* the gradient the copy is taken from */
	int *order;	  /* [nbuckets] buckets in posting order (under mu) */
	int queued;	  /* entries of order (under mu) */
	size_t handed;	  /* floats of the gradient copied and queued (training thread) */
	char *bstate;	  /* [nsmall + nbuckets] BS_* (under mu) */
};

enum { BS_WAITING, BS_POSTED, BS_DONE };

static size_t bucket_lo(const wf_mpi_buckets *b, int i)
{
	return (size_t)i * b->bucket;
}

static size_t bucket_hi(const wf_mpi_buckets *b, int i)
{
	return WF_MIN(b->n, (size_t)(i + 1) * b->bucket);
}

static const char *bucket_label(void *arg, int i, char *buf, size_t n)
{
	const wf_mpi_buckets *b = arg;
	if (i < b->nsmall)
		snprintf(buf, n, "%s", b->small[i].what);
	else
		snprintf(buf, n, "gradient bucket %d of %d (floats [%zu, %zu))", i - b->nsmall,
			 b->nbuckets, bucket_lo(b, i - b->nsmall), bucket_hi(b, i - b->nsmall));
	return buf;
}

/* Priority by layer, on the thread: post the buckets queued since, in the
 * queue's order, and test each collective in flight, marking those done
 * (the training thread waits for them one by one). *done: every one posted
 * so far is done. */
static int prio_progress(wf_mpi_buckets *b, long step, int *posted, int *done, wf_err *err)
{
	pthread_mutex_lock(&b->mu);
	int queued = b->queued;
	pthread_mutex_unlock(&b->mu);
	for (; *posted < queued; (*posted)++) {
		int k = b->order[*posted];
		MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, b->buf + bucket_lo(b, k),
					 (int)(bucket_hi(b, k) - bucket_lo(b, k)), MPI_FLOAT,
					 MPI_SUM, g.comm, &b->reqs[b->nsmall + k]),
			  err, "gradient bucket %d of step %ld", k, step + 1);
		pthread_mutex_lock(&b->mu);
		b->bstate[b->nsmall + k] = BS_POSTED;
		pthread_mutex_unlock(&b->mu);
	}
	int all = 1, any = 0;
	for (int i = 0; i < b->nsmall + b->nbuckets; i++) {
		if (b->bstate[i] != BS_POSTED) { /* only this thread moves it on from here */
			all &= b->bstate[i] == BS_DONE || i >= b->nsmall;
			continue;
		}
		int f = 0;
		MPI_CHECK(MPI_Test(&b->reqs[i], &f, MPI_STATUS_IGNORE), err, "waiting for %s",
			  b->wt->phase);
		if (!f) {
			all = 0;
			continue;
		}
		pthread_mutex_lock(&b->mu);
		b->bstate[i] = BS_DONE;
		pthread_mutex_unlock(&b->mu);
		any = 1;
	}
	if (any) { /* the training thread may wait for one of them */
		pthread_mutex_lock(&b->mu);
		pthread_cond_broadcast(&b->idle);
		pthread_mutex_unlock(&b->mu);
	}
	*done = all;
	return 0;
}

/* The thread's side of one step: start the small collectives, then each
 * bucket once it is final, until all are done, the deadline passes or the
 * owner quits. */
static int comm_step(wf_mpi_buckets *b, long step, wf_err *err)
{
	waiter *wt = b->wt;
	int rc = enter_phase(wt, err, "the allreduce of step %ld", step + 1);
	if (rc != 0)
		return rc;
	for (int i = 0; i < b->nsmall; i++) {
		const small_coll *s = &b->small[i];
		MPI_CHECK(MPI_Iallreduce(s->send, s->recv, s->count, s->type, s->op, g.comm,
					 &b->reqs[i]),
			  err, "%s of step %ld", s->what, step + 1);
		if (b->prio) {
			pthread_mutex_lock(&b->mu);
			b->bstate[i] = BS_POSTED;
			pthread_mutex_unlock(&b->mu);
		}
	}
	double limit = g.timeout + (g.w.rank == 0 ? 0 : WF_MIN(5.0, 0.25 * g.timeout));
	int posted = 0;
	for (long wakes = 0;; wakes++) {
		pthread_mutex_lock(&b->mu);
		size_t ready = b->ready;
		double waits_at = b->waits_at;
		int quit = b->quit;
		pthread_mutex_unlock(&b->mu);
		if (quit)
			return wf_errf(err, WF_ESTOPPED, "the allreduce of step %ld was abandoned",
				       step + 1);
		int done = 0;
		if (b->prio) {
			if ((rc = prio_progress(b, step, &posted, &done, err)) != 0)
				return rc;
		} else {
			for (; posted < b->nbuckets && bucket_hi(b, posted) <= ready; posted++)
				MPI_CHECK(
					MPI_Iallreduce(
						MPI_IN_PLACE, b->buf + bucket_lo(b, posted),
						(int)(bucket_hi(b, posted) - bucket_lo(b, posted)),
						MPI_FLOAT, MPI_SUM, g.comm,
						&b->reqs[b->nsmall + posted]),
					err, "gradient bucket %d of step %ld", posted, step + 1);
			MPI_CHECK(MPI_Testall(b->nsmall + posted, b->reqs, &done,
					      MPI_STATUSES_IGNORE),
				  err, "waiting for %s", wt->phase);
		}
		if (done && posted == b->nbuckets)
			return 0;
		double now = wf_now();
		if (now - wt->hb.sent_at > HB_PERIOD)
			rc = hb_send(&wt->hb, err);
		else if ((wakes & 63) == 0)
			rc = hb_poll(&wt->hb, err);
		if (rc != 0)
			return rc;
		if (waits_at > 0 && now - waits_at > limit)
			return stall_report(wt, first_pending(b->nsmall + posted, b->reqs),
					    bucket_label, b, now - waits_at, err);
		if (waits_at > 0 && b->spin) { /* as a blocking MPI wait would */
			if (wakes > 256)
				sched_yield();
			continue;
		}
		/* in flight: progress again soon; else sleep until more is final */
		double nap = done ? HB_PERIOD : PROGRESS_US * 1e-6;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		long ns = until.tv_nsec + (long)(nap * 1e9);
		until.tv_sec += ns / 1000000000L;
		until.tv_nsec = ns % 1000000000L;
		pthread_mutex_lock(&b->mu);
		if (b->ready == ready && b->waits_at == waits_at && !b->quit)
			pthread_cond_timedwait(&b->wake, &b->mu, &until);
		pthread_mutex_unlock(&b->mu);
	}
}

static void *comm_main(void *arg)
{
	wf_mpi_buckets *b = arg;
	pthread_mutex_lock(&b->mu);
	for (;;) {
		while (b->state != BK_RUNNING && !b->quit)
			pthread_cond_wait(&b->wake, &b->mu);
		if (b->quit)
			break;
		long step = b->step;
		pthread_mutex_unlock(&b->mu);
		int rc = comm_step(b, step, &b->terr);
		if (rc != 0)
			g.failed = 1; /* collectives may be left in flight: never finalise */
		pthread_mutex_lock(&b->mu);
		b->rc = rc;
		b->state = BK_DONE;
		pthread_cond_broadcast(&b->idle);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* floats per bucket for bucket_mb MiB, within MPI's int counts */
static size_t bucket_floats(double bucket_mb)
{
	double floats = bucket_mb * 1024.0 * 1024.0 / sizeof(float);
	return floats < 1024 ? 1024 : floats > INT_MAX ? (size_t)INT_MAX : (size_t)floats;
}

static void buckets_free(wf_mpi_buckets *b)
{
	if (!b)
		return;
	if (b->thread_started) {
		pthread_mutex_lock(&b->mu);
		b->quit = 1;
		pthread_cond_signal(&b->wake);
		pthread_mutex_unlock(&b->mu);
		pthread_join(b->thread, NULL);
		pthread_cond_destroy(&b->idle);
		pthread_cond_destroy(&b->wake);
		pthread_mutex_destroy(&b->mu);
	}
	if (b->wt == &b->own)
		hb_free(&b->own.hb);
	if (b->prio)
		free(b->buf);
	free(b->order);
	free(b->bstate);
	free(b->reqs);
	free(b);
}

/* The buckets of buf[n] (their owner's waiter wt, or NULL: their own),
 * with nsmall small collectives sent first, spinning or not once the owner
 * waits (see spin); the thread starts in a world of more than one, with
 * every signal blocked (the training thread takes them). */
static int buckets_new(wf_mpi_buckets **out, float *buf, size_t n, double bucket_mb,
		       const small_coll *small, int nsmall, waiter *wt, int spin, int prio,
		       wf_err *err)
{
	*out = NULL;
	wf_mpi_buckets *b = calloc(1, sizeof(*b));
	if (!b)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	b->buf = buf;
	b->n = n;
	b->bucket = bucket_floats(bucket_mb);
	b->nbuckets = n ? (int)((n + b->bucket - 1) / b->bucket) : 0;
	b->nsmall = nsmall;
	b->spin = spin;
	if (nsmall > 0) /* small may be NULL when there are none */
		memcpy(b->small, small, (size_t)nsmall * sizeof(*small));
	b->wt = wt ? wt : &b->own;
	b->reqs = malloc((size_t)(nsmall + b->nbuckets + 1) * sizeof(*b->reqs));
	if (!b->reqs) {
		wf_errf(err, WF_ENOMEM, "out of memory for %d buckets", b->nbuckets);
		buckets_free(b);
		return WF_ENOMEM;
	}
	for (int i = 0; i < nsmall + b->nbuckets; i++)
		b->reqs[i] = MPI_REQUEST_NULL;
	if (prio) {
		b->prio = 1;
		b->src = buf;
		b->buf = malloc((n ? n : 1) * sizeof(float));
		b->order = malloc((size_t)(b->nbuckets + 1) * sizeof(*b->order));
		b->bstate = calloc((size_t)(nsmall + b->nbuckets + 1), 1);
		if (!b->buf || !b->order || !b->bstate) {
			wf_errf(err, WF_ENOMEM, "out of memory for the gradient's copy");
			buckets_free(b);
			return WF_ENOMEM;
		}
	}
	if (g.w.size < 2) {
		*out = b;
		return 0;
	}
	int rc = 0;
	if (!wt && (rc = hb_init(&b->own.hb, err)) != 0) {
		buckets_free(b);
		return rc;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->wake, &ca);
	pthread_cond_init(&b->idle, NULL);
	pthread_condattr_destroy(&ca);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&b->thread, NULL, comm_main, b);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&b->idle);
		pthread_cond_destroy(&b->wake);
		pthread_mutex_destroy(&b->mu);
		buckets_free(b);
		return wf_errf(err, WF_EINTERNAL, "starting the communication thread: %s",
			       strerror(rc));
	}
	b->thread_started = 1;
	*out = b;
	return 0;
}

static int full_buckets(const wf_mpi_buckets *b, size_t done)
{
	return done >= b->n ? b->nbuckets : (int)(done / b->bucket);
}

/* Training thread: [0, done) of step `step` is final (opens the step the
 * first time); waits = 1: nothing more comes, the deadline starts. */
static void buckets_hand(wf_mpi_buckets *b, long step, size_t done, int waits)
{
	pthread_mutex_lock(&b->mu);
	int wake = 0;
	if (b->state == BK_IDLE) {
		b->state = BK_RUNNING;
		b->step = step;
		b->ready = 0;
		b->waits_at = 0;
		b->queued = 0;
		b->handed = 0;
		if (b->prio)
			memset(b->bstate, BS_WAITING, (size_t)(b->nsmall + b->nbuckets));
		wake = 1;
	}
	if (b->state == BK_RUNNING && b->prio && done > b->handed) {
		/* the buckets this hand completes: copied, then queued highest first */
		int from = full_buckets(b, b->handed), to = full_buckets(b, done);
		pthread_mutex_unlock(&b->mu);
		if (to > from)
			memcpy(b->buf + bucket_lo(b, from), b->src + bucket_lo(b, from),
			       (bucket_hi(b, to - 1) - bucket_lo(b, from)) * sizeof(float));
		pthread_mutex_lock(&b->mu);
		for (int k = to - 1; k >= from; k--)
			b->order[b->queued++] = k;
		if (to > from) {
			b->handed = bucket_hi(b, to - 1);
			wake = 1;
		}
	}
	if (b->state == BK_RUNNING) {
		if (done > b->ready) {
			wake |= full_buckets(b, done) > full_buckets(b, b->ready);
			b->ready = done;
		}
		if (waits) {
			b->waits_at = wf_now();
			wake = 1;
		}
	}
	if (wake)
		pthread_cond_signal(&b->wake);
	pthread_mutex_unlock(&b->mu);
}

/* Training thread: hand over the rest and wait for the step (passively:
 * the thread's own deadline bounds it). */
static int buckets_finish(wf_mpi_buckets *b, long step, wf_err *err)
{
	buckets_hand(b, step, b->n, 1);
	pthread_mutex_lock(&b->mu);
	while (b->state != BK_DONE)
		pthread_cond_wait(&b->idle, &b->mu);
	b->state = BK_IDLE;
	int rc = b->rc;
	pthread_mutex_unlock(&b->mu);
	if (rc != 0)
		*err = b->terr;
	return rc;
}

/* Training thread, priority by layer: wait until collective i (the small
 * ones, then the buckets) of the running step is done, or the step failed
 * (its error). */
static int buckets_wait_one(wf_mpi_buckets *b, int i, wf_err *err)
{
	pthread_mutex_lock(&b->mu);
	while (b->bstate[i] != BS_DONE && b->state == BK_RUNNING)
		pthread_cond_wait(&b->idle, &b->mu);
	int rc = b->bstate[i] == BS_DONE ? 0 : b->rc;
	pthread_mutex_unlock(&b->mu);
	if (rc != 0)
		*err = b->terr;
	return rc;
}

/* The cluster benchmark's modelled workers: the same buckets, no small
 * collectives, their own stall inspector; dozens share a few cores, so the
 * thread naps even while the owner waits. */
int wf_mpi_buckets_create(wf_mpi_buckets **out, float *buf, size_t n, double bucket_mb, wf_err *err)
{
	return buckets_new(out, buf, n, bucket_mb, NULL, 0, NULL, 0, 0, err);
}

void wf_mpi_buckets_free(wf_mpi_buckets *b)
{
	buckets_free(b);
}

int wf_mpi_buckets_ready(wf_mpi_buckets *b, size_t done, wf_err *err)
{
	(void)err;
	if (g.w.size > 1)
		buckets_hand(b, b->nsteps, done, 0);
	return 0;
}

int wf_mpi_buckets_wait(wf_mpi_buckets *b, wf_err *err)
{
	if (g.w.size < 2)
		return 0;
	return buckets_finish(b, b->nsteps++, err);
}

int wf_mpi_buckets_done(wf_mpi_buckets *b)
{
	if (g.w.size < 2)
		return 1;
	pthread_mutex_lock(&b->mu);
	int done = b->state == BK_DONE;
	pthread_mutex_unlock(&b->mu);
	return done;
}

void wf_mpi_world_finalize(void)
{
	if (world_waiter_ready) {
		hb_free(&world_waiter.hb);
		world_waiter_ready = 0;
	}
	if (!g.ready || !g.w.active)
		return;
	if (g.failed) /* peers may be gone or stuck: leave; mpirun ends the job */
		return;
	MPI_Comm_free(&g.comm);
	if (g.we_init)
		MPI_Finalize();
	g.ready = 0;
}

/* ---- the exchange ------------------------------------------------------ */

typedef struct mpi_ctx {
	wf_exec *ex;
	wf_backend *be;
	const wf_model *m;
	wf_optim_cfg cfg;
	size_t n;      /* parameters (floats) */
	size_t nstate; /* batch-norm statistics (floats) */
	int nslots;    /* 0, 1 or 2 */
	float *slot_m; /* backend (host) memory [n] or NULL */
	float *slot_v;
	wf_mpi_buckets *b; /* the gradient, statistics and stop flag: the communication thread */
	int open;	   /* this step's exchange was handed to it */
	long cur_step;	   /* step being computed (for messages) */
	int finished;	   /* finish() succeeded: MPI may be finalised */
	int stop_local;	   /* this rank was asked to stop (latched) */
	int stop_send, stop_recv; /* the flag in this step's MPI_MAX allreduce */
	int stop_agreed;	  /* some rank asked: all stop after this step */
	waiter wt;
	/* layer by layer (x->layer_ready): step returns once everything is
	 * handed to the thread; the next forward waits for each layer's
	 * buckets, and each bucket's optimizer update is applied on this
	 * thread once it is summed */
	int pending;	/* the last step's exchange is still open */
	long pend_step; /* its step */
	int small_done; /* its statistics were averaged and its stop flag read */
	char *applied;	/* [nbuckets] updated */
	int pend_rc;	/* its first failure, returned by the next step or settle */
	wf_err pend_err;
	double returned_at, first_at; /* when step returned, when the first layer ran */
	int left_at_first;	      /* buckets not summed when it ran */
} mpi_ctx;

/* The step's stop flag is this rank's request as it stood when the step's
 * exchange began (before the thread reads it). */
static void open_step(mpi_ctx *c)
{
	if (c->open)
		return;
	c->stop_send = c->stop_local;
	c->stop_recv = 0;
	c->open = 1;
}

/* ---- layer by layer ---------------------------------------------------- */

/* The statistics and the stop flag of the pending step: averaged and read
 * once they are summed. */
static int lr_small(mpi_ctx *c, wf_err *err)
{
	if (c->small_done)
		return 0;
	for (int i = 0; i < c->b->nsmall; i++) {
		int rc = buckets_wait_one(c->b, i, err);
		if (rc != 0)
			return rc;
	}
	c->stop_agreed = c->stop_recv;
	if (c->nstate && wf_op_scale(c->be, c->nstate, wf_exec_state(c->ex), wf_exec_state(c->ex),
				     1.0f / (float)g.w.size) != 0)
		return wf_errf(err, WF_EINTERNAL, "averaging batch-norm statistics: %s",
			       c->be->err.msg);
	c->small_done = 1;
	return 0;
}

/* Bucket k of the pending step, once summed: its optimizer update (the
 * mean of the ranks' gradients, as the whole-vector step applies it). */
static int lr_apply(mpi_ctx *c, int k, int wait, wf_err *err)
{
	wf_mpi_buckets *b = c->b;
	if (c->applied[k])
		return 0;
	if (!wait) {
		pthread_mutex_lock(&b->mu);
		int done = b->bstate[b->nsmall + k] == BS_DONE;
		pthread_mutex_unlock(&b->mu);
		if (!done)
			return 0;
	} else {
		int rc = buckets_wait_one(b, b->nsmall + k, err);
		if (rc != 0)
			return rc;
	}
	int rc = wf_exec_optim_step_range(c->ex, &c->cfg, c->pend_step, bucket_lo(b, k),
					  bucket_hi(b, k), b->buf, c->slot_m, c->slot_v,
					  1.0f / (float)g.w.size);
	if (rc != 0)
		return wf_errf(err, rc, "optimizer step %ld: %s", c->pend_step + 1, c->be->err.msg);
	c->applied[k] = 1;
	return 0;
}

/* Wait for the whole pending step: every bucket summed and updated, the
 * statistics averaged, the thread idle again (the training thread may make
 * MPI calls after). Returns the step's first failure. */
static int lr_settle(mpi_ctx *c, wf_err *err)
{
	if (!c->pending)
		return 0;
	int rc = c->pend_rc;
	if (rc)
		*err = c->pend_err;
	if (c->pending < 0) { /* failed already, the step's thread done with it */
		c->pending = 0;
		c->pend_rc = 0;
		return rc;
	}
	int frc = buckets_finish(c->b, c->pend_step, rc ? &(wf_err){0} : err);
	if (!rc)
		rc = frc;
	if (!rc)
		rc = lr_small(c, err);
	for (int k = 0; k < c->b->nbuckets && !rc; k++)
		rc = lr_apply(c, k, 0, err);
	if (!rc)
		wf_event("layer_ready",
			 json_pack("{s:I, s:f, s:i, s:i}", "step", (json_int_t)c->pend_step,
				   "first_layer_ms",
				   c->first_at > 0 ? (c->first_at - c->returned_at) * 1e3 : -1.0,
				   "left_at_first", c->first_at > 0 ? c->left_at_first : -1,
				   "buckets", c->b->nbuckets));
	c->pending = 0;
	c->pend_rc = 0;
	return rc;
}

static void mpi_layer_wait(wf_exchange *x, size_t lo, size_t hi, int state)
{
	mpi_ctx *c = x->ctx;
	wf_mpi_buckets *b = c->b;
	if (!c->pending || c->pend_rc)
		return;
	int rc = state ? lr_small(c, &c->pend_err) : 0;
	if (hi > lo)
		for (int k = (int)(lo / b->bucket);
		     rc == 0 && k < b->nbuckets && bucket_lo(b, k) < hi; k++)
			rc = lr_apply(c, k, 1, &c->pend_err);
	if (c->first_at == 0 && rc == 0) {
		c->first_at = wf_now();
		c->left_at_first = 0;
		pthread_mutex_lock(&b->mu);
		for (int k = 0; k < b->nbuckets; k++)
			c->left_at_first += b->bstate[b->nsmall + k] != BS_DONE;
		pthread_mutex_unlock(&b->mu);
	}
	/* and whatever else is summed by now */
	for (int k = b->nbuckets - 1; rc == 0 && k >= 0; k--)
		rc = lr_apply(c, k, 0, &c->pend_err);
	c->pend_rc = rc;
	if (rc != 0)
		wf_warn("allreduce: rank %d, waiting for step %ld's values: %s", g.w.rank,
			c->pend_step + 1, c->pend_err.msg);
}

static int mpi_settle(wf_exchange *x, long *to, wf_err *err)
{
	(void)to; /* the workers never move to another step */
	return lr_settle(x->ctx, err);
}

static void mpi_grad_ready(wf_exchange *x, size_t done)
{
	mpi_ctx *c = x->ctx;
	if (g.w.size < 2)
		return;
	if (c->pending < 0) /* the step before failed: step returns it */
		return;
	if (c->pending) { /* the step before: the forward waited for its buckets */
		wf_err e = {0};
		int rc = lr_settle(c, &e);
		if (rc != 0) {
			c->pend_rc = rc; /* step returns it; nothing of this one is handed */
			c->pend_err = e;
			c->pending = -1;
			return;
		}
	}
	open_step(c);
	buckets_hand(c->b, c->cur_step, done, 0);
}

static int mpi_step(wf_exchange *x, long step, long *to, wf_err *err)
{
	mpi_ctx *c = x->ctx;
	(void)to; /* the workers never move to another step */
	int rc = 0;
	float inv = 1.0f / (float)g.w.size;
	if (g.w.size > 1 && c->applied) {
		if (c->pending) /* a failure of the step before (grad_ready) or no grad_ready */
			rc = c->pending < 0 ? (*err = c->pend_err, c->pend_rc) : lr_settle(c, err);
		c->pending = 0;
		c->pend_rc = 0;
		if (rc != 0)
			return rc;
		c->cur_step = step;
		open_step(c);
		buckets_hand(c->b, step, c->n, 1);
		c->open = 0;
		c->cur_step = step + 1;
		c->pending = 1;
		c->pend_step = step;
		c->small_done = 0;
		memset(c->applied, 0, (size_t)c->b->nbuckets);
		c->returned_at = wf_now();
		c->first_at = 0;
		return 0;
	}
	if (g.w.size > 1) {
		c->cur_step = step;
		open_step(c);
		rc = buckets_finish(c->b, step, err);
		c->open = 0;
		c->cur_step = step + 1;
		if (rc != 0)
			return rc;
		c->stop_agreed = c->stop_recv;
		if (c->nstate && wf_op_scale(c->be, c->nstate, wf_exec_state(c->ex),
					     wf_exec_state(c->ex), inv) != 0)
			return wf_errf(err, WF_EINTERNAL, "averaging batch-norm statistics: %s",
				       c->be->err.msg);
	}
	rc = wf_exec_optim_step(c->ex, &c->cfg, step, c->slot_m, c->slot_v, inv);
	if (rc != 0)
		return wf_errf(err, rc, "optimizer step %ld: %s", step + 1, c->be->err.msg);
	return 0;
}

/* What rank 0 tells every rank before the starting state. */
typedef struct start_header {
	int64_t step; /* 0-based step to run next */
	int64_t nparams, nstate;
	uint64_t optim_hash; /* wf_optim_cfg_hash: ranks must agree */
	int32_t nslots;
	int32_t resumed;
} start_header;

static int mpi_start(wf_exchange *x, const char *resume_dir, long resume_step, long *start_step,
		     wf_err *err)
{
	mpi_ctx *c = x->ctx;
	size_t bytes = c->n * sizeof(float);
	*start_step = 0;
	if (c->slot_m)
		memset(c->slot_m, 0, bytes);
	if (c->slot_v)
		memset(c->slot_v, 0, bytes);
	long step = 0;
	if (resume_dir && g.w.rank == 0) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/%s", resume_dir, WF_OPTIM_FILE);
		int rc = wf_optim_state_load(path, &c->cfg, c->n, c->nslots, c->slot_m, c->slot_v,
					     &step, err);
		if (rc != 0)
			return rc;
		if (step != resume_step)
			return wf_errf(err, WF_EFORMAT,
				       "%s: holds step %ld, its directory says step %ld", path,
				       step, resume_step);
	}
	if (g.w.size < 2) {
		*start_step = step;
		return 0;
	}
	start_header h = {.step = step,
			  .nparams = (int64_t)c->n,
			  .nstate = (int64_t)c->nstate,
			  .optim_hash = wf_optim_cfg_hash(&c->cfg),
			  .nslots = c->nslots,
			  .resumed = resume_dir != NULL};
	start_header mine = h;
	int rc = enter_phase(&c->wt, err, "the start-up broadcast from rank 0");
	if (rc == 0)
		rc = bcast_chunks(&c->wt, &h, sizeof(h), 0, err);
	if (rc != 0)
		return rc;
	if (g.w.rank != 0) {
		if (h.nparams != mine.nparams || h.nstate != mine.nstate)
			return wf_errf(
				err, WF_EINVAL,
				"rank %d: model has %lld parameters and %lld statistics, rank "
				"0's has %lld and %lld: every rank must run the same config",
				g.w.rank, (long long)mine.nparams, (long long)mine.nstate,
				(long long)h.nparams, (long long)h.nstate);
		if (h.optim_hash != mine.optim_hash || h.nslots != mine.nslots)
			return wf_errf(
				err, WF_EINVAL,
				"rank %d: optimizer settings differ from rank 0's: every rank "
				"must run the same config",
				g.w.rank);
		if (h.resumed != mine.resumed || (h.resumed && h.step != resume_step))
			wf_warn("rank %d: %s; using rank 0's (step %lld)", g.w.rank,
				mine.resumed ? "my checkpoint differs from rank 0's"
					     : "rank 0 resumes from a checkpoint I do not see",
				(long long)h.step);
	}
	/* Rank 0's parameters, statistics and slots, so every rank starts equal. */
	if (wf_exec_params_to_host(c->ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "reading parameters: %s", wf_exec_error(c->ex));
	rc = bcast_chunks(&c->wt, c->m->params, bytes, 0, err);
	if (rc == 0 && c->nstate)
		rc = bcast_chunks(&c->wt, c->m->state, c->nstate * sizeof(float), 0, err);
	if (rc == 0 && c->slot_m)
		rc = bcast_chunks(&c->wt, c->slot_m, bytes, 0, err);
	if (rc == 0 && c->slot_v)
		rc = bcast_chunks(&c->wt, c->slot_v, bytes, 0, err);
	if (rc != 0)
		return rc;
	if (wf_exec_params_from_host(c->ex) != 0)
		return wf_errf(err, WF_EINTERNAL, "restoring parameters: %s", wf_exec_error(c->ex));
	*start_step = (long)h.step;
	c->cur_step = *start_step;
	if (g.w.rank == 0)
		wf_info("allreduce: %d ranks, %d gradient bucket%s of up to %.2f MiB, %zu "
			"parameters; stall timeout %.0f s",
			g.w.size, c->b->nbuckets, c->b->nbuckets == 1 ? "" : "s",
			(double)c->b->bucket * sizeof(float) / (1024.0 * 1024.0), c->n, g.timeout);
	return 0;
}

/* Every rank enters save() before rank 0 writes anything: the trainer's
 * non-chief ranks touch the step directory (un-completing a re-written
 * step) before calling save, so this barrier orders that before rank 0's
 * DONE. Only rank 0 writes optimizer.h5 (the slots are equal everywhere). */
static int mpi_save(wf_exchange *x, const char *dir, long step, wf_err *err)
{
	mpi_ctx *c = x->ctx;
	char what[96];
	snprintf(what, sizeof(what), "the checkpoint of step %ld", step);
	int rc = lr_settle(c, err); /* the thread idle: this thread's MPI calls next */
	if (rc == 0)
		rc = barrier(&c->wt, what, err);
	if (rc != 0 || g.w.rank != 0)
		return rc;
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WF_OPTIM_FILE);
	return wf_optim_state_save(path, &c->cfg, step, c->n, c->nslots, c->slot_m, c->slot_v, err);
}

/* After the last barrier: take in the peers' last heartbeats, so no message
 * is left unreceived at MPI_Finalize (bounded: they were sent already). */
static void hb_drain(heartbeat *h, wf_err *err)
{
	double t0 = wf_now();
	for (;;) {
		if (hb_poll(h, err) != 0)
			return;
		int all = 1;
		for (int i = 0; i < h->npeers; i++)
			all &= h->last[i] >= h->seq;
		if (all || wf_now() - t0 > 1.0)
			return;
		sched_yield();
	}
}

static int mpi_finish(wf_exchange *x, long *to, wf_err *err)
{
	mpi_ctx *c = x->ctx;
	(void)to; /* the workers never move to another step */
	int rc = lr_settle(c, err);
	if (rc == 0)
		rc = barrier(&c->wt, "the end of training", err);
	if (rc == 0) {
		hb_drain(&c->wt.hb, err);
		c->finished = 1;
	}
	return rc;
}

/* A request seen after step N's exchange began travels with step N + 1's;
 * every rank returns the reduced flag of the step just done. */
static int mpi_should_stop(wf_exchange *x, long step, int requested)
{
	mpi_ctx *c = x->ctx;
	if (requested && !c->stop_local && g.w.size > 1)
		wf_debug("rank %d: stop requested after step %ld; telling the others", g.w.rank,
			 step + 1);
	c->stop_local |= requested != 0;
	if (c->pending > 0 && !c->pend_rc) { /* layer by layer: the step's flag first */
		c->pend_rc = lr_small(c, &c->pend_err);
		if (c->pend_rc)
			return 0; /* the next step (or settle) fails with it */
	}
	return g.w.size < 2 ? c->stop_local : c->stop_agreed;
}

/* After an agreed stop every rank has checkpointed and is on its way out:
 * meet once more so MPI can be finalised (mpirun then reports the ranks'
 * exit codes instead of an abort). */
static void stop_together(mpi_ctx *c)
{
	wf_err err = {0};
	if (barrier(&c->wt, "the stop of the job", &err) != 0)
		return;
	hb_drain(&c->wt.hb, &err);
	c->finished = 1;
}

static void mpi_free(wf_exchange *x)
{
	mpi_ctx *c = x->ctx;
	if (c) {
		buckets_free(c->b); /* the thread ends (abandoning a step left open) */
		free(c->applied);
		if (!c->finished && c->stop_agreed && !g.failed && g.w.size > 1)
			stop_together(c);
		if (!c->finished)
			g.failed = 1; /* ended early: peers may still be in a collective */
		hb_free(&c->wt.hb);
		if (c->slot_m)
			wf_op_free(c->be, c->slot_m);
		if (c->slot_v)
			wf_op_free(c->be, c->slot_v);
		free(c);
		wf_mpi_world_finalize();
	}
	free(x);
}

static const wf_exchange_ops mpi_ops = {
	.start = mpi_start,
	.grad_ready = mpi_grad_ready,
	.step = mpi_step,
	.save = mpi_save,
	.finish = mpi_finish,
	.free = mpi_free,
	.should_stop = mpi_should_stop,
	.layer_wait = mpi_layer_wait,
	.settle = mpi_settle,
};

int wf_exchange_mpi_create(wf_exchange **out, wf_exec *ex, const wf_model *m,
			   const wf_optim_cfg *cfg, double bucket_mb, int layer_ready, wf_err *err)
{
	*out = NULL;
	wf_backend *be = wf_exec_backend(ex);
	if (!wf_backend_host_memory(be))
		return wf_errf(err, WF_ENOTSUP,
			       "strategy.name allreduce on device '%s' needs NCCL; this weft "
			       "was built without it",
			       be->name);
	wf_mpi_world w;
	int rc = wf_mpi_world_get(&w, err);
	if (rc != 0)
		return rc;
	wf_exchange *x = calloc(1, sizeof(*x));
	mpi_ctx *c = calloc(1, sizeof(*c));
	if (!x || !c) {
		free(x);
		free(c);
		return wf_errf(err, WF_ENOMEM, "out of memory");
	}
	x->name = "allreduce";
	x->ops = &mpi_ops;
	x->ctx = c;
	x->rank = w.rank;
	x->workers = w.size;
	x->is_chief = w.rank == 0;
	c->ex = ex;
	c->be = be;
	c->m = m;
	c->cfg = *cfg;
	c->n = m->nparams;
	c->nstate = m->nstate;
	c->nslots = wf_optim_slots(cfg);
	size_t bytes = (c->n ? c->n : 1) * sizeof(float);
	if (c->nslots >= 1 && !(c->slot_m = wf_op_alloc(be, bytes)))
		goto nomem;
	if (c->nslots >= 2 && !(c->slot_v = wf_op_alloc(be, bytes)))
		goto nomem;
	small_coll small[2];
	int nsmall = 0;
	if (c->nstate > 0) {
		small[nsmall] = (small_coll){MPI_IN_PLACE, wf_exec_state(ex), (int)c->nstate,
					     MPI_FLOAT,	   MPI_SUM,	      ""};
		snprintf(small[nsmall++].what, sizeof(small->what),
			 "the batch-norm statistics (%zu floats)", c->nstate);
	}
	small[nsmall++] =
		(small_coll){&c->stop_send, &c->stop_recv, 1, MPI_INT, MPI_MAX, "the stop flag"};
	/* layer by layer: the updates applied bucket by bucket, so not with
	 * clipping (it needs the whole gradient), and only among ranks */
	int clips = cfg->clipnorm > 0 || cfg->global_clipnorm > 0 || cfg->clipvalue > 0;
	int lr = layer_ready && w.size > 1 && !clips;
	if (layer_ready && clips && w.rank == 0)
		wf_warn("allreduce: strategy.layer_ready does not go with gradient clipping (it "
			"needs the whole gradient): each step waits for every bucket");
	if (lr &&
	    !(c->applied = calloc(
		      (size_t)(c->n + bucket_floats(bucket_mb) - 1) / bucket_floats(bucket_mb) + 1,
		      1)))
		goto nomem;
	x->layer_ready = lr;
	if ((rc = hb_init(&c->wt.hb, err)) != 0 ||
	    (rc = buckets_new(&c->b, wf_exec_grads(ex), c->n, bucket_mb, small, nsmall, &c->wt, !lr,
			      lr, err)) != 0) {
		c->finished = 1; /* nothing is in flight yet */
		mpi_free(x);
		return rc;
	}
	*out = x;
	return 0;
nomem:
	wf_errf(err, WF_ENOMEM, "out of memory for the allreduce of %zu parameters", c->n);
	mpi_free(x);
	return WF_ENOMEM;
}
