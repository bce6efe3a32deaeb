/* zoo_build.h: the graph builder behind the model zoo and the Keras importer
 * (private to model/). Each add_* appends one layer to a graph JSON document
 * and tracks its output shape, so builders can make shape-dependent choices
 * (Keras's correct_pad, NASNet's adjust blocks) as Keras does when it builds. */
#ifndef WF_ZOO_BUILD_H
#define WF_ZOO_BUILD_H

#include "common/strmap.h"
#include "model/model.h"

#include <jansson.h>

typedef struct wf_bshape {
	int h, w, c; /* output per sample; flat [N,F] layers have h = w = 1 */
	int flat;    /* 1 after dense/gap/flatten */
} wf_bshape;

typedef struct wf_builder {
	json_t *layers; /* the graph's "layers" array */
	int n, cap;
	char **names;	 /* [n] malloc'd each, so returned names stay put */
	wf_strmap index; /* name -> its latest index in names (lookups in O(1)) */
	wf_bshape *shapes;
	int failed;    /* an allocation failed, a name was too long or an input was unknown */
	char why[256]; /* the first failure */
	int in_h, in_w, in_c;
	const char *input_name; /* not NULL: wf_b_input's name, whatever the builder asks */
} wf_builder;

/* Start a graph for input [h,w,c]; free with wf_builder_free. */
int wf_builder_init(wf_builder *b, int h, int w, int c);
void wf_builder_free(wf_builder *b);
/* Finish: the graph JSON text (malloc'd) with output = the last layer (or
 * `output` when not NULL); classes is that layer's width. NULL on failure
 * (b->why says why). */
char *wf_builder_json(wf_builder *b, const char *output, int *classes);
/* Shape of the named layer, or NULL. */
const wf_bshape *wf_builder_shape(const wf_builder *b, const char *name);

/* Each returns the new layer's name (stable until wf_builder_free); on
 * failure it marks b->failed and returns name anyway so calls can chain. */
const char *wf_b_add(wf_builder *b, const char *name, const char *type, json_t *config, int nin,
		     const char *const *inputs);
const char *wf_b_input(wf_builder *b, const char *name);
/* conv k x k, stride s, dilation d, groups g; same: Keras "same" padding. */
const char *wf_b_conv(wf_builder *b, const char *name, const char *in, int filters, int kh, int kw,
		      int sh, int sw, int d, int groups, int same, int use_bias);
/* depthwise conv (groups = channels, filters = channels * multiplier) */
const char *wf_b_dwconv(wf_builder *b, const char *name, const char *in, int k, int s, int same,
			int use_bias);
const char *wf_b_bn(wf_builder *b, const char *name, const char *in, double eps, double momentum);
const char *wf_b_act(wf_builder *b, const char *name, const char *type, const char *in);
const char *wf_b_add2(wf_builder *b, const char *name, const char *x, const char *y);
const char *wf_b_concat(wf_builder *b, const char *name, int n, const char *const *in);
/* max/avg pool ("maxpool"/"avgpool") k x k stride s */
const char *wf_b_pool(wf_builder *b, const char *name, const char *type, const char *in, int k,
		      int s, int same);
const char *wf_b_pad(wf_builder *b, const char *name, const char *type, const char *in, int t,
		     int bot, int l, int r);
const char *wf_b_gap(wf_builder *b, const char *name, const char *in);
const char *wf_b_flatten(wf_builder *b, const char *name, const char *in);
const char *wf_b_dense(wf_builder *b, const char *name, const char *in, int units, int use_bias);
const char *wf_b_dropout(wf_builder *b, const char *name, const char *in, double rate);

/* Keras's imagenet_utils.correct_pad for a k x k stride-2 window on input
 * x: pad[4] = top, bottom, left, right. */
void wf_b_correct_pad(const wf_builder *b, const char *x, int k, int pad[4]);

/* ---- the Keras applications (zoo_apps.c) ---- */

void wf_zoo_mobilenetv2(wf_builder *b, int classes, const wf_zoo_opts *o);
void wf_zoo_nasnetmobile(wf_builder *b, int classes, const wf_zoo_opts *o);
void wf_zoo_nasnetlarge(wf_builder *b, int classes, const wf_zoo_opts *o);
void wf_zoo_resnet50(wf_builder *b, int classes, const wf_zoo_opts *o);
void wf_zoo_resnet152(wf_builder *b, int classes, const wf_zoo_opts *o);

#endif
