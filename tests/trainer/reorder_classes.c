/* reorder_classes.c: test helper for test_class_remap.sh: `reorder_classes
 * IN OUT` writes the samples of dataset IN to OUT with the class list
 * reversed and every label mapped to its class's new index, so OUT holds the
 * same images of the same classes, listed in another order. */
#include "worker/data.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	wf_err err = {0};
	wf_dataset *ds = NULL;
	wf_dataset_writer *wr = NULL;
	uint8_t *px = NULL;
	int32_t *lab = NULL;
	const char **names = NULL;
	int rc = 1;
	if (argc != 3) {
		fprintf(stderr, "usage: reorder_classes IN OUT\n");
		return 2;
	}
	if (wf_dataset_open(&ds, argv[1], &err))
		goto done;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	int k = in->nclasses;
	px = malloc((size_t)in->h * in->w * in->c * (size_t)in->count + 1);
	lab = malloc(sizeof(*lab) * (size_t)in->count + 1);
	names = calloc((size_t)k + 1, sizeof(*names));
	if (!px || !lab || !names || !in->classes) {
		snprintf(err.msg, sizeof(err.msg), "out of memory or no class names");
		goto done;
	}
	for (int i = 0; i < k; i++)
		names[i] = in->classes[k - 1 - i];
	if (wf_dataset_read(ds, 0, in->count, px, lab, &err))
		goto done;
	for (long i = 0; i < in->count; i++)
		lab[i] = k - 1 - lab[i];
	if (wf_dataset_create(&wr, argv[2], in->count, in->h, in->w, in->c, k, names, &err) ||
	    wf_dataset_append(wr, px, lab, in->count, &err))
		goto done;
	rc = wf_dataset_writer_close(wr, &err);
	wr = NULL;
done:
	if (rc)
		fprintf(stderr, "reorder_classes: %s\n", err.msg);
	if (wr)
		wf_dataset_writer_close(wr, &err);
	wf_dataset_close(ds);
	free(px);
	free(lab);
	free(names);
	return rc ? 1 : 0;
}
