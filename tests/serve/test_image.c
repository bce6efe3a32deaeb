/* test_image.c: weft-serve's PNG decoding. PNGs of every colour type, bit
 * depth and interlacing, written here with libpng's encoder, decode to the
 * pixels they hold; corrupt, truncated and oversized PNGs fail with a reason. */
#include "common/util.h"
#include "common/image.h"
#include "tests/test.h"

#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zlib.h>
/* jpeglib.h needs stdio.h first */
#include <jpeglib.h>

#define W 13 /* odd sizes: partial Adam7 passes and partly filled packed bytes */
#define H 11

typedef struct mem_png {
	uint8_t *data;
	size_t len, cap;
} mem_png;

static void mem_write(png_structp png, png_bytep d, png_size_t n)
{
	mem_png *m = png_get_io_ptr(png);
	if (m->len + n > m->cap) {
		m->cap = (m->len + n) * 2;
		m->data = realloc(m->data, m->cap);
	}
	memcpy(m->data + m->len, d, n);
	m->len += n;
}

static void mem_flush(png_structp png)
{
	(void)png;
}

/* What one case writes: the file's samples and the RGB pixels it must decode to. */
typedef struct png_case {
	const char *name;
	int type, depth, interlace;
	uint8_t rows[H][W * 8]; /* samples as stored in the file (packed, big-endian) */
	uint8_t want[H * W * 3];
	png_color pal[256];
	int npal;
	uint8_t trns[256];
	int ntrns;
	int trns_colour;
} png_case;

/* Encode a case; with only_header, stop after IHDR (for size checks). */
static mem_png encode(const png_case *c, int w, int h, int only_header)
{
	mem_png m = {0};
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	if (setjmp(png_jmpbuf(png))) {
		free(m.data);
		m.data = NULL;
		m.len = 0;
		goto out;
	}
	png_set_write_fn(png, &m, mem_write, mem_flush);
	png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, c->depth, c->type, c->interlace,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (c->npal)
		png_set_PLTE(png, info, c->pal, c->npal);
	if (c->ntrns)
		png_set_tRNS(png, info, c->trns, c->ntrns, NULL);
	if (c->trns_colour) /* a colour (or gray level) that means transparent */
		png_set_tRNS(png, info, NULL, 0,
			     &(png_color_16){.red = 7, .green = 7, .blue = 7, .gray = 7});
	png_write_info(png, info);
	if (!only_header) {
		png_bytep rows[H];
		for (int y = 0; y < H; y++)
			rows[y] = (png_bytep)c->rows[y];
		png_write_image(png, rows);
		png_write_end(png, NULL);
	}
out:
	png_destroy_write_struct(&png, &info);
	return m;
}

static void put_sample(png_case *c, int y, int x, int ch, int nch, unsigned v)
{
	uint8_t *row = c->rows[y];
	if (c->depth == 16) {
		row[(x * nch + ch) * 2] = (uint8_t)(v >> 8);
		row[(x * nch + ch) * 2 + 1] = (uint8_t)v;
	} else if (c->depth == 8) {
		row[x * nch + ch] = (uint8_t)v;
	} else { /* 1, 2, 4 bits: one channel, most significant bits first */
		int per = 8 / c->depth, shift = 8 - c->depth * (x % per + 1);
		row[x / per] |= (uint8_t)(v << shift);
	}
}

static int channels_of(int type)
{
	switch (type) {
	case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
	case PNG_COLOR_TYPE_RGB: return 3;
	case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
	default: return 1; /* gray, palette */
	}
}

/* A 8-bit value v as a 16-bit sample that any correct 16 -> 8 reduction maps back to v. */
static unsigned wide(wf_rng *r, unsigned v)
{
	return v * 257 + (v < 255 ? (unsigned)(wf_rng_uniform(r) * 100) : 0);
}

static void make_case(png_case *c, const char *name, int type, int depth, int interlace,
		      uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed);
	memset(c, 0, sizeof(*c));
	c->name = name;
	c->type = type;
	c->depth = depth;
	c->interlace = interlace;
	unsigned maxv = (1u << (depth < 8 ? depth : 8)) - 1;
	if (type == PNG_COLOR_TYPE_PALETTE) {
		c->npal = 1 << depth;
		for (int i = 0; i < c->npal; i++) {
			c->pal[i].red = (uint8_t)(wf_rng_uniform(&r) * 256);
			c->pal[i].green = (uint8_t)(wf_rng_uniform(&r) * 256);
			c->pal[i].blue = (uint8_t)(wf_rng_uniform(&r) * 256);
			c->trns[i] = (uint8_t)(wf_rng_uniform(&r) * 256);
		}
		if (depth == 8)
			c->ntrns = 100; /* transparency is dropped like an alpha channel */
	}
	c->trns_colour = strstr(name, "tRNS") && type != PNG_COLOR_TYPE_PALETTE;
	int nch = channels_of(type);
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++) {
			uint8_t *want = c->want + (y * W + x) * 3;
			unsigned v[4];
			for (int k = 0; k < 4; k++)
				v[k] = (unsigned)(wf_rng_uniform(&r) * (maxv + 1));
			if (c->trns_colour && x == 0 && y == 0)
				v[0] = v[1] = v[2] = 7; /* the transparent colour is kept */
			if (type == PNG_COLOR_TYPE_PALETTE) {
				put_sample(c, y, x, 0, 1, v[0]);
				want[0] = c->pal[v[0]].red;
				want[1] = c->pal[v[0]].green;
				want[2] = c->pal[v[0]].blue;
				continue;
			}
			for (int k = 0; k < nch; k++)
				put_sample(c, y, x, k, nch, depth == 16 ? wide(&r, v[k]) : v[k]);
			if (type & PNG_COLOR_MASK_COLOR)
				for (int k = 0; k < 3; k++)
					want[k] = (uint8_t)v[k];
			else /* low bit depths scale up to the full 8-bit range */
				want[0] = want[1] = want[2] = (uint8_t)(v[0] * 255 / maxv);
		}
}

static wf_image_io identity_io(int c)
{
	wf_image_io io = {.h = H, .w = W, .c = c, .classes = 2, .scale = 1.0f};
	for (int i = 0; i < 4; i++)
		io.std[i] = 1.0f;
	return io;
}

static void test_every_png_colour_type_decodes_to_its_pixels(void)
{
	static const struct {
		const char *name;
		int type, depth, interlace;
	} kinds[] = {
		{"gray 1-bit", PNG_COLOR_TYPE_GRAY, 1, 0},
		{"gray 2-bit", PNG_COLOR_TYPE_GRAY, 2, 0},
		{"gray 4-bit", PNG_COLOR_TYPE_GRAY, 4, 0},
		{"gray 8-bit", PNG_COLOR_TYPE_GRAY, 8, 0},
		{"gray 16-bit", PNG_COLOR_TYPE_GRAY, 16, 0},
		{"gray+alpha 8-bit", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0},
		{"gray+alpha 16-bit", PNG_COLOR_TYPE_GRAY_ALPHA, 16, 0},
		{"gray 8-bit + tRNS", PNG_COLOR_TYPE_GRAY, 8, 0},
		{"RGB 8-bit", PNG_COLOR_TYPE_RGB, 8, 0},
		{"RGB 8-bit + tRNS", PNG_COLOR_TYPE_RGB, 8, 0},
		{"RGB 16-bit", PNG_COLOR_TYPE_RGB, 16, 0},
		{"RGBA 8-bit", PNG_COLOR_TYPE_RGBA, 8, 0},
		{"RGBA 16-bit", PNG_COLOR_TYPE_RGBA, 16, 0},
		{"palette 1-bit", PNG_COLOR_TYPE_PALETTE, 1, 0},
		{"palette 2-bit", PNG_COLOR_TYPE_PALETTE, 2, 0},
		{"palette 4-bit", PNG_COLOR_TYPE_PALETTE, 4, 0},
		{"palette 8-bit + tRNS", PNG_COLOR_TYPE_PALETTE, 8, 0},
		{"interlaced RGB 8-bit", PNG_COLOR_TYPE_RGB, 8, 1},
		{"interlaced gray 2-bit", PNG_COLOR_TYPE_GRAY, 2, 1},
		{"interlaced palette 4-bit", PNG_COLOR_TYPE_PALETTE, 4, 1},
		{"interlaced RGBA 16-bit", PNG_COLOR_TYPE_RGBA, 16, 1},
		{"interlaced gray+alpha 16-bit", PNG_COLOR_TYPE_GRAY_ALPHA, 16, 1},
	};
	png_case *c = malloc(sizeof(*c));
	wf_image_io io = identity_io(3);
	float out[H * W * 3];
	wf_err err = {0};
	for (size_t i = 0; i < WF_ARRAY_LEN(kinds); i++) {
		make_case(c, kinds[i].name, kinds[i].type, kinds[i].depth,
			  kinds[i].interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, 100 + i);
		mem_png m = encode(c, W, H, 0);
		WF_CHECK_MSG(m.data != NULL, "%s: encoding failed", c->name);
		int rc = wf_image_decode(&io, m.data, m.len, out, &err);
		WF_CHECK_MSG(rc == 0, "%s: rc %d \"%s\"", c->name, rc, err.msg);
		int bad = -1;
		for (int j = 0; !rc && j < H * W * 3 && bad < 0; j++)
			if (out[j] != c->want[j])
				bad = j;
		WF_CHECK_MSG(bad < 0, "%s: sample %d is %g, want %d", c->name, bad,
			     bad < 0 ? 0.0 : (double)out[bad], bad < 0 ? 0 : c->want[bad]);
		free(m.data);
	}
	free(c);
}

static void test_png_feeds_a_one_channel_model(void)
{
	png_case *c = malloc(sizeof(*c));
	wf_image_io io = identity_io(1);
	float out[H * W];
	wf_err err = {0};
	/* gray stays exact */
	make_case(c, "gray 8-bit", PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, 7);
	mem_png m = encode(c, W, H, 0);
	WF_CHECK_INT(wf_image_decode(&io, m.data, m.len, out, &err), 0);
	for (int j = 0; j < H * W; j++)
		WF_CHECK_MSG(out[j] == c->want[j * 3], "gray pixel %d: %g", j, (double)out[j]);
	free(m.data);
	/* colour becomes BT.601 luma, as for JPEG */
	make_case(c, "RGBA 8-bit", PNG_COLOR_TYPE_RGBA, 8, PNG_INTERLACE_ADAM7, 8);
	m = encode(c, W, H, 0);
	WF_CHECK_INT(wf_image_decode(&io, m.data, m.len, out, &err), 0);
	for (int j = 0; j < H * W; j++) {
		const uint8_t *p = c->want + j * 3;
		double luma = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
		WF_CHECK_NEAR(out[j], luma, 1.0);
	}
	free(m.data);
	free(c);
}

static void test_png_is_resized_and_preprocessed(void)
{
	/* a solid 40x30 image resized to 13x11 keeps its colour, then gets
	 * the model's preprocessing in BGR order */
	png_case *c = calloc(1, sizeof(*c));
	c->type = PNG_COLOR_TYPE_RGB;
	c->depth = 8;
	wf_image_io io = identity_io(3);
	io.scale = 1.0f / 255;
	io.bgr = 1;
	for (int k = 0; k < 3; k++) {
		io.mean[k] = 0.5f;
		io.std[k] = 0.25f;
	}
	const uint8_t rgb[3] = {200, 100, 50};
	mem_png m = {0};
	png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	png_infop info = png_create_info_struct(png);
	png_set_write_fn(png, &m, mem_write, mem_flush);
	png_set_IHDR(png, info, 40, 30, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	uint8_t row[40 * 3];
	for (int x = 0; x < 40; x++)
		memcpy(row + 3 * x, rgb, 3);
	for (int y = 0; y < 30; y++)
		png_write_row(png, row);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	float out[H * W * 3];
	wf_err err = {0};
	WF_CHECK_INT(wf_image_decode(&io, m.data, m.len, out, &err), 0);
	for (int j = 0; j < H * W; j++)
		for (int k = 0; k < 3; k++)
			WF_CHECK_NEAR(out[j * 3 + k], (rgb[2 - k] / 255.0 - 0.5) / 0.25, 1e-5);
	free(m.data);
	free(c);
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void test_truncated_and_corrupt_png_fail_with_a_reason(void)
{
	png_case *c = malloc(sizeof(*c));
	make_case(c, "RGB 8-bit", PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, 9);
	mem_png m = encode(c, W, H, 0);
	wf_image_io io = identity_io(3);
	float out[H * W * 3];
	wf_err err = {0};
	/* every cut-off prefix fails, naming PNG once the signature is whole */
	int bad = -1;
	for (size_t n = 0; n < m.len && bad < 0; n++) {
		err.msg[0] = 0;
		int rc = wf_image_decode(&io, m.data, n, out, &err);
		if (rc != WF_EINVAL || (n >= 8 && !strstr(err.msg, "PNG")))
			bad = (int)n;
	}
	WF_CHECK_MSG(bad < 0, "prefix of %d bytes: \"%s\"", bad, err.msg);
	WF_CHECK_INT(wf_image_decode(&io, m.data, m.len - 12, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "invalid PNG image: "), "%s", err.msg);

	/* a flipped bit in IHDR: the chunk's CRC no longer matches */
	uint8_t *bytes = malloc(m.len);
	memcpy(bytes, m.data, m.len);
	bytes[8 + 8 + 3] ^= 1;
	WF_CHECK_INT(wf_image_decode(&io, bytes, m.len, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "PNG") && strstr(err.msg, "CRC"), "%s", err.msg);

	/* garbage compressed data with a valid CRC: zlib's complaint comes back */
	memcpy(bytes, m.data, m.len);
	size_t off = 8;
	while (off + 8 <= m.len && memcmp(bytes + off + 4, "IDAT", 4) != 0)
		off += 12 + be32(bytes + off);
	WF_CHECK(off + 8 <= m.len);
	uint32_t len = be32(bytes + off);
	for (uint32_t i = 2; i < len; i++)
		bytes[off + 8 + i] = (uint8_t)(i * 37 + 11);
	uint32_t crc = (uint32_t)crc32(0, bytes + off + 4, len + 4);
	for (int k = 0; k < 4; k++)
		bytes[off + 8 + len + k] = (uint8_t)(crc >> (24 - 8 * k));
	err.msg[0] = 0;
	WF_CHECK_INT(wf_image_decode(&io, bytes, m.len, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "invalid PNG image: ") && strlen(err.msg) > 20, "%s", err.msg);
	free(bytes);
	free(m.data);
	free(c);
}

static void test_oversized_png_is_refused_naming_the_limit(void)
{
	png_case *c = calloc(1, sizeof(*c));
	c->type = PNG_COLOR_TYPE_GRAY;
	c->depth = 8;
	wf_image_io io = identity_io(3);
	float out[H * W * 3];
	wf_err err = {0};
	/* headers alone: the decoder must refuse before reading (or allocating) pixels */
	mem_png m = encode(c, 70000, 2, 1);
	WF_CHECK_INT(wf_image_decode(&io, m.data, m.len, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "70000x2") && strstr(err.msg, "65535"), "%s", err.msg);
	free(m.data);
	m = encode(c, 10000, 10000, 1);
	WF_CHECK_INT(wf_image_decode(&io, m.data, m.len, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "10000x10000") && strstr(err.msg, "67108864"), "%s", err.msg);
	free(m.data);
	free(c);
}

/* A progressive gray JPEG of side x side pixels, in memory. */
static unsigned char *small_jpeg(int side, unsigned long *len)
{
	struct jpeg_compress_struct cinfo;
	struct jpeg_error_mgr jerr;
	unsigned char *out = NULL, row[64] = {0};
	cinfo.err = jpeg_std_error(&jerr);
	jpeg_create_compress(&cinfo);
	jpeg_mem_dest(&cinfo, &out, len);
	cinfo.image_width = cinfo.image_height = (JDIMENSION)side;
	cinfo.input_components = 1;
	cinfo.in_color_space = JCS_GRAYSCALE;
	jpeg_set_defaults(&cinfo);
	jpeg_simple_progression(&cinfo);
	jpeg_start_compress(&cinfo, TRUE);
	JSAMPROW r = row;
	while (cinfo.next_scanline < cinfo.image_height)
		jpeg_write_scanlines(&cinfo, &r, 1);
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	return out;
}

static long max_rss_kb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* A few hundred bytes declaring 20000x20000 used to cost 1.5 GB
 * (libjpeg's progressive coefficient buffer) before the size was refused. */
static void test_jpeg_header_bomb_is_refused_before_allocating(void)
{
	unsigned long len = 0;
	unsigned char *j = small_jpeg(8, &len);
	size_t sof = 0;
	for (size_t i = 2; i + 9 < len; i++)
		if (j[i] == 0xff && (j[i + 1] == 0xc2 || j[i + 1] == 0xc0)) {
			sof = i;
			break;
		}
	WF_CHECK(sof > 0);
	j[sof + 5] = j[sof + 7] = 20000 >> 8; /* height, width */
	j[sof + 6] = j[sof + 8] = 20000 & 0xff;
	wf_image_io io = identity_io(3);
	float out[H * W * 3];
	wf_err err = {0};
	long before = max_rss_kb();
	WF_CHECK_INT(wf_image_decode(&io, j, len, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "20000x20000") && strstr(err.msg, "too large"), "%s", err.msg);
	long grew = max_rss_kb() - before;
	WF_CHECK_MSG(grew < 64 * 1024, "decoding the refused header grew RSS by %ld KiB", grew);
	free(j);
	/* the operator's limit (--max_image_pixels) is the one applied and named */
	j = small_jpeg(16, &len);
	io.max_pixels = 255;
	WF_CHECK_INT(wf_image_decode(&io, j, len, out, &err), WF_EINVAL);
	WF_CHECK_MSG(strstr(err.msg, "16x16") && strstr(err.msg, "255 pixels"), "%s", err.msg);
	io.max_pixels = 256;
	WF_CHECK_INT(wf_image_decode(&io, j, len, out, &err), 0);
	free(j);
}

int main(void)
{
	WF_RUN(test_every_png_colour_type_decodes_to_its_pixels);
	WF_RUN(test_png_feeds_a_one_channel_model);
	WF_RUN(test_png_is_resized_and_preprocessed);
	WF_RUN(test_truncated_and_corrupt_png_fail_with_a_reason);
	WF_RUN(test_oversized_png_is_refused_naming_the_limit);
	WF_RUN(test_jpeg_header_bomb_is_refused_before_allocating);
	return wf_test_summary();
}
