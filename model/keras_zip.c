/* keras_zip.c: reading Keras 3 .keras archives (zip) through their
 * central directory (see keras.c). */
#include "model/keras_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- .keras archives ------------------------------------------------------------------ */

/* Bounds: a .keras archive is read through its central directory only; no
 * name from it is ever used as a path. */
#define ZIP_MAX_CONFIG	      (64u << 20)   /* config.json */
#define ZIP_MAX_WEIGHTS	      (4000u << 20) /* model.weights.h5, inflated in memory */
#define ZIP_MAX_ENTRIES	      65536
#define ZIP_DEFLATE_RATIO_MAX 1032 /* deflate's largest expansion */

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static int zread_at(FILE *f, long off, void *buf, size_t n)
{
	return fseek(f, off, SEEK_SET) == 0 && fread(buf, 1, n, f) == n ? 0 : -1;
}

int wf_keras_is_zip(const char *path)
{
	unsigned char magic[4] = {0};
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	size_t n = fread(magic, 1, sizeof(magic), f);
	fclose(f);
	return n == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

/* Read entry `want` of the zip archive f (size fsize) into *out (malloc'd,
 * *n bytes, plus a NUL). 1 when the archive has no such entry. */
static int zip_entry(FILE *f, long fsize, const char *path, const char *want, size_t max,
		     unsigned char **out, size_t *n, wf_err *err)
{
	unsigned char tail[65557], h[46];
	*out = NULL, *n = 0;
	long tn = fsize < (long)sizeof(tail) ? fsize : (long)sizeof(tail);
	if (tn < 22 || zread_at(f, fsize - tn, tail, (size_t)tn))
		return wf_errf(err, WF_EFORMAT, "%s: .keras archive truncated (no zip directory)",
			       path);
	long e = -1;
	for (long i = tn - 22; i >= 0 && e < 0; i--)
		if (le32(tail + i) == 0x06054b50)
			e = i;
	if (e < 0)
		return wf_errf(err, WF_EFORMAT,
			       "%s: .keras archive truncated or corrupt (no end of the zip "
			       "directory)",
			       path);
	unsigned entries = le16(tail + e + 10);
	uint32_t cd_size = le32(tail + e + 12), cd_off = le32(tail + e + 16);
	if (cd_off == 0xffffffffu || entries == 0xffff)
		return wf_errf(err, WF_ENOTSUP, "%s: a zip64 .keras archive (not supported)", path);
	if ((long)cd_off + (long)cd_size > fsize || entries > ZIP_MAX_ENTRIES)
		return wf_errf(err, WF_EFORMAT,
			       "%s: .keras archive: zip directory beyond the end of the file "
			       "(truncated?)",
			       path);
	long off = cd_off;
	for (unsigned i = 0; i < entries; i++) {
		char name[256];
		if (off + 46 > fsize || zread_at(f, off, h, 46) || le32(h) != 0x02014b50)
			return wf_errf(err, WF_EFORMAT,
				       "%s: .keras archive: zip directory entry %u corrupt", path,
				       i);
		unsigned method = le16(h + 10), nl = le16(h + 28), xl = le16(h + 30),
			 cl = le16(h + 32);
		uint32_t crc = le32(h + 16), csize = le32(h + 20), usize = le32(h + 24),
			 loff = le32(h + 42);
		long next = off + 46 + (long)nl + xl + cl;
		if (nl >= sizeof(name) || zread_at(f, off + 46, name, nl)) {
			off = next;
			continue;
		}
		name[nl] = '\0';
		off = next;
		if (strcmp(name, want) != 0)
			continue;
		unsigned char lh[30];
		if (csize == 0xffffffffu || usize == 0xffffffffu)
			return wf_errf(err, WF_ENOTSUP, "%s: %s: a zip64 entry (not supported)",
				       path, want);
		if (usize > max)
			return wf_errf(err, WF_EFORMAT, "%s: %s: %u bytes (at most %zu)", path,
				       want, usize, max);
		/* before the allocation: stored data is its own size, and deflate
		 * cannot expand more than 1032 times */
		if ((method == 0 && usize != csize) ||
		    (uint64_t)usize > (uint64_t)csize * ZIP_DEFLATE_RATIO_MAX + 1024)
			return wf_errf(err, WF_EFORMAT,
				       "%s: %s: %u bytes claimed from %u compressed: corrupt", path,
				       want, usize, csize);
		if (method != 0 && method != 8)
			return wf_errf(err, WF_ENOTSUP,
				       "%s: %s: zip compression method %u (stored or deflated "
				       "only)",
				       path, want, method);
		if ((long)loff + 30 > fsize || zread_at(f, loff, lh, 30) || le32(lh) != 0x04034b50)
			return wf_errf(err, WF_EFORMAT, "%s: %s: zip local header corrupt", path,
				       want);
		long data = (long)loff + 30 + le16(lh + 26) + le16(lh + 28);
		if (data + (long)csize > fsize)
			return wf_errf(err, WF_EFORMAT,
				       "%s: %s: data beyond the end of the archive (truncated?)",
				       path, want);
		unsigned char *cbuf = malloc(csize ? csize : 1), *ubuf = malloc((size_t)usize + 1);
		int rc = 0;
		if (!cbuf || !ubuf) {
			rc = wf_errf(err, WF_ENOMEM, "%s: %s: out of memory", path, want);
		} else if (zread_at(f, data, cbuf, csize)) {
			rc = wf_errf(err, WF_EIO, "%s: %s: cannot be read", path, want);
		} else if (method == 0) {
			memcpy(ubuf, cbuf, csize); /* usize == csize, checked above */
		} else {
			z_stream z;
			memset(&z, 0, sizeof(z));
			if (inflateInit2(&z, -MAX_WBITS) != Z_OK) {
				rc = wf_errf(err, WF_ENOMEM, "%s: %s: inflate", path, want);
			} else {
				z.next_in = cbuf, z.avail_in = csize;
				z.next_out = ubuf, z.avail_out = usize;
				int zr = inflate(&z, Z_FINISH);
				if (zr != Z_STREAM_END || z.total_out != usize)
					rc = wf_errf(err, WF_EFORMAT,
						     "%s: %s: corrupt compressed data", path, want);
				inflateEnd(&z);
			}
		}
		if (!rc && crc32(0L, ubuf, usize) != crc)
			rc = wf_errf(err, WF_EFORMAT, "%s: %s: CRC mismatch (corrupt archive)",
				     path, want);
		free(cbuf);
		if (rc) {
			free(ubuf);
			return rc;
		}
		ubuf[usize] = '\0';
		*out = ubuf, *n = usize;
		return 0;
	}
	return 1;
}

/* Read config.json and model.weights.h5 of the .keras archive at path. */
int wf_keras_read_archive(const char *path, json_t **config, unsigned char **weights, size_t *nw,
			  wf_err *err)
{
	unsigned char *cfg = NULL;
	size_t ncfg = 0;
	json_error_t jerr;
	*config = NULL, *weights = NULL, *nw = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return wf_errf(err, WF_EIO, "%s: %s", path, strerror(errno));
	long fsize = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
	int rc = fsize < 0 ? wf_errf(err, WF_EIO, "%s: cannot be read", path) : 0;
	if (!rc &&
	    (rc = zip_entry(f, fsize, path, "config.json", ZIP_MAX_CONFIG, &cfg, &ncfg, err)) == 1)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: a zip archive without config.json (not a .keras "
			     "model)",
			     path);
	if (!rc && (rc = zip_entry(f, fsize, path, "model.weights.h5", ZIP_MAX_WEIGHTS, weights, nw,
				   err)) == 1)
		rc = wf_errf(err, WF_EFORMAT,
			     "%s: .keras archive without model.weights.h5 (saved without weights?)",
			     path);
	if (!rc && !(*config = json_loadb((const char *)cfg, ncfg, 0, &jerr)))
		rc = wf_errf(err, WF_EFORMAT, "%s: config.json: invalid JSON at line %d: %s", path,
			     jerr.line, jerr.text);
	fclose(f);
	free(cfg);
	if (rc) {
		free(*weights);
		*weights = NULL;
	}
	return rc;
}
