/* image.c: base64, JPEG and PNG decoding with EXIF orientation, bilinear
 * resizing and preprocessing (see image.h). */
#include "common/image.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
/* jpeglib.h needs stdio.h first */
#include <jerror.h>
#include <jpeglib.h>
#include <stdlib.h>
#include <string.h>

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

int wf_b64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len, wf_err *err)
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

char *wf_b64_encode(const uint8_t *data, size_t n)
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

/* ---- sizes, modes, orientation --------------------------------------- */

int wf_image_resize_parse(const char *name)
{
	if (!name)
		return -1;
	if (strcmp(name, "fit") == 0)
		return WF_RESIZE_FIT;
	if (strcmp(name, "crop") == 0)
		return WF_RESIZE_CROP;
	if (strcmp(name, "pad") == 0)
		return WF_RESIZE_PAD;
	return -1;
}

const char *wf_image_resize_name(int mode)
{
	switch (mode) {
	case WF_RESIZE_CROP: return "crop";
	case WF_RESIZE_PAD: return "pad";
	default: return "fit";
	}
}

/* Refuse images whose decoded size would exceed the limits, from the header. */
static int check_size(const char *kind, uint32_t w, uint32_t h, long max_pixels,
		      const char *limit_flag, wf_err *err)
{
	long limit = max_pixels > 0 ? max_pixels : WF_IMAGE_MAX_PIXELS_DEFAULT;
	if (w < 1 || h < 1)
		return wf_errf(err, WF_EINVAL, "%s image %ux%u is empty", kind, w, h);
	if (w > WF_IMAGE_MAX_SIDE || h > WF_IMAGE_MAX_SIDE)
		return wf_errf(err, WF_EINVAL,
			       "%s image %ux%u is too large: the limit is %d pixels per side", kind,
			       w, h, WF_IMAGE_MAX_SIDE);
	if ((uint64_t)w * h > (uint64_t)limit)
		return wf_errf(err, WF_EINVAL,
			       "%s image %ux%u is too large: the limit is %ld pixels in all%s%s%s",
			       kind, w, h, limit, limit_flag ? " (" : "",
			       limit_flag ? limit_flag : "", limit_flag ? " raises it)" : "");
	return 0;
}

static uint16_t rd16(const uint8_t *p, int le)
{
	return le ? (uint16_t)(p[0] | p[1] << 8) : (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t rd32(const uint8_t *p, int le)
{
	return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			       (uint32_t)p[3] << 24
		  : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The orientation tag (0x0112) of IFD0 of an APP1 Exif payload, 1..8; 1 when
 * absent or malformed. Every offset is checked against n. */
static int exif_orientation(const uint8_t *d, size_t n)
{
	if (n < 14 || memcmp(d, "Exif\0\0", 6) != 0)
		return 1;
	d += 6;
	n -= 6;
	int le = d[0] == 'I' && d[1] == 'I';
	if (!le && !(d[0] == 'M' && d[1] == 'M'))
		return 1;
	if (rd16(d + 2, le) != 42)
		return 1;
	uint32_t ifd = rd32(d + 4, le);
	if (ifd > n || n - ifd < 2)
		return 1;
	unsigned cnt = rd16(d + ifd, le);
	for (unsigned i = 0; i < cnt && i < 512; i++) {
		size_t e = (size_t)ifd + 2 + (size_t)12 * i;
		if (e + 12 > n)
			break;
		if (rd16(d + e, le) != 0x0112)
			continue;
		if (rd16(d + e + 2, le) != 3) /* SHORT */
			return 1;
		unsigned v = rd16(d + e + 8, le);
		return v >= 1 && v <= 8 ? (int)v : 1;
	}
	return 1;
}

static int jpeg_orientation(j_decompress_ptr cinfo)
{
	for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next)
		if (m->marker == JPEG_APP0 + 1)
			return exif_orientation(m->data, m->data_length);
	return 1;
}

/* Apply EXIF orientation o to src [h,w,c]; returns a new buffer (5..8 swap
 * the sides) or src itself for 1. *h, *w become the output sides. */
static uint8_t *orient(uint8_t *src, int *h, int *w, int c, int o)
{
	if (o <= 1 || o > 8)
		return src;
	int H = *h, W = *w, oh = o >= 5 ? W : H, ow = o >= 5 ? H : W;
	uint8_t *dst = malloc((size_t)H * W * c);
	if (!dst)
		return NULL;
	for (int yo = 0; yo < oh; yo++) {
		for (int xo = 0; xo < ow; xo++) {
			int xi, yi;
			switch (o) {
			case 2: xi = W - 1 - xo, yi = yo; break;
			case 3: xi = W - 1 - xo, yi = H - 1 - yo; break;
			case 4: xi = xo, yi = H - 1 - yo; break;
			case 5: xi = yo, yi = xo; break;
			case 6: xi = yo, yi = H - 1 - xo; break;
			case 7: xi = W - 1 - yo, yi = H - 1 - xo; break;
			default: xi = W - 1 - yo, yi = xo; break; /* 8 */
			}
			memcpy(dst + ((size_t)yo * ow + xo) * c, src + ((size_t)yi * W + xi) * c,
			       (size_t)c);
		}
	}
	free(src);
	*h = oh;
	*w = ow;
	return dst;
}

/* ---- preprocessing and resizing -------------------------------------- */

void wf_image_preprocess_u8(const wf_image_io *io, const uint8_t *px, float *out)
{
	size_t npx = (size_t)io->h * io->w;
	float lut[4][256];
	int c = io->c < 4 ? io->c : 4;
	for (int j = 0; j < c; j++) {
		for (int v = 0; v < 256; v++)
			lut[j][v] = ((float)v * io->scale - io->mean[j]) / io->std[j];
	}
	for (size_t i = 0; i < npx; i++) {
		const uint8_t *p = px + i * io->c;
		float *o = out + i * io->c;
		for (int j = 0; j < c; j++)
			o[j] = lut[j][(io->bgr && io->c == 3) ? p[2 - j] : p[j]];
	}
}

void wf_image_preprocess_f32(const wf_image_io *io, float *x, size_t n)
{
	size_t npx = n * (size_t)io->h * io->w;
	int c = io->c < 4 ? io->c : 4, swap = io->bgr && io->c == 3;
	for (size_t i = 0; i < npx; i++) {
		float *p = x + i * io->c, v[4];
		for (int j = 0; j < c; j++)
			v[j] = p[swap ? 2 - j : j];
		for (int j = 0; j < c; j++)
			p[j] = (v[j] * io->scale - io->mean[j]) / io->std[j];
	}
}

/* Bilinear resize with half-pixel centres of the rectangle src [sh,sw,c]
 * (rows sstride pixels apart) into dst [dh,dw,c] (rows dstride apart). */
static void resize_rect(const uint8_t *src, size_t sstride, int sh, int sw, int c, uint8_t *dst,
			size_t dstride, int dh, int dw)
{
	int *xi = malloc(sizeof(int) * 2 * (size_t)dw);
	float *xw = malloc(sizeof(float) * (size_t)dw);
	if (!xi || !xw) { /* nearest neighbour needs no tables */
		for (int y = 0; y < dh; y++)
			for (int x = 0; x < dw; x++)
				memcpy(dst + ((size_t)y * dstride + x) * c,
				       src + ((size_t)((long)y * sh / dh) * sstride +
					      (size_t)((long)x * sw / dw)) *
						       c,
				       (size_t)c);
		free(xi);
		free(xw);
		return;
	}
	float fy = (float)sh / dh, fx = (float)sw / dw;
	for (int x = 0; x < dw; x++) {
		float sx = (x + 0.5f) * fx - 0.5f;
		if (sx < 0)
			sx = 0;
		int x0 = (int)sx;
		if (x0 > sw - 1)
			x0 = sw - 1;
		xi[2 * x] = x0 * c;
		xi[2 * x + 1] = (x0 + 1 < sw ? x0 + 1 : sw - 1) * c;
		xw[x] = sx - x0;
	}
	for (int y = 0; y < dh; y++) {
		float sy = (y + 0.5f) * fy - 0.5f;
		if (sy < 0)
			sy = 0;
		int y0 = (int)sy;
		if (y0 > sh - 1)
			y0 = sh - 1;
		int y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
		float wy = sy - y0;
		const uint8_t *r0 = src + (size_t)y0 * sstride * c;
		const uint8_t *r1 = src + (size_t)y1 * sstride * c;
		uint8_t *o = dst + (size_t)y * dstride * c;
		for (int x = 0; x < dw; x++) {
			const uint8_t *p00 = r0 + xi[2 * x], *p01 = r0 + xi[2 * x + 1];
			const uint8_t *p10 = r1 + xi[2 * x], *p11 = r1 + xi[2 * x + 1];
			float wx = xw[x];
			for (int j = 0; j < c; j++) {
				float top = p00[j] + (p01[j] - p00[j]) * wx;
				float bot = p10[j] + (p11[j] - p10[j]) * wx;
				float v = top + (bot - top) * wy + 0.5f;
				o[(size_t)x * c + j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
		}
	}
	free(xi);
	free(xw);
}

void wf_image_resize_rect(const uint8_t *src, size_t sstride, int sh, int sw, int c, uint8_t *dst,
			  int dh, int dw)
{
	resize_rect(src, sstride, sh, sw, c, dst, (size_t)dw, dh, dw);
}

void wf_image_resize_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw,
			int mode)
{
	if (mode == WF_RESIZE_CROP) {
		int ch = sh, cw = sw, y0 = 0, x0 = 0;
		if ((long)sw * dh > (long)sh * dw) { /* wider than the target: cut the sides */
			cw = (int)(((long)sh * dw + dh / 2) / dh);
			cw = cw < 1 ? 1 : cw > sw ? sw : cw;
			x0 = (sw - cw) / 2;
		} else {
			ch = (int)(((long)sw * dh + dw / 2) / dw);
			ch = ch < 1 ? 1 : ch > sh ? sh : ch;
			y0 = (sh - ch) / 2;
		}
		resize_rect(src + ((size_t)y0 * sw + x0) * c, (size_t)sw, ch, cw, c, dst,
			    (size_t)dw, dh, dw);
	} else if (mode == WF_RESIZE_PAD) {
		int rh = dh, rw = dw, y0 = 0, x0 = 0;
		if ((long)sw * dh > (long)sh * dw) { /* wider: bars above and below */
			rh = (int)(((long)sh * dw + sw / 2) / sw);
			rh = rh < 1 ? 1 : rh > dh ? dh : rh;
			y0 = (dh - rh) / 2;
		} else {
			rw = (int)(((long)sw * dh + sh / 2) / sh);
			rw = rw < 1 ? 1 : rw > dw ? dw : rw;
			x0 = (dw - rw) / 2;
		}
		memset(dst, 0, (size_t)dh * dw * c);
		resize_rect(src, (size_t)sw, sh, sw, c, dst + ((size_t)y0 * dw + x0) * c,
			    (size_t)dw, rh, rw);
	} else {
		resize_rect(src, (size_t)sw, sh, sw, c, dst, (size_t)dw, dh, dw);
	}
}

/* ---- JPEG ------------------------------------------------------------ */

typedef struct jpeg_guard {
	struct jpeg_error_mgr mgr;
	jmp_buf jump;
	int truncated; /* libjpeg warned that the data ended early */
	char msg[JMSG_LENGTH_MAX];
} jpeg_guard;

static void jpeg_fail(j_common_ptr cinfo)
{
	jpeg_guard *g = (jpeg_guard *)cinfo->err;
	(*cinfo->err->format_message)(cinfo, g->msg);
	longjmp(g->jump, 1);
}

/* Warnings are not printed; a premature end of data is remembered: libjpeg
 * fills the rest with gray, and a photo cut off is not a photo to train on. */
static void jpeg_message(j_common_ptr cinfo, int level)
{
	jpeg_guard *g = (jpeg_guard *)cinfo->err;
	if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
		g->truncated = 1;
}

static void jpeg_quiet(j_common_ptr cinfo)
{
	(void)cinfo;
}

static void jpeg_start(struct jpeg_decompress_struct *cinfo, jpeg_guard *guard)
{
	memset(cinfo, 0, sizeof(*cinfo));
	cinfo->err = jpeg_std_error(&guard->mgr);
	guard->mgr.error_exit = jpeg_fail;
	guard->mgr.output_message = jpeg_quiet;
	guard->mgr.emit_message = jpeg_message;
	guard->truncated = 0;
	guard->msg[0] = 0;
}

/* CMYK scanline (4 samples per pixel) to RGB or gray. Photoshop writes Adobe
 * CMYK inverted (0 = full ink): with the Adobe marker the samples are used
 * as they are, without it they are inverted first. */
static void cmyk_row(const uint8_t *in, uint8_t *out, int w, int c, int adobe)
{
	for (int x = 0; x < w; x++) {
		const uint8_t *p = in + 4 * x;
		int C = p[0], M = p[1], Y = p[2], K = p[3];
		if (!adobe) {
			C = 255 - C, M = 255 - M, Y = 255 - Y, K = 255 - K;
		}
		int r = (C * K + 127) / 255, g = (M * K + 127) / 255, b = (Y * K + 127) / 255;
		if (c == 3) {
			out[3 * x] = (uint8_t)r, out[3 * x + 1] = (uint8_t)g,
				out[3 * x + 2] = (uint8_t)b;
		} else {
			out[x] = (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
		}
	}
}

static int decode_jpeg(const uint8_t *bytes, size_t n, int c, long max_pixels,
		       const char *limit_flag, int min_h, int min_w, uint8_t **px, int *ph, int *pw,
		       wf_err *err)
{
	struct jpeg_decompress_struct cinfo;
	jpeg_guard guard;
	uint8_t *volatile pixels = NULL;
	uint8_t *volatile row4 = NULL;
	volatile int rc = 0;

	jpeg_start(&cinfo, &guard);
	if (setjmp(guard.jump)) {
		rc = wf_errf(err, WF_EINVAL, "invalid JPEG image: %s", guard.msg);
		goto out_destroy;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, bytes, (unsigned long)n);
	jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
	jpeg_read_header(&cinfo, TRUE);
	/* the size is checked before libjpeg allocates anything for the pixels */
	rc = check_size("JPEG", cinfo.image_width, cinfo.image_height, max_pixels, limit_flag, err);
	if (rc)
		goto out_destroy;
	int o = jpeg_orientation(&cinfo);
	int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
	if (cmyk)
		cinfo.out_color_space = JCS_CMYK;
	else
		cinfo.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
	if (min_h > 0 && min_w > 0) { /* the smallest DCT scale still covering the target */
		long th = o >= 5 ? min_w : min_h, tw = o >= 5 ? min_h : min_w;
		unsigned num = 1;
		while (num < 8 && (((long)cinfo.image_width * num + 7) / 8 < tw ||
				   ((long)cinfo.image_height * num + 7) / 8 < th))
			num++;
		cinfo.scale_num = num;
		cinfo.scale_denom = 8;
	}
	jpeg_start_decompress(&cinfo);
	int sw = (int)cinfo.output_width, sh = (int)cinfo.output_height;
	int comps = cinfo.output_components;
	if (comps != (cmyk ? 4 : c)) {
		rc = wf_errf(err, WF_EINVAL, "JPEG image %dx%d decodes to %d channels, not %d", sw,
			     sh, comps, c);
		goto out_destroy;
	}
	size_t stride = (size_t)sw * c;
	pixels = malloc(stride * sh);
	if (cmyk)
		row4 = malloc((size_t)sw * 4);
	if (!pixels || (cmyk && !row4)) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory decoding a %dx%d JPEG", sw, sh);
		goto out_destroy;
	}
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW row = cmyk ? row4 : pixels + stride * cinfo.output_scanline;
		JDIMENSION y = cinfo.output_scanline;
		if (jpeg_read_scanlines(&cinfo, &row, 1) != 1)
			break;
		if (cmyk)
			cmyk_row(row4, pixels + stride * y, sw, c, cinfo.saw_Adobe_marker);
	}
	if (guard.truncated) {
		rc = wf_errf(err, WF_EINVAL, "truncated JPEG image: the data ends early");
		goto out_destroy;
	}
	jpeg_finish_decompress(&cinfo);
	if (guard.truncated) {
		rc = wf_errf(err, WF_EINVAL, "truncated JPEG image: the data ends early");
		goto out_destroy;
	}
	uint8_t *done = orient(pixels, &sh, &sw, c, o);
	if (!done) {
		rc = wf_errf(err, WF_ENOMEM, "out of memory rotating a %dx%d JPEG", sw, sh);
		goto out_destroy;
	}
	pixels = NULL;
	*px = done;
	*ph = sh;
	*pw = sw;
out_destroy:
	jpeg_destroy_decompress(&cinfo);
	free(pixels);
	free(row4);
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

/* Ask libpng for 8-bit samples with exactly c channels (1: gray, 3: RGB),
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

static int decode_png(const uint8_t *bytes, size_t n, int c, long max_pixels,
		      const char *limit_flag, uint8_t **px, int *ph, int *pw, wf_err *err)
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
		rc = check_size("PNG", be32(bytes + 16), be32(bytes + 20), max_pixels, limit_flag,
				err);
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
	rc = check_size("PNG", sw, sh, max_pixels, limit_flag, err);
	if (rc)
		goto out_destroy;
	png_want_8bit(png, info, c);
	size_t stride = png_get_rowbytes(png, info);
	if (png_get_channels(png, info) != c || png_get_bit_depth(png, info) != 8 ||
	    stride != (size_t)sw * c) {
		rc = wf_errf(
			err, WF_EINVAL,
			"PNG image (colour type %d, %d bits) cannot be read as %d 8-bit channels",
			png_get_color_type(png, info), png_get_bit_depth(png, info), c);
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
	*px = pixels;
	pixels = NULL;
	*ph = (int)sh;
	*pw = (int)sw;
out_destroy:
	png_destroy_read_struct(&png, &info, NULL); /* accepts NULLs */
	free(rows);
	free(pixels);
	return rc;
}

/* ---- entry points ---------------------------------------------------- */

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static int not_an_image(size_t n, wf_err *err)
{
	return wf_errf(
		err, WF_EINVAL,
		"image is not a JPEG or PNG (no JPEG SOI marker or PNG signature; %zu bytes)", n);
}

int wf_image_probe(const uint8_t *bytes, size_t n, int *w, int *h, const char **format, wf_err *err)
{
	if (n >= 24 && memcmp(bytes, png_magic, 8) == 0) {
		if (memcmp(bytes + 12, "IHDR", 4) != 0)
			return wf_errf(err, WF_EINVAL, "invalid PNG image: IHDR is not first");
		uint32_t pw = be32(bytes + 16), ph = be32(bytes + 20);
		if (pw > 0x7fffffff || ph > 0x7fffffff)
			return wf_errf(err, WF_EINVAL, "invalid PNG image: size %ux%u", pw, ph);
		*w = (int)pw;
		*h = (int)ph;
		if (format)
			*format = "PNG";
		return 0;
	}
	if (!(n >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8))
		return not_an_image(n, err);
	struct jpeg_decompress_struct cinfo;
	jpeg_guard guard;
	volatile int rc = 0;
	jpeg_start(&cinfo, &guard);
	if (setjmp(guard.jump)) {
		rc = wf_errf(err, WF_EINVAL, "invalid JPEG image: %s", guard.msg);
		goto out;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, bytes, (unsigned long)n);
	jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
	jpeg_read_header(&cinfo, TRUE);
	int o = jpeg_orientation(&cinfo);
	*w = (int)(o >= 5 ? cinfo.image_height : cinfo.image_width);
	*h = (int)(o >= 5 ? cinfo.image_width : cinfo.image_height);
	if (format)
		*format = "JPEG";
out:
	jpeg_destroy_decompress(&cinfo);
	return rc;
}

int wf_image_decode_u8(const uint8_t *bytes, size_t n, int c, long max_pixels,
		       const char *limit_flag, int min_h, int min_w, uint8_t **px, int *h, int *w,
		       wf_err *err)
{
	*px = NULL;
	if (c != 1 && c != 3)
		return wf_errf(err, WF_EINVAL,
			       "images cannot feed a model with %d input channels; send numbers",
			       c);
	if (n >= 8 && memcmp(bytes, png_magic, 8) == 0)
		return decode_png(bytes, n, c, max_pixels, limit_flag, px, h, w, err);
	if (n >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8)
		return decode_jpeg(bytes, n, c, max_pixels, limit_flag, min_h, min_w, px, h, w,
				   err);
	return not_an_image(n, err);
}

int wf_image_load_u8(const uint8_t *bytes, size_t n, int c, int dh, int dw, int mode,
		     long max_pixels, const char *limit_flag, uint8_t *dst, wf_err *err)
{
	uint8_t *px;
	int sh, sw;
	if (dh < 1 || dw < 1)
		return wf_errf(err, WF_EINVAL, "image target size %dx%d is empty", dw, dh);
	/* full-size decode, then bilinear without antialiasing, as Keras's
	 * tf.image.resize does: a JPEG and the PNG of its pixels give the same
	 * input (a reduced DCT scale would be faster but differ) */
	int rc = wf_image_decode_u8(bytes, n, c, max_pixels, limit_flag, 0, 0, &px, &sh, &sw, err);
	if (rc)
		return rc;
	wf_image_resize_u8(px, sh, sw, c, dst, dh, dw, mode);
	free(px);
	return 0;
}

int wf_image_decode(const wf_image_io *io, const uint8_t *bytes, size_t n, float *out, wf_err *err)
{
	if (io->c != 1 && io->c != 3)
		return wf_errf(err, WF_EINVAL,
			       "images cannot feed a model with %d input channels; send numbers",
			       io->c);
	uint8_t *px = malloc((size_t)io->h * io->w * io->c);
	if (!px)
		return wf_errf(err, WF_ENOMEM, "out of memory for a %dx%d image", io->w, io->h);
	int rc = wf_image_load_u8(bytes, n, io->c, io->h, io->w, io->resize, io->max_pixels,
				  io->max_pixels_flag, px, err);
	if (!rc)
		wf_image_preprocess_u8(io, px, out);
	free(px);
	return rc;
}
