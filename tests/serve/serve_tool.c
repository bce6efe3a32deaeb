/* serve_tool.c: makes inputs for the weft-serve tests and benchmarks.
 *   serve_tool model ZOO OUT.h5 [SEED] [H]  a zoo model with random weights and
 *                                           non-trivial batch-norm statistics,
 *                                           classes "class0".., 10 classes
 *   serve_tool fold IN.h5 OUT.h5            fold batch norm, drop dropout
 *   serve_tool jpeg OUT.jpg W H SEED        a random-pattern JPEG image
 *   serve_tool images DIR N SEED [W H]      DIR/class<k>/img<i>.jpg, k = i % 10
 *   serve_tool decode IN.jpg OUT.rgb         the RGB pixels libjpeg decodes (as
 *                                           weft-serve does); prints "W H"
 */
#include "common/util.h"
#include "model/fold.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* jpeglib.h needs stdio.h first */
#include <jpeglib.h>

static void randomise_bn(wf_model *m, uint64_t seed)
{
	wf_rng r;
	wf_rng_seed(&r, seed ^ 0xb17);
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		if (l->type != WF_LAYER_BATCHNORM)
			continue;
		const wf_view *g = &m->views[l->p_gamma], *b = &m->views[l->p_beta];
		const wf_view *mu = &m->views[l->s_mean], *var = &m->views[l->s_var];
		for (size_t c = 0; c < g->count; c++) {
			m->params[g->offset + c] = (float)(0.5 + wf_rng_uniform(&r));
			m->params[b->offset + c] = (float)(0.2 * wf_rng_normal(&r));
			m->state[mu->offset + c] = (float)(0.3 * wf_rng_normal(&r));
			m->state[var->offset + c] = (float)(0.5 + wf_rng_uniform(&r));
		}
	}
}

static int write_jpeg(const char *path, int w, int h, uint64_t seed, int cls)
{
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	unsigned char *px = malloc((size_t)w * h * 3);
	wf_rng r;
	wf_rng_seed(&r, seed);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < 3; c++) {
				/* a class-dependent stripe pattern plus noise */
				int stripe = ((x + y * (cls % 3)) / (2 + cls % 4)) % 2;
				double v = (stripe ? 200.0 : 40.0) * (c == cls % 3 ? 1.0 : 0.5) +
					   30.0 * wf_rng_normal(&r);
				px[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0	    ? 0
										  : v > 255 ? 255
											    : v);
			}
	struct jpeg_compress_struct cinfo;
	struct jpeg_error_mgr jerr;
	cinfo.err = jpeg_std_error(&jerr);
	jpeg_create_compress(&cinfo);
	jpeg_stdio_dest(&cinfo, f);
	cinfo.image_width = (JDIMENSION)w;
	cinfo.image_height = (JDIMENSION)h;
	cinfo.input_components = 3;
	cinfo.in_color_space = JCS_RGB;
	jpeg_set_defaults(&cinfo);
	jpeg_set_quality(&cinfo, 90, TRUE);
	jpeg_start_compress(&cinfo, TRUE);
	while (cinfo.next_scanline < cinfo.image_height) {
		JSAMPROW row = px + (size_t)cinfo.next_scanline * w * 3;
		jpeg_write_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	fclose(f);
	free(px);
	return 0;
}

static int decode_jpeg(const char *in, const char *out)
{
	FILE *f = fopen(in, "rb"), *o = NULL;
	if (!f) {
		perror(in);
		return 1;
	}
	struct jpeg_decompress_struct cinfo;
	struct jpeg_error_mgr jerr;
	cinfo.err = jpeg_std_error(&jerr);
	jpeg_create_decompress(&cinfo);
	jpeg_stdio_src(&cinfo, f);
	jpeg_read_header(&cinfo, TRUE);
	cinfo.out_color_space = JCS_RGB;
	jpeg_start_decompress(&cinfo);
	size_t stride = (size_t)cinfo.output_width * 3;
	unsigned char *row = malloc(stride);
	int rc = 0;
	o = fopen(out, "wb");
	if (!o) {
		perror(out);
		rc = 1;
	}
	while (cinfo.output_scanline < cinfo.output_height) {
		jpeg_read_scanlines(&cinfo, &row, 1);
		if (o && fwrite(row, 1, stride, o) != stride)
			rc = 1;
	}
	printf("%u %u\n", cinfo.output_width, cinfo.output_height);
	jpeg_finish_decompress(&cinfo);
	jpeg_destroy_decompress(&cinfo);
	free(row);
	if (o && fclose(o))
		rc = 1;
	fclose(f);
	return rc;
}

static int make_model(const char *zoo, const char *out, uint64_t seed, int hw)
{
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	if (wf_model_zoo(&m, zoo, hw, hw, 3, 10, &err)) {
		fprintf(stderr, "serve_tool: %s\n", err.msg);
		return 1;
	}
	wf_model_init_params(m, seed);
	randomise_bn(m, seed);
	wf_model_meta_init(&meta);
	meta.nclasses = 10;
	meta.class_names = calloc(10, sizeof(char *));
	for (int i = 0; i < 10; i++) {
		char name[32];
		snprintf(name, sizeof(name), "class%d", i);
		meta.class_names[i] = strdup(name);
	}
	meta.trained_steps = (long)seed;
	int rc = wf_model_save(m, &meta, out, &err);
	if (rc)
		fprintf(stderr, "serve_tool: %s\n", err.msg);
	wf_model_meta_free(&meta);
	wf_model_free(m);
	return rc ? 1 : 0;
}

static int fold_file(const char *in, const char *out)
{
	wf_model *m = NULL, *f = NULL;
	wf_model_meta meta;
	wf_err err = {0};
	wf_model_meta_init(&meta);
	int rc = wf_model_load(&m, &meta, in, &err);
	if (!rc)
		rc = wf_model_fold_for_inference(m, &f, &err);
	if (!rc)
		rc = wf_model_save(f, &meta, out, &err);
	if (rc)
		fprintf(stderr, "serve_tool: %s\n", err.msg);
	wf_model_free(f);
	wf_model_free(m);
	wf_model_meta_free(&meta);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "model"))
		return make_model(argv[2], argv[3], argc > 4 ? strtoull(argv[4], NULL, 10) : 1,
				  argc > 5 ? atoi(argv[5]) : 32);
	if (argc == 4 && !strcmp(argv[1], "fold"))
		return fold_file(argv[2], argv[3]);
	if (argc == 6 && !strcmp(argv[1], "jpeg"))
		return write_jpeg(argv[2], atoi(argv[3]), atoi(argv[4]),
				  strtoull(argv[5], NULL, 10), 0);
	if (argc == 4 && !strcmp(argv[1], "decode"))
		return decode_jpeg(argv[2], argv[3]);
	if ((argc == 5 || argc == 7) && !strcmp(argv[1], "images")) {
		int n = atoi(argv[3]), w = argc == 7 ? atoi(argv[5]) : 32;
		int h = argc == 7 ? atoi(argv[6]) : 32;
		uint64_t seed = strtoull(argv[4], NULL, 10);
		char path[4096];
		for (int i = 0; i < n; i++) {
			snprintf(path, sizeof(path), "%s/class%d", argv[2], i % 10);
			wf_mkdirs(path);
			snprintf(path, sizeof(path), "%s/class%d/img%05d.jpg", argv[2], i % 10, i);
			if (write_jpeg(path, w, h, wf_hash3(seed, (uint64_t)i, 0), i % 10))
				return 1;
		}
		return 0;
	}
	fprintf(stderr, "usage: serve_tool model ZOO OUT.h5 [SEED] [H] | fold IN OUT | jpeg OUT W "
			"H SEED | images DIR N SEED [W H] | decode IN.jpg OUT.rgb\n");
	return 2;
}
