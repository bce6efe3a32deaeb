/* images_check.c: test helper for test_images.sh: `images_check A B` reads
 * every sample of two dataset files through wf_dataset_read (an encoded one
 * decoded by the image module) and exits 0 when shapes, classes, labels and
 * pixels are identical, and the readers over both (every augmentation on,
 * 1 thread for A, 3 for B) give identical batches; 1 with the first
 * difference otherwise. */
#include "worker/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int load(const char *path, wf_dataset **ds, uint8_t **px, int32_t **lab)
{
	wf_err err = {0};
	if (wf_dataset_open(ds, path, &err)) {
		fprintf(stderr, "images_check: %s\n", err.msg);
		return 1;
	}
	const wf_dataset_info *in = wf_dataset_info_get(*ds);
	*px = malloc((size_t)in->h * in->w * in->c * (size_t)in->count + 1);
	*lab = malloc(sizeof(int32_t) * (size_t)in->count + 1);
	if (!*px || !*lab || wf_dataset_read(*ds, 0, in->count, *px, *lab, &err)) {
		fprintf(stderr, "images_check: %s: %s\n", path, err.msg);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	wf_dataset *a = NULL, *b = NULL;
	uint8_t *pa = NULL, *pb = NULL;
	int32_t *la = NULL, *lb = NULL;
	int rc = 1;
	if (argc != 3) {
		fprintf(stderr, "usage: images_check A B\n");
		return 2;
	}
	const char *mb = getenv("WEFT_DATA_MEMORY_MB"); /* the program resolves it, as weft does */
	if (mb && *mb)
		wf_dataset_set_memory_mb(atol(mb));
	if (load(argv[1], &a, &pa, &la) || load(argv[2], &b, &pb, &lb))
		goto out;
	const wf_dataset_info *ia = wf_dataset_info_get(a), *ib = wf_dataset_info_get(b);
	if (ia->count != ib->count || ia->h != ib->h || ia->w != ib->w || ia->c != ib->c ||
	    ia->nclasses != ib->nclasses) {
		fprintf(stderr, "images_check: shapes differ: %ld x %dx%dx%d vs %ld x %dx%dx%d\n",
			ia->count, ia->h, ia->w, ia->c, ib->count, ib->h, ib->w, ib->c);
		goto out;
	}
	for (int i = 0; i < ia->nclasses; i++)
		if (strcmp(ia->classes[i], ib->classes[i]) != 0) {
			fprintf(stderr, "images_check: class %d: %s vs %s\n", i, ia->classes[i],
				ib->classes[i]);
			goto out;
		}
	size_t sb = (size_t)ia->h * ia->w * ia->c;
	for (long k = 0; k < ia->count; k++) {
		if (la[k] != lb[k] || memcmp(pa + k * sb, pb + k * sb, sb) != 0) {
			fprintf(stderr, "images_check: sample %ld differs (labels %d, %d)\n", k,
				la[k], lb[k]);
			goto out;
		}
	}
	wf_reader_cfg rc_cfg;
	wf_reader_cfg_default(&rc_cfg);
	rc_cfg.batch = (int)(ia->count < 4 ? ia->count : 4);
	rc_cfg.flip = rc_cfg.crop = rc_cfg.rrc = 1;
	rc_cfg.brightness = rc_cfg.contrast = rc_cfg.saturation = 0.3f;
	rc_cfg.threads = 1;
	wf_reader *ra = NULL, *rb = NULL;
	wf_err err = {0};
	if (wf_reader_create(&ra, a, &rc_cfg, &err) == 0) {
		rc_cfg.threads = 3;
		wf_reader_create(&rb, b, &rc_cfg, &err);
	}
	for (int s = 0; s < 6 && ra && rb; s++) {
		wf_batch *x = NULL, *y = NULL;
		if (wf_reader_next(ra, &x, &err) != 1 || wf_reader_next(rb, &y, &err) != 1)
			break;
		if (x->n != y->n || memcmp(x->labels, y->labels, sizeof(int32_t) * x->n) != 0 ||
		    memcmp(x->images, y->images, sizeof(float) * sb * x->n) != 0) {
			fprintf(stderr, "images_check: augmented batch %d differs\n", s);
			wf_reader_free(ra);
			wf_reader_free(rb);
			goto out;
		}
		if (s == 5)
			printf("images_check: 6 augmented batches identical\n");
	}
	wf_reader_free(ra);
	wf_reader_free(rb);
	if (err.msg[0]) {
		fprintf(stderr, "images_check: reader: %s\n", err.msg);
		goto out;
	}
	printf("images_check: %ld samples identical (%s: %s, %s: %s)\n", ia->count, argv[1],
	       ia->encoded ? "encoded" : "pixels", argv[2], ib->encoded ? "encoded" : "pixels");
	rc = 0;
out:
	free(pa);
	free(pb);
	free(la);
	free(lb);
	wf_dataset_close(a);
	wf_dataset_close(b);
	return rc;
}
