/* ring.h: a ring of processes over plain TCP for elastic allreduce: rank r
 * sends to rank r + 1 and receives from rank r - 1 (mod size). A sum
 * allreduce (reduce-scatter, then allgather: every rank ends with the same
 * bits) and a pipelined broadcast. A ring belongs to one generation of the
 * job's membership: a failed call leaves it broken (both sockets closed, so
 * the failure travels round the ring at once) and the caller forms a new
 * one.
 *
 * The connection to the right neighbour is authenticated with the job key
 * (wf_rdv_mac over both ends' nonces, the job tag and the generation); the
 * gradients themselves travel in the clear, as MPI's do.
 *
 * Threads: one thread drives a ring. */
#ifndef WF_RING_H
#define WF_RING_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_ring wf_ring;

typedef struct wf_ring_cfg {
	int rank, size;		/* this process's place in the generation */
	int listen_fd;		/* this process's listening socket (wf_net_listen) */
	const char *right;	/* "host:port" of rank + 1 */
	const char *right_name; /* names rank + 1 in errors ("rank 2 (worker:2)") */
	const char *left_name;	/* names rank - 1 in errors */
	uint64_t job;		/* the job tag, alike on every rank */
	uint64_t gen;		/* the generation: a connection of another is refused */
	const uint8_t *key;	/* the job key (WF_RDV_KEY_BYTES), or NULL (--insecure) */
	double timeout;		/* seconds any one call may wait for a peer */
} wf_ring_cfg;

/* Connect the ring: to the right neighbour, and accept the left one (other
 * connections to the listening socket are answered with a refusal and
 * dropped). Fails naming the neighbour that did not come within the
 * timeout. size 1: a ring of one, no sockets. */
int wf_ring_create(wf_ring **out, const wf_ring_cfg *cfg, wf_err *err);
/* buf[0, n) := the sum over ranks, identical bits on every rank. The
 * vector is cut into size chunks of n / size (+1) floats; chunk c is summed
 * in the order of ranks c, c + 1, ..., c - 1 (mod size). Fails with
 * WF_ETRANSIENT naming the neighbour that broke off or went silent for
 * the timeout; the ring is then broken. */
int wf_ring_allreduce(wf_ring *r, float *buf, size_t n, const char *what, wf_err *err);
/* bytes of buf from root to every rank. */
int wf_ring_bcast(wf_ring *r, void *buf, size_t bytes, int root, const char *what, wf_err *err);
/* 1 once a call failed (the ring must be formed again). */
int wf_ring_broken(const wf_ring *r);
void wf_ring_free(wf_ring *r); /* closes both connections; accepts NULL */

#endif
