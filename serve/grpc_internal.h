/* grpc_internal.h: what serve/grpc.c, grpc_h2.c and grpc_call.c share: the
 * connection, stream, job and server state, and the helpers one file defines
 * and another calls (not an API: only those files include it). */
#ifndef WF_SERVE_GRPC_INTERNAL_H
#define WF_SERVE_GRPC_INTERNAL_H

#include "serve/grpc.h"
#include "serve/grpc_tls.h"
#include "serve/pool.h"

#include "common/log.h"
#include "common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#define PREFIX	     5	       /* compressed flag + 4-byte big-endian length */
#define READ_CHUNK   65536     /* bytes read per recv */
#define READ_BUDGET  (1 << 20) /* bytes read from one connection per wake-up */
#define STREAM_WIN   (1 << 20) /* HTTP/2 initial window per stream */
#define CONN_WIN     (1 << 24) /* HTTP/2 window per connection */
#define MAX_PATH_LEN 256
#define FRAME_MAX    16384	 /* bytes of DATA in a frame: HTTP/2's default, which we keep */
#define GATHER	     (256 << 10) /* bytes of frames gathered into one send */
#define HELLO_SECS   10	 /* a connection must send the HTTP/2 preface and SETTINGS by then */
#define IDLE_SECS    300 /* a connection without streams for this long gets GOAWAY */

typedef struct conn conn;

typedef struct stream {
	int32_t id;
	char path[MAX_PATH_LEN];
	char encoding[32];
	double timeout;	   /* seconds from grpc-timeout; 0: none */
	double t_begin;	   /* wf_now() at its first header */
	int post, grpc_ct; /* :method POST, content-type application/grpc* */
	int bad_header;	   /* a header we read was too long */
	int authorized;	   /* "authorization: Bearer <the server's token>" */
	uint8_t *body;	   /* DATA received so far: base + pad */
	uint8_t *base;	   /* the allocation */
	size_t len, cap, pad;
	int answered; /* a response was submitted */
	uint8_t *out; /* reply: prefix + message (a stream: messages not sent yet) */
	size_t out_len, out_off, out_cap;
	/* a streaming method's stream (wf_grpc_method.stream_reply) */
	const wf_grpc_method *sm; /* NULL: a unary call */
	int half_closed;	  /* the client sent END_STREAM */
	int calls;		  /* its calls not answered yet */
	int started;		  /* response headers submitted, data deferred or flowing */
	int ending;		  /* ends after the replies queued (stream_end) */
	int end_code;		  /* ... with this grpc-status */
	char end_msg[256];	  /* ... and grpc-message */
	struct stream *prev, *next;
} stream;

struct conn {
	wf_grpc *g;
	int fd;
	wf_tls_conn *tls; /* NULL: plain h2c */
	int handshaking;  /* TLS handshake not finished: nothing of HTTP/2 yet */
	int local;	  /* the peer is on loopback (wf_serve_addr_is_loopback) */
	nghttp2_session *s;
	int refs;	  /* the loop's own + one per job in flight */
	int closed;	  /* socket closed, session deleted */
	size_t receiving; /* bytes held in stream bodies */
	uint8_t *pend;	  /* bytes nghttp2 produced that the socket did not take yet */
	size_t pend_len, pend_off, pend_cap;
	uint32_t events;	 /* registered epoll events */
	double t_open, t_active; /* wf_now() at accept, at the last bytes read */
	long frames;		 /* frames received */
	int dirty;		 /* in deliver's list of connections to flush */
	conn *dirty_next;
	stream *streams;
	conn *prev, *next;
};

typedef struct job {
	conn *c;
	int32_t stream_id;
	const wf_grpc_method *m;
	wf_grpc_call call;
	uint8_t *body, *inflated; /* what call.msg points into (owned) */
	int code;
	int parked;	     /* its handler returned WF_GRPC_PENDING first */
	int finished;	     /* wf_grpc_call_done ran before its handler returned */
	wf_serve_job queued; /* waiting for a worker (serve/pool.h) */
	struct job *next;    /* in the loop's list of finished jobs */
} job;

struct wf_grpc {
	wf_grpc_opts o;
	const wf_grpc_method *methods;
	int nmethods;
	void *ctx;
	int lfd, efd, epfd, port;
	pthread_t loop;
	int loop_started;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	wf_tls_server *tls; /* NULL: plain h2c */
	conn *conns;
	conn *dead; /* closed, unreferenced, freed after this wake-up */
	int nconns;
	atomic_int stop;
	atomic_int draining;	/* wf_grpc_drain was called */
	int drained;		/* the loop closed the listener and sent GOAWAY */
	atomic_int inflight;	/* streams open: being received, handled or answered */
	wf_serve_pool workers;	/* the calls waiting for a worker, and the workers */
	pthread_mutex_t mu;	/* what follows */
	job *done;		/* finished, for the loop */
	int pending;		/* calls a handler left WF_GRPC_PENDING */
	pthread_cond_t settled; /* pending fell to 0 */
};

/* Shared between the serve/grpc.c, grpc_h2.c and grpc_call.c files (defined where named). */
void pct_encode(const char *s, char *out, size_t cap);
void answer_error(conn *c, stream *st, int code, const char *msg);
void answer_http(conn *c, stream *st, const char *status);
void answer_ok(conn *c, stream *st, uint8_t *reply, size_t len);
void conn_unref(conn *c);
void free_dead(wf_grpc *g);
void conn_close(conn *c);
int conn_flush(conn *c);
/* recv/send on the connection, through TLS where it has it. */
ssize_t conn_recv(conn *c, void *buf, size_t n);
ssize_t conn_send(conn *c, const void *buf, size_t n);
int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user);
int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
	      const uint8_t *value, size_t vlen, uint8_t flags, void *user);
int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
	    void *user);
void dispatch_call(conn *c, stream *st);
/* Request headers complete: a streaming method's stream is checked and
 * opened now (unary calls wait for their message). */
void stream_begin(conn *c, stream *st);
/* Hand the complete messages received on a streaming stream to calls. */
void stream_take(conn *c, stream *st);
/* A call of stream st finished with code (its reply or message in call):
 * queue its reply message, or end the stream. */
void stream_answer(conn *c, stream *st, wf_grpc_call *call, int code);
/* End a stream with code and msg after the replies queued before (a
 * unary call: at once, trailers only). */
void stream_end(conn *c, stream *st, int code, const char *msg);
/* Submit or resume a stream's output once it has some, or its end. */
void stream_kick(conn *c, stream *st);
/* 1 while a streaming stream takes calls and replies: not refused, not
 * ending (its reply headers may have gone out). */
static inline int stream_live(const stream *st)
{
	return !st->ending && (!st->answered || st->started);
}
/* The handler of j returned code: hand j to the loop, or, for
 * WF_GRPC_PENDING, leave that to wf_grpc_call_done (call under no lock). */
void job_returned(wf_grpc *g, job *j, int code);
/* With a token set: answer UNAUTHENTICATED to a call without it (open
 * methods excepted); 1 when the stream is answered. */
int refuse_unauthorized(conn *c, stream *st);
int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user);
int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *user);
void *loop_main(void *arg);

#endif
