/* image.c: base64, JPEG decoding, bilinear resize and preprocessing. */
#include "serve/image.h"

#include <setjmp.h>
#include <stdio.h>
/* jpeglib.h needs stdio.h first */
#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>

void wf_serve_io_from_model(wf_serve_io *io, const wf_model *m, const wf_model_meta *meta)
{
	memset(io, 0, sizeof(*io));
	io->h = m->in_h;
	io->w = m->in_w;
	io->c = m->in_c;
	io->classes = m->classes;
	io->scale = 1.0f;
	for (int i = 0; i < 4; i++) {
		io->mean[i] = 0.0f;
		io->std[i] = 1.0f;
	}
	if (!meta)
		return;
	io->scale = meta->scale;
	for (int i = 0; i < 4; i++) {
		io->mean[i] = meta->mean[i];
		io->std[i] = meta->std[i] != 0.0f ? meta->std[i] : 1.0f;
	}
	io->bgr = strncmp(meta->channel_order, "BGR", 3) == 0;
}

/* ---- base64 ---------------------------------------------------------- */

static int b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+' || ch == '-')
		return 62;
	if (ch == '/' || ch == '_')
		return 63;
	return -1;
}

int wf_serve_b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len, wf_err *err)
{
	uint8_t *buf = malloc(n / 4 * 3 + 4);
	if (!buf)
		return wf_errf(err, WF_ENOMEM, "base64: out of memory for %zu bytes", n);
	size_t len = 0, pad = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
			continue;
		if (ch == '=') {
			pad++;
			continue;
		}
		int v = b64_value(ch);
		if (v < 0 || pad) {
			free(buf);
			return wf_errf(err, WF_EINVAL,
				       "invalid base64: unexpected character at offset %zu", i);
		}
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[len++] = (uint8_t)(acc >> bits);
		}
	}
	if (bits >= 6 || pad > 2) {
		free(buf);
		return wf_errf(err, WF_EINVAL, "invalid base64: truncated input");
	}
	*out = buf;
	*out_len = len;
	return 0;
}

char *wf_serve_b64_encode(const uint8_t *data, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc((n + 2) / 3 * 4 + 1);
	if (!s)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)data[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)data[i + 1] << 8;
		if (i + 2 < n)
			v |= data[i + 2];
		s[o++] = tab[(v >> 18) & 63];
		s[o++] = tab[(v >> 12) & 63];
		s[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
		s[o++] = i + 2 < n ? tab[v & 63] : '=';
	}
	s[o] = 0;
	return s;
}

/* ---- preprocessing --------------------------------------------------- */

/* v: one pixel's channels in RGB order (floats in pixel units). */
static inline void preprocess_pixel(const wf_serve_io *io, const float *v, float *out)
{
	for (int j = 0; j < io->c; j++) {
		float p = (io->bgr && io->c == 3) ? v[2 - j] : v[j];
		out[j] = (p * io->scale - io->mean[j]) / io->std[j];
	}
}

void wf_serve_preprocess_u8(const wf_serve_io *io, const uint8_t *px, float *out)
{
	size_t npx = (size_t)io->h * io->w;
	float v[4];
	for (size_t i = 0; i < npx; i++) {
		for (int j = 0; j < io->c && j < 4; j++)
			v[j] = px[i * io->c + j];
		preprocess_pixel(io, v, out + i * io->c);
	}
}

/* Bilinear resize with half-pixel centres (as PIL and tf.image.resize do)
 * of src [sh,sw,c] uint8 into out [io->h,io->w,c], preprocessing each pixel. */
static void resize_preprocess(const wf_serve_io *io, const uint8_t *src, int sh, int sw, float *out)
{
	int c = io->c;
	float fy = (float)sh / io->h, fx = (float)sw / io->w;
	float v[4];
	for (int y = 0; y < io->h; y++) {
		float sy = (y + 0.5f) * fy - 0.5f;
		if (sy < 0)
			sy = 0;
		int y0 = (int)sy, y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
		float wy = sy - y0;
		for (int x = 0; x < io->w; x++) {
			float sx = (x + 0.5f) * fx - 0.5f;
			if (sx < 0)
				sx = 0;
			int x0 = (int)sx, x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
			float wx = sx - x0;
			const uint8_t *p00 = src + ((size_t)y0 * sw + x0) * c;
			const uint8_t *p01 = src + ((size_t)y0 * sw + x1) * c;
			const uint8_t *p10 = src + ((size_t)y1 * sw + x0) * c;
			const uint8_t *p11 = src + ((size_t)y1 * sw + x1) * c;
			for (int j = 0; j < c; j++) {
				float top = p00[j] + (p01[j] - p00[j]) * wx;
				float bot = p10[j] + (p11[j] - p10[j]) * wx;
				v[j] = top + (bot - top) * wy;
			}
			preprocess_pixel(io, v, out + ((size_t)y * io->w + x) * c);
		}
	}
}

/* ---- JPEG ------------------------------------------------------------ */

typedef struct jpeg_guard {
	struct jpeg_error_mgr mgr;
	jmp_buf jump;
	char msg[JMSG_LENGTH_MAX];
} jpeg_guard;

static void jpeg_fail(j_common_ptr cinfo)
{
	jpeg_guard *g = (jpeg_guard *)cinfo->err;
	(*cinfo->err->format_message)(cinfo, g->msg);
	longjmp(g->jump, 1);
}

static void jpeg_quiet(j_common_ptr cinfo)
{
	(void)cinfo;
}

static int decode_jpeg(const wf_serve_io *io, const uint8_t *bytes, size_t n, float *out,
		       wf_err *err)
{
	struct jpeg_decompress_struct cinfo;
	jpeg_guard guard;
	uint8_t *volatile pixels = NULL;
	volatile int rc = 0;

	memset(&cinfo, 0, sizeof(cinfo));
	cinfo.err = jpeg_std_error(&guard.mgr);
	guard.mgr.error_exit = jpeg_fail;
	guard.mgr.output_message = jpeg_quiet;
	guard.msg[0] = 0;
	if (setjmp(guard.jump)) {
		rc = wf_errf(err, WF_EINVAL, "invalid JPEG image: %s", guard.msg);
		goto out_destroy;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, bytes, (unsigned long)n);
	jpeg_read_header(&cinfo, TRUE);
	cinfo.out_color_space = io->c == 1 ? JCS_GRAYSCALE : JCS_RGB;
	jpeg_start_decompress(&cinfo);
	int sw = (int)cinfo.output_width, sh = (int)cinfo.output_height;
	if ((long)sw * sh > WF_SERVE_MAX_IMAGE_PIXELS || cinfo.output_components != io->c) {
		rc = wf_errf(err, WF_EINVAL, "JPEG image %dx%d with %d channels is not accepted",
			     sw, sh, cinfo.output_components);
		goto out_destroy;
	}
	size_t stride = (size_t)sw * io->c;
	pixels = malloc(stride * sh);
	if (!pixels) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory decoding a %dx%d JPEG", sw, sh);
		goto out_destroy;
	}
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW row = pixels + stride * cinfo.output_scanline;
		jpeg_read_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_decompress(&cinfo);
	resize_preprocess(io, pixels, sh, sw, out);
out_destroy:
	jpeg_destroy_decompress(&cinfo);
	free(pixels);
	return rc;
}

int wf_serve_decode_image(const wf_serve_io *io, const uint8_t *bytes, size_t n, float *out,
			  wf_err *err)
{
	static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
	if (io->c != 1 && io->c != 3)
		return wf_errf(err, WF_EINVAL,
			       "images cannot feed a model with %d input channels; send numbers",
			       io->c);
	if (n >= 8 && memcmp(bytes, png_magic, 8) == 0)
		return wf_errf(err, WF_EINVAL,
			       "PNG images are not supported; send JPEG or a numeric tensor");
	if (n < 3 || bytes[0] != 0xff || bytes[1] != 0xd8)
		return wf_errf(err, WF_EINVAL, "image is not a JPEG (no SOI marker; %zu bytes)", n);
	return decode_jpeg(io, bytes, n, out, err);
}
