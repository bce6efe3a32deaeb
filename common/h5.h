/* h5.h: the HDF5 helpers shared by the model file, the Keras importer, the
 * dataset file and the optimizer-state file: HDF5's error stack turned into
 * wf_err messages, opening with HDF5's own printing off, typed attributes
 * (strings, string lists, integers) and closing any id. Errors name the file
 * (`path`, only used in messages) and the attribute. */
#ifndef WF_H5_H
#define WF_H5_H

#include "common/error.h"

#include <hdf5.h>
#include <stdint.h>

/* ---- errors ---------------------------------------------------------------- */

/* Record code and "<message> (HDF5: <innermost cause>; <src>:<line>)" (just the
 * message when HDF5 recorded no cause), then clear HDF5's error stack. Call it
 * right after the failing HDF5 call, through WF_H5_FAIL. */
int wf_h5_fail(wf_err *err, int code, const char *src, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
#define WF_H5_FAIL(err, code, ...) wf_h5_fail(err, code, __FILE__, __LINE__, __VA_ARGS__)

/* HDF5 prints its error stack by default; between begin and end it does not.
 * The calling thread's setting is saved in q and restored by end. */
typedef struct wf_h5_quiet {
	H5E_auto2_t fn; /* the printer in place before begin */
	void *data;
} wf_h5_quiet;
void wf_h5_quiet_begin(wf_h5_quiet *q);
/* Turn HDF5's error printing off for the whole process (its errors reach the
 * user through wf_err): what a program's main does once. */
void wf_h5_quiet_process(void);
/* Clear the error stack and restore the setting saved by begin. */
void wf_h5_quiet_end(wf_h5_quiet *q);

/* ---- files and ids ------------------------------------------------------------ */

/* Open the existing HDF5 file path (flags H5F_ACC_RDONLY or H5F_ACC_RDWR) into
 * *file; WF_EFORMAT "<path>: not an HDF5 file, unreadable or truncated". */
int wf_h5_open(const char *path, unsigned flags, hid_t *file, wf_err *err);
/* Close *id, of any kind, when it is valid and set it to H5I_INVALID_HID;
 * returns 0, or -1 when HDF5 failed to close it (a file: not flushed). */
int wf_h5_close(hid_t *id);

/* A new HDF5 file built in memory (the core driver, no backing store):
 * nothing reaches the disk until wf_h5_commit_mem, so a full disk can never
 * leave libhdf5 with a half-closed file (it crashed at exit). path is only
 * used in messages. */
int wf_h5_create_mem(const char *path, hid_t *file, wf_err *err);
/* Close the in-memory *file and write its bytes to path atomically
 * (common/atomicfile); *file is closed in every case. A full disk is
 * WF_EIO naming path; the previous path is untouched. */
int wf_h5_commit_mem(hid_t *file, const char *path, wf_err *err);

/* A new float32 dataset name (a path from loc; its groups must exist) of rank
 * dims, written from data; WF_EIO "<path>: writing <name>". */
int wf_h5_write_f32(hid_t loc, const char *name, int rank, const hsize_t *dims, const float *data,
		    const char *path, wf_err *err);

/* Read the 1-D dataset name (a path from loc) of exactly n floats into data:
 * 0; -1 when absent or unreadable; -2 when it holds another count. Sets no
 * wf_err: the caller names the file and what it expected. */
int wf_h5_read_f32_exact(hid_t loc, const char *name, float *data, size_t n);

/* ---- writing attributes (new ones: the name must not exist yet) --------------- */

/* Attribute name on obj of n elements (n < 0: a scalar) read from data as
 * mtype and stored as ftype; WF_EIO "<path>: writing attribute <name>". */
int wf_h5_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, long n,
		     const void *data, const char *path, wf_err *err);
/* A scalar variable-length UTF-8 string. */
int wf_h5_attr_write_str(hid_t obj, const char *name, const char *s, const char *path, wf_err *err);
/* A 1-D array of n variable-length UTF-8 strings (none NULL; n may be 0). */
int wf_h5_attr_write_strs(hid_t obj, const char *name, const char *const *s, int n,
			  const char *path, wf_err *err);
/* A scalar 64-bit signed integer (H5T_STD_I64LE). */
int wf_h5_attr_write_i64(hid_t obj, const char *name, int64_t v, const char *path, wf_err *err);

/* ---- reading attributes (WF_EFORMAT naming path and name on any mismatch) ------ */

/* Exactly n elements (a scalar is one) of mtype's class (integer or float),
 * converted to mtype into v. */
int wf_h5_attr_read(hid_t obj, const char *name, hid_t mtype, int n, void *v, const char *path,
		    wf_err *err);
/* Exactly n integers of any integer type, as int64. */
int wf_h5_attr_read_i64(hid_t obj, const char *name, int64_t *v, int n, const char *path,
			wf_err *err);
/* All the strings of attribute name (a scalar or an array; variable or fixed
 * length, a fixed one whatever its padding) into *out, n malloc'd strings in a
 * malloc'd array (free with wf_h5_strs_free). An attribute with no elements is
 * an empty list whatever its type (Keras 3 writes an empty float64 array). */
int wf_h5_attr_read_strs(hid_t obj, const char *name, char ***out, int *n, const char *path,
			 wf_err *err);
/* Exactly one string (a scalar or a one-element array) into *out (malloc'd). */
int wf_h5_attr_read_str(hid_t obj, const char *name, char **out, const char *path, wf_err *err);
/* The string list name as Keras writes it: whole, or split into attributes
 * name0, name1, ... (past 64 KB), or both concatenated; absent: empty. */
int wf_h5_attr_read_str_list(hid_t obj, const char *name, char ***out, int *n, const char *path,
			     wf_err *err);
/* Free n strings and their array (s may be NULL). */
void wf_h5_strs_free(char **s, int n);

#endif
