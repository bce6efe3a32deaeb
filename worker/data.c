/* data.c: the dataset file (HDF5) — opening and checking it, reading samples
 * from memory or streaming them from the chunked file (data_write.c holds
 * the writer the converters use). Every HDF5 call holds one global lock: a serial HDF5 need
 * not be thread-safe, and the reader thread reads while the main thread may
 * open another file. */
#include "worker/data.h"
#include "worker/data_priv.h"

#include "common/atomicfile.h"
#include "common/h5.h"
#include "common/image.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------------------ */
/* HDF5 lock                                                                 */

static pthread_mutex_t h5_mutex = PTHREAD_MUTEX_INITIALIZER;
static wf_h5_quiet h5_quiet; /* the holder's HDF5 printing setting, guarded by h5_mutex */

/* Take the HDF5 lock and turn HDF5's own printing off until wf_data_h5_unlock. */
void wf_data_h5_lock(void)
{
	pthread_mutex_lock(&h5_mutex);
	wf_h5_quiet_begin(&h5_quiet);
}

void wf_data_h5_unlock(void)
{
	wf_h5_quiet_end(&h5_quiet);
	pthread_mutex_unlock(&h5_mutex);
}

/* CRC-32 (zlib's) of n int32 labels as little-endian bytes. */
uint32_t wf_data_crc_i32(uint32_t crc, const int32_t *v, long n)
{
	uint8_t buf[4096];
	for (long i = 0; i < n;) {
		size_t k = 0;
		for (; i < n && k + 4 <= sizeof(buf); i++, k += 4) {
			uint32_t u = (uint32_t)v[i];
			buf[k] = (uint8_t)u, buf[k + 1] = (uint8_t)(u >> 8);
			buf[k + 2] = (uint8_t)(u >> 16), buf[k + 3] = (uint8_t)(u >> 24);
		}
		crc = (uint32_t)crc32(crc, buf, (uInt)k);
	}
	return crc;
}

/* CRC-32 of any number of bytes (zlib takes at most 4 GiB per call). */
uint32_t wf_data_crc_bytes(uint32_t crc, const uint8_t *b, size_t n)
{
	while (n > 0) {
		size_t k = n < (1u << 30) ? n : (1u << 30);
		crc = (uint32_t)crc32(crc, b, (uInt)k);
		b += k;
		n -= k;
	}
	return crc;
}

/* Check data against the optional attribute `crc32` of dataset `name`
 * (files from other tools may leave it out). Lock held. */
static int check_crc(hid_t file, const char *path, const char *name, uint32_t crc, wf_err *err)
{
	hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
	if (d < 0)
		return WF_H5_FAIL(err, WF_EFORMAT, "%s: cannot open `%s`", path, name);
	int rc = 0;
	if (H5Aexists(d, "crc32") > 0) {
		int64_t want = 0;
		rc = wf_h5_attr_read_i64(d, "crc32", &want, 1, path, err);
		if (!rc && (uint32_t)want != crc)
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: dataset `%s` fails its checksum (crc32 %08x, the file "
				     "says %08x): the file is damaged; convert it again",
				     path, name, crc, (uint32_t)want);
	}
	wf_h5_close(&d);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */

typedef struct gather_ent {
	long idx; /* sample index in the file */
	long pos; /* position in the caller's output */
} gather_ent;

struct wf_dataset {
	char *path;
	wf_dataset_info info;
	size_t sample_bytes; /* h*w*c */
	int32_t *labels;     /* [N], always in memory */
	uint8_t *images;     /* [N,H,W,C] when under the memory budget, else NULL */
	hid_t file, dimages; /* open only while streaming */
	/* streamed `images`: per-group CRC-32s checked on first read of a group */
	long group; /* samples per group; 0: no group checksums */
	long ngroups;
	uint32_t *group_crc; /* [ngroups] */
	uint8_t *group_ok;   /* [ngroups] 1 once checked */
	uint8_t *group_buf;  /* [group * sample_bytes] */
	/* encoded form: sample i is bytes [offsets[i], offsets[i+1]) of `encoded` */
	uint64_t *offsets;    /* [N+1] */
	uint8_t *enc;	      /* all of `encoded` when under the memory budget, else NULL */
	hid_t dencoded;	      /* open while streaming an encoded dataset */
	uint32_t *sample_crc; /* streaming encoded: each sample's CRC-32 (`sample_crc32`),
			       * checked at every read; NULL: the file has none */
	int resize;	      /* wf_image_resize of the encoded form */
	/* gather scratch, guarded by the HDF5 lock, grown (never per batch once warm) */
	gather_ent *order;
	long order_cap;
	uint8_t *scratch;
	size_t scratch_cap;
};

static long memory_mb = WF_DATA_MEMORY_MB_DEFAULT;

void wf_dataset_set_memory_mb(long mb)
{
	memory_mb = mb >= 0 ? mb : WF_DATA_MEMORY_MB_DEFAULT;
}

static size_t memory_budget(void)
{
	return (size_t)memory_mb << 20;
}

static const char *type_class_name(H5T_class_t c)
{
	switch (c) {
	case H5T_INTEGER: return "integer";
	case H5T_FLOAT: return "float";
	case H5T_STRING: return "string";
	case H5T_COMPOUND: return "compound";
	case H5T_ENUM: return "enum";
	case H5T_ARRAY: return "array";
	case H5T_VLEN: return "vlen";
	default: return "other";
	}
}

/* Open dataset `name`, check its element type (class, size (0: any), sign
 * (-1: any); want_name says it in words) and rank, and return its dims. Lock
 * held. */
static int open_checked(hid_t file, const char *path, const char *name, H5T_class_t want_class,
			size_t want_size, int want_unsigned, const char *want_name, int want_rank,
			hsize_t *dims, hid_t dapl, hid_t *out, wf_err *err)
{
	int rc = 0;
	hid_t d = H5I_INVALID_HID, t = H5I_INVALID_HID, s = H5I_INVALID_HID;
	hid_t p = H5I_INVALID_HID;
	htri_t ex = H5Lexists(file, name, H5P_DEFAULT);
	if (ex <= 0) {
		rc = wf_errf(err, WF_EFORMAT, "%s: dataset `%s` is missing", path, name);
		goto out;
	}
	d = H5Dopen2(file, name, dapl);
	if (d < 0) {
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: cannot open `%s` as a dataset", path, name);
		goto out;
	}
	t = H5Dget_type(d);
	s = H5Dget_space(d);
	if (t < 0 || s < 0) {
		rc = WF_H5_FAIL(err, WF_EFORMAT, "%s: cannot read type/shape of `%s`", path, name);
		goto out;
	}
	H5T_class_t cls = H5Tget_class(t);
	size_t size = H5Tget_size(t);
	int is_unsigned = cls == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
	if (cls != want_class || (want_size && size != want_size) ||
	    (cls == H5T_INTEGER && want_unsigned >= 0 && is_unsigned != want_unsigned)) {
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: dataset `%s` has type %s%s of %zu bytes, want %s", path, name,
			     cls == H5T_INTEGER ? (is_unsigned ? "unsigned " : "signed ") : "",
			     type_class_name(cls), size, want_name);
		goto out;
	}
	if (H5Sget_simple_extent_type(s) != H5S_SIMPLE) {
		rc = wf_errf(err, WF_EFORMAT, "%s: dataset `%s` is not a simple array", path, name);
		goto out;
	}
	int rank = H5Sget_simple_extent_ndims(s);
	if (rank != want_rank) {
		rc = wf_errf(err, WF_EFORMAT, "%s: dataset `%s` has rank %d, want %d", path, name,
			     rank, want_rank);
		goto out;
	}
	H5Sget_simple_extent_dims(s, dims, NULL);
	/* An unfiltered dataset must hold all its bytes: less means a truncated or
	 * unfinished file whose missing samples would read as fill values. */
	hsize_t need = size;
	for (int i = 0; i < rank; i++) {
		if (__builtin_mul_overflow(need, dims[i], &need)) {
			rc = wf_errf(err, WF_EFORMAT, "%s: dataset `%s` is too large", path, name);
			goto out;
		}
	}
	p = H5Dget_create_plist(d);
	if (p >= 0 && H5Pget_nfilters(p) == 0 && H5Dget_storage_size(d) < need) {
		rc = wf_errf(
			err, WF_EFORMAT,
			"%s: dataset `%s` stores %llu of its %llu bytes (truncated or unfinished "
			"file?)",
			path, name, (unsigned long long)H5Dget_storage_size(d),
			(unsigned long long)need);
		goto out;
	}
	*out = d;
	d = H5I_INVALID_HID;
out:
	wf_h5_close(&p);
	wf_h5_close(&s);
	wf_h5_close(&t);
	wf_h5_close(&d);
	return rc;
}

/* Read the root attribute `classes`: one or more strings. Lock held. */
static int read_classes(hid_t file, const char *path, char ***out, int *nout, wf_err *err)
{
	if (H5Aexists(file, "classes") <= 0)
		return wf_errf(err, WF_EFORMAT, "%s: attribute `classes` is missing", path);
	int rc = wf_h5_attr_read_strs(file, "classes", out, nout, path, err);
	if (!rc && *nout < 1) {
		wf_h5_strs_free(*out, *nout);
		*out = NULL;
		*nout = 0;
		rc = wf_errf(err, WF_EFORMAT, "%s: attribute `classes` must hold 1 or more strings",
			     path);
	}
	return rc;
}

/* Read images [start, start+n) of an open dataset into dst. Lock held. */
static int read_image_range(wf_dataset *ds, hid_t d, long start, long n, uint8_t *dst, wf_err *err)
{
	int rc = 0;
	const wf_dataset_info *in = &ds->info;
	hsize_t off[4] = {(hsize_t)start, 0, 0, 0};
	hsize_t cnt[4] = {(hsize_t)n, (hsize_t)in->h, (hsize_t)in->w, (hsize_t)in->c};
	hid_t fs = H5Dget_space(d), ms = H5Screate_simple(4, cnt, NULL);
	if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 ||
	    H5Dread(d, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst) < 0)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: reading `images` [%ld, %ld)", ds->path, start,
				start + n);
	wf_h5_close(&ms);
	wf_h5_close(&fs);
	return rc;
}

/* Streaming an encoded set: the optional `sample_crc32` [N] (uint32). */
static int read_sample_crcs(wf_dataset *ds, hid_t file, const char *path, wf_err *err)
{
	if (H5Lexists(file, "sample_crc32", H5P_DEFAULT) <= 0)
		return 0; /* written by another tool or an older weft: nothing to check */
	hsize_t dims[1];
	hid_t d = H5I_INVALID_HID;
	int rc = open_checked(file, path, "sample_crc32", H5T_INTEGER, 4, 1, "uint32", 1, dims,
			      H5P_DEFAULT, &d, err);
	if (!rc && dims[0] != (hsize_t)ds->info.count)
		rc = wf_errf(err, WF_EFORMAT, "%s: `sample_crc32` has %llu entries, want %ld", path,
			     (unsigned long long)dims[0], ds->info.count);
	if (!rc && !(ds->sample_crc = malloc(sizeof(uint32_t) * (size_t)(dims[0] + 1))))
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory for %llu checksums", path,
			     (unsigned long long)dims[0]);
	if (!rc && dims[0] &&
	    H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->sample_crc) < 0)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: reading `sample_crc32`", path);
	wf_h5_close(&d);
	return rc;
}

/* Read `labels` ([n], any integer type), check their range and checksum.
 * Lock held. */
static int read_labels(wf_dataset *ds, hid_t file, const char *path, long n, wf_err *err)
{
	hsize_t ldims[1];
	hid_t dlab = H5I_INVALID_HID;
	int rc = open_checked(file, path, "labels", H5T_INTEGER, 0, -1, "an integer type (int32)",
			      1, ldims, H5P_DEFAULT, &dlab, err);
	if (rc)
		return rc;
	if ((long)ldims[0] != n) {
		rc = wf_errf(err, WF_EFORMAT, "%s: %ld samples but `labels` has %llu", path, n,
			     (unsigned long long)ldims[0]);
		goto out;
	}
	ds->labels = malloc(sizeof(*ds->labels) * (size_t)(n ? n : 1));
	if (!ds->labels) {
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory for %ld labels", path, n);
		goto out;
	}
	if (n && H5Dread(dlab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->labels) < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: reading `labels`", path);
		goto out;
	}
	for (long i = 0; i < n; i++) {
		if (ds->labels[i] < 0 || ds->labels[i] >= ds->info.nclasses) {
			rc = wf_errf(
				err, WF_EFORMAT,
				"%s: `labels`[%ld] = %d is outside [0, %d) (the `classes` count)",
				path, i, ds->labels[i], ds->info.nclasses);
			goto out;
		}
	}
	rc = check_crc(file, path, "labels", wf_data_crc_i32(0, ds->labels, n), err);
out:
	wf_h5_close(&dlab);
	return rc;
}

/* Open the encoded form: `encoded` uint8 [B], `offsets` uint64 [N+1],
 * `labels` [N], attributes `classes`, `image_size` [H,W,C] and `resize`.
 * Takes ownership of file (closed, or kept for streaming). Lock held. */
static int open_encoded(wf_dataset *ds, hid_t file, const char *path, hid_t dapl, wf_err *err)
{
	int rc = 0;
	hid_t denc = H5I_INVALID_HID, doff = H5I_INVALID_HID;
	hsize_t edims[1], odims[1];
	wf_dataset_info *in = &ds->info;
	int64_t size[3] = {0, 0, 0}, resize = 0;
	if ((rc = wf_h5_attr_read_i64(file, "image_size", size, 3, path, err)))
		goto out;
	if (H5Aexists(file, "resize") > 0 &&
	    (rc = wf_h5_attr_read_i64(file, "resize", &resize, 1, path, err)))
		goto out;
	if (size[0] < 1 || size[1] < 1 || size[0] > 8192 || size[1] > 8192 ||
	    (size[2] != 1 && size[2] != 3) || resize < 0 || resize > 2) {
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: attribute `image_size` [%lld,%lld,%lld] is not [H,W,C] with H, "
			     "W in 1..8192 and C 1 or 3, or `resize` %lld is not 0..2",
			     path, (long long)size[0], (long long)size[1], (long long)size[2],
			     (long long)resize);
		goto out;
	}
	in->h = (int)size[0];
	in->w = (int)size[1];
	in->c = (int)size[2];
	in->encoded = 1;
	ds->resize = (int)resize;
	ds->sample_bytes = (size_t)in->h * in->w * in->c;
	if ((rc = open_checked(file, path, "encoded", H5T_INTEGER, 1, 1, "uint8", 1, edims, dapl,
			       &denc, err)))
		goto out;
	if ((rc = open_checked(file, path, "offsets", H5T_INTEGER, 8, 1, "uint64", 1, odims,
			       H5P_DEFAULT, &doff, err)))
		goto out;
	if (odims[0] < 1 || odims[0] - 1 > (hsize_t)1 << 40) {
		rc = wf_errf(err, WF_EFORMAT, "%s: `offsets` has %llu entries, want N+1 >= 1", path,
			     (unsigned long long)odims[0]);
		goto out;
	}
	in->count = (long)odims[0] - 1;
	ds->offsets = malloc(sizeof(*ds->offsets) * (size_t)odims[0]);
	if (!ds->offsets) {
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory for %llu offsets", path,
			     (unsigned long long)odims[0]);
		goto out;
	}
	if (H5Dread(doff, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->offsets) < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: reading `offsets`", path);
		goto out;
	}
	if (ds->offsets[0] != 0 || ds->offsets[in->count] != edims[0]) {
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: `offsets` must start at 0 and end at the %llu bytes of "
			     "`encoded` (they run %llu..%llu)",
			     path, (unsigned long long)edims[0], (unsigned long long)ds->offsets[0],
			     (unsigned long long)ds->offsets[in->count]);
		goto out;
	}
	for (long i = 0; i < in->count; i++) {
		if (ds->offsets[i + 1] < ds->offsets[i] ||
		    ds->offsets[i + 1] - ds->offsets[i] > (256u << 20)) {
			rc = wf_errf(err, WF_EFORMAT,
				     "%s: `offsets`[%ld..%ld] = %llu..%llu is not a sample of 0 to "
				     "256 MiB",
				     path, i, i + 1, (unsigned long long)ds->offsets[i],
				     (unsigned long long)ds->offsets[i + 1]);
			goto out;
		}
	}
	uint32_t ocrc = wf_data_crc_bytes(0, (const uint8_t *)ds->offsets,
					  sizeof(*ds->offsets) * (size_t)odims[0]);
	if ((rc = check_crc(file, path, "offsets", ocrc, err)))
		goto out;
	if ((rc = read_classes(file, path, &in->classes, &in->nclasses, err)))
		goto out;
	if ((rc = read_labels(ds, file, path, in->count, err)))
		goto out;
	if (edims[0] <= memory_budget()) {
		ds->enc = malloc(edims[0] ? edims[0] : 1);
		if (!ds->enc) {
			rc = wf_errf(err, WF_ENOMEM, "%s: out of memory for %llu encoded bytes",
				     path, (unsigned long long)edims[0]);
			goto out;
		}
		if (edims[0] &&
		    H5Dread(denc, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->enc) < 0) {
			rc = WF_H5_FAIL(err, WF_EIO, "%s: reading `encoded`", path);
			goto out;
		}
		rc = check_crc(file, path, "encoded", wf_data_crc_bytes(0, ds->enc, edims[0]), err);
	} else {
		rc = read_sample_crcs(ds, file, path, err);
		ds->file = file;
		ds->dencoded = denc;
		file = denc = H5I_INVALID_HID;
	}
out:
	wf_h5_close(&doff);
	wf_h5_close(&denc);
	wf_h5_close(&file);
	return rc;
}

/* Streaming: read the optional `group_crc32` / `group_samples` attributes of
 * `images`. Lock held. */
static int load_group_crcs(wf_dataset *ds, wf_err *err)
{
	if (H5Aexists(ds->dimages, "group_crc32") <= 0 ||
	    H5Aexists(ds->dimages, "group_samples") <= 0)
		return 0; /* written by another tool: nothing to check */
	int64_t g = 0;
	int rc = wf_h5_attr_read_i64(ds->dimages, "group_samples", &g, 1, ds->path, err);
	if (rc)
		return rc;
	long ng = g > 0 ? (long)((ds->info.count + g - 1) / g) : 0;
	if (g < 1 || g > (1L << 30) || ng > (1L << 24))
		return wf_errf(err, WF_EFORMAT,
			       "%s: `images` attribute `group_samples` = %lld is not in 1..2^30",
			       ds->path, (long long)g);
	int64_t *v = malloc(sizeof(*v) * (size_t)ng);
	ds->group_crc = malloc(sizeof(*ds->group_crc) * (size_t)ng);
	ds->group_ok = calloc((size_t)ng, 1);
	ds->group_buf = malloc(ds->sample_bytes * (size_t)g);
	if (!v || !ds->group_crc || !ds->group_ok || !ds->group_buf) {
		free(v);
		return wf_errf(err, WF_ENOMEM, "%s: out of memory for %ld checksums", ds->path, ng);
	}
	rc = wf_h5_attr_read_i64(ds->dimages, "group_crc32", v, (int)ng, ds->path, err);
	for (long i = 0; !rc && i < ng; i++)
		ds->group_crc[i] = (uint32_t)v[i];
	free(v);
	if (!rc) {
		ds->group = (long)g;
		ds->ngroups = ng;
	}
	return rc;
}

/* Streaming: check the groups holding samples [first, last] that were not
 * checked yet, reading each whole group once. Lock held. */
static int check_groups(wf_dataset *ds, long first, long last, wf_err *err)
{
	if (!ds->group)
		return 0;
	for (long g = first / ds->group; g <= last / ds->group && g < ds->ngroups; g++) {
		if (ds->group_ok[g])
			continue;
		long s = g * ds->group, n = WF_MIN(ds->group, ds->info.count - s);
		int rc = read_image_range(ds, ds->dimages, s, n, ds->group_buf, err);
		if (rc)
			return rc;
		uint32_t crc = wf_data_crc_bytes(0, ds->group_buf, ds->sample_bytes * (size_t)n);
		if (crc != ds->group_crc[g])
			return wf_errf(
				err, WF_EFORMAT,
				"%s: dataset `images` samples [%ld, %ld) fail their checksum "
				"(crc32 %08x, the file says %08x): the file is damaged; convert "
				"it again",
				ds->path, s, s + n, crc, ds->group_crc[g]);
		ds->group_ok[g] = 1;
	}
	return 0;
}

/* The shape of `images` (idims) checked, into ds->info. */
static int take_shape(wf_dataset *ds, const hsize_t *idims, wf_err *err)
{
	const char *path = ds->path;
	wf_dataset_info *in = &ds->info;
	if (idims[1] < 1 || idims[2] < 1 || idims[1] > 65536 || idims[2] > 65536 || idims[3] < 1 ||
	    idims[3] > 4)
		return wf_errf(
			err, WF_EFORMAT,
			"%s: `images` shape [N,%llu,%llu,%llu] is not [N,H,W,C] with C in 1..4",
			path, (unsigned long long)idims[1], (unsigned long long)idims[2],
			(unsigned long long)idims[3]);
	if (idims[0] > (hsize_t)1 << 40)
		return wf_errf(err, WF_EFORMAT, "%s: `images` has %llu samples: too many", path,
			       (unsigned long long)idims[0]);
	in->count = (long)idims[0];
	in->h = (int)idims[1];
	in->w = (int)idims[2];
	in->c = (int)idims[3];
	ds->sample_bytes = (size_t)in->h * in->w * in->c;
	return 0;
}

int wf_dataset_open(wf_dataset **out, const char *path, wf_err *err)
{
	int rc = 0;
	hid_t file = H5I_INVALID_HID, dimg = H5I_INVALID_HID;
	hid_t dapl = H5I_INVALID_HID;
	*out = NULL;
	wf_dataset *ds = calloc(1, sizeof(*ds));
	if (!ds)
		return wf_errf(err, WF_ENOMEM, "%s: out of memory", path);
	ds->file = ds->dimages = ds->dencoded = H5I_INVALID_HID;
	ds->path = strdup(path);
	if (!ds->path) {
		free(ds);
		return wf_errf(err, WF_ENOMEM, "%s: out of memory", path);
	}
	if (!wf_exists(path)) {
		rc = wf_errf(err, WF_EIO, "%s: no such dataset file", path);
		goto fail_unlocked;
	}
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		rc = wf_errf(err, WF_EINVAL,
			     "%s is a directory, not a dataset file; a folder of photos (one "
			     "sub-folder per class) becomes one with: weft data images %s --out "
			     "data.h5",
			     path, path);
		goto fail_unlocked;
	}

	wf_data_h5_lock();
	if ((rc = wf_h5_open(path, H5F_ACC_RDONLY, &file, err)))
		goto fail;
	dapl = H5Pcreate(H5P_DATASET_ACCESS);
	if (dapl < 0 || H5Pset_chunk_cache(dapl, CHUNK_CACHE_SLOTS, CHUNK_CACHE_BYTES, 1.0) < 0) {
		rc = WF_H5_FAIL(err, WF_EINTERNAL, "%s: cannot set the chunk cache", path);
		goto fail;
	}
	hsize_t idims[4];
	if (H5Lexists(file, "encoded", H5P_DEFAULT) > 0) {
		rc = open_encoded(ds, file, path, dapl, err);
		if (rc)
			goto fail;
		file = H5I_INVALID_HID; /* kept by open_encoded when streaming, else closed */
		wf_h5_close(&dapl);
		wf_data_h5_unlock();
		*out = ds;
		return 0;
	}
	rc = open_checked(file, path, "images", H5T_INTEGER, 1, 1, "uint8", 4, idims, dapl, &dimg,
			  err);
	if (rc)
		goto fail;
	wf_dataset_info *in = &ds->info;
	if ((rc = take_shape(ds, idims, err)) ||
	    (rc = read_classes(file, path, &in->classes, &in->nclasses, err)) ||
	    (rc = read_labels(ds, file, path, in->count, err)))
		goto fail;
	size_t bytes = ds->sample_bytes * (size_t)in->count;
	if (bytes <= memory_budget()) {
		ds->images = malloc(bytes ? bytes : 1);
		if (!ds->images) {
			rc = wf_errf(err, WF_ENOMEM, "%s: out of memory for %zu image bytes", path,
				     bytes);
			goto fail;
		}
		if (in->count) {
			rc = read_image_range(ds, dimg, 0, in->count, ds->images, err);
			if (rc)
				goto fail;
		}
		rc = check_crc(file, path, "images", wf_data_crc_bytes(0, ds->images, bytes), err);
		if (rc)
			goto fail;
		wf_h5_close(&dimg);
		wf_h5_close(&file);
	} else {
		ds->file = file;
		ds->dimages = dimg;
		file = dimg = H5I_INVALID_HID;
		rc = load_group_crcs(ds, err);
		if (rc)
			goto fail;
	}
	wf_h5_close(&dapl);
	wf_data_h5_unlock();
	*out = ds;
	return 0;

fail:
	wf_h5_close(&dimg);
	wf_h5_close(&dapl);
	wf_h5_close(&file);
	wf_data_h5_unlock();
fail_unlocked:
	wf_dataset_close(ds);
	return rc;
}

void wf_dataset_close(wf_dataset *ds)
{
	if (!ds)
		return;
	if (ds->dimages >= 0 || ds->file >= 0 || ds->dencoded >= 0) {
		wf_data_h5_lock();
		wf_h5_close(&ds->dencoded);
		wf_h5_close(&ds->dimages);
		wf_h5_close(&ds->file);
		wf_data_h5_unlock();
	}
	wf_h5_strs_free(ds->info.classes, ds->info.nclasses);
	free(ds->labels);
	free(ds->images);
	free(ds->offsets);
	free(ds->enc);
	free(ds->group_crc);
	free(ds->sample_crc);
	free(ds->group_ok);
	free(ds->group_buf);
	free(ds->order);
	free(ds->scratch);
	free(ds->path);
	free(ds);
}

const wf_dataset_info *wf_dataset_info_get(const wf_dataset *ds)
{
	return &ds->info;
}

int wf_dataset_load_sample(wf_dataset *ds, long idx, uint8_t *image, wf_err *err)
{
	if (idx < 0 || idx >= ds->info.count)
		return wf_errf(err, WF_EINVAL, "%s: sample index %ld outside [0, %ld)", ds->path,
			       idx, ds->info.count);
	if (!ds->info.encoded) {
		if (ds->images) {
			memcpy(image, ds->images + (size_t)idx * ds->sample_bytes,
			       ds->sample_bytes);
			return 0;
		}
		return wf_dataset_read(ds, idx, 1, image, NULL, err);
	}
	uint64_t off = ds->offsets[idx];
	size_t len = (size_t)(ds->offsets[idx + 1] - off);
	const uint8_t *bytes = ds->enc ? ds->enc + off : NULL;
	uint8_t *owned = NULL;
	int rc = 0;
	if (!bytes) { /* streaming: this sample's bytes only */
		owned = malloc(len ? len : 1);
		if (!owned)
			return wf_errf(err, WF_ENOMEM, "%s: out of memory for sample %ld", ds->path,
				       idx);
		wf_data_h5_lock();
		hsize_t o = off, cnt = len;
		hid_t fs = H5Dget_space(ds->dencoded), ms = H5Screate_simple(1, &cnt, NULL);
		if (len &&
		    (fs < 0 || ms < 0 ||
		     H5Sselect_hyperslab(fs, H5S_SELECT_SET, &o, NULL, &cnt, NULL) < 0 ||
		     H5Dread(ds->dencoded, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, owned) < 0))
			rc = WF_H5_FAIL(err, WF_EIO, "%s: reading sample %ld of `encoded`",
					ds->path, idx);
		wf_h5_close(&ms);
		wf_h5_close(&fs);
		wf_data_h5_unlock();
		bytes = owned;
		uint32_t crc = rc || !ds->sample_crc ? 0 : wf_data_crc_bytes(0, owned, len);
		if (!rc && ds->sample_crc && crc != ds->sample_crc[idx])
			rc = wf_errf(
				err, WF_EFORMAT,
				"%s: sample %ld of dataset `encoded` fails its checksum (crc32 "
				"%08x, `sample_crc32` says %08x): the file is damaged; convert "
				"it again",
				ds->path, idx, crc, ds->sample_crc[idx]);
	}
	if (!rc) {
		rc = wf_image_load_u8(bytes, len, ds->info.c, ds->info.h, ds->info.w, ds->resize, 0,
				      NULL, image, err);
		if (rc)
			wf_err_wrap(err, "%s: sample %ld", ds->path, idx);
	}
	free(owned);
	return rc;
}

int wf_dataset_read(wf_dataset *ds, long start, long n, uint8_t *images, int32_t *labels,
		    wf_err *err)
{
	if (start < 0 || n < 0 || start > ds->info.count || n > ds->info.count - start)
		return wf_errf(err, WF_EINVAL, "%s: read of [%ld, %ld) outside [0, %ld)", ds->path,
			       start, start + n, ds->info.count);
	if (n == 0)
		return 0;
	if (labels)
		memcpy(labels, ds->labels + start, sizeof(*labels) * (size_t)n);
	if (!images)
		return 0;
	if (ds->info.encoded) {
		for (long k = 0; k < n; k++) {
			int rc = wf_dataset_load_sample(ds, start + k,
							images + (size_t)k * ds->sample_bytes, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (ds->images) {
		memcpy(images, ds->images + (size_t)start * ds->sample_bytes,
		       ds->sample_bytes * (size_t)n);
		return 0;
	}
	wf_data_h5_lock();
	int rc = check_groups(ds, start, start + n - 1, err);
	if (!rc)
		rc = read_image_range(ds, ds->dimages, start, n, images, err);
	wf_data_h5_unlock();
	return rc;
}

static int cmp_gather(const void *a, const void *b)
{
	const gather_ent *x = a, *y = b;
	if (x->idx != y->idx)
		return x->idx < y->idx ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Streaming gather: sort the indices, select each run of consecutive samples
 * as one hyperslab, read them all in one call (HDF5 walks the chunks in file
 * order through its chunk cache), then scatter to the caller's order. */
static int gather_stream(wf_dataset *ds, const long *idx, long n, uint8_t *images, wf_err *err)
{
	int rc = 0;
	const wf_dataset_info *in = &ds->info;
	size_t sb = ds->sample_bytes;
	hid_t fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
	if (n > ds->order_cap) {
		gather_ent *o = realloc(ds->order, sizeof(*o) * (size_t)n);
		if (!o)
			return wf_errf(err, WF_ENOMEM, "%s: out of memory gathering %ld", ds->path,
				       n);
		ds->order = o;
		ds->order_cap = n;
	}
	if ((size_t)n * sb > ds->scratch_cap) {
		uint8_t *s = realloc(ds->scratch, (size_t)n * sb);
		if (!s)
			return wf_errf(err, WF_ENOMEM, "%s: out of memory gathering %ld", ds->path,
				       n);
		ds->scratch = s;
		ds->scratch_cap = (size_t)n * sb;
	}
	for (long k = 0; k < n; k++) {
		ds->order[k].idx = idx[k];
		ds->order[k].pos = k;
	}
	qsort(ds->order, (size_t)n, sizeof(*ds->order), cmp_gather);
	for (long k = 0; k < n; k++) { /* each touched group checked once */
		int crc_rc = check_groups(ds, ds->order[k].idx, ds->order[k].idx, err);
		if (crc_rc)
			return crc_rc;
	}

	fs = H5Dget_space(ds->dimages);
	if (fs < 0 || H5Sselect_none(fs) < 0)
		goto h5fail;
	long uniq = 0;
	for (long k = 0; k < n;) {
		long first = ds->order[k].idx, last = first;
		while (k < n && ds->order[k].idx <= last + 1) {
			last = ds->order[k].idx;
			k++;
		}
		hsize_t off[4] = {(hsize_t)first, 0, 0, 0};
		hsize_t cnt[4] = {(hsize_t)(last - first + 1), (hsize_t)in->h, (hsize_t)in->w,
				  (hsize_t)in->c};
		if (H5Sselect_hyperslab(fs, H5S_SELECT_OR, off, NULL, cnt, NULL) < 0)
			goto h5fail;
		uniq += last - first + 1;
	}
	hsize_t mdim = (hsize_t)uniq * sb;
	ms = H5Screate_simple(1, &mdim, NULL);
	if (ms < 0 || H5Dread(ds->dimages, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, ds->scratch) < 0)
		goto h5fail;
	long u = -1, prev = -1;
	for (long k = 0; k < n; k++) {
		if (ds->order[k].idx != prev) {
			u++;
			prev = ds->order[k].idx;
		}
		memcpy(images + (size_t)ds->order[k].pos * sb, ds->scratch + (size_t)u * sb, sb);
	}
	goto out;
h5fail:
	rc = WF_H5_FAIL(err, WF_EIO, "%s: gathering %ld samples from `images`", ds->path, n);
out:
	wf_h5_close(&ms);
	wf_h5_close(&fs);
	return rc;
}

int wf_dataset_gather(wf_dataset *ds, const long *idx, long n, uint8_t *images, int32_t *labels,
		      wf_err *err)
{
	for (long k = 0; k < n; k++) {
		if (idx[k] < 0 || idx[k] >= ds->info.count)
			return wf_errf(err, WF_EINVAL, "%s: sample index %ld outside [0, %ld)",
				       ds->path, idx[k], ds->info.count);
	}
	if (labels) {
		for (long k = 0; k < n; k++)
			labels[k] = ds->labels[idx[k]];
	}
	if (!images || n == 0)
		return 0;
	if (ds->info.encoded) {
		for (long k = 0; k < n; k++) {
			int rc = wf_dataset_load_sample(ds, idx[k],
							images + (size_t)k * ds->sample_bytes, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (ds->images) {
		for (long k = 0; k < n; k++)
			memcpy(images + (size_t)k * ds->sample_bytes,
			       ds->images + (size_t)idx[k] * ds->sample_bytes, ds->sample_bytes);
		return 0;
	}
	wf_data_h5_lock();
	int rc = gather_stream(ds, idx, n, images, err);
	wf_data_h5_unlock();
	return rc;
}
