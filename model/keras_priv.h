/* keras_priv.h: the Keras importer's state and the helpers its sources
 * share (keras.c: config and layer walk, entry points; keras_layers.c:
 * layer converters; keras_weights.c: weights and preprocessing;
 * keras_zip.c: .keras archives). Not part of the public API. */
#ifndef WF_KERAS_PRIV_H
#define WF_KERAS_PRIV_H

#include "model/keras.h"
#include "model/zoo_build.h"

#include "common/cancel.h"
#include "common/h5.h"
#include "common/strmap.h"

#include <jansson.h>
#include <stddef.h>

#define NM	    WF_NAME_MAX
#define MAX_WEIGHTS 8

/* ---- the importer's state ------------------------------------------------ */

/* A weight to copy once the model is built. */
typedef struct wload {
	char view[2 * NM];   /* weft view, "<layer>/<param>" */
	char layer[NM];	     /* Keras layer */
	char scope[2 * NM];  /* the nested models holding it, "base/inner" ("" at the top) */
	char v3path[4 * NM]; /* .keras: its group, "layers/functional/layers/conv2d_1" */
	char key[32];	     /* Keras weight name without scope and ":0" */
	int depthwise;	     /* Keras [kh,kw,C,m] into weft [kh,kw,1,C*m] */
} wload;

typedef struct kimp {
	const char *path;
	hid_t file, weights;  /* file, its model_weights group */
	int v3;		      /* weights as in a .keras archive: layers/<name>/vars/<i> */
	char scope[2 * NM];   /* the nested model being walked ("" at the top) */
	char v3dir[4 * NM];   /* .keras: the group of that model ("" at the top) */
	char v3layer[4 * NM]; /* .keras: the group of the layer being converted */
	int pre_ok;	      /* still in the leading preprocessing chain */
	wf_err *err;
	int rc; /* the first error's code */
	wf_builder b;
	/* alias: Keras layer -> weft layer holding its output ("" = not built) */
	int n;
	char (*kname)[NM];
	wf_strmap kindex; /* kname -> its latest index (lookups in O(1)) */
	char (*alias)[NM];
	int *consumers;	     /* Keras consumers of each layer */
	const char *input;   /* the weft input layer */
	const char *output;  /* the Keras output layer */
	double pa[4], pc[4]; /* leading preprocessing so far: y = pa * x + pc */
	int have_pre;
	char base_name[NM]; /* the first nested model (a Keras application as the base) */
	wload *loads;
	int nloads, capl;
} kimp;
/* Record an error about the file (the first code is kept in k->rc); returns code. */
int wf_keras_fail(kimp *k, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Record an error naming Keras layer name and its class; returns WF_EINVAL. */
int wf_keras_lfail(kimp *k, const char *name, const char *cls, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Queue weight key of Keras layer `layer` for weft view `view` (dw: depthwise). */
int wf_keras_add_load(kimp *k, const char *view, const char *layer, const char *key, int dw);

/* keras_layers.c */
/* The Keras activation of a layer config ("linear" when absent). */
const char *wf_keras_activation(json_t *cfg);
/* Fold a leading Rescaling/Normalization layer into k's preprocessing. */
int wf_keras_fold_pre(kimp *k, const char *name, const char *cls, json_t *cfg);
/* Convert Keras layer name of class cls (fed by weft layers in[0..nin)) through
 * the table of converters; *y: the weft layer holding its output. */
int wf_keras_convert(kimp *k, const char *name, const char *cls, json_t *cfg, int nin,
		     const char **in, int is_output, const char **y);

/* keras_weights.c */
/* Copy every queued weight from the file into the built model m. */
int wf_keras_load_weights(kimp *k, wf_model *m);
/* Fill meta's preprocessing from the folded layers or the application's name. */
void wf_keras_set_meta(kimp *k, const char *model_name, wf_model_meta *meta);

/* keras_zip.c */
/* 1 when path starts with a zip local-file header. */
int wf_keras_is_zip(const char *path);
/* Read config.json (parsed) and model.weights.h5 (malloc'd bytes) of the
 * .keras archive at path. */
int wf_keras_read_archive(const char *path, json_t **config, unsigned char **weights, size_t *nw,
			  wf_err *err);

#endif
