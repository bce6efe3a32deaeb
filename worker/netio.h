/* netio.h: the plain-TCP plumbing shared by the NCCL id hand-out
 * (rendezvous.c), the elastic membership service (membership.c) and the TCP
 * ring (ring.c): big-endian integers, waits and whole reads/writes with a
 * deadline, "host:port" parsing, listening and connecting sockets.
 *
 * Threads: every function is thread-safe (no shared state). */
#ifndef WF_NETIO_H
#define WF_NETIO_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

void wf_net_put32(uint8_t *p, uint32_t v);
uint32_t wf_net_get32(const uint8_t *p);
void wf_net_put64(uint8_t *p, uint64_t v);
uint64_t wf_net_get64(const uint8_t *p);

/* Milliseconds from now to deadline (wf_now() seconds) for poll: 0 once past. */
int wf_net_ms_left(double deadline);
/* Wait until fd is ready for events (POLLIN, POLLOUT) before deadline: 1
 * ready, 0 timed out, -1 error (errno). Signals do not end the wait. */
int wf_net_wait(int fd, short events, double deadline);
/* Send (writing 1) or receive exactly n bytes before deadline: 0, or -1
 * with errno (ETIMEDOUT; ECONNRESET when the peer closed early). */
int wf_net_io(int fd, void *buf, size_t n, int writing, double deadline);
int wf_net_nonblocking(int fd);
/* Split and check "host:port" or "[v6]:port" (no blanks or slashes in the
 * host, a port of 1-65535 in digits) into host (n bytes) and port: 0, or -1. */
int wf_net_split_hostport(const char *hp, char *host, size_t n, int *port);
/* A non-blocking listening socket on every address of this host, port port
 * (0: any free port); what names the listener in the error. Returns the fd,
 * or a negative code with err filled. */
int wf_net_listen(int port, int backlog, const char *what, wf_err *err);
/* The port a bound socket listens on, or -1. */
int wf_net_local_port(int fd);
/* One connection attempt to host:port, at most until deadline: a
 * non-blocking connected fd, or -1 with why (n bytes) filled. */
int wf_net_connect(const char *host, int port, double deadline, char *why, size_t n);
/* The peer's numeric "host:port" (or "a peer"). */
void wf_net_peer_name(int fd, char *buf, size_t n);

#endif
