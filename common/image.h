/* image.h: the one image module of weft, shared by weft-serve (request
 * images), the `weft data images` converter and the dataset reader (encoded
 * datasets): base64, JPEG (libjpeg-turbo: baseline, progressive, grayscale,
 * CMYK/YCCK) and PNG (libpng: any colour type, bit depth, interlacing)
 * decoding with the EXIF orientation applied, bilinear resizing (stretch,
 * centre crop or pad to the target aspect) and the model's preprocessing.
 * Image dimensions are checked from the header before any pixel buffer is
 * allocated. Thread-safe: no shared state. */
#ifndef WF_IMAGE_H
#define WF_IMAGE_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

/* Default largest decoded image (width x height), and the largest side. */
#define WF_IMAGE_MAX_PIXELS_DEFAULT (64L * 1024 * 1024)
#define WF_IMAGE_MAX_SIDE	    65535

/* How an image of another aspect ratio becomes H x W. */
typedef enum wf_image_resize {
	WF_RESIZE_FIT = 0, /* stretch to H x W (Keras's and weft-serve's default) */
	WF_RESIZE_CROP,	   /* centre crop to the aspect ratio of H x W, then resize */
	WF_RESIZE_PAD	   /* resize to fit inside, centre, pad with zeros */
} wf_image_resize;

/* What a model takes per sample and how an image becomes its input. */
typedef struct wf_image_io {
	int h, w, c;		     /* input [H,W,C] */
	int classes;		     /* output width K (serving) */
	float scale;		     /* preprocessing: x = (pixel * scale - mean[c]) / std[c] */
	float mean[4], std[4];	     /* per channel, in the model's channel order */
	int bgr;		     /* 1 when the model was trained on BGR pixels */
	int resize;		     /* wf_image_resize */
	long max_pixels;	     /* largest width x height decoded; 0: the default */
	const char *max_pixels_flag; /* the setting that raises max_pixels, named when an
				      * image is refused for its size; NULL: none */
	int unbatched;		     /* serving: tensors carry no batch dimension (one sample) */
	int raw_numbers;	     /* serving: numbers are raw pixels too and get the
				      * preprocessing (it is the model's own first layers) */
	const char *input_name;	     /* serving: the input as the model names it; NULL: none */
} wf_image_io;

/* Decode standard or URL-safe base64 (padding optional, whitespace
 * ignored) into a malloc'd buffer. Fails on any other character. */
int wf_b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len, wf_err *err);
/* Encode n bytes as standard base64 into a malloc'd NUL-terminated string. */
char *wf_b64_encode(const uint8_t *data, size_t n);

/* Parse a resize mode name ("fit", "crop", "pad"); -1 when unknown. */
int wf_image_resize_parse(const char *name);
const char *wf_image_resize_name(int mode);

/* Read the dimensions (after EXIF orientation) and format ("JPEG", "PNG")
 * from the header only. Fails with WF_EINVAL when the bytes are not a JPEG
 * or PNG or the header is damaged. */
int wf_image_probe(const uint8_t *bytes, size_t n, int *w, int *h, const char **format,
		   wf_err *err);

/* Decode to a malloc'd uint8 [*h, *w, c] (c: 1 gray or 3 RGB) with the EXIF
 * orientation applied. Gray images become RGB replicated, colour images gray
 * as BT.601 luma; PNG alpha is dropped, not composited. min_h/min_w (0: full
 * size) let a JPEG decode at a reduced DCT scale no smaller than that. Images
 * above max_pixels (0: default) or WF_IMAGE_MAX_SIDE fail before any pixel
 * buffer is allocated, naming limit_flag (the caller's setting for
 * max_pixels; NULL: none). Corrupt or truncated data fails with WF_EINVAL. */
int wf_image_decode_u8(const uint8_t *bytes, size_t n, int c, long max_pixels,
		       const char *limit_flag, int min_h, int min_w, uint8_t **px, int *h, int *w,
		       wf_err *err);

/* Resize src [sh,sw,c] into dst [dh,dw,c] (mode: wf_image_resize) with
 * half-pixel-centre bilinear sampling, as PIL and tf.image.resize, rounded. */
void wf_image_resize_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw,
			int mode);

/* Resize the rectangle src [sh,sw,c] whose rows are sstride pixels apart
 * into dst [dh,dw,c], as wf_image_resize_u8 with WF_RESIZE_FIT. */
void wf_image_resize_rect(const uint8_t *src, size_t sstride, int sh, int sw, int c, uint8_t *dst,
			  int dh, int dw);

/* Decode and resize to dst [dh,dw,c] uint8: what the converter stores and
 * what the reader and weft-serve feed the preprocessing. */
int wf_image_load_u8(const uint8_t *bytes, size_t n, int c, int dh, int dw, int mode,
		     long max_pixels, const char *limit_flag, uint8_t *dst, wf_err *err);

/* Preprocess one raw image px [H,W,C] uint8 in RGB order into out [H,W,C]. */
void wf_image_preprocess_u8(const wf_image_io *io, const uint8_t *px, float *out);
/* The same for n samples of raw pixel values as floats (RGB, 0-255, any
 * value allowed), in place: x [n,H,W,C]. */
void wf_image_preprocess_f32(const wf_image_io *io, float *x, size_t n);

/* Decode an encoded image (JPEG or PNG), resize it to io->h x io->w
 * (io->resize) and preprocess it into out [H,W,C]: wf_image_load_u8 then
 * wf_image_preprocess_u8, so a photo gives the same input over HTTP as from
 * a converted dataset. Fails with WF_EINVAL and a reason. */
int wf_image_decode(const wf_image_io *io, const uint8_t *bytes, size_t n, float *out, wf_err *err);

#endif
