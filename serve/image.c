/* image.c: base64, JPEG and PNG decoding, bilinear resize and preprocessing. */
#include "serve/image.h"

#include <png.h>
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

/* Refuse images whose decoded size would exceed the limits of image.h. */
static int check_size(const char *kind, uint32_t w, uint32_t h, wf_err *err)
{
	if (w > WF_SERVE_MAX_IMAGE_SIDE || h > WF_SERVE_MAX_IMAGE_SIDE)
		return wf_errf(err, WF_EINVAL,
			       "%s image %ux%u is too large: the limit is %d pixels per side", kind,
			       w, h, WF_SERVE_MAX_IMAGE_SIDE);
	if ((uint64_t)w * h > (uint64_t)WF_SERVE_MAX_IMAGE_PIXELS)
		return wf_errf(err, WF_EINVAL,
			       "%s image %ux%u is too large: the limit is %ld pixels in all", kind,
			       w, h, (long)WF_SERVE_MAX_IMAGE_PIXELS);
	return 0;
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
	rc = check_size("JPEG", (uint32_t)sw, (uint32_t)sh, err);
	if (rc)
		goto out_destroy;
	if (cinfo.output_components != io->c) {
		rc = wf_errf(err, WF_EINVAL, "JPEG image %dx%d decodes to %d channels, not %d", sw,
			     sh, cinfo.output_components, io->c);
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

/* ---- PNG ------------------------------------------------------------- */

/* libpng reports errors through png_error(), which must not return: the
 * handler keeps the message and jumps back to decode_png's setjmp. */
typedef struct png_src {
	const uint8_t *bytes;
	size_t n, pos;
	char msg[160];
} png_src;

static void png_fail(png_structp png, png_const_charp msg)
{
	png_src *src = png_get_error_ptr(png);
	snprintf(src->msg, sizeof(src->msg), "%s", msg);
	png_longjmp(png, 1);
}

static void png_quiet(png_structp png, png_const_charp msg)
{
	(void)png;
	(void)msg;
}

static void png_read_mem(png_structp png, png_bytep dst, png_size_t len)
{
	png_src *src = png_get_io_ptr(png);
	if (len > src->n - src->pos)
		png_error(png, "truncated data (the image ends early)");
	memcpy(dst, src->bytes + src->pos, len);
	src->pos += len;
}

/* Ask libpng for 8-bit samples with exactly io->c channels (1: gray, 3: RGB),
 * whatever the file holds: palettes and low bit depths expand, 16-bit samples
 * scale to 8 bits, alpha (and tRNS transparency) is dropped, gray is
 * replicated into RGB and RGB becomes gray with the weights libjpeg uses. */
static void png_want_8bit(png_structp png, png_infop info, int c)
{
	int type = png_get_color_type(png, info);
	if (type == PNG_COLOR_TYPE_PALETTE)
		png_set_palette_to_rgb(png);
	if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
		png_set_expand_gray_1_2_4_to_8(png);
	if (png_get_bit_depth(png, info) == 16)
		png_set_scale_16(png);
	/* an alpha channel, or one that palette expansion makes from tRNS */
	png_set_strip_alpha(png);
	int colour = (type & PNG_COLOR_MASK_COLOR) != 0;
	if (c == 3 && !colour)
		png_set_gray_to_rgb(png);
	if (c == 1 && colour) /* ITU-R BT.601, as libjpeg's RGB -> gray */
		png_set_rgb_to_gray_fixed(png, PNG_ERROR_ACTION_NONE, 29900, 58700);
	png_set_interlace_handling(png);
	png_read_update_info(png, info);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int decode_png(const wf_serve_io *io, const uint8_t *bytes, size_t n, float *out,
		      wf_err *err)
{
	png_src src = {.bytes = bytes, .n = n};
	png_structp png = NULL;
	png_infop info = NULL;
	uint8_t *volatile pixels = NULL;
	png_bytep *volatile rows = NULL;
	volatile int rc = 0;

	/* IHDR comes first (libpng checks that): refuse an oversized image
	 * before reading the chunks that follow, with our limits in the message. */
	if (n >= 24 && memcmp(bytes + 12, "IHDR", 4) == 0) {
		rc = check_size("PNG", be32(bytes + 16), be32(bytes + 20), err);
		if (rc)
			return rc;
	}
	png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_quiet);
	if (png)
		info = png_create_info_struct(png);
	if (!png || !info) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory starting a PNG decoder");
		goto out_destroy;
	}
	if (setjmp(png_jmpbuf(png))) {
		rc = wf_errf(err, WF_EINVAL, "invalid PNG image: %s", src.msg);
		goto out_destroy;
	}
	/* Sizes are checked below against our own limits, which name themselves. */
	png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
	png_set_read_fn(png, &src, png_read_mem);
	png_read_info(png, info);
	uint32_t sw = png_get_image_width(png, info), sh = png_get_image_height(png, info);
	rc = check_size("PNG", sw, sh, err);
	if (rc)
		goto out_destroy;
	png_want_8bit(png, info, io->c);
	size_t stride = png_get_rowbytes(png, info);
	if (png_get_channels(png, info) != io->c || png_get_bit_depth(png, info) != 8 ||
	    stride != (size_t)sw * io->c) {
		rc = wf_errf(
			err, WF_EINVAL,
			"PNG image (colour type %d, %d bits) cannot be read as %d 8-bit channels",
			png_get_color_type(png, info), png_get_bit_depth(png, info), io->c);
		goto out_destroy;
	}
	pixels = malloc(stride * sh);
	rows = malloc(sizeof(*rows) * sh);
	if (!pixels || !rows) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory decoding a %ux%u PNG", sw, sh);
		goto out_destroy;
	}
	for (uint32_t y = 0; y < sh; y++)
		rows[y] = pixels + stride * y;
	png_read_image(png, rows); /* all interlace passes */
	png_read_end(png, NULL);   /* checks the remaining chunks: a cut-off file fails */
	resize_preprocess(io, pixels, (int)sh, (int)sw, out);
out_destroy:
	png_destroy_read_struct(&png, &info, NULL); /* accepts NULLs */
	free(rows);
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
		return decode_png(io, bytes, n, out, err);
	if (n >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8)
		return decode_jpeg(io, bytes, n, out, err);
	return wf_errf(
		err, WF_EINVAL,
		"image is not a JPEG or PNG (no JPEG SOI marker or PNG signature; %zu bytes)", n);
}
