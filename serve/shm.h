/* shm.h: Triton's system shared memory extension. A client on the same
 * machine puts tensors into a POSIX shared memory object, registers it under
 * a region name (key: the object's shm_open name, offset, byte_size), and
 * then names the region in an inference request instead of sending the
 * bytes: inputs are read from it and outputs written into it. The registry
 * is one per server, shared by HTTP and gRPC; thread-safe.
 *
 * A region maps another process's memory into weft-serve, read and written
 * on behalf of whoever names it, so who may register is a server setting
 * (wf_serve_shm_policy; weft-serve's default: nobody, as Triton's).
 * A region in use by a request stays mapped until that request is done,
 * even when unregistered meanwhile. */
#ifndef WF_SERVE_SHM_H
#define WF_SERVE_SHM_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
	WF_SHM_NONE,  /* the extension is off */
	WF_SHM_LOCAL, /* clients connecting from 127.0.0.0/8 or ::1 */
	WF_SHM_ALL,   /* any client (Triton's behaviour) */
} wf_serve_shm_policy;

typedef struct wf_serve_shm wf_serve_shm;
typedef struct wf_shm_region wf_shm_region;

/* What the status calls list of one region. */
typedef struct wf_serve_shm_info {
	char name[128];
	char key[256];
	uint64_t offset, byte_size;
} wf_serve_shm_info;

/* bytes [offset, offset + size) of a region, held by a request. */
typedef struct wf_serve_shm_view {
	wf_shm_region *region; /* NULL: nothing held */
	uint8_t *p;
	size_t len;
} wf_serve_shm_view;

wf_serve_shm *wf_serve_shm_create(wf_serve_shm_policy policy);
/* Unregisters everything (regions in use are unmapped by their last user). */
void wf_serve_shm_free(wf_serve_shm *s);
/* Parses "none", "local" or "all"; -1 for anything else. */
int wf_serve_shm_policy_parse(const char *s);
/* 1 when sa is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x). */
struct sockaddr;
int wf_serve_addr_is_loopback(const struct sockaddr *sa);
/* 0 when a client at loopback (local = 1) or elsewhere may use the
 * extension; else WF_ENOTSUP with the reason in err. */
int wf_serve_shm_allowed(const wf_serve_shm *s, int local, wf_err *err);

/* Maps byte_size bytes from offset of the shared memory object `key` as
 * region `name`. WF_EINVAL for a name already registered, a bad key, or an
 * object smaller than offset + byte_size. */
int wf_serve_shm_register(wf_serve_shm *s, const char *name, const char *key, uint64_t offset,
			  uint64_t byte_size, wf_err *err);
/* Unregisters region `name` (NULL or "": all); an unknown name is not an
 * error (Triton's behaviour). */
void wf_serve_shm_unregister(wf_serve_shm *s, const char *name);
/* The regions (name NULL or "": all, else that one: WF_EINVAL when
 * unknown): *out malloc'd, *n entries. */
int wf_serve_shm_status(wf_serve_shm *s, const char *name, wf_serve_shm_info **out, int *n,
			wf_err *err);

/* Holds bytes [offset, offset + size) of region `name` (WF_EINVAL when
 * unknown or out of the region). s may be NULL: the extension is absent. */
int wf_serve_shm_view_get(wf_serve_shm *s, const char *name, uint64_t offset, uint64_t size,
			  wf_serve_shm_view *v, wf_err *err);
void wf_serve_shm_view_put(wf_serve_shm_view *v);
/* memcpy that returns -1 instead of killing the process when src or dst
 * is a page of a shared memory object past the object's end (SIGBUS: the
 * client shrank it), 0 otherwise. The batcher copies every request's input
 * with it, so an FP32 input can be read in place from a region. */
int wf_serve_copy_guarded(void *dst, const void *src, size_t n);
/* Copy n bytes out of / into a view at byte `at`. The client may shrink its
 * object under us: a read or write past its end (SIGBUS) becomes WF_EIO
 * with a message instead of killing the server. */
int wf_serve_shm_read(const wf_serve_shm_view *v, size_t at, void *dst, size_t n, wf_err *err);
int wf_serve_shm_write(const wf_serve_shm_view *v, size_t at, const void *src, size_t n,
		       wf_err *err);
/* The size bytes at offset of region `name`, copied into *out (malloc'd). */
int wf_serve_shm_copy_out(wf_serve_shm *s, const char *name, uint64_t offset, uint64_t size,
			  uint8_t **out, wf_err *err);
/* n bytes of output `what` into region `name` at offset, where the request
 * offered size bytes (n > size: WF_EINVAL naming both). */
int wf_serve_shm_copy_in(wf_serve_shm *s, const char *name, uint64_t offset, uint64_t size,
			 const void *src, size_t n, const char *what, wf_err *err);

#endif
