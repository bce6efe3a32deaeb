/* image.h: turning what a client sends into model input: base64, JPEG
 * (libjpeg-turbo) and PNG (libpng) decoding, bilinear resizing to the model's
 * input size and the preprocessing recorded in the model file. Thread-safe:
 * no shared state. */
#ifndef WF_SERVE_IMAGE_H
#define WF_SERVE_IMAGE_H

#include "common/error.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* What a served model takes and gives, per sample. */
typedef struct wf_serve_io {
	int h, w, c;	       /* input [H,W,C] */
	int classes;	       /* output width K */
	float scale;	       /* preprocessing: x = (pixel * scale - mean[c]) / std[c] */
	float mean[4], std[4]; /* per channel, in the model's channel order */
	int bgr;	       /* 1 when the model was trained on BGR pixels */
} wf_serve_io;

/* Largest decoded image accepted: bounds memory per request. */
#define WF_SERVE_MAX_IMAGE_PIXELS (64L * 1024 * 1024) /* width x height */
#define WF_SERVE_MAX_IMAGE_SIDE	  65535		      /* width or height, pixels */

/* Fill io from a loaded model and its metadata (meta may be NULL: identity). */
void wf_serve_io_from_model(wf_serve_io *io, const wf_model *m, const wf_model_meta *meta);

/* Decode standard or URL-safe base64 (padding optional, whitespace
 * ignored) into a malloc'd buffer. Fails on any other character. */
int wf_serve_b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len, wf_err *err);
/* Encode n bytes as standard base64 into a malloc'd NUL-terminated string. */
char *wf_serve_b64_encode(const uint8_t *data, size_t n);

/* Preprocess one raw image px [H,W,C] uint8 in RGB order into out [H,W,C]. */
void wf_serve_preprocess_u8(const wf_serve_io *io, const uint8_t *px, float *out);

/* Decode an encoded image (JPEG, or PNG of any colour type, bit depth and
 * interlacing; PNG alpha is dropped, not composited), resize it bilinearly to
 * io->h x io->w and preprocess it into out [H,W,C]. Gray images feed RGB
 * models replicated, colour images feed 1-channel models as BT.601 luma. A
 * corrupt, truncated or oversized image fails with WF_EINVAL and a reason. */
int wf_serve_decode_image(const wf_serve_io *io, const uint8_t *bytes, size_t n, float *out,
			  wf_err *err);

#endif
