/* elastic_wire.h: the messages of elastic allreduce: between a worker and
 * the membership service (membership.c), and the hand-shake of a TCP ring
 * connection (ring.c): encode and parse (pure, which the fuzz target
 * drives directly), and whole messages over a socket with a deadline.
 *
 * A message: a 12-byte header "WFEL", type, body length (big-endian u32),
 * then the body (at most WF_EL_MAX_BODY bytes); every integer big-endian,
 * every string a u32 length then its bytes (no NUL, at most 255).
 *
 * Threads: every function is thread-safe. */
#ifndef WF_ELASTIC_WIRE_H
#define WF_ELASTIC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WF_EL_MAGIC	  0x5746454cu /* "WFEL" */
#define WF_EL_VERSION	  2u
#define WF_EL_HEADER	  12
#define WF_EL_MAX_BODY	  (300 * 1024)
#define WF_EL_MAX_MEMBERS 1024
#define WF_EL_TEXT	  256 /* strings: at most 255 bytes + NUL */
#define WF_EL_NONCE	  32
#define WF_EL_MAC	  32

typedef enum wf_el_type {
	WF_EL_HELLO = 1,       /* worker -> service: who I am, where my ring listens */
	WF_EL_CHALLENGE = 2,   /* service -> worker: its nonce and proof (or a refusal) */
	WF_EL_PROOF = 3,       /* -> the acceptor: the opener's proof */
	WF_EL_READY = 4,       /* worker -> service: place me in the next generation */
	WF_EL_LEAVE = 5,       /* worker -> service: I leave for good */
	WF_EL_NOTICE = 6,      /* service -> members of generation gen: someone waits to join */
	WF_EL_ASSIGN = 7,      /* service -> worker: the new generation and my place in it */
	WF_EL_FAIL = 8,	       /* service -> worker: the job cannot go on (text says why) */
	WF_EL_RING_HELLO = 9,  /* ring: rank -> its right neighbour */
	WF_EL_RING_REPLY = 10, /* ring: the neighbour's nonce and proof (or a refusal) */
	WF_EL_DONE = 11	       /* worker -> service: the job trained its last step (step);
				* service -> a worker waiting to join: too late */
} wf_el_type;

typedef struct wf_el_member {
	int slot;	       /* the worker's TF_CONFIG slot */
	char addr[WF_EL_TEXT]; /* its ring's "host:port" */
} wf_el_member;

/* One message; which fields count depends on type. */
typedef struct wf_el_msg {
	int type;
	uint32_t status;	    /* CHALLENGE, RING_REPLY: 0 ok, 1 refused (text) */
	int keyed;		    /* HELLO: 1 when the worker holds the job key */
	int slot;		    /* HELLO */
	uint64_t job;		    /* HELLO, RING_HELLO: the job tag */
	uint8_t nonce[WF_EL_NONCE]; /* HELLO, CHALLENGE, RING_HELLO, RING_REPLY */
	uint8_t mac[WF_EL_MAC];	    /* CHALLENGE, PROOF, RING_REPLY */
	char addr[WF_EL_TEXT];	    /* HELLO: the worker's ring address */
	char text[WF_EL_TEXT];	    /* CHALLENGE, RING_REPLY (refused), FAIL */
	uint64_t gen;		    /* HELLO (its generation, 0: none), READY, NOTICE, ASSIGN,
				     * RING_HELLO */
	int64_t step;		    /* READY: committed step (-1: none); ASSIGN: the root's */
	int rank, size, root;	    /* ASSIGN: mine, the generation's, whose state counts;
				     * RING_HELLO: rank = the opener's */
	int nmembers;		    /* ASSIGN: = size */
	wf_el_member *members;	    /* ASSIGN: [size] by rank (parse allocates; free below) */
} wf_el_msg;

/* The header: 0 with *type and *len, or -1 (not ours, or a body too long). */
int wf_el_header_parse(const uint8_t h[WF_EL_HEADER], int *type, uint32_t *len);
/* The body of a message of type into *m (zeroed first): 0, or -1 with why
 * (n bytes) saying what is wrong. Never reads outside body[0, len). */
int wf_el_msg_parse(int type, const uint8_t *body, size_t len, wf_el_msg *m, char *why, size_t n);
/* Header and body of *m into out (cap bytes): the bytes written, or 0 when
 * they do not fit or a field is out of range. */
size_t wf_el_msg_encode(const wf_el_msg *m, uint8_t *out, size_t cap);
/* Bytes enough for wf_el_msg_encode of *m (an upper bound). */
size_t wf_el_msg_bytes(const wf_el_msg *m);
void wf_el_msg_free(wf_el_msg *m); /* the members array; accepts a zeroed msg */

/* Send *m on fd before deadline (wf_now() seconds): 0, or -1 with errno. */
int wf_el_send(int fd, const wf_el_msg *m, double deadline);
/* Receive one message from fd before deadline into *m: 0; -1 with errno
 * (ETIMEDOUT, ECONNRESET, ...); -2 when it is not a valid message (why
 * says what). */
int wf_el_recv(int fd, wf_el_msg *m, double deadline, char *why, size_t n);

#endif
