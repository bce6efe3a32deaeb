/* cmd_model.c: `weft summary` and `weft import-keras` (see cmd_model.h). */
#include "trainer/cmd_model.h"

#include "model/keras.h"
#include "model/model.h"
#include "trainer/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- weft summary -------------------------------------------------------- */

/* n with thousands separators, as Keras prints counts. */
static const char *grouped(size_t n, char *buf, size_t len)
{
	char raw[32];
	int d = snprintf(raw, sizeof(raw), "%zu", n), o = 0;
	for (int i = 0; i < d && o < (int)len - 1; i++) {
		if (i > 0 && (d - i) % 3 == 0 && o < (int)len - 2)
			buf[o++] = ',';
		buf[o++] = raw[i];
	}
	buf[o] = '\0';
	return buf;
}

/* Append s to dst[cap], cutting it short when full. */
static void append(char *dst, size_t cap, const char *s)
{
	size_t at = strlen(dst), n = strlen(s);
	if (at + n >= cap)
		n = cap - at - 1;
	memcpy(dst + at, s, n);
	dst[at + n] = '\0';
}

static size_t layer_params(const wf_model *m, const wf_layer *l)
{
	int vs[6] = {l->p_kernel, l->p_bias, l->p_gamma, l->p_beta, l->s_mean, l->s_var};
	size_t n = 0;
	for (int k = 0; k < 6; k++)
		if (vs[k] >= 0)
			n += m->views[vs[k]].count;
	return n;
}

static int is_flat(const wf_model *m, int i)
{
	for (;;) {
		const wf_layer *l = &m->layers[i];
		if (l->type == WF_LAYER_DENSE || l->type == WF_LAYER_GAP ||
		    l->type == WF_LAYER_FLATTEN)
			return 1;
		if (l->ninputs < 1 || l->type == WF_LAYER_CONV2D || l->type == WF_LAYER_MAXPOOL ||
		    l->type == WF_LAYER_AVGPOOL || l->type == WF_LAYER_ZEROPAD ||
		    l->type == WF_LAYER_CROP)
			return 0;
		i = l->inputs[0];
	}
}

static const char *type_name(wf_layer_type t)
{
	static const char *const names[WF_LAYER__COUNT] = {
		"input",   "conv2d",  "dense", "batchnorm", "relu",    "relu6", "add",	   "concat",
		"maxpool", "avgpool", "gap",   "flatten",   "zeropad", "crop",	"dropout",
	};
	return t >= 0 && t < WF_LAYER__COUNT ? names[t] : "?";
}

static void print_summary(const wf_model *m, const char *title)
{
	char a[32], b[32], c[32];
	const char *rule = "_______________________________________________________________"
			   "_______________________________________________";
	printf("Model: \"%s\"\n%s\n", title, rule);
	printf(" %-44s %-22s %12s   %s\n", "Layer (type)", "Output Shape", "Param #",
	       "Connected to");
	printf("%s\n", "==============================================================="
		       "===============================================");
	for (int i = 0; i < m->nlayers; i++) {
		const wf_layer *l = &m->layers[i];
		char name[WF_NAME_MAX + 32], shape[48], conn[96] = "";
		if (l->type == WF_LAYER_CONV2D && l->groups > 1)
			snprintf(name, sizeof(name), "%s (conv2d/%s)", l->name,
				 m->layers[l->inputs[0]].oc == l->groups ? "depthwise" : "grouped");
		else
			snprintf(name, sizeof(name), "%s (%s)", l->name, type_name(l->type));
		if (is_flat(m, i))
			snprintf(shape, sizeof(shape), "(None, %d)", l->oc);
		else
			snprintf(shape, sizeof(shape), "(None, %d, %d, %d)", l->oh, l->ow, l->oc);
		for (int k = 0; k < l->ninputs; k++) {
			size_t at = strlen(conn);
			if (at > 60) {
				snprintf(conn + at, sizeof(conn) - at, ", +%d", l->ninputs - k);
				break;
			}
			if (k)
				append(conn, sizeof(conn), ", ");
			append(conn, sizeof(conn), m->layers[l->inputs[k]].name);
		}
		printf(" %-44s %-22s %12s   %s\n", name, shape,
		       grouped(layer_params(m, l), a, sizeof(a)), conn);
	}
	printf("%s\n", "==============================================================="
		       "===============================================");
	printf("Total params: %s\nTrainable params: %s\nNon-trainable params: %s\n",
	       grouped(m->nparams + m->nstate, a, sizeof(a)), grouped(m->nparams, b, sizeof(b)),
	       grouped(m->nstate, c, sizeof(c)));
	printf("Layers: %d, output: %s [%d], forward: %.3g GFLOPs per image\n", m->nlayers,
	       m->layers[m->output].name, m->classes, wf_model_flops(m) / 1e9);
}

int wf_cmd_summary(int argc, char **argv, wf_err *err)
{
	const char *file = NULL, *alpha = NULL;
	long classes = 1000, size = 0;
	int no_top = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"model", WF_FLAG_STR, &file, "FILE", "a model file (weft or Keras .h5) instead"},
		{"classes", WF_FLAG_INT, &classes, "K", "classifier width (default 1000)"},
		{"size", WF_FLAG_INT, &size, "N",
		 "input N x N (default: the model's own, e.g. 224; nasnetlarge 331)"},
		{"no-top", WF_FLAG_BOOL, &no_top, NULL,
		 "without the classifier: the output is the pooled features (Keras "
		 "include_top=False, pooling='avg')"},
		{"alpha", WF_FLAG_STR, &alpha, "A", "mobilenetv2 width multiplier (default 1.0)"},
		{0},
	};
	const wf_command_help help = {
		"weft summary MODEL [--classes K] [--size N] [--no-top]\n"
		"       weft summary --model FILE",
		"Print a Keras-like table of a model's layers, output shapes and parameter "
		"counts,\n"
		"with the totals (trainable: weights; non-trainable: batch-norm statistics).\n"
		"MODEL is a built-in model: mlp smallcnn resnet20 resnet56 mobilenetv2\n"
		"nasnetmobile nasnetlarge resnet50 resnet152."};
	wf_model *m = NULL;
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 1, err);
	if (rc != 0)
		goto cleanup;
	const char *name = pos.n ? pos.items[0] : NULL;
	if (!!name == !!file) {
		rc = wf_errf(err, WF_EINVAL,
			     "summary: give a built-in MODEL or --model FILE (one of them)");
		goto cleanup;
	}
	if (file) {
		if ((rc = wf_model_load(&m, NULL, file, err)) != 0)
			goto cleanup;
		print_summary(m, file);
		goto cleanup;
	}
	wf_zoo_opts o = WF_ZOO_OPTS_DEFAULT;
	o.include_top = !no_top;
	if (alpha) {
		char *end;
		o.alpha = strtof(alpha, &end);
		if (*end || !(o.alpha > 0)) {
			rc = wf_errf(err, WF_EINVAL,
				     "summary: --alpha '%s' is not a positive number", alpha);
			goto cleanup;
		}
	}
	if (classes < 1 || classes > 65536 || size < 0 || size > 4096) {
		rc = wf_errf(err, WF_EINVAL, "summary: --classes %ld / --size %ld out of range",
			     classes, size);
		goto cleanup;
	}
	if ((rc = wf_model_zoo_ex(&m, name, (int)size, (int)size, 3, (int)classes, &o, err)))
		goto cleanup;
	print_summary(m, name);
cleanup:
	wf_cli_list_free(&pos);
	wf_model_free(m);
	return rc;
}

/* ---- weft import-keras ----------------------------------------------------- */

static int read_labels(const char *path, wf_model_meta *meta, int classes, wf_err *err)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	if (!f)
		return wf_errf(err, WF_EIO, "import-keras: --labels %s: cannot be opened", path);
	meta->class_names = calloc((size_t)classes, sizeof(char *));
	int n = 0, rc = 0;
	while (meta->class_names && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (n >= classes) {
			n++;
			continue;
		}
		if (!(meta->class_names[n++] = strdup(line)))
			rc = wf_errf(err, WF_ENOMEM, "import-keras: out of memory");
	}
	fclose(f);
	meta->nclasses = n < classes ? n : classes;
	if (!meta->class_names)
		return wf_errf(err, WF_ENOMEM, "import-keras: out of memory");
	if (!rc && n != classes)
		rc = wf_errf(err, WF_EINVAL,
			     "import-keras: --labels %s has %d lines, the model has %d classes",
			     path, n, classes);
	return rc;
}

int wf_cmd_import_keras(int argc, char **argv, wf_err *err)
{
	const char *pre = NULL, *labels = NULL;
	int quiet = 0;
	wf_cli_list pos = {0};
	const wf_flag flags[] = {
		{"preprocessing", WF_FLAG_STR, &pre, "MODE",
		 "override the input preprocessing: tf ([-1, 1]), caffe (BGR minus the ImageNet "
		 "mean), unit ([0, 1]) or raw (pixels as they are). Default: from leading "
		 "Rescaling/Normalization layers, else from the Keras application's name, else "
		 "raw"},
		{"labels", WF_FLAG_STR, &labels, "FILE", "class names, one per line"},
		{"quiet", WF_FLAG_BOOL, &quiet, NULL, "do not print the summary table"},
		{0},
	};
	const wf_command_help help = {
		"weft import-keras IN.h5 OUT.h5 [--preprocessing MODE] [--labels FILE]",
		"Convert a Keras model saved with model.save('x.h5') (Keras 2 or 3) or\n"
		"model.save('x.keras') (Keras 3) to a weft model file: the graph, the weights\n"
		"and the preprocessing; a base model nested as a layer (the transfer-learning\n"
		"recipe) is flattened under its layers' names. A final softmax\n"
		"becomes the logits output (the server applies softmax). Layers weft cannot\n"
		"run are reported by name and class. weft-serve also loads Keras files directly."};
	wf_model *m = NULL;
	wf_model_meta meta;
	wf_model_meta_init(&meta);
	int rc = wf_cli_parse(&help, flags, argc, argv, &pos, 2, err);
	if (rc != 0)
		goto cleanup;
	if (pos.n != 2) {
		rc = wf_errf(err, WF_EINVAL, "import-keras: expected IN.h5 OUT.h5 (see --help)");
		goto cleanup;
	}
	if ((rc = wf_keras_load(&m, &meta, pos.items[0], err)) != 0)
		goto cleanup;
	if (pre) { /* then the preprocessing is the caller's, outside the model */
		int h, w, c;
		meta.pre_in_model = 0;
		const char *zoo = strcmp(pre, "tf") == 0      ? "mobilenetv2"
				  : strcmp(pre, "caffe") == 0 ? "resnet50"
				  : strcmp(pre, "unit") == 0  ? "resnet20"
							      : NULL;
		if (zoo) {
			wf_model_zoo_info(zoo, &h, &w, &c, &meta, err);
		} else if (strcmp(pre, "raw") == 0) {
			meta.scale = 1.0f;
			for (int k = 0; k < 4; k++)
				meta.mean[k] = 0.0f, meta.std[k] = 1.0f;
			snprintf(meta.channel_order, sizeof(meta.channel_order), "RGB");
		} else {
			rc = wf_errf(err, WF_EINVAL,
				     "import-keras: --preprocessing '%s' (expected tf, caffe, unit "
				     "or raw)",
				     pre);
			goto cleanup;
		}
	}
	if (labels && (rc = read_labels(labels, &meta, m->classes, err)))
		goto cleanup;
	if ((rc = wf_model_save(m, &meta, pos.items[1], err)) != 0)
		goto cleanup;
	if (!quiet)
		print_summary(m, pos.items[0]);
	printf("wrote %s: input %dx%dx%d, %d classes, preprocessing (x * %g - [%g %g %g]) / "
	       "[%g %g %g] %s\n",
	       pos.items[1], m->in_h, m->in_w, m->in_c, m->classes, (double)meta.scale,
	       (double)meta.mean[0], (double)meta.mean[1], (double)meta.mean[2],
	       (double)meta.std[0], (double)meta.std[1], (double)meta.std[2], meta.channel_order);
cleanup:
	wf_cli_list_free(&pos);
	wf_model_free(m);
	wf_model_meta_free(&meta);
	return rc;
}
