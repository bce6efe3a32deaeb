/* auth.h: ZeroMQ CURVE keys of a parameter-server cluster, the server's
 * ZAP handler, and the socket monitors that watch connections. A cluster has two key pairs, kept as
 * files in one key directory (a Kubernetes Secret, or what `weft keygen` / `weft launch` write):
 *
 *   server.pub  server.key   the servers' key pair (every server)
 *   client.pub  client.key   the clients' key pair (chief, workers, tools)
 *
 * Each file holds one 40-character Z85 key on its own line; lines starting
 * with '#' are comments. The .key files are secret (written 0600). A server
 * encrypts with server.key and admits, through its ZAP handler, only peers
 * that prove they hold the secret of client.pub; a client must know
 * server.pub (so it talks to the real servers) and hold client.key. */
#ifndef WF_PS_AUTH_H
#define WF_PS_AUTH_H

#include "common/error.h"

#include <stdint.h>

#define WF_PS_KEY_Z85 41 /* 40 Z85 characters and a NUL */
/* CURVE encrypts on ZeroMQ's I/O threads, one connection on one thread: a
 * client opens up to this many connections per server and spreads the
 * chunks over them; a server runs this many I/O threads. */
#define WF_PS_CURVE_STRIPES 4

typedef struct wf_ps_keys {
	char server_public[WF_PS_KEY_Z85], server_secret[WF_PS_KEY_Z85];
	char client_public[WF_PS_KEY_Z85], client_secret[WF_PS_KEY_Z85];
} wf_ps_keys;

/* 1 when the linked libzmq supports CURVE (built with libsodium). */
int wf_ps_curve_available(void);
/* WF_ENOTSUP with a message saying what to install when CURVE is missing. */
int wf_ps_curve_check(wf_err *err);
/* Parse the text of one key file (n bytes, any content): the first line that
 * is not empty or a '#' comment must be exactly 40 Z85 characters; copied to
 * out with its NUL. -1 when there is no such line. */
int wf_ps_key_parse(const char *text, size_t n, char out[WF_PS_KEY_Z85]);
/* Read the four key files of dir into k; the message names the file and
 * says how to make them (`weft keygen --out DIR`). Warns when a secret key
 * file can be read by group or others. dir "fd:N" reads the four keys
 * (server.pub, server.key, client.pub, client.key: one Z85 line each) from
 * descriptor N instead (`weft launch`'s keys, never on disk). */
int wf_ps_keys_load(wf_ps_keys *k, const char *dir, wf_err *err);
/* Two fresh key pairs in memory (benchmarks, tests). */
int wf_ps_keys_new(wf_ps_keys *k, wf_err *err);
/* Make two fresh key pairs and write them to dir (created 0700 if missing;
 * existing key files are refused unless overwrite). */
int wf_ps_keys_generate(const char *dir, int overwrite, wf_err *err);

/* ZAP handler of a server's ZeroMQ context: admits CURVE clients whose
 * public key is the cluster's client key. Start it before binding. */
typedef struct wf_ps_zap wf_ps_zap;
int wf_ps_zap_start(wf_ps_zap **out, void *zctx, const wf_ps_keys *k, int server_index,
		    wf_err *err);
/* Connections refused so far. */
uint64_t wf_ps_zap_refused(const wf_ps_zap *z);
/* Stop and free: call after zmq_ctx_shutdown(zctx) (or with the context
 * still open: it is shut down here). Accepts NULL. */
void wf_ps_zap_stop(wf_ps_zap *z);

/* Socket options: a server socket (CURVE server with its secret key) and a
 * client socket (CURVE client of the cluster's servers). */
int wf_ps_curve_server(void *sock, const wf_ps_keys *k, wf_err *err);
int wf_ps_curve_client(void *sock, const wf_ps_keys *k, wf_err *err);

/* Watch sock's connections (ZeroMQ's socket monitor for the ZMQ_EVENT_*
 * bits of events): the PAIR socket their events are read from, NULL when
 * ZeroMQ refuses. Before closing sock, call zmq_socket_monitor(sock, NULL,
 * 0), then close both. */
void *wf_ps_monitor_open(void *zctx, void *sock, int events);
/* Read the next event waiting on mon: 1 with its ZMQ_EVENT_* number and
 * value (a connection's fd, an error code), 0 when none waits. */
int wf_ps_monitor_next(void *mon, uint16_t *event, uint32_t *value);

#endif
