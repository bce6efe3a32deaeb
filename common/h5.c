/* h5.c: the HDF5 helpers of h5.h. Strings are read through HDF5's own
 * conversion into a memory type one byte longer than the stored one, so a
 * fixed-length string that fills its field keeps its last character and
 * space padding is stripped by the library. */
#include "common/h5.h"

#include "common/atomicfile.h"
#include "common/sandbox.h"
#include "common/util.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define STRS_MAX      1000000	/* strings in one attribute or list */
#define STR_BYTES_MAX (1 << 30) /* bytes of one fixed-length attribute read */

/* ---- errors ---------------------------------------------------------------- */

static herr_t innermost_cb(unsigned n, const H5E_error2_t *e, void *data)
{
	if (n == 0 && e->desc)
		snprintf((char *)data, 256, "%s", e->desc);
	return 0;
}

int wf_h5_fail(wf_err *err, int code, const char *src, int line, const char *fmt, ...)
{
	char msg[768], lib[256] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, lib);
	H5Eclear2(H5E_DEFAULT);
	const char *base = strrchr(src, '/');
	if (lib[0])
		return wf_errf(err, code, "%s (HDF5: %s; %s:%d)", msg, lib, base ? base + 1 : src,
			       line);
	return wf_errf(err, code, "%s", msg);
}

void wf_h5_quiet_begin(wf_h5_quiet *q)
{
	H5Eget_auto2(H5E_DEFAULT, &q->fn, &q->data);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void wf_h5_quiet_end(wf_h5_quiet *q)
{
	H5Eclear2(H5E_DEFAULT);
	H5Eset_auto2(H5E_DEFAULT, q->fn, q->data);
}

/* ---- files and ids ------------------------------------------------------------ */

void wf_h5_quiet_process(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

int wf_h5_open(const char *path, unsigned flags, hid_t *file, wf_err *err)
{
	wf_h5_quiet q;
	*file = H5I_INVALID_HID;
	int rc = wf_check_regular_file(path, err);
	if (rc)
		return rc;
	wf_h5_quiet_begin(&q);
	*file = H5Fis_hdf5(path) > 0 ? H5Fopen(path, flags, H5P_DEFAULT) : H5I_INVALID_HID;
	if (*file < 0)
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: not an HDF5 file, unreadable or truncated",
				path);
	wf_h5_quiet_end(&q);
	return rc;
}

int wf_h5_close(hid_t *id)
{
	herr_t rc;
	if (*id < 0)
		return 0;
	switch (H5Iget_type(*id)) {
	case H5I_FILE: rc = H5Fclose(*id); break;
	case H5I_GROUP: rc = H5Gclose(*id); break;
	case H5I_DATASET: rc = H5Dclose(*id); break;
	case H5I_ATTR: rc = H5Aclose(*id); break;
	case H5I_DATATYPE: rc = H5Tclose(*id); break;
	case H5I_DATASPACE: rc = H5Sclose(*id); break;
	case H5I_GENPROP_LST: rc = H5Pclose(*id); break;
	default: rc = H5Idec_ref(*id); break;
	}
	*id = H5I_INVALID_HID;
	return rc < 0 ? -1 : 0;
}

int wf_h5_create_mem(const char *path, hid_t *file, wf_err *err)
{
	static unsigned long seq; /* core-driver names must differ while open */
	char name[64];
	int rc = 0;
	wf_h5_quiet q;
	wf_h5_quiet_begin(&q);
	snprintf(name, sizeof(name), "weft-mem-%lu", __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	*file = fapl < 0 || H5Pset_fapl_core(fapl, 1 << 20, 0) < 0
			? H5I_INVALID_HID
			: H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	if (*file < 0)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: cannot create the file in memory", path);
	wf_h5_close(&fapl);
	wf_h5_quiet_end(&q);
	return rc;
}

int wf_h5_commit_mem(hid_t *file, const char *path, wf_err *err)
{
	int rc = 0;
	void *img = NULL;
	wf_h5_quiet q;
	wf_h5_quiet_begin(&q);
	ssize_t n = H5Fflush(*file, H5F_SCOPE_GLOBAL) < 0 ? -1 : H5Fget_file_image(*file, NULL, 0);
	if (n > 0 && (img = malloc((size_t)n)) == NULL)
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory (%zd bytes)", path, n);
	else if (n <= 0 || H5Fget_file_image(*file, img, (size_t)n) != n)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: cannot build the file image", path);
	if (wf_h5_close(file) < 0 && !rc)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: closing the in-memory file", path);
	wf_h5_quiet_end(&q);
	if (!rc)
		rc = wf_atomic_write(path, img, (size_t)n, err);
	free(img);
	return rc;
}

int wf_h5_write_f32(hid_t loc, const char *name, int rank, const hsize_t *dims, const float *data,
		    const char *path, wf_err *err)
{
	int rc = 0;
	hid_t sp = H5Screate_simple(rank, dims, NULL);
	hid_t d = sp < 0 ? H5I_INVALID_HID
			 : H5Dcreate2(loc, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
				      H5P_DEFAULT);
	if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: writing %s", path, name);
	wf_h5_close(&d);
	wf_h5_close(&sp);
	return rc;
}

int wf_h5_read_f32_exact(hid_t loc, const char *name, float *p, size_t n)
{
	if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
		return -1;
	hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
	if (d < 0)
		return -1;
	hid_t sp = H5Dget_space(d);
	hsize_t dims[1] = {0};
	int rc = -1;
	if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 1) {
		H5Sget_simple_extent_dims(sp, dims, NULL);
		rc = dims[0] != n
			     ? -2
			     : (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, p) < 0
					? -1
					: 0);
	}
	if (sp >= 0)
		H5Sclose(sp);
	H5Dclose(d);
	return rc;
}

/* ---- writing attributes ---------------------------------------------------------- */

int wf_h5_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, long n,
		     const void *data, const char *path, wf_err *err)
{
	hsize_t dim = n < 0 ? 0 : (hsize_t)n;
	hid_t space = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
	hid_t a = space < 0 ? H5I_INVALID_HID
			    : H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
	int rc = 0;
	if (a < 0 || (n != 0 && H5Awrite(a, mtype, data) < 0))
		rc = WF_H5_FAIL(err, WF_EIO, "%s: writing attribute %s", path, name);
	wf_h5_close(&a);
	wf_h5_close(&space);
	return rc;
}

/* n variable-length UTF-8 strings (n < 0: one, as a scalar). */
static int write_vlen_strs(hid_t obj, const char *name, const char *const *s, long n,
			   const char *path, wf_err *err)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	if (t < 0 || H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
		int rc = WF_H5_FAIL(err, WF_EIO, "%s: writing attribute %s", path, name);
		wf_h5_close(&t);
		return rc;
	}
	int rc = wf_h5_attr_write(obj, name, t, t, n, s, path, err);
	wf_h5_close(&t);
	return rc;
}

int wf_h5_attr_write_str(hid_t obj, const char *name, const char *s, const char *path, wf_err *err)
{
	return write_vlen_strs(obj, name, &s, -1, path, err);
}

int wf_h5_attr_write_strs(hid_t obj, const char *name, const char *const *s, int n,
			  const char *path, wf_err *err)
{
	return write_vlen_strs(obj, name, s, n, path, err);
}

int wf_h5_attr_write_i64(hid_t obj, const char *name, int64_t v, const char *path, wf_err *err)
{
	return wf_h5_attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, -1, &v, path, err);
}

/* ---- reading attributes ------------------------------------------------------------ */

int wf_h5_attr_read(hid_t obj, const char *name, hid_t mtype, int n, void *v, const char *path,
		    wf_err *err)
{
	int rc = 0;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	hid_t ft = a < 0 ? H5I_INVALID_HID : H5Aget_type(a);
	hid_t sp = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
	hssize_t got = 0;
	if (a < 0 || ft < 0 || sp < 0) /* before any other call: each clears HDF5's stack */
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: attribute %s: cannot be opened", path, name);
	else if (H5Tget_class(ft) != H5Tget_class(mtype))
		rc = wf_errf(err, WF_EFORMAT, "%s: attribute %s: expected %s", path, name,
			     H5Tget_class(mtype) == H5T_INTEGER ? "an integer"
								: "a floating-point number");
	else if ((got = H5Sget_simple_extent_npoints(sp)) != n)
		rc = wf_errf(err, WF_EFORMAT, "%s: attribute %s: expected %d value%s, got %lld",
			     path, name, n, n == 1 ? "" : "s", (long long)got);
	else if (H5Aread(a, mtype, v) < 0)
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: attribute %s: cannot be read", path, name);
	wf_h5_close(&sp);
	wf_h5_close(&ft);
	wf_h5_close(&a);
	return rc;
}

int wf_h5_attr_read_i64(hid_t obj, const char *name, int64_t *v, int n, const char *path,
			wf_err *err)
{
	return wf_h5_attr_read(obj, name, H5T_NATIVE_INT64, n, v, path, err);
}

void wf_h5_strs_free(char **s, int n)
{
	for (int i = 0; s && i < n; i++)
		free(s[i]);
	free(s);
}

/* The size of the file that holds obj, in bytes (0 when unknown). */
static size_t file_bytes(hid_t obj)
{
	hid_t f = H5Iget_file_id(obj);
	hsize_t size = 0;
	if (f < 0 || H5Fget_filesize(f, &size) < 0)
		size = 0;
	wf_h5_close(&f);
	return (size_t)size;
}

/* Append the strings of attribute name on obj to *list (*n entries, grown). */
static int append_strs(hid_t obj, const char *name, char ***list, int *n, const char *path,
		       wf_err *err)
{
	int rc = 0;
	void *buf = NULL;
	hid_t mt = H5I_INVALID_HID;
	hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
	hid_t ft = a < 0 ? H5I_INVALID_HID : H5Aget_type(a);
	hid_t sp = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
	if (a < 0 || ft < 0 || sp < 0) {
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: attribute %s: cannot be opened", path, name);
		goto done;
	}
	hssize_t cnt = H5Sget_simple_extent_npoints(sp);
	if (cnt == 0)
		goto done;
	if (H5Tget_class(ft) != H5T_STRING) {
		rc = wf_errf(err, WF_EFORMAT, "%s: attribute %s: expected strings", path, name);
		goto done;
	}
	int vlen = H5Tis_variable_str(ft) > 0;
	size_t each = vlen ? sizeof(char *) : H5Tget_size(ft) + 1; /* fixed: room for a NUL */
	size_t limit = file_bytes(obj); /* the strings are stored in the file */
	if (cnt < 0 || cnt > STRS_MAX - *n || each < 2 || (size_t)cnt > STR_BYTES_MAX / each ||
	    (!vlen && limit && (size_t)cnt * (each - 1) > limit)) {
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: attribute %s: bad size (%lld strings of %zu bytes)", path, name,
			     (long long)cnt, vlen ? (size_t)0 : each - 1);
		goto done;
	}
	mt = H5Tcopy(H5T_C_S1);
	if (mt < 0 || H5Tset_size(mt, vlen ? H5T_VARIABLE : each) < 0 ||
	    H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0 || H5Tset_cset(mt, H5Tget_cset(ft)) < 0) {
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: attribute %s: bad string type", path, name);
		goto done;
	}
	buf = calloc((size_t)cnt, each);
	char **grown = realloc(*list, sizeof(*grown) * (size_t)(*n + cnt));
	if (grown)
		*list = grown;
	if (!buf || !grown) {
		rc = wf_errf(err, WF_ENOMEM, "%s: attribute %s: out of memory", path, name);
		goto done;
	}
	if (H5Aread(a, mt, buf) < 0) {
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: attribute %s: cannot be read", path, name);
		goto done;
	}
	size_t total = 0;
	for (hssize_t i = 0; i < cnt && !rc; i++) {
		const char *s = vlen ? ((char **)buf)[i] : (char *)buf + (size_t)i * each;
		total += s ? strlen(s) : 0;
		if (limit && total > limit) {
			/* every string is stored in the file: a longer one is a corrupt length */
			rc = wf_errf(
				err, WF_EFORMAT,
				"%s: attribute %s: %zu bytes of strings in a file of %zu bytes: "
				"corrupt",
				path, name, total, limit);
			break;
		}
		char *copy = strdup(s ? s : "");
		if (copy)
			(*list)[(*n)++] = copy;
		else
			rc = wf_errf(err, WF_ENOMEM, "%s: attribute %s: out of memory", path, name);
	}
	if (vlen)
		H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, buf);
done:
	free(buf);
	wf_h5_close(&mt);
	wf_h5_close(&sp);
	wf_h5_close(&ft);
	wf_h5_close(&a);
	return rc;
}

/* ---- variable-length strings: a first read in a child process ---------------

 * libhdf5 1.10 follows a vlen string's global-heap reference without bounds
 * checks: two corrupt bytes crash or hang it. Every attribute of
 * variable-length strings is therefore read first in a short-lived child
 * (common/sandbox) and in-process only when the child succeeded; fixed-length
 * strings live in the attribute itself and are read directly. */

#define STR_CHECK_SECONDS 10.0
/* Memory a string read may take: libhdf5 needs about twice the strings,
 * which are stored in the file. */
#define STR_MEM_BASE ((size_t)64 << 20) /* bytes, plus 4 x the file's size */

typedef struct str_probe {
	hid_t obj;
	const char *name, *path;
	int list; /* wf_h5_attr_read_str_list rather than one attribute */
} str_probe;

static int read_all(hid_t obj, const char *name, int list, char ***out, int *n, const char *path,
		    wf_err *err);

static int probe_fn(void *arg, wf_err *err)
{
	str_probe *p = arg;
	char **s;
	int n;
	int rc = read_all(p->obj, p->name, p->list, &s, &n, p->path, err);
	if (!rc)
		wf_h5_strs_free(s, n);
	return rc;
}

/* 1 when attribute name (a list: also name0, name1, ...) holds vlen data. */
static int has_vlen(hid_t obj, const char *name, int list)
{
	char part[256];
	int found = 0;
	for (int k = -1; !found; k++) {
		if (k >= 0)
			snprintf(part, sizeof(part), "%s%d", name, k);
		const char *an = k < 0 ? name : part;
		if (H5Aexists(obj, an) <= 0) {
			if (k < 0 && list)
				continue;
			break;
		}
		hid_t a = H5Aopen(obj, an, H5P_DEFAULT);
		hid_t t = a < 0 ? H5I_INVALID_HID : H5Aget_type(a);
		found = t < 0 || (H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) != 0) ||
			H5Tget_class(t) == H5T_VLEN;
		wf_h5_close(&t);
		wf_h5_close(&a);
		if (!list)
			break;
	}
	H5Eclear2(H5E_DEFAULT);
	return found;
}

static int checked_read(hid_t obj, const char *name, int list, char ***out, int *n,
			const char *path, wf_err *err)
{
	*out = NULL;
	*n = 0;
	if (!has_vlen(obj, name, list))
		return read_all(obj, name, list, out, n, path, err);
	size_t mem = STR_MEM_BASE + WF_SANDBOX_MEM_PER_BYTE * file_bytes(obj);
	if (wf_sandbox_active()) {
		/* already in a checking child (a whole-file check): no second fork,
		 * only this read's own deadline (SIGALRM ends the child) and memory */
		unsigned left = alarm((unsigned)STR_CHECK_SECONDS);
		size_t prev = wf_sandbox_narrow(mem);
		int rc = read_all(obj, name, list, out, n, path, err);
		wf_sandbox_widen(prev);
		alarm(left);
		if (rc && prev && wf_sandbox_out_of_memory(rc, err->msg))
			rc = wf_errf(
				err, WF_EFORMAT,
				"%s: attribute %s: reading its strings needed more than %zu MiB: "
				"the file is corrupt (or crafted), refused",
				path, name, mem >> 20);
		return rc;
	}
	{
		str_probe p = {obj, name, path, list};
		char what[600];
		snprintf(what, sizeof(what), "%s: attribute %s", path, name);
		int rc = wf_sandbox_check(what, STR_CHECK_SECONDS, mem, probe_fn, &p, err);
		if (rc)
			return rc;
	}
	return read_all(obj, name, list, out, n, path, err);
}

int wf_h5_attr_read_strs(hid_t obj, const char *name, char ***out, int *n, const char *path,
			 wf_err *err)
{
	return checked_read(obj, name, 0, out, n, path, err);
}

int wf_h5_attr_read_str(hid_t obj, const char *name, char **out, const char *path, wf_err *err)
{
	char **s;
	int n;
	*out = NULL;
	int rc = wf_h5_attr_read_strs(obj, name, &s, &n, path, err);
	if (rc)
		return rc;
	if (n != 1) {
		wf_h5_strs_free(s, n);
		return wf_errf(err, WF_EFORMAT, "%s: attribute %s: expected one string, got %d",
			       path, name, n);
	}
	*out = s[0];
	free(s);
	return 0;
}

int wf_h5_attr_read_str_list(hid_t obj, const char *name, char ***out, int *n, const char *path,
			     wf_err *err)
{
	return checked_read(obj, name, 1, out, n, path, err);
}

/* The strings of attribute name (list: name, then name0, name1, ...). */
static int read_all(hid_t obj, const char *name, int list, char ***out, int *n, const char *path,
		    wf_err *err)
{
	char part[256];
	int rc = 0;
	*out = NULL;
	*n = 0;
	if (!list || H5Aexists(obj, name) > 0)
		rc = append_strs(obj, name, out, n, path, err);
	for (int k = 0; list && !rc; k++) {
		snprintf(part, sizeof(part), "%s%d", name, k);
		if (H5Aexists(obj, part) <= 0)
			break;
		rc = append_strs(obj, part, out, n, path, err);
	}
	if (rc) {
		wf_h5_strs_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return rc;
}
