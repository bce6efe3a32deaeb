/* netem.h: an emulated cluster network on this machine. Each node is a
 * Linux network namespace with one interface (eth0, 10.213.0.<node+1>/24)
 * joined to the others through a bridge, its link shaped in both directions
 * by tc (tbf for a rate alone, netem when a delay or loss is asked) and
 * carrying MTU-sized packets, as a wire does (no GSO on its eth0). Every
 * node knows every other's MAC from the start (no ARP table to outgrow at
 * 64 nodes). Nothing
 * leaves the machine: the host has no address on the bridge. Needs root and
 * iproute2 (`ip`, `tc`).
 *
 * Threads: create and destroy from one thread; wf_netem_enter is meant for
 * a forked child before it execs or runs its role. */
#ifndef WF_NETEM_H
#define WF_NETEM_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

#define WF_NETEM_MAX_NODES 128

typedef struct wf_netem_link {
	double rate_bps; /* bits per second each way; 0: unshaped */
	double delay_ms; /* one-way delay added on each side's egress; 0: none */
	double loss;	 /* packet loss in [0, 1) on each egress; 0: none */
	int gso;	 /* 1: let TCP's 64 KiB GSO packets through the qdiscs whole (as
			  * before 2026-11-28); 0: wire-sized packets */
	int mtu;	 /* every interface's MTU (jumbo frames: 9000); 0: 1500 */
	int queue_kb;	 /* each shaped egress's queue (a switch port's buffer) in KiB;
			  * 0: 20 ms of the rate, at least 256 KiB */
} wf_netem_link;

typedef struct wf_netem {
	int nodes;
	int shaped;	 /* nodes [0, shaped) have shaped links; the rest are unshaped */
	char tag[16];	 /* "wf<pid>": names of namespaces and interfaces */
	char bridge[24]; /* the bridge joining them, in this namespace */
	int made;	 /* namespaces created so far (destroy removes them) */
} wf_netem;

/* Parse "10gbit", "100mbit", "800kbit", "1.5gbit" or a plain number of
 * bits per second (as tc reads rates). -1 naming the value in err when
 * malformed. */
int wf_netem_parse_rate(const char *s, double *bps, wf_err *err);
/* Parse "0.2ms", "1ms", "2us" or a plain number of milliseconds. */
int wf_netem_parse_delay(const char *s, double *ms, wf_err *err);

/* Create nodes namespaces: the first `shaped` ones with `link`, the rest
 * with plain links (a launcher's own node). Fails with WF_ENOTSUP when this
 * process may not create namespaces or the kernel lacks the qdisc, naming
 * the command and its output; everything made so far is removed then. */
int wf_netem_create(wf_netem *ne, int nodes, int shaped, const wf_netem_link *link, wf_err *err);
/* Remove the namespaces and the bridge (killing nothing: processes left in
 * a namespace keep it alive until they exit). Accepts a zeroed ne. */
void wf_netem_destroy(wf_netem *ne);
/* Remove what an earlier run left behind: namespaces and bridges named
 * wf<pid> whose process is gone. */
void wf_netem_sweep(void);
/* Move the calling process into node's namespace. */
int wf_netem_enter(const wf_netem *ne, int node, wf_err *err);
/* What TCP and the shaping queues of one node saw, since the node was made. */
typedef struct wf_netem_counters {
	uint64_t retrans;  /* TCP segments it retransmitted (RetransSegs) */
	uint64_t timeouts; /* its retransmission timeouts (TCPTimeouts) */
	uint64_t drops_in; /* packets its download queue (the bridge port) dropped */
} wf_netem_counters;
/* Read node's counters (from its namespace's /proc/net and tc -s). */
int wf_netem_counters_get(const wf_netem *ne, int node, wf_netem_counters *c, wf_err *err);
/* Node's address ("10.213.0.7") into buf. */
void wf_netem_addr(int node, char *buf, size_t n);
/* Node's namespace name into buf ("wf1234-7"). */
void wf_netem_ns(const wf_netem *ne, int node, char *buf, size_t n);

#endif
