/* grpc_tls.h: TLS for the gRPC servers (GnuTLS, non-blocking, ALPN "h2" as
 * gRPC clients require): server credentials from PEM text, and one session
 * per connection driven by the event loop. Only serve/grpc*.c use it. */
#ifndef WF_SERVE_GRPC_TLS_H
#define WF_SERVE_GRPC_TLS_H

#include "common/error.h"

#include <stddef.h>
#include <sys/types.h>

typedef struct wf_tls_server wf_tls_server;
typedef struct wf_tls_conn wf_tls_conn;

/* Credentials from a PEM certificate (chain) and key; errors say which. */
int wf_tls_server_create(wf_tls_server **out, const char *cert_pem, const char *key_pem,
			 wf_err *err);
void wf_tls_server_free(wf_tls_server *t);

/* A server session on the non-blocking socket fd; NULL when out of memory. */
wf_tls_conn *wf_tls_conn_new(wf_tls_server *t, int fd);
/* One step of the handshake: 1 done (and the client chose "h2"), 0 call
 * again when the socket is ready (*want_write: for writing), -1 failed (the
 * reason in why). */
int wf_tls_handshake(wf_tls_conn *c, int *want_write, char *why, size_t cap);
/* As recv/send: bytes (> 0), 0 at the peer's close (recv), -1 with errno
 * EAGAIN (call again when ready; a send must then be repeated with the same
 * length) or EPIPE (the session failed). */
ssize_t wf_tls_recv(wf_tls_conn *c, void *buf, size_t n);
ssize_t wf_tls_send(wf_tls_conn *c, const void *buf, size_t n);
/* Decrypted bytes held inside the session (no socket event will announce
 * them). */
size_t wf_tls_pending(wf_tls_conn *c);
void wf_tls_conn_free(wf_tls_conn *c);

#endif
