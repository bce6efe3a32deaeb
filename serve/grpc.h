/* grpc.h: a gRPC server for unary and bidirectional streaming calls over
 * HTTP/2 cleartext (h2c with prior
 * knowledge, as gRPC clients speak it), on libnghttp2 (the only file that
 * includes it): gRPC's length-prefixed messages, grpc-status/grpc-message
 * trailers, grpc-timeout, gzip/deflate request messages (grpc-encoding).
 *
 * One event-loop thread per server multiplexes every connection and stream
 * over non-blocking sockets, so a slow or stalled client holds up nobody; a
 * pool of worker threads runs the method handlers, which may block (they wait
 * for the batcher). Memory is bounded per message (max_message), per
 * connection (streams being received), and by the worker queue: a call that
 * finds max_queue calls waiting gets RESOURCE_EXHAUSTED at once. Malformed
 * frames close the connection (nghttp2 sends GOAWAY); malformed gRPC framing
 * gets INVALID_ARGUMENT. Functions are thread-safe. */
#ifndef WF_SERVE_GRPC_H
#define WF_SERVE_GRPC_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

/* gRPC status codes (the same numbers as tensorflow.error.Code). */
enum {
	WF_GRPC_OK = 0,
	WF_GRPC_CANCELLED = 1,
	WF_GRPC_UNKNOWN = 2,
	WF_GRPC_INVALID_ARGUMENT = 3,
	WF_GRPC_DEADLINE_EXCEEDED = 4,
	WF_GRPC_NOT_FOUND = 5,
	WF_GRPC_ALREADY_EXISTS = 6,
	WF_GRPC_PERMISSION_DENIED = 7,
	WF_GRPC_RESOURCE_EXHAUSTED = 8,
	WF_GRPC_FAILED_PRECONDITION = 9,
	WF_GRPC_ABORTED = 10,
	WF_GRPC_OUT_OF_RANGE = 11,
	WF_GRPC_UNIMPLEMENTED = 12,
	WF_GRPC_INTERNAL = 13,
	WF_GRPC_UNAVAILABLE = 14,
	WF_GRPC_DATA_LOSS = 15,
	WF_GRPC_UNAUTHENTICATED = 16,
	/* not a status: the handler's answer when the call finishes later
	 * (wf_grpc_call_done) */
	WF_GRPC_PENDING = -1,
};

/* One call as a handler sees it. */
typedef struct wf_grpc_call {
	const uint8_t *msg; /* the request message (decompressed) */
	size_t len;	    /* bytes */
	double deadline;    /* wf_now() by which the client gives up (grpc-timeout); 0: none */
	double t_begin;	    /* wf_now() when its headers arrived */
	int local;	    /* the client connected from loopback */
	uint8_t *reply;	    /* 5-byte gRPC prefix + message: see wf_grpc_reply_buf */
	size_t reply_len;   /* message bytes after the prefix */
	char message[1024]; /* grpc-message when the handler fails */
} wf_grpc_call;

/* A method handler: packs the reply into wf_grpc_reply_buf(call, n) and
 * returns WF_GRPC_OK, or returns a status code (wf_grpc_fail). A handler of
 * a method that is not quick may instead hand the call to other work and
 * return WF_GRPC_PENDING: that work then finishes it, from any thread, with
 * wf_grpc_call_done (reply or message filled as a handler fills them). */
typedef int (*wf_grpc_handler)(void *ctx, wf_grpc_call *call);
void wf_grpc_call_done(wf_grpc_call *call, int code);

typedef struct wf_grpc_method {
	const char *path; /* "/package.Service/Method" */
	wf_grpc_handler fn;
	int quick; /* 1: never blocks (health, metadata): runs in the event loop */
	int open;  /* 1: answered without the token (liveness, readiness) */
	/* > 0: a call whose message has at most this many bytes runs in the
	 * event loop too (its handler then must not block: it returns
	 * WF_GRPC_PENDING where it would wait); larger ones go to a worker */
	size_t loop_below;
	/* non-NULL: a bidirectional streaming method. Each request message on
	 * the stream is a call of fn, answered by one reply message on the same
	 * stream, in the order the calls finish; stream_reply turns a finished
	 * call (code, reply or message) into that message (in the loop thread)
	 * and returns WF_GRPC_OK, or a status that ends the stream. The stream
	 * ends with OK once the client has half-closed it and every call is
	 * answered. */
	int (*stream_reply)(wf_grpc_call *call, int code);
} wf_grpc_method;

typedef struct wf_grpc_opts {
	const char *bind_address; /* IPv4 address to listen on */
	int port;		  /* 0: any free port (see wf_grpc_port) */
	const char *name;	  /* for logs ("KServe v2 gRPC") */
	size_t max_message;	  /* bytes of one request message (after decompression) */
	int workers;		  /* handler threads at most, started as calls need them */
	int start_workers;	  /* handler threads started at once (0: 1) */
	int max_queue;		  /* calls waiting for a worker before RESOURCE_EXHAUSTED */
	int max_streams;	  /* concurrent streams per connection */
	int max_conns;		  /* open connections; more are closed at once */
	const char *tls_cert;	  /* PEM pair: the port speaks TLS only (ALPN "h2"); */
	const char *tls_key;	  /* NULL: plain h2c */
	const char *token;	  /* every call but the open ones must carry metadata
				   * "authorization: Bearer <token>" (else UNAUTHENTICATED,
				   * before its message is read); NULL: none */
} wf_grpc_opts;

typedef struct wf_grpc wf_grpc;

/* Bind, listen and start the event loop and the workers. methods (and ctx)
 * must outlive the server. Fails when the port cannot be bound. */
int wf_grpc_start(wf_grpc **out, const wf_grpc_opts *o, const wf_grpc_method *methods, int nmethods,
		  void *ctx, wf_err *err);
/* The port actually bound. */
int wf_grpc_port(wf_grpc *g);
/* Begin a drain (thread-safe, returns at once): the listener closes (new
 * connections are refused) and every connection gets a GOAWAY, after which
 * its client opens no new stream on it; every call that reaches the server
 * meanwhile, on a connection it already had, is still served. */
void wf_grpc_drain(wf_grpc *g);
/* Calls begun (headers received) and not yet answered: what a drain waits for. */
int wf_grpc_inflight(wf_grpc *g);
/* Close the listener and every connection, join the threads, free. */
void wf_grpc_stop(wf_grpc *g);

/* Room for a reply message of n bytes (after the 5-byte prefix), owned by the
 * call; NULL when out of memory. */
uint8_t *wf_grpc_reply_buf(wf_grpc_call *call, size_t n);
/* Set call->message and return code. */
int wf_grpc_fail(wf_grpc_call *call, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Name of a status code ("INVALID_ARGUMENT"). */
const char *wf_grpc_code_name(int code);

/* The framing of one unary request body (the DATA of a stream): one message
 * with its 5-byte prefix, decompressed per encoding (NULL or "identity",
 * "gzip", "deflate"), of at most max bytes: *msg points into body (identity:
 * read in place) or is *inflated (malloc'd, the caller frees it; NULL when
 * not compressed). Returns WF_GRPC_OK or a status code with why filled.
 * Pure: the fuzz target drives it. */
int wf_grpc_unframe(const uint8_t *body, size_t len, const char *encoding, size_t max,
		    const uint8_t **msg, size_t *msg_len, uint8_t **inflated, char *why,
		    size_t why_cap);
/* Seconds in a grpc-timeout header value ("100m", "5S"); -1 when malformed. */
double wf_grpc_parse_timeout(const char *v);

/* For the fuzz target: bytes fed to one server-side HTTP/2 session as a
 * client's, every call they complete run in this thread through methods,
 * the replies submitted, then everything freed. Returns 0, or -1 when the
 * session closed the connection (a protocol error). Not thread-safe. */
int wf_grpc_fuzz_session(const wf_grpc_method *methods, int nmethods, void *ctx,
			 const uint8_t *data, size_t len);

#endif
