/* atomicfile.h: atomic file replacement, the way PostgreSQL and etcd make a
 * file durable: write under a temporary name in the same directory, fsync
 * it, rename it over the target, fsync the directory. A reader sees the old
 * file or the new one, never a part; a crash or a full disk leaves the old
 * one. Every file weft writes goes through here. */
#ifndef WF_ATOMICFILE_H
#define WF_ATOMICFILE_H

#include "common/error.h"

#include <stddef.h>

/* The temporary name for path ("<path>.tmp-<pid>", same directory) into tmp;
 * WF_EINVAL when it does not fit in n bytes. */
int wf_atomic_tmp(const char *path, char *tmp, size_t n, wf_err *err);
/* fsync tmp, rename it to path, fsync path's directory. On failure tmp is
 * removed, the previous path is untouched and err names path and the cause
 * (ENOSPC: "No space left on device"); WF_EIO. */
int wf_atomic_commit(const char *tmp, const char *path, wf_err *err);
/* Remove a temporary file after a failed write (tmp may be NULL). */
void wf_atomic_abort(const char *tmp);
/* Replace path with the n bytes at data, atomically (tmp, write, commit). */
int wf_atomic_write(const char *path, const void *data, size_t n, wf_err *err);
/* fsync the directory that holds path; 0 or WF_EIO (errno kept). */
int wf_fsync_parent(const char *path);

#endif
