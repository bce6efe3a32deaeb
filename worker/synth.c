/* synth.c: `weft data synth`, a generated data set a small CNN learns in
 * seconds: each class is a shape or pattern (squares, circles, stripes...)
 * drawn at a random place and size in random, well-contrasted colours, plus
 * pixel noise. Sample i is a pure function of (seed, i). */
#include "worker/data.h"

#include "common/util.h"

#include <stdlib.h>
#include <string.h>

#define SYNTH_BLOCK_BYTES (16 << 20) /* image bytes generated per append, about */
#define SYNTH_MIN_SIZE	  4	     /* shapes need 8 or more pixels to stay apart */
#define SYNTH_MAX_SIZE	  4096
#define SYNTH_NOISE	  8.0 /* pixel noise standard deviation (0..255 scale) */
#define SYNTH_CONTRAST	  112 /* least luma difference between shape and ground */

static const char *const synth_classes[] = {
	"square",   "hollow_square", "circle", "ring",	   "hstripes",
	"vstripes", "dstripes",	     "cross",  "triangle", "checkerboard",
};

/* 1 when (u, v) of an s x s box lies on the shape of class k. p is a period
 * (stripes, checks), t a stroke width. */
static int synth_inside(int k, int u, int v, int s, int p, int t)
{
	int c2 = s - 1; /* twice the centre, so odd and even sizes stay symmetric */
	int du = 2 * u - c2, dv = 2 * v - c2;
	int r2 = s * s; /* (2r)^2 with r = s/2 */
	int d2 = du * du + dv * dv;
	switch (k) {
	case 0: return 1;
	case 1: return u < t || v < t || u >= s - t || v >= s - t;
	case 2: return d2 <= r2;
	case 3: {
		int ri = s - 2 * 2 * t; /* 2 * inner radius */
		return d2 <= r2 && d2 >= ri * ri;
	}
	case 4: return (v / p) % 2 == 0;
	case 5: return (u / p) % 2 == 0;
	case 6: return ((u + v) / p) % 2 == 0;
	case 7: return abs(du) <= t || abs(dv) <= t;
	case 8: return abs(du) <= v; /* apex at the top, base at the bottom */
	case 9: return ((u / p) + (v / p)) % 2 == 0;
	default: return 0;
	}
}

static int luma(const int *rgb)
{
	return (299 * rgb[0] + 587 * rgb[1] + 114 * rgb[2]) / 1000;
}

/* Draw sample `index` into img [size,size,3] and return its label. */
static int32_t synth_sample(uint8_t *img, int size, int nclasses, uint64_t seed, long index)
{
	wf_rng r;
	wf_rng_seed(&r, wf_hash3(seed, (uint64_t)index, 0x53594e54));
	int k = (int)wf_rng_below(&r, (uint64_t)nclasses);
	int bg[3], fg[3];
	do {
		for (int ch = 0; ch < 3; ch++) {
			bg[ch] = (int)wf_rng_below(&r, 256);
			fg[ch] = (int)wf_rng_below(&r, 256);
		}
	} while (abs(luma(fg) - luma(bg)) < SYNTH_CONTRAST);
	int lo = size / 2, hi = size * 7 / 8;
	int s = lo + (int)wf_rng_below(&r, (uint64_t)(hi - lo + 1));
	int x0 = (int)wf_rng_below(&r, (uint64_t)(size - s + 1));
	int y0 = (int)wf_rng_below(&r, (uint64_t)(size - s + 1));
	int p = WF_MAX(2, s / 8) + (int)wf_rng_below(&r, 2);
	int t = WF_MAX(1, s / 8);
	for (int y = 0; y < size; y++) {
		for (int x = 0; x < size; x++) {
			int u = x - x0, v = y - y0;
			int on = u >= 0 && v >= 0 && u < s && v < s &&
				 synth_inside(k, u, v, s, p, t);
			const int *col = on ? fg : bg;
			uint8_t *px = img + ((size_t)y * size + x) * 3;
			for (int ch = 0; ch < 3; ch++) {
				double val = col[ch] + SYNTH_NOISE * wf_rng_normal(&r);
				px[ch] = (uint8_t)(val < 0 ? 0 : val > 255 ? 255 : val + 0.5);
			}
		}
	}
	return k;
}

int wf_data_synth(const char *out_path, const wf_synth_cfg *cfg, wf_err *err)
{
	int rc = 0;
	wf_dataset_writer *wr = NULL;
	uint8_t *images = NULL;
	int32_t *labels = NULL;
	if (cfg->count < 1)
		return wf_errf(err, WF_EINVAL, "synth: count = %ld, want >= 1", cfg->count);
	if (cfg->size < SYNTH_MIN_SIZE || cfg->size > SYNTH_MAX_SIZE)
		return wf_errf(err, WF_EINVAL, "synth: size = %d, want %d..%d", cfg->size,
			       SYNTH_MIN_SIZE, SYNTH_MAX_SIZE);
	if (cfg->classes < 1 || cfg->classes > (int)WF_ARRAY_LEN(synth_classes))
		return wf_errf(err, WF_EINVAL, "synth: classes = %d, want 1..%d", cfg->classes,
			       (int)WF_ARRAY_LEN(synth_classes));
	size_t sb = (size_t)cfg->size * cfg->size * 3;
	long block = (long)WF_MAX((size_t)1, WF_MIN((size_t)256, SYNTH_BLOCK_BYTES / sb));
	images = malloc(sb * (size_t)block);
	labels = malloc(sizeof(*labels) * (size_t)block);
	if (!images || !labels) {
		rc = wf_errf(err, WF_ENOMEM, "synth: out of memory");
		goto out;
	}
	rc = wf_dataset_create(&wr, out_path, cfg->count, cfg->size, cfg->size, 3, cfg->classes,
			       synth_classes, err);
	if (rc)
		goto out;
	for (long i = 0; i < cfg->count; i += block) {
		long n = WF_MIN(block, cfg->count - i);
		for (long j = 0; j < n; j++)
			labels[j] = synth_sample(images + sb * (size_t)j, cfg->size, cfg->classes,
						 cfg->seed, i + j);
		rc = wf_dataset_append(wr, images, labels, n, err);
		if (rc)
			goto out;
	}
	rc = wf_dataset_writer_close(wr, err);
	wr = NULL;
out:
	if (wr)
		wf_dataset_writer_close(wr, NULL); /* short: removes the temporary file */
	free(images);
	free(labels);
	return rc;
}
