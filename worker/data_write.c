/* data_write.c: the dataset writer the converters use (see data.c): chunked
 * datasets written under a temporary name with running CRC-32s, renamed into
 * place on close. */
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
/* Writing                                                                   */

struct wf_dataset_writer {
	char *path;
	char *tmp; /* written here, renamed to path on close */
	hid_t file, dimages, dlabels;
	long count, written;
	int h, w, c, nclasses;
	int allow_short; /* close may end before count (converters that skip) */
	int encoded;	 /* `encoded` + `offsets` instead of `images` */
	hid_t dencoded;
	uint64_t *offsets; /* [count+1] (encoded) */
	uint32_t crc_encoded;
	uint32_t *sample_crc; /* [count] (encoded): each sample's bytes, for streaming readers */
	uint32_t crc_images, crc_labels; /* running CRC-32 of what was appended */
	/* per group of `group` samples (one images chunk): CRC-32s for readers
	 * that stream and check each group when they first read from it */
	long group, in_group, ngroups;
	uint32_t crc_group;
	int64_t *group_crc; /* [ceil(count / group)] */
};

static void writer_discard(wf_dataset_writer *wr)
{
	wf_data_h5_lock();
	wf_h5_close(&wr->dimages);
	wf_h5_close(&wr->dencoded);
	wf_h5_close(&wr->dlabels);
	wf_h5_close(&wr->file);
	wf_data_h5_unlock();
	free(wr->offsets);
	free(wr->sample_crc);
	free(wr->group_crc);
	if (wr->tmp)
		unlink(wr->tmp);
	free(wr->tmp);
	free(wr->path);
	free(wr);
}

void wf_dataset_writer_allow_short(wf_dataset_writer *wr)
{
	wr->allow_short = 1;
}

/* Store a dataset's CRC-32 as its attribute `crc32`. Lock held. */
static int write_crc(hid_t d, uint32_t crc, const char *path, const char *name, wf_err *err)
{
	int rc = wf_h5_attr_write_i64(d, "crc32", (int64_t)crc, path, err);
	if (rc)
		wf_err_wrap(err, "dataset `%s`", name);
	return rc;
}

/* Create a chunked dataset of the given rank and element type. Lock held. */
static hid_t create_chunked(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims,
			    const hsize_t *chunk)
{
	hid_t d = H5I_INVALID_HID;
	hsize_t maxdims[4] = {H5S_UNLIMITED, 0, 0, 0};
	for (int i = 1; i < rank && i < 4; i++)
		maxdims[i] = dims[i];
	hid_t s = H5Screate_simple(rank, dims, maxdims);
	hid_t p = H5Pcreate(H5P_DATASET_CREATE);
	if (s >= 0 && p >= 0 && H5Pset_chunk(p, rank, chunk) >= 0 &&
	    H5Pset_fill_time(p, H5D_FILL_TIME_NEVER) >= 0)
		d = H5Dcreate2(file, name, type, s, H5P_DEFAULT, p, H5P_DEFAULT);
	wf_h5_close(&p);
	wf_h5_close(&s);
	return d;
}

static int create_writer(wf_dataset_writer **out, const char *path, long count, int h, int w, int c,
			 int nclasses, const char *const *classes, int encoded, int resize,
			 wf_err *err);

int wf_dataset_create(wf_dataset_writer **out, const char *path, long count, int h, int w, int c,
		      int nclasses, const char *const *classes, wf_err *err)
{
	return create_writer(out, path, count, h, w, c, nclasses, classes, 0, 0, err);
}

int wf_dataset_create_encoded(wf_dataset_writer **out, const char *path, long count, int h, int w,
			      int c, int resize, int nclasses, const char *const *classes,
			      wf_err *err)
{
	if (c != 1 && c != 3)
		return wf_errf(err, WF_EINVAL, "%s: encoded images have 1 or 3 channels, not %d",
			       path, c);
	return create_writer(out, path, count, h, w, c, nclasses, classes, 1, resize, err);
}

static int create_writer(wf_dataset_writer **out, const char *path, long count, int h, int w, int c,
			 int nclasses, const char *const *classes, int encoded, int resize,
			 wf_err *err)
{
	int rc = 0;
	*out = NULL;
	if (count < 1 || h < 1 || w < 1 || c < 1 || c > 4 || h > 65536 || w > 65536)
		return wf_errf(err, WF_EINVAL,
			       "%s: bad dataset shape [%ld,%d,%d,%d] (want N >= 1, C in 1..4)",
			       path, count, h, w, c);
	if (nclasses < 1 || !classes)
		return wf_errf(err, WF_EINVAL, "%s: a dataset needs 1 or more class names", path);
	for (int i = 0; i < nclasses; i++) {
		if (!classes[i])
			return wf_errf(err, WF_EINVAL, "%s: class name %d is NULL", path, i);
	}
	wf_dataset_writer *wr = calloc(1, sizeof(*wr));
	if (!wr)
		return wf_errf(err, WF_ENOMEM, "%s: out of memory", path);
	wr->file = wr->dimages = wr->dlabels = wr->dencoded = H5I_INVALID_HID;
	wr->encoded = encoded;
	wr->count = count;
	wr->h = h;
	wr->w = w;
	wr->c = c;
	wr->nclasses = nclasses;
	size_t tlen = strlen(path) + 32;
	wr->path = strdup(path);
	wr->tmp = malloc(tlen);
	if (!wr->path || !wr->tmp) {
		free(wr->tmp);
		wr->tmp = NULL;
		writer_discard(wr);
		return wf_errf(err, WF_ENOMEM, "%s: out of memory", path);
	}
	snprintf(wr->tmp, tlen, "%s.tmp.%ld", path, (long)getpid());

	wf_data_h5_lock();
	wr->file = H5Fcreate(wr->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (wr->file < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: cannot create %s", path, wr->tmp);
		goto out;
	}
	size_t sb = (size_t)h * w * c;
	hsize_t per = CHUNK_TARGET_BYTES / sb;
	per = per < 1 ? 1 : per > CHUNK_MAX_IMAGES ? CHUNK_MAX_IMAGES : per;
	per = per > (hsize_t)count ? (hsize_t)count : per;
	wr->group = (long)per;
	wr->group_crc = calloc((size_t)((count + wr->group - 1) / wr->group), sizeof(int64_t));
	if (!wr->group_crc) {
		rc = wf_errf(err, WF_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	hsize_t idims[4] = {(hsize_t)count, (hsize_t)h, (hsize_t)w, (hsize_t)c};
	hsize_t ichunk[4] = {per, (hsize_t)h, (hsize_t)w, (hsize_t)c};
	hsize_t ldims[1] = {(hsize_t)count};
	hsize_t lchunk[1] = {(hsize_t)(count < LABEL_CHUNK ? count : LABEL_CHUNK)};
	if (encoded) {
		hsize_t edims[1] = {0}, echunk[1] = {CHUNK_TARGET_BYTES};
		int64_t size[3] = {h, w, c};
		wr->offsets = calloc((size_t)count + 1, sizeof(*wr->offsets));
		wr->sample_crc = calloc((size_t)count + 1, sizeof(*wr->sample_crc));
		if (!wr->offsets || !wr->sample_crc) {
			rc = wf_errf(err, WF_ENOMEM, "%s: out of memory for %ld offsets", path,
				     count);
			goto out;
		}
		wr->dencoded = create_chunked(wr->file, "encoded", H5T_STD_U8LE, 1, edims, echunk);
		if (wr->dencoded < 0) {
			rc = WF_H5_FAIL(err, WF_EIO, "%s: cannot create dataset `encoded`", path);
			goto out;
		}
		rc = wf_h5_attr_write(wr->file, "image_size", H5T_STD_I64LE, H5T_NATIVE_INT64, 3,
				      size, path, err);
		if (!rc)
			rc = wf_h5_attr_write_i64(wr->file, "resize", resize, path, err);
		if (rc)
			goto out;
	} else {
		wr->dimages = create_chunked(wr->file, "images", H5T_STD_U8LE, 4, idims, ichunk);
		if (wr->dimages < 0) {
			rc = WF_H5_FAIL(err, WF_EIO, "%s: cannot create dataset `images`", path);
			goto out;
		}
	}
	wr->dlabels = create_chunked(wr->file, "labels", H5T_STD_I32LE, 1, ldims, lchunk);
	if (wr->dlabels < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: cannot create dataset `labels`", path);
		goto out;
	}
	rc = wf_h5_attr_write_strs(wr->file, "classes", classes, nclasses, path, err);
out:
	wf_data_h5_unlock();
	if (rc) {
		writer_discard(wr);
		return rc;
	}
	*out = wr;
	return 0;
}

int wf_dataset_append(wf_dataset_writer *wr, const uint8_t *images, const int32_t *labels, long n,
		      wf_err *err)
{
	int rc = 0;
	if (n < 0 || n > wr->count - wr->written)
		return wf_errf(err, WF_EINVAL,
			       "%s: appending %ld samples after %ld exceeds the declared %ld",
			       wr->path, n, wr->written, wr->count);
	if (wr->encoded)
		return wf_errf(err, WF_EINVAL, "%s: an encoded dataset takes encoded images",
			       wr->path);
	for (long i = 0; i < n; i++) {
		if (labels[i] < 0 || labels[i] >= wr->nclasses)
			return wf_errf(err, WF_EINVAL,
				       "%s: label of sample %ld is %d, outside [0, %d)", wr->path,
				       wr->written + i, labels[i], wr->nclasses);
	}
	if (n == 0)
		return 0;
	wf_data_h5_lock();
	hid_t fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
	hsize_t off[4] = {(hsize_t)wr->written, 0, 0, 0};
	hsize_t cnt[4] = {(hsize_t)n, (hsize_t)wr->h, (hsize_t)wr->w, (hsize_t)wr->c};
	fs = H5Dget_space(wr->dimages);
	ms = H5Screate_simple(4, cnt, NULL);
	if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 ||
	    H5Dwrite(wr->dimages, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, images) < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: writing `images` at %ld", wr->path, wr->written);
		goto out;
	}
	wf_h5_close(&ms);
	wf_h5_close(&fs);
	fs = H5Dget_space(wr->dlabels);
	ms = H5Screate_simple(1, cnt, NULL);
	if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 ||
	    H5Dwrite(wr->dlabels, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, labels) < 0) {
		rc = WF_H5_FAIL(err, WF_EIO, "%s: writing `labels` at %ld", wr->path, wr->written);
		goto out;
	}
	wr->crc_images =
		wf_data_crc_bytes(wr->crc_images, images, (size_t)n * wr->h * wr->w * wr->c);
	for (long i = 0; i < n; i++) {
		size_t sb = (size_t)wr->h * wr->w * wr->c;
		wr->crc_group = wf_data_crc_bytes(wr->crc_group, images + (size_t)i * sb, sb);
		if (++wr->in_group == wr->group) {
			wr->group_crc[wr->ngroups++] = wr->crc_group;
			wr->crc_group = 0;
			wr->in_group = 0;
		}
	}
	wr->crc_labels = wf_data_crc_i32(wr->crc_labels, labels, n);
	wr->written += n;
out:
	wf_h5_close(&ms);
	wf_h5_close(&fs);
	wf_data_h5_unlock();
	return rc;
}

/* Write labels [written, written+n) and keep their checksum. Lock held. */
static int write_labels(wf_dataset_writer *wr, const int32_t *labels, long n, wf_err *err)
{
	int rc = 0;
	hsize_t off[1] = {(hsize_t)wr->written}, cnt[1] = {(hsize_t)n};
	hid_t fs = H5Dget_space(wr->dlabels), ms = H5Screate_simple(1, cnt, NULL);
	if (fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 ||
	    H5Dwrite(wr->dlabels, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, labels) < 0)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: writing `labels` at %ld", wr->path, wr->written);
	else
		wr->crc_labels = wf_data_crc_i32(wr->crc_labels, labels, n);
	wf_h5_close(&ms);
	wf_h5_close(&fs);
	return rc;
}

int wf_dataset_append_encoded(wf_dataset_writer *wr, const uint8_t *const *bytes,
			      const size_t *lens, const int32_t *labels, long n, wf_err *err)
{
	int rc = 0;
	if (!wr->encoded)
		return wf_errf(err, WF_EINVAL, "%s: not an encoded dataset", wr->path);
	if (n < 0 || n > wr->count - wr->written)
		return wf_errf(err, WF_EINVAL,
			       "%s: appending %ld samples after %ld exceeds the declared %ld",
			       wr->path, n, wr->written, wr->count);
	size_t total = 0;
	for (long i = 0; i < n; i++) {
		if (labels[i] < 0 || labels[i] >= wr->nclasses)
			return wf_errf(err, WF_EINVAL,
				       "%s: label of sample %ld is %d, outside [0, %d)", wr->path,
				       wr->written + i, labels[i], wr->nclasses);
		total += lens[i];
	}
	if (n == 0)
		return 0;
	uint8_t *flat = malloc(total ? total : 1);
	if (!flat)
		return wf_errf(err, WF_ENOMEM, "%s: out of memory for %zu bytes", wr->path, total);
	size_t at = 0;
	for (long i = 0; i < n; i++) {
		memcpy(flat + at, bytes[i], lens[i]);
		at += lens[i];
	}
	wf_data_h5_lock();
	uint64_t start = wr->offsets[wr->written];
	hsize_t off[1] = {start}, cnt[1] = {total}, size[1] = {start + total};
	hid_t fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
	if (total) {
		if (H5Dset_extent(wr->dencoded, size) < 0 ||
		    (fs = H5Dget_space(wr->dencoded)) < 0 ||
		    (ms = H5Screate_simple(1, cnt, NULL)) < 0 ||
		    H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 ||
		    H5Dwrite(wr->dencoded, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, flat) < 0) {
			rc = WF_H5_FAIL(err, WF_EIO, "%s: writing `encoded` at byte %llu", wr->path,
					(unsigned long long)start);
			goto out;
		}
	}
	if ((rc = write_labels(wr, labels, n, err)))
		goto out;
	wr->crc_encoded = wf_data_crc_bytes(wr->crc_encoded, flat, total);
	for (long i = 0; i < n; i++) {
		wr->offsets[wr->written + i + 1] = wr->offsets[wr->written + i] + lens[i];
		wr->sample_crc[wr->written + i] = wf_data_crc_bytes(0, bytes[i], lens[i]);
	}
	wr->written += n;
out:
	wf_h5_close(&ms);
	wf_h5_close(&fs);
	wf_data_h5_unlock();
	free(flat);
	return rc;
}

int wf_dataset_writer_close(wf_dataset_writer *wr, wf_err *err)
{
	int rc = 0;
	if (!wr)
		return 0;
	if (wr->written != wr->count && !(wr->allow_short && wr->written > 0)) {
		rc = wf_errf(err, WF_EINVAL, "%s: %ld samples written but %ld were declared",
			     wr->path, wr->written, wr->count);
		writer_discard(wr);
		return rc;
	}
	wf_data_h5_lock();
	if (wr->written != wr->count) {
		hsize_t idims[4] = {(hsize_t)wr->written, (hsize_t)wr->h, (hsize_t)wr->w,
				    (hsize_t)wr->c};
		if ((!wr->encoded && H5Dset_extent(wr->dimages, idims) < 0) ||
		    H5Dset_extent(wr->dlabels, idims) < 0)
			rc = WF_H5_FAIL(err, WF_EIO, "%s: shrinking to %ld samples", wr->path,
					wr->written);
	}
	if (!rc && wr->encoded) {
		hsize_t odims[1] = {(hsize_t)wr->written + 1};
		hid_t s = H5Screate_simple(1, odims, NULL);
		hid_t d = s < 0 ? H5I_INVALID_HID
				: H5Dcreate2(wr->file, "offsets", H5T_STD_U64LE, s, H5P_DEFAULT,
					     H5P_DEFAULT, H5P_DEFAULT);
		if (d < 0 ||
		    H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, wr->offsets) < 0)
			rc = WF_H5_FAIL(err, WF_EIO, "%s: writing `offsets`", wr->path);
		if (!rc)
			rc = write_crc(d,
				       wf_data_crc_bytes(0, (const uint8_t *)wr->offsets,
							 sizeof(*wr->offsets) * odims[0]),
				       wr->path, "offsets", err);
		if (!rc)
			rc = write_crc(wr->dencoded, wr->crc_encoded, wr->path, "encoded", err);
		wf_h5_close(&d);
		wf_h5_close(&s);
		if (!rc && wr->written) { /* each sample's CRC-32, for readers that stream */
			hsize_t cdims[1] = {(hsize_t)wr->written};
			s = H5Screate_simple(1, cdims, NULL);
			d = s < 0 ? H5I_INVALID_HID
				  : H5Dcreate2(wr->file, "sample_crc32", H5T_STD_U32LE, s,
					       H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
			if (d < 0 || H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
					      wr->sample_crc) < 0)
				rc = WF_H5_FAIL(err, WF_EIO, "%s: writing `sample_crc32`",
						wr->path);
			wf_h5_close(&d);
			wf_h5_close(&s);
		}
		wf_h5_close(&wr->dencoded);
	} else if (!rc) {
		rc = write_crc(wr->dimages, wr->crc_images, wr->path, "images", err);
		if (wr->in_group)
			wr->group_crc[wr->ngroups++] = wr->crc_group;
		int64_t g = wr->group;
		if (!rc)
			rc = wf_h5_attr_write(wr->dimages, "group_crc32", H5T_STD_I64LE,
					      H5T_NATIVE_INT64, wr->ngroups, wr->group_crc,
					      wr->path, err);
		if (!rc)
			rc = wf_h5_attr_write_i64(wr->dimages, "group_samples", g, wr->path, err);
	}
	if (!rc)
		rc = write_crc(wr->dlabels, wr->crc_labels, wr->path, "labels", err);
	wf_h5_close(&wr->dimages);
	wf_h5_close(&wr->dlabels);
	if (wf_h5_close(&wr->file) < 0 && !rc)
		rc = WF_H5_FAIL(err, WF_EIO, "%s: closing %s", wr->path, wr->tmp);
	wf_data_h5_unlock();
	if (!rc)
		rc = wf_atomic_commit(wr->tmp, wr->path, err); /* removes tmp on failure */
	if (!rc) {
		free(wr->tmp);
		wr->tmp = NULL; /* renamed: nothing to remove */
	}
	writer_discard(wr);
	return rc;
}
