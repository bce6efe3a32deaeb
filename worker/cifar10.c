/* cifar10.c: `weft data cifar10`, CIFAR-10 binary batches into one dataset
 * file. A batch file is a run of 3073-byte records: one label byte, then the
 * 32x32 red plane, green plane and blue plane, each row-major; the dataset
 * stores images NHWC. */
#include "worker/data.h"

#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CIFAR_SIDE   32
#define CIFAR_PLANE  (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + 3 * CIFAR_PLANE) /* bytes */
#define CIFAR_BLOCK  1000		   /* records per append */

static const char *const cifar_classes[] = {
	"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
};

/* Record count of one batch file, or a negative code naming the file. */
static int cifar_count(const char *path, long *count, wf_err *err)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return wf_errf(err, WF_EIO, "%s: cannot read CIFAR-10 batch: %s", path,
			       strerror(errno));
	if (!S_ISREG(st.st_mode))
		return wf_errf(err, WF_EIO, "%s: not a regular file", path);
	if (st.st_size == 0 || st.st_size % CIFAR_RECORD != 0)
		return wf_errf(err, WF_EFORMAT,
			       "%s: size %lld is not a positive multiple of the %d-byte CIFAR-10 "
			       "record",
			       path, (long long)st.st_size, CIFAR_RECORD);
	*count = (long)(st.st_size / CIFAR_RECORD);
	return 0;
}

/* Convert n records of rec into NHWC images and labels. */
static int cifar_convert(const char *path, long first, const uint8_t *rec, long n, uint8_t *images,
			 int32_t *labels, wf_err *err)
{
	for (long i = 0; i < n; i++) {
		const uint8_t *r = rec + (size_t)i * CIFAR_RECORD;
		if (r[0] >= WF_ARRAY_LEN(cifar_classes))
			return wf_errf(err, WF_EFORMAT, "%s: record %ld has label %d, want 0..9",
				       path, first + i, r[0]);
		labels[i] = r[0];
		uint8_t *img = images + (size_t)i * 3 * CIFAR_PLANE;
		for (int p = 0; p < CIFAR_PLANE; p++)
			for (int ch = 0; ch < 3; ch++)
				img[p * 3 + ch] = r[1 + ch * CIFAR_PLANE + p];
	}
	return 0;
}

int wf_data_cifar10(const char *out_path, const char *const *batch_files, int nfiles, wf_err *err)
{
	int rc = 0;
	long total = 0;
	FILE *f = NULL;
	wf_dataset_writer *wr = NULL;
	uint8_t *rec = NULL, *images = NULL;
	int32_t *labels = NULL;
	if (nfiles < 1)
		return wf_errf(err, WF_EINVAL, "cifar10: no batch files given");
	/* Check every file's size before writing anything. */
	for (int i = 0; i < nfiles; i++) {
		long n;
		rc = cifar_count(batch_files[i], &n, err);
		if (rc)
			return rc;
		total += n;
	}
	rec = malloc((size_t)CIFAR_RECORD * CIFAR_BLOCK);
	images = malloc((size_t)3 * CIFAR_PLANE * CIFAR_BLOCK);
	labels = malloc(sizeof(*labels) * CIFAR_BLOCK);
	if (!rec || !images || !labels) {
		rc = wf_errf(err, WF_ENOMEM, "cifar10: out of memory");
		goto out;
	}
	rc = wf_dataset_create(&wr, out_path, total, CIFAR_SIDE, CIFAR_SIDE, 3,
			       (int)WF_ARRAY_LEN(cifar_classes), cifar_classes, err);
	if (rc)
		goto out;
	for (int i = 0; i < nfiles; i++) {
		const char *path = batch_files[i];
		long n, done = 0;
		rc = cifar_count(path, &n, err);
		if (rc)
			goto out;
		f = fopen(path, "rb");
		if (!f) {
			rc = wf_errf(err, WF_EIO, "%s: cannot open: %s", path, strerror(errno));
			goto out;
		}
		while (done < n) {
			long k = WF_MIN((long)CIFAR_BLOCK, n - done);
			if (fread(rec, CIFAR_RECORD, (size_t)k, f) != (size_t)k) {
				rc = wf_errf(err, WF_EIO, "%s: short read at record %ld", path,
					     done);
				goto out;
			}
			rc = cifar_convert(path, done, rec, k, images, labels, err);
			if (rc)
				goto out;
			rc = wf_dataset_append(wr, images, labels, k, err);
			if (rc)
				goto out;
			done += k;
		}
		fclose(f);
		f = NULL;
	}
	rc = wf_dataset_writer_close(wr, err);
	wr = NULL;
out:
	if (f)
		fclose(f);
	if (wr)
		wf_dataset_writer_close(wr, NULL); /* incomplete: removes the temporary file */
	free(rec);
	free(images);
	free(labels);
	return rc;
}
