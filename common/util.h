/* util.h: small helpers every module uses: deterministic random numbers,
 * monotonic time, checked allocation, file-system helpers. */
#ifndef WF_UTIL_H
#define WF_UTIL_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

/* ---- deterministic random numbers (same stream on every machine) ---- */

/* Mix a 64-bit value (splitmix64 finaliser): a good hash of small ints. */
uint64_t wf_hash64(uint64_t x);
/* Hash of several values: wf_hash3(seed, a, b) keys streams by purpose. */
uint64_t wf_hash3(uint64_t seed, uint64_t a, uint64_t b);

typedef struct wf_rng {
	uint64_t s; /* state; any value is valid */
} wf_rng;

void wf_rng_seed(wf_rng *r, uint64_t seed);
uint64_t wf_rng_u64(wf_rng *r);
/* Uniform in [0, 1). */
double wf_rng_uniform(wf_rng *r);
/* Uniform integer in [0, n). */
uint64_t wf_rng_below(wf_rng *r, uint64_t n);
/* Standard normal (Box-Muller). */
double wf_rng_normal(wf_rng *r);

/* ---- time ---- */

/* Monotonic clock in seconds. */
double wf_now(void);
/* Sleep s seconds, through any signal that interrupts it. */
void wf_sleep(double s);
/* Sort v ascending in place. */
void wf_sort_doubles(double *v, size_t n);
/* Median of v[0..n) (n >= 1); sorts v in place. For benchmark timings. */
double wf_median(double *v, size_t n);

/* ---- files ---- */

/* mkdir -p; returns 0 or WF_EIO (errno kept). */
int wf_mkdirs(const char *path);
/* 1 when path exists (any type). */
int wf_exists(const char *path);
/* fsync a file or directory by path; returns 0 or WF_EIO. */
int wf_fsync_path(const char *path);
/* 0 when path is a regular file (or a link to one); WF_EIO "<path>: is a
 * directory" / "not a regular file (a FIFO, socket or device)" / the stat
 * error otherwise, before anything opens it (a FIFO would block the open). */
int wf_check_regular_file(const char *path, wf_err *err);
/* Read a whole file into a NUL-terminated malloc'd buffer (*len excludes the
 * NUL); refuses what wf_check_regular_file refuses (errno EISDIR or EINVAL). */
int wf_read_file(const char *path, char **data, size_t *len);

/* ---- misc ---- */
#define WF_MIN(a, b)	((a) < (b) ? (a) : (b))
#define WF_MAX(a, b)	((a) > (b) ? (a) : (b))
#define WF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Unlink node from the doubly linked list whose first node is head (nodes
 * with prev and next pointers). */
#define WF_LIST_UNLINK(head, node)                                                                 \
	do {                                                                                       \
		if ((node)->prev)                                                                  \
			(node)->prev->next = (node)->next;                                         \
		else                                                                               \
			(head) = (node)->next;                                                     \
		if ((node)->next)                                                                  \
			(node)->next->prev = (node)->prev;                                         \
	} while (0)

#endif
