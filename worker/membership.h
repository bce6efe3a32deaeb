/* membership.h: the membership service of elastic allreduce, and a
 * worker's connection to it. The service (run by `weft launch --elastic`,
 * or as a pod of its own: `weft membership`) numbers the generations of the
 * ring: it gathers the workers that are ready for the next one, assigns
 * their ranks (by slot: the TF_CONFIG worker index, so the chief stays rank
 * 0) and tells every rank the whole member list (its ring neighbours among
 * them) and which rank's state the others take (the one with the newest
 * committed step). Each worker keeps one TCP connection to it, so the
 * service learns at once of a worker that dies (its connection closes).
 *
 * Authenticated with the job key as the NCCL id hand-out is (wf_rdv_mac over
 * both ends' nonces); without a key (--insecure) nothing is checked.
 *
 * Threads: a service runs on one thread (wf_membership_run);
 * wf_membership_stop may be called from any other. A member connection is
 * driven by one thread. */
#ifndef WF_MEMBERSHIP_H
#define WF_MEMBERSHIP_H

#include "common/error.h"
#include "worker/elastic_wire.h"

#include <stdint.h>

/* ---- the service ---------------------------------------------------------- */

typedef struct wf_membership_cfg {
	int port;		/* listen on this port of every address (0: any free one) */
	uint64_t job;		/* the job tag: a worker of another job is refused */
	const uint8_t *key;	/* the job key, or NULL (--insecure) */
	int min_workers;	/* a generation needs at least this many (MIN) */
	int expect;		/* the first generation waits this long for this many */
	double elastic_timeout; /* seconds with fewer than MIN ready before the job
				 * fails (FAIL to the waiting workers); 0: for ever */
	double settle;		/* seconds a re-formation waits for members of the last
				 * generation that have not asked to be placed again */
} wf_membership_cfg;

typedef struct wf_membership wf_membership;

/* Listen (errors name the port); nothing is served before run. */
int wf_membership_create(wf_membership **out, const wf_membership_cfg *cfg, wf_err *err);
int wf_membership_port(const wf_membership *s); /* the port it listens on */
/* Serve until wf_membership_stop. Returns 0, or an error of its own
 * (poll failing); the job's failures go to the workers as FAIL messages. */
int wf_membership_run(wf_membership *s, wf_err *err);
void wf_membership_stop(wf_membership *s); /* thread-safe, async-signal-safe */
void wf_membership_free(wf_membership *s); /* accepts NULL */

/* ---- a worker's side ------------------------------------------------------- */

typedef struct wf_member_cfg {
	const char *service; /* "host:port" of the service */
	int slot;	     /* this worker's TF_CONFIG slot */
	const char *addr;    /* "host:port" where this worker's ring listens */
	uint64_t job;
	const uint8_t *key; /* the job key, or NULL (--insecure) */
	double timeout;	    /* seconds to reach the service (retrying) */
} wf_member_cfg;

typedef struct wf_member wf_member;

/* Connect and register (the service and this worker prove they hold the
 * key). WF_ETRANSIENT naming the address when it does not answer in time;
 * WF_EINVAL when it refuses (another job, key mismatch, slot in use). */
int wf_member_connect(wf_member **out, const wf_member_cfg *cfg, wf_err *err);
/* Connect again after the connection broke (the service restarted): the
 * hello names gen, the generation this worker is in (0: none), so that a
 * restarted service goes on from it with this worker as its member. Tries
 * for timeout seconds; errors as wf_member_connect. */
int wf_member_reconnect(wf_member *m, uint64_t gen, double timeout, wf_err *err);
/* 0 once the connection broke (ready, poll_notice said so), else 1. */
int wf_member_connected(const wf_member *m);
/* Ask to be placed in the next generation, having last been in gen (0:
 * none) with committed step (-1: no state); wait up to timeout seconds (<=
 * 0: for ever) for the assignment, into *a (wf_el_msg_free it). The
 * service's FAIL becomes WF_EINVAL with its text. */
int wf_member_ready(wf_member *m, uint64_t gen, long step, double timeout, wf_el_msg *a,
		    wf_err *err);
/* Without waiting: 1 when the service said someone waits to join a ring of
 * generation >= gen since the last call, 0 if not, < 0 when the service is
 * gone (err says so). */
int wf_member_poll_notice(wf_member *m, uint64_t gen, wf_err *err);
/* Tell the service the job trained its last step (best effort): workers
 * waiting to join are told so. */
void wf_member_done(wf_member *m, long step);
/* Tell the service this worker leaves for good (best effort). */
void wf_member_leave(wf_member *m);
void wf_member_free(wf_member *m); /* closes the connection; accepts NULL */

#endif
