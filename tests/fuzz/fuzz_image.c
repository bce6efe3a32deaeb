/* fuzz_image.c: libFuzzer target for the image module (common/image.c: JPEG
 * with libjpeg-turbo and our EXIF orientation parser and CMYK conversion, PNG
 * with libpng) through wf_image_probe and wf_image_decode, as weft-serve,
 * the converter and the reader use it. Any input must give 0 or an error,
 * never a crash, a leak or a read out of bounds. Seeds:
 * tests/fuzz/seeds/fuzz_image (progressive, gray, CMYK, EXIF-rotated JPEGs,
 * palette, 16-bit, RGBA, interlaced PNGs, a header bomb).
 *
 * Random bytes rarely get past a PNG's CRCs and zlib stream or a JPEG's
 * markers, so the first byte picks the model's input (1 or 3 channels, 1 to
 * 8 pixels square) and how the rest is used:
 *   0: as the encoded image itself;
 *   1: as PNG chunks after the signature, with every chunk's CRC made right;
 *   2: as the fields of a PNG header (size, colour type, bit depth,
 *      interlacing, palette, tRNS) and then the image data, which is
 *      compressed here, so any bytes reach unfiltering and the colour
 *      transformations;
 *   3: as the pixels of a small valid JPEG made here, then a few of its bytes
 *      overwritten where the data says. */
#include "common/image.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* jpeglib.h needs stdio.h first */
#include <jpeglib.h>
#include <zlib.h>

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* A growable byte buffer; allocation failure is not a case worth fuzzing. */
typedef struct buf {
	uint8_t *p;
	size_t len, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
	if (!n)
		return;
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static void put32(buf *b, uint32_t v)
{
	uint8_t be[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	put(b, be, 4);
}

static void put_chunk(buf *b, const char *type, const uint8_t *d, size_t n)
{
	put32(b, (uint32_t)n);
	size_t at = b->len;
	put(b, type, 4);
	put(b, d, n);
	put32(b, (uint32_t)crc32(0, b->p + at, (uInt)(n + 4)));
}

/* Mode 1: data split into chunks by its own length fields, CRCs recomputed. */
static void png_fix_crcs(buf *b, const uint8_t *d, size_t n)
{
	put(b, png_sig, 8);
	size_t off = 0;
	while (n - off >= 8) {
		uint32_t len = (uint32_t)d[off] << 8 | d[off + 1]; /* at most 64 KiB */
		char type[4];
		memcpy(type, d + off + 2, 4);
		off += 6;
		if (len > n - off)
			len = (uint32_t)(n - off);
		put_chunk(b, type, d + off, len);
		off += len;
	}
	put_chunk(b, "IEND", NULL, 0);
}

/* The image data a PNG of this header holds, each row a filter byte (0-4)
 * and the row's samples, filled from d cyclically; NULL when there is none. */
static uint8_t *png_rows(const uint8_t ihdr[13], const uint8_t *d, size_t n, size_t *len)
{
	static const int ch[7] = {1, 0, 3, 1, 2, 0, 4}; /* channels by colour type */
	static const int adam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
					{0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
	static const int whole[1][4] = {{0, 0, 1, 1}};
	const int(*passes)[4] = ihdr[12] ? adam7 : whole;
	int npass = ihdr[12] ? 7 : 1, w = ihdr[3], h = ihdr[7];
	size_t bits = (size_t)ihdr[8] * ch[ihdr[9] % 7], rows[7] = {0}, cols[7] = {0}, total = 0;
	for (int p = 0; p < npass; p++) {
		const int *a = passes[p];
		if (w > a[0] && h > a[1]) { /* passes with no pixels have no rows */
			rows[p] = (size_t)(h - a[1] + a[3] - 1) / a[3];
			cols[p] = 1 + ((size_t)(w - a[0] + a[2] - 1) / a[2] * bits + 7) / 8;
			total += rows[p] * cols[p];
		}
	}
	if (!n || !total)
		return NULL;
	uint8_t *raw = malloc(total), *o = raw;
	if (!raw)
		abort();
	size_t src = 0;
	for (int p = 0; p < npass; p++)
		for (size_t y = 0; y < rows[p]; y++) {
			*o++ = d[src++ % n] % 5;
			for (size_t i = 1; i < cols[p]; i++)
				*o++ = d[src++ % n];
		}
	*len = total;
	return raw;
}

/* Mode 2: a well-formed PNG around arbitrary header fields and image data. */
static void png_synth(buf *b, const uint8_t *d, size_t n)
{
	static const uint8_t types[5] = {0, 2, 3, 4, 6};
	static const uint8_t depths[5] = {1, 2, 4, 8, 16};
	if (n < 8)
		return;
	uint8_t ihdr[13] = {0};
	ihdr[3] = (uint8_t)(1 + d[0] % 40); /* width */
	ihdr[7] = (uint8_t)(1 + d[1] % 40); /* height */
	ihdr[8] = depths[d[3] % 5];
	ihdr[9] = types[d[2] % 5];
	ihdr[12] = d[4] & 1;	   /* interlace */
	if ((d[4] & 0x26) == 0x26) /* now and then an invalid method */
		ihdr[10 + (d[4] >> 3 & 1)] = d[5];
	put(b, png_sig, 8);
	put_chunk(b, "IHDR", ihdr, sizeof(ihdr));
	size_t off = 8;
	if (ihdr[9] == 3) {
		size_t npal = 1 + (size_t)d[6] % 256;
		uint8_t pal[768];
		for (size_t i = 0; i < npal * 3; i++)
			pal[i] = off + i < n ? d[off + i] : (uint8_t)i;
		put_chunk(b, "PLTE", pal, npal * 3);
	}
	if (d[7] & 1) { /* tRNS of a length the data chooses */
		size_t len = d[7] >> 1;
		put_chunk(b, "tRNS", d + off, len < n - off ? len : n - off);
	}
	/* mostly image data of the right layout; now and then the bytes as they are */
	size_t rlen = n - off;
	uint8_t *raw = (d[4] & 24) ? png_rows(ihdr, d + off, n - off, &rlen) : NULL;
	const uint8_t *img = raw ? raw : d + off;
	uLongf zlen = compressBound((uLong)rlen);
	uint8_t *z = malloc(zlen);
	if (!z)
		abort();
	if (compress(z, &zlen, img, (uLong)rlen) == Z_OK) {
		uLongf half = zlen / 2; /* two IDAT chunks: a stream across chunks */
		put_chunk(b, "IDAT", z, half);
		put_chunk(b, "IDAT", z + half, zlen - half);
	}
	free(z);
	free(raw);
	put_chunk(b, "IEND", NULL, 0);
}

/* Mode 3: a valid JPEG of the data's pixels, then damaged as the data says. */
static void jpeg_synth(buf *b, const uint8_t *d, size_t n)
{
	if (n < 4)
		return;
	int w = 1 + d[0] % 24, h = 1 + d[1] % 24, gray = d[2] & 1, ndamage = d[3] % 6;
	int c = gray ? 1 : 3;
	struct jpeg_compress_struct cinfo;
	struct jpeg_error_mgr jerr;
	unsigned char *out = NULL;
	unsigned long len = 0;
	unsigned char *row = malloc((size_t)w * c);
	if (!row)
		abort();
	cinfo.err = jpeg_std_error(&jerr);
	jpeg_create_compress(&cinfo);
	jpeg_mem_dest(&cinfo, &out, &len);
	cinfo.image_width = (JDIMENSION)w;
	cinfo.image_height = (JDIMENSION)h;
	cinfo.input_components = c;
	cinfo.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
	jpeg_set_defaults(&cinfo);
	jpeg_set_quality(&cinfo, 10 + d[2] % 90, TRUE);
	if (d[2] & 2)
		jpeg_simple_progression(&cinfo);
	jpeg_start_compress(&cinfo, TRUE);
	size_t src = 4 + 3 * (size_t)ndamage;
	while (cinfo.next_scanline < cinfo.image_height) {
		for (int i = 0; i < w * c; i++, src++)
			row[i] = src < n ? d[src] : (uint8_t)(i * 7);
		jpeg_write_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	free(row);
	for (int i = 0; i < ndamage && 4 + 3 * (size_t)i + 2 < n && len > 0; i++) {
		const uint8_t *p = d + 4 + 3 * i;
		out[((size_t)p[0] << 8 | p[1]) % len] = p[2];
	}
	put(b, out, len);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	int side = 1 + (mode >> 3) % 8;
	wf_image_io io = {.h = side, .w = side, .c = mode & 4 ? 1 : 3, .classes = 2};
	io.scale = 1.0f / 255;
	for (int i = 0; i < 4; i++)
		io.std[i] = 1.0f;
	io.bgr = (mode >> 6) & 1;
	io.resize = (mode >> 7) ? WF_RESIZE_PAD : WF_RESIZE_FIT;
	io.max_pixels = 1 << 20;
	const uint8_t *d = data + 1;
	size_t n = size - 1;
	buf b = {0};
	switch (mode & 3) {
	case 0: put(&b, d, n); break;
	case 1: png_fix_crcs(&b, d, n); break;
	case 2: png_synth(&b, d, n); break;
	default: jpeg_synth(&b, d, n); break;
	}
	float out[8 * 8 * 3];
	wf_err err = {0};
	if (b.len) {
		int w, h;
		wf_image_probe(b.p, b.len, &w, &h, NULL, &err);
		wf_image_decode(&io, b.p, b.len, out, &err);
	}
	free(b.p);
	return 0;
}
