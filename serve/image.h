/* image.h: turning what a client sends into model input: base64, JPEG
 * decoding (libjpeg-turbo), bilinear resizing to the model's input size and
 * the preprocessing recorded in the model file. Thread-safe: no shared state. */
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

/* Largest decoded image accepted (pixels): bounds memory per request. */
#define WF_SERVE_MAX_IMAGE_PIXELS (64L * 1024 * 1024)

/* Fill io from a loaded model and its metadata (meta may be NULL: identity). */
void wf_serve_io_from_model(wf_serve_io *io, const wf_model *m, const wf_model_meta *meta);

/* Decode standard or URL-safe base64 (padding optional, whitespace
 * ignored) into a malloc'd buffer. Fails on any other character. */
int wf_serve_b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len, wf_err *err);
/* Encode n bytes as standard base64 into a malloc'd NUL-terminated string. */
char *wf_serve_b64_encode(const uint8_t *data, size_t n);

/* Preprocess one raw image px [H,W,C] uint8 in RGB order into out [H,W,C]. */
void wf_serve_preprocess_u8(const wf_serve_io *io, const uint8_t *px, float *out);

/* Decode an encoded image (JPEG; PNG is recognised and refused), resize it
 * bilinearly to io->h x io->w and preprocess it into out [H,W,C]. */
int wf_serve_decode_image(const wf_serve_io *io, const uint8_t *bytes, size_t n, float *out,
			  wf_err *err);

#endif
