/* proto.h: the parameter-server wire protocol. A message is one fixed 64-byte
 * little-endian header frame followed by 0..WF_PS_MAX_FRAMES payload frames.
 * This module encodes and validates headers; it knows nothing about sockets,
 * so the parser can be fuzzed on plain buffers.
 *
 * Header layout (all little-endian):
 *   0  u32 magic "WEFT"        4  u16 version        6  u16 op
 *   8  u32 flags               12 u32 sender (role << 24 | index)
 *   16 u64 job id              24 i64 step
 *   32 u32 chunk               36 u16 dtype          38 u16 reserved (0)
 *   40 u64 payload bytes (sum of payload frames)
 *   48 u32 tag (request id, echoed by the reply)
 *   52 u32 payload frame count
 *   56 u32 checksum            60 u32 aux (push: contributors; error: -code)
 * A push's aux counts the workers' mean gradients the payload sums (the
 * client's `contributors`, 1 for a worker's own push; 0: the server's
 * configured batch); the server scales by 1 / (contributors of the step).
 * checksum = CRC32C (Castagnoli, reflected, init ~0, final ~) over every
 * payload frame in order, continued over the 64 header bytes with the
 * checksum field set to zero (payload first, so a server replying the same
 * values to many workers hashes them once).
 *
 * Payloads per op (request -> reply; "values" = the chunk's floats):
 *   register   [optimizer settings]    -> -           (reply step: server step, chunk: nchunks)
 *   init       values [+ slots]        -> -           (step = version to start at)
 *   push_pull  grad [+ state] [+ frozen] -> values [+ state] [+ units]  (flags STATE,
 *              FROZEN, UNITS; grad is f32, or bf16 with ps.compression bf16: dtype
 *              names it)
 *   pull       -                       -> values [+ units]  (reply step: version)
 *   barrier    -                       -> -
 *   checkpoint dir (bytes)             -> -           (step = N)
 *   restore    dir (bytes)             -> -           (step = N or -1 newest; reply step)
 *   stats      -                       -> JSON (bytes)
 *   shutdown   -                       -> -
 *   heartbeat  -                       -> -           (reply aux: incarnation; to a
 *              server, reply chunk: bit g set when the replier is the primary of
 *              group g and does not count the asker as a live backup)
 *   replicate  grad [+ state] [+ frozen] -> -         (server to server, aux: contributors)
 *   join       -                       -> -           (server to server, chunk: group)
 *   handoff    -                       -> -           (server to server, chunk: group)
 *   any error reply: flag ERROR, aux = -code, one frame of text.
 * A register's optional frame (dtype bytes) is the sender's optimizer
 * settings as wf_optim_describe writes them ("optimizer.lr=0.1 ..."): a
 * server whose own settings read differently refuses the register with
 * code WF_EINVAL naming each differing key and both values. Workers and
 * the chief send it; tools send none and are not checked.
 * A push's frozen frame (flag FROZEN, last) lists the chunk's frozen floats
 * (model.freeze) as little-endian u64 pairs [begin, end), chunk-relative,
 * ascending, not overlapping: the optimizer leaves them as they are (no
 * update, no weight decay).
 * The state pseudo-chunk WF_PS_STATE_CHUNK (non-trainable state, kept by
 * server 0) can be the target of init and pull.
 * Replication (ps.replicas R > 1, ps/server_repl.c): the chunks placed on
 * server g form group g, kept by servers g, g+1, ..., g+R-1 (mod the
 * servers); one of them is the group's primary and the rest its backups.
 * The primary sends each update it applies to the backups as a replicate
 * (the summed gradient, the step, the contributors: the backups apply it
 * with the same optimizer, so the values stay bitwise equal) or an init
 * (values and slots), in order on one connection per backup, and answers
 * the workers only once every live backup acknowledged it. A request to a
 * server that is not the primary of the chunk's group is refused with flag
 * REDIRECT naming the primary; one with flag FAILOVER (the sender's
 * primary stopped answering) makes a backup that holds the group's state
 * its primary. A restarted server joins each of its groups: the primary
 * sends it every chunk as an init on the replication connection. */
#ifndef WF_PS_PROTO_H
#define WF_PS_PROTO_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

#define WF_PS_MAGIC	   0x54464557u /* bytes 'W','E','F','T' */
#define WF_PS_VERSION	   1
#define WF_PS_HEADER_BYTES 64
#define WF_PS_MAX_FRAMES   4 /* payload frames per message */
#define WF_PS_STATE_CHUNK  0xffffffffu
#define WF_PS_MAX_FROZEN   65536 /* ranges in a push's frozen frame */

typedef enum {
	WF_PS_OP_REGISTER = 1,
	WF_PS_OP_INIT,
	WF_PS_OP_PUSH_PULL,
	WF_PS_OP_PULL,
	WF_PS_OP_BARRIER,
	WF_PS_OP_CHECKPOINT,
	WF_PS_OP_RESTORE,
	WF_PS_OP_STATS,
	WF_PS_OP_SHUTDOWN,
	WF_PS_OP_HEARTBEAT,
	WF_PS_OP_REPLICATE, /* server to server: apply this gradient as the primary did */
	WF_PS_OP_JOIN,	    /* server to server: send me your state of group `chunk` */
	WF_PS_OP_LEAVE,	    /* worker: I leave the job for good (elastic) */
	WF_PS_OP_UNITS,	    /* server to server: the data units changed between steps */
	WF_PS_OP_HANDOFF,   /* server to server: be the primary of group `chunk` again */
	WF_PS_OP__COUNT
} wf_ps_op;

enum {
	WF_PS_FLAG_REPLY = 1u << 0,  /* a reply to the request with the same tag */
	WF_PS_FLAG_ERROR = 1u << 1,  /* error reply: aux = -code, payload = text */
	WF_PS_FLAG_STATE = 1u << 2,  /* an extra frame with the state vector */
	WF_PS_FLAG_STALE = 1u << 3,  /* push for a past step: ignored, values are current */
	WF_PS_FLAG_FROZEN = 1u << 4, /* push: a last frame of frozen ranges */
	/* request: the sender moved this group here because its primary failed */
	WF_PS_FLAG_FAILOVER = 1u << 5,
	/* error reply: not the group's primary; reply step = the primary, -1 unknown */
	WF_PS_FLAG_REDIRECT = 1u << 6,
	/* replicate or init, server to server: a frame with the data units
	 * (before the frozen frame of a replicate; last in an init); a reply
	 * to a worker's push_pull or pull of a chunk: a last frame with the
	 * worker's unit list (strategy.elastic_batch global) */
	WF_PS_FLAG_UNITS = 1u << 7,
	/* register: the sender is joining a running job and has not pushed
	 * yet (it waits for the servers to agree on a step): a server does not
	 * wait for it in a step until it pushed */
	WF_PS_FLAG_JOINING = 1u << 8,
	WF_PS_FLAG__ALL = 0x1ff,
};

/* A units frame: little-endian 64-bit signed integers, WF_PS_UNITS_HEADER
 * of them first: units per epoch, next fresh unit, workers W, queued Q,
 * epochs E; then W current units (-1: none), W steps of each worker's last
 * applied push (-1: none), the Q queued units in order, E units applied and
 * E re-queued per epoch; with elastic_batch global a tail follows: 1 when a
 * step's units were dealt (else 0), W list lengths (0..WF_PS_UNITS_MAX_LIST;
 * the list of worker w starts with its current unit), then the units after
 * the first of each list, in worker order (docs/formats.md). */
/* A unit list (a reply with flag UNITS, elastic_batch global): the data
 * units the worker trains next, 1..WF_PS_UNITS_MAX_LIST little-endian
 * 64-bit signed integers, none negative; the first is the reply's aux - 1. */
#define WF_PS_UNITS_MAX_LIST  4096
#define WF_PS_UNITS_HEADER    5
#define WF_PS_UNITS_MAX_QUEUE (1L << 24)
#define WF_PS_UNITS_MAX_EPOCH (1L << 20)

/* Payload element types. BF16 (a push's gradient frame only, with
 * ps.compression bf16): each float's upper 16 bits after rounding to
 * nearest even, little-endian, 2 bytes per float. TOPK (a push's gradient
 * frame only, with ps.compression topk:F): k >= 1 entries of the chunk, k
 * little-endian u32 chunk-relative indices, strictly ascending and below
 * the chunk's floats, then their k f32 values; the entries not named are
 * zero. 8k bytes. */
typedef enum {
	WF_PS_DTYPE_NONE = 0,
	WF_PS_DTYPE_F32 = 1,
	WF_PS_DTYPE_BYTES = 2,
	WF_PS_DTYPE_BF16 = 3,
	WF_PS_DTYPE_TOPK = 4,
} wf_ps_dtype;

/* How a push's gradient travels (ps.compression; workers and servers must
 * agree on the kind): fp32 as computed, bf16, or topk (each worker sends
 * the fraction F of each chunk's entries of largest magnitude and keeps
 * the rest as a residual it adds to its next gradient; F is the worker's
 * own, the servers take any k). Replies, inits, the state and the
 * replication between servers stay fp32: the master weights are exact. */
typedef enum {
	WF_PS_COMPRESSION_NONE,
	WF_PS_COMPRESSION_BF16,
	WF_PS_COMPRESSION_TOPK
} wf_ps_compression;
#define WF_PS_COMPRESSIONS "none, bf16 or topk:F (0 < F <= 1)"
/* "none", "bf16" or "topk:F" into *out (and F into *topk, which may be
 * NULL; 0 for the others); WF_EINVAL naming the key and the value
 * otherwise. */
int wf_ps_compression_parse(const char *name, wf_ps_compression *out, double *topk, wf_err *err);
/* The kind's name: "none", "bf16" or "topk" (without F). */
const char *wf_ps_compression_name(wf_ps_compression c);
/* n floats to bf16 (round to nearest even; NaN stays NaN) and back. */
void wf_ps_bf16_encode(uint16_t *dst, const float *src, size_t n);
void wf_ps_bf16_decode(float *dst, const void *src, size_t n); /* src: 2n bytes */
/* Entries a topk:F push of a chunk of n floats carries: ceil(F n), in [1, n]
 * (0 when n is 0). */
size_t wf_ps_topk_count(double topk, size_t n);
/* A topk push of n floats: add grad into resid (the error feedback, [n]),
 * then move the k entries of largest magnitude (NaN counts as largest)
 * out of resid into out (8k bytes: WF_PS_DTYPE_TOPK's layout), zeroing
 * them there. mag: scratch of n floats. */
void wf_ps_topk_encode(uint8_t *out, size_t k, float *resid, const float *grad, size_t n,
		       float *mag);
/* A parsed topk frame (bytes, a multiple of 8) into dst [n floats]: zeros
 * and the named entries. */
void wf_ps_topk_decode(float *dst, size_t n, const void *src, size_t bytes);

typedef enum {
	WF_PS_ROLE_WORKER = 1, /* counts in membership; index = worker index */
	WF_PS_ROLE_CHIEF = 2,  /* coordination only */
	WF_PS_ROLE_TOOL = 3,   /* stats, benchmarks, tests */
	WF_PS_ROLE_SERVER = 4, /* another parameter server (replication); index = server */
} wf_ps_role;

/* How servers aggregate pushes (strategy.mode, parsed once by trainer/config.c;
 * worker and server must agree): sync, async, or ssp:K (staleness bound K). */
typedef enum { WF_PS_MODE_SYNC, WF_PS_MODE_ASYNC, WF_PS_MODE_SSP } wf_ps_mode;

#define WF_PS_SENDER(role, index) (((uint32_t)(role) << 24) | ((uint32_t)(index)&0xffffffu))
#define WF_PS_SENDER_ROLE(s)	  ((int)((s) >> 24))
#define WF_PS_SENDER_INDEX(s)	  ((int)((s)&0xffffffu))

/* Why a message was rejected (counted per reason in the server's stats). */
typedef enum {
	WF_PS_REJECT_FRAMES, /* frame count wrong for the op or above the maximum */
	WF_PS_REJECT_HEADER, /* header frame not 64 bytes */
	WF_PS_REJECT_MAGIC,
	WF_PS_REJECT_VERSION,
	WF_PS_REJECT_OP,     /* unknown op or flags */
	WF_PS_REJECT_JOB,    /* job id of another job */
	WF_PS_REJECT_SENDER, /* unknown role or worker index out of range */
	WF_PS_REJECT_CHUNK,  /* chunk index out of range or not on this server */
	WF_PS_REJECT_BYTES,  /* byte count vs frames or vs the chunk's size */
	WF_PS_REJECT_DTYPE,
	WF_PS_REJECT_CHECKSUM,
	WF_PS_REJECT_STATE, /* protocol state: duplicate push, server behind... */
	WF_PS_REJECT__COUNT
} wf_ps_reject;

/* Little-endian u64 at p (the frozen frame's pairs). */
uint64_t wf_ps_get_u64(const void *p);
void wf_ps_put_u64(void *p, uint64_t v);

/* Decoded header. */
typedef struct wf_ps_hdr {
	uint16_t version;
	uint16_t op;	 /* wf_ps_op */
	uint32_t flags;	 /* WF_PS_FLAG_* */
	uint32_t sender; /* WF_PS_SENDER(role, index) */
	uint64_t job_id;
	int64_t step;
	uint32_t chunk;
	uint16_t dtype; /* wf_ps_dtype */
	uint64_t payload_bytes;
	uint32_t tag;
	uint32_t nframes; /* payload frames */
	uint32_t checksum;
	uint32_t aux;
} wf_ps_hdr;

/* What the receiver knows, for validation. */
typedef struct wf_ps_limits {
	uint64_t job_id;
	uint32_t nchunks;	      /* global chunk count */
	const uint64_t *chunk_floats; /* [nchunks]; 0 = not held here (server) */
	uint64_t state_floats;	      /* state vector length; 0 = none here */
	int nslots;		      /* optimizer slots an init may carry */
	int nworkers;		      /* worker indices must be below this (0: any) */
	int is_reply;		      /* validating replies (client side) */
	uint32_t max_text;	      /* longest bytes payload (0: 1 MiB) */
	int defer_checksum;	      /* parse skips the checksum of f32 payloads: the caller
				       * verifies it while copying them (wf_ps_msg_verify) */
} wf_ps_limits;

/* A parsed message: header plus pointers into the caller's frames (no copy). */
typedef struct wf_ps_msg {
	wf_ps_hdr hdr;
	int nframes;
	const void *frame[WF_PS_MAX_FRAMES];
	size_t size[WF_PS_MAX_FRAMES];	 /* bytes */
	int deferred;			 /* checksum not checked yet (lim->defer_checksum) */
	uint8_t raw[WF_PS_HEADER_BYTES]; /* the header as received, when deferred */
} wf_ps_msg;

/* Name of an op / reject reason, for logs and stats ("push_pull", "checksum"). */
const char *wf_ps_op_name(int op);
const char *wf_ps_reject_name(int reason);
/* "sync", "async" or "ssp:K" into buf (n bytes); returns buf. */
const char *wf_ps_mode_str(wf_ps_mode mode, int staleness, char *buf, size_t n);

/* CRC32C continuing from crc (start with 0); hardware-accelerated with SSE4.2. */
uint32_t wf_ps_crc32c(uint32_t crc, const void *data, size_t n);
/* Copy n bytes src -> dst (not overlapping) and return wf_ps_crc32c(crc,
 * src, n), in one pass over memory where the build has AVX-512 VPCLMULQDQ. */
uint32_t wf_ps_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);

/* Fill h->payload_bytes, nframes, checksum from the frames and write the
 * 64-byte encoding to out. */
void wf_ps_hdr_encode(wf_ps_hdr *h, uint8_t out[WF_PS_HEADER_BYTES], const void *const *frames,
		      const size_t *sizes, int nframes);
/* CRC32C of the payload frames (the first part of the checksum). */
uint32_t wf_ps_payload_crc(const void *const *frames, const size_t *sizes, int nframes);
/* As wf_ps_hdr_encode with the payload CRC and byte count already known. */
void wf_ps_hdr_encode_crc(wf_ps_hdr *h, uint8_t out[WF_PS_HEADER_BYTES], uint32_t payload_crc,
			  uint64_t payload_bytes, int nframes);
/* Decode 64 bytes without validation. */
void wf_ps_hdr_decode(wf_ps_hdr *h, const uint8_t in[WF_PS_HEADER_BYTES]);

/* ZeroMQ hands received frames at any byte offset (its zero-copy receive
 * points into the socket's read buffer), but payloads are read as floats.
 * One scratch buffer per payload frame, grown to the largest frame once and
 * reused: wf_ps_align returns p itself when it is 4-byte aligned, else a copy
 * in s (NULL when the scratch cannot grow). */
typedef struct wf_ps_scratch {
	void *buf;
	size_t cap; /* bytes */
} wf_ps_scratch;
const void *wf_ps_align(const void *p, size_t n, wf_ps_scratch *s);
void wf_ps_scratch_free(wf_ps_scratch *s);

/* ZeroMQ receives every large frame into a fresh malloc'd buffer and frees
 * it when the message is closed, often on another thread. With glibc's
 * defaults a multi-MB buffer is mmapped or trimmed back to the kernel on
 * free, so each receive page-faults (and zeroes) it again: on loopback that
 * costs more CPU than the checksums. Once per process, keep buffers of up
 * to WF_PS_RECV_POOL_BYTES in the heap (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD)
 * so they are reused warm; the cost is that freed receive memory stays in
 * the process. Called by the server and the client; a no-op without glibc
 * or after wf_ps_tune_malloc_enable(0) (the program's WEFT_PS_MALLOC_TUNE=0).
 * Thread-safe. */
#define WF_PS_RECV_POOL_BYTES (32u << 20)
void wf_ps_tune_malloc(void);
/* 0: wf_ps_tune_malloc does nothing (call it at start-up, before any client
 * or server exists); 1: the default. */
void wf_ps_tune_malloc_enable(int on);

/* Validate frames[0] (the header) and frames[1..n) (payload) against lim:
 * frame counts, header size, magic, version, op, flags, job id, sender,
 * chunk range, byte counts, dtype, checksum. On success fills msg and
 * returns 0; otherwise returns WF_EFORMAT, sets *reason and describes the
 * fault in err. When the header decoded, msg->hdr is filled even on failure
 * (so the error reply can echo op and tag). Never reads outside the frames. */
int wf_ps_msg_parse(wf_ps_msg *msg, const void *const *frames, const size_t *sizes, int n,
		    const wf_ps_limits *lim, int *reason, wf_err *err);
/* For a message parsed with lim->defer_checksum and msg->deferred set:
 * check its checksum given the CRC32C of its payload frames (computed by
 * the caller, e.g. with wf_ps_crc32c_copy while copying them out).
 * WF_EFORMAT naming both values when it does not match. */
int wf_ps_msg_verify(const wf_ps_msg *msg, uint32_t payload_crc, wf_err *err);

/* ---- statistics (the stats op's reply, JSON on the wire) ---- */

typedef struct wf_ps_stats {
	int server, nservers;
	double uptime;		       /* seconds */
	uint64_t pushes, pulls;	       /* since start */
	double push_rate, pull_rate;   /* per second, since start */
	uint64_t bytes_in, bytes_out;  /* payload+header bytes */
	int held;		       /* replies held (queue depth) */
	long version_min, version_max; /* over the server's chunks */
	int nworkers;
	long *worker_step; /* [nworkers] last step pushed, -1 none */
	int *worker_alive; /* [nworkers] 1 alive, 0 dead, -1 never seen */
	uint64_t rejected[WF_PS_REJECT__COUNT];
	int staleness;	   /* K of ssp:K; -1 in sync and async */
	uint64_t ssp_held; /* ssp: pushes whose reply waited for the bound */
	long ssp_max_lead; /* ssp: largest (step - slowest worker's step) answered */
	/* backup workers (sync, strategy.backup_workers > 0) or elastic
	 * membership (min_workers > 0); else 0 and NULL */
	int backup_workers;
	int min_workers;       /* elastic: the fewest workers a step may have; 0: not elastic */
	int live_workers;      /* workers alive now */
	long *worker_late;     /* [nworkers] steps whose push came after the step completed */
	long *worker_late_sum; /* [nworkers] sum over them of how many steps late */
	long *worker_late_max; /* [nworkers] the most steps late */
	long units_per_epoch;  /* the server handing out data units: units per epoch */
	long nepochs;	       /* epochs in units_applied/units_requeued; 0: not here */
	long *units_applied;   /* [nepochs] units whose gradient was applied */
	long *units_requeued;  /* [nepochs] units dropped as late and handed out again */
} wf_ps_stats;

/* JSON text of s (malloc'd, caller frees) / parse it back (fills s; free
 * with wf_ps_stats_free). */
int wf_ps_stats_to_json(const wf_ps_stats *s, char **out, wf_err *err);
int wf_ps_stats_from_json(wf_ps_stats *s, const char *json, size_t len, wf_err *err);
void wf_ps_stats_free(wf_ps_stats *s);
/* One log line: "ps 0/2: up 12.0 s, 3.1k push/s ... rejected: checksum=2". */
void wf_ps_stats_format(const wf_ps_stats *s, char *buf, size_t n);

#endif
