/* images.h: `weft data images`: a folder of photos (one sub-folder per class,
 * class names from the sorted folder names) into a dataset file, decoded and
 * resized (or, with `encoded`, kept as the original JPEG/PNG bytes) by the
 * image module weft-serve uses. */
#ifndef WF_IMAGES_H
#define WF_IMAGES_H

#include "common/error.h"

#include <stdint.h>

typedef struct wf_images_cfg {
	const char *dir;     /* DIR/CLASS/.../IMAGE.{jpg,jpeg,png} */
	const char *out;     /* dataset file (training part) */
	const char *val_out; /* validation dataset file, with val_split > 0 */
	double val_split;    /* fraction of the images for validation (0: none) */
	int h, w, c;	     /* stored size; c: 3 (RGB) or 1 (gray) */
	int resize;	     /* wf_image_resize */
	int threads;	     /* decoding threads (>= 1) */
	int encoded;	     /* keep the file bytes; the reader decodes */
	uint64_t seed;	     /* the split's shuffle */
	long max_pixels;     /* larger images are skipped (0: the image module's default) */
	int progress;	     /* progress line on stderr */
} wf_images_cfg;

typedef struct wf_images_result {
	long found;   /* image files found */
	long train;   /* samples written to out */
	long val;     /* samples written to val_out */
	long skipped; /* unreadable images, listed in OUT.skipped.txt */
	int nclasses;
} wf_images_result;

void wf_images_cfg_default(wf_images_cfg *cfg);
/* Convert; skipped files are named on stderr and in OUT.skipped.txt (removed
 * when nothing was skipped). Fails when no image at all could be read. */
int wf_data_images(const wf_images_cfg *cfg, wf_images_result *res, wf_err *err);

#endif
