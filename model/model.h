/* model.h: the network. A DAG of named layers (like a Keras functional
 * model), its flat parameter layout, the model zoo, and the model file.
 *
 * Parameters: every trainable float lives in one contiguous buffer, with a
 * table of named views ("conv1/kernel"). Views are laid out in REVERSE
 * topological order (the last layer's parameters at offset 0), so backward
 * finishes gradients in one ascending sweep: the gradient range [0, k) is
 * complete as soon as backward has passed the layers that own it.
 * Non-trainable state (batch-norm moving mean/variance) lives in a second
 * buffer with its own views. The graph's single output is the logits [N,K];
 * softmax is applied by the loss and by the server.
 *
 * Threads: a wf_model is read-only once built and may be shared by threads;
 * a wf_exec is used by one thread at a time. */
#ifndef WF_MODEL_H
#define WF_MODEL_H

#include "common/error.h"
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

#define WF_NAME_MAX   128
#define WF_MAX_INPUTS 16

typedef enum {
	WF_LAYER_INPUT,	 /* the image input [N,H,W,C] */
	WF_LAYER_CONV2D, /* filters, kernel [kh,kw], strides, dilation, groups, padding, use_bias */
	WF_LAYER_DENSE,	 /* units, use_bias; input [N,F] (flatten first) */
	WF_LAYER_BATCHNORM, /* epsilon, momentum */
	WF_LAYER_RELU,
	WF_LAYER_RELU6,
	WF_LAYER_ADD,	  /* 2+ inputs of one shape */
	WF_LAYER_CONCAT,  /* 2+ inputs, channel axis */
	WF_LAYER_MAXPOOL, /* pool [kh,kw], strides, padding */
	WF_LAYER_AVGPOOL,
	WF_LAYER_GAP,	  /* global average pool -> [N,C] */
	WF_LAYER_FLATTEN, /* [N,H,W,C] -> [N,H*W*C], no copy */
	WF_LAYER_ZEROPAD, /* padding [[t,b],[l,r]] */
	WF_LAYER_CROP,	  /* cropping [[t,b],[l,r]] */
	WF_LAYER_DROPOUT, /* rate; identity in inference */
	WF_LAYER__COUNT
} wf_layer_type;

typedef struct wf_layer {
	char name[WF_NAME_MAX];
	wf_layer_type type;
	int ninputs;
	int inputs[WF_MAX_INPUTS]; /* indices of producer layers (topological order) */
	/* config (meaning depends on type) */
	int filters, units;	    /* conv output channels / dense units */
	int kh, kw, sh, sw, dh, dw; /* conv/pool window, strides, dilation */
	int groups;		    /* conv groups (1 = normal) */
	int same;		    /* padding: 1 = Keras same, 0 = valid */
	int use_bias;
	int pad[4];	     /* zeropad/crop: top, bottom, left, right */
	float eps, momentum; /* batch norm */
	float rate;	     /* dropout */
	/* output shape per sample: [h,w,c] (dense/gap/flatten: h = w = 1) */
	int oh, ow, oc;
	/* parameter views, indices into wf_model.views (-1 when absent) */
	int p_kernel, p_bias, p_gamma, p_beta; /* trainable */
	int s_mean, s_var;		       /* non-trainable */
	/* int8 calibration (weft export --quantize int8), graph JSON "range":
	 * the [min, max] this layer's output is quantised over; has_range 0
	 * where none was measured */
	int has_range;
	float range[2];
	/* training only, not stored: 1 = frozen (Keras trainable=False): no
	 * gradient for its parameters, batch norm in inference mode. Set before
	 * wf_exec_create. */
	int frozen;
} wf_layer;

typedef struct wf_view {
	char name[2 * WF_NAME_MAX]; /* "<layer>/<param>", as in the model file */
	int trainable;		    /* 1: params buffer, 0: state buffer */
	size_t offset;		    /* floats from the start of its buffer */
	size_t count;		    /* floats */
	int ndim;
	int shape[4]; /* Keras layout: HWIO, (in,out), (C) */
} wf_view;

typedef struct wf_model {
	int in_h, in_w, in_c; /* input image */
	int classes;	      /* logits width */
	int nlayers;
	wf_layer *layers; /* topological order; layers[0] is the input */
	int output;	  /* index of the logits layer */
	int nviews;
	wf_view *views;
	size_t nparams;	  /* trainable floats */
	size_t nstate;	  /* non-trainable floats */
	float *params;	  /* host [nparams] */
	float *state;	  /* host [nstate] */
	char *graph_json; /* canonical graph JSON (what the model file stores) */
} wf_model;

/* Metadata kept beside the weights in model.h5 (docs/formats.md). */
typedef struct wf_model_meta {
	long trained_steps;
	int nclasses;
	char **class_names; /* [nclasses] label strings, may be NULL */
	/* preprocessing: pixel' = (pixel * scale - mean[c]) / std[c] */
	float scale;	       /* usually 1/255 */
	float mean[4], std[4]; /* per channel */
	char channel_order[8]; /* "RGB" */
	int pre_in_model;      /* 1: the preprocessing is the model's own first layers (Keras
				* Rescaling/Normalization, run by the input pipeline instead):
				* the model takes raw pixels, numbers included */
	char precision[8];     /* compute precision to serve in (weft export --precision):
				* one of WF_PRECISIONS (kernels.h); "": not chosen (fp32) */
} wf_model_meta;

/* ---- building ---- */

/* Parse a graph JSON document (format in model/graph.c), infer shapes,
 * lay out parameters. Errors name the layer and the field. */
int wf_model_from_json(wf_model **out, const char *graph_json, wf_err *err);
/* A built-in model: "mlp", "smallcnn", "resnet20", "resnet56", and the
 * Keras applications "mobilenetv2", "nasnetmobile", "nasnetlarge",
 * "resnet50", "resnet152" (layer for layer as tf.keras.applications builds
 * them). h, w or c = 0 take the model's default input size. */
int wf_model_zoo(wf_model **out, const char *name, int h, int w, int c, int classes, wf_err *err);
/* Options of a built-in model. */
typedef struct wf_zoo_opts {
	int include_top;	/* 1: the classifier head; 0: no head, the output is the globally
				   average-pooled features [N,C] (Keras include_top=False,
				   pooling='avg') and classes is ignored */
	float alpha;		/* mobilenetv2 width multiplier (0 = 1.0) */
	const char *input_name; /* NULL: the model's own ("image", "input_1"); else this name
				   (a fine-tuned Keras model keeps its input's) */
} wf_zoo_opts;
#define WF_ZOO_OPTS_DEFAULT                                                                        \
	{                                                                                          \
		1, 1.0f, NULL                                                                      \
	}
/* wf_model_zoo with options (NULL = WF_ZOO_OPTS_DEFAULT). */
int wf_model_zoo_ex(wf_model **out, const char *name, int h, int w, int c, int classes,
		    const wf_zoo_opts *opts, wf_err *err);
/* A built-in model's default input [h,w,c] and, when meta is not NULL, its
 * preprocessing as Keras applications define it (other fields untouched). */
int wf_model_zoo_info(const char *name, int *h, int *w, int *c, wf_model_meta *meta, wf_err *err);
/* Names of the built-in models, space separated. */
const char *wf_model_zoo_names(void);
void wf_model_free(wf_model *m);
/* Kernel initialisers as Keras names them (fans as Keras computes them;
 * the normal ones truncated at 2 sd as Keras draws them). */
typedef enum {
	WF_INIT_GLOROT_UNIFORM, /* the Keras default */
	WF_INIT_GLOROT_NORMAL,
	WF_INIT_HE_NORMAL,
	WF_INIT_HE_UNIFORM,
	WF_INIT_LECUN_NORMAL,
	WF_INIT_LECUN_UNIFORM
} wf_init;
/* Initialiser by Keras name ("glorot_uniform", ...): 0, or -1 if unknown. */
int wf_init_parse(const char *name, wf_init *out);
/* Initialise parameters deterministically from seed: conv and dense kernels
 * Glorot-uniform (Keras's default), zero biases, BN gamma 1 beta 0 mean 0
 * var 1. */
void wf_model_init_params(wf_model *m, uint64_t seed);
/* The same with conv_init for conv kernels and dense_init for dense ones. */
void wf_model_init_params_with(wf_model *m, uint64_t seed, wf_init conv_init, wf_init dense_init);
/* View by name, or NULL. */
const wf_view *wf_model_view(const wf_model *m, const char *name);
/* Forward FLOPs per sample (multiply-add = 2), for throughput reports. */
double wf_model_flops(const wf_model *m);

void wf_model_meta_init(wf_model_meta *meta); /* scale 1/255, mean 0, std 1, RGB */
void wf_model_meta_free(wf_model_meta *meta);

/* ---- the model file (HDF5) ---- */

#define WF_MODEL_FORMAT 1

/* Write model (graph, weights, state, meta) to path, via a temporary file
 * renamed into place. */
int wf_model_save(const wf_model *m, const wf_model_meta *meta, const char *path, wf_err *err);
/* Read a model file; meta may be NULL. Truncated, corrupt or wrong-version
 * files fail with a message naming the file and what is wrong. */
int wf_model_load(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err);
/* As wf_model_load, in-process only: for files whose bytes were verified
 * against a checksum first (a checkpoint's DONE). wf_model_load parses the
 * file once in a short-lived child before (common/sandbox), so a file that
 * crashes or hangs libhdf5 is refused instead of taking the process down. */
int wf_model_load_trusted(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err);

/* ---- the executor ---- */

typedef struct wf_exec wf_exec;

/* Called during backward each time the ascending gradient prefix
 * [0, done) grows (floats). */
typedef void (*wf_grad_ready_fn)(void *arg, size_t done);

/* Called by a forward before layer i runs (once per layer per forward, in
 * layer order, for each layer that reads parameters or state): the layer
 * reads the parameters [lo, hi) floats (lo == hi: none) and, when state is
 * 1, its non-trainable state (batch-norm statistics, which a training
 * forward also updates). The caller may wait there until those values are
 * final. Returns 0, or an error code that stops the forward (the hook says
 * why through its own channel). */
typedef int (*wf_layer_hook_fn)(void *arg, int layer, size_t lo, size_t hi, int state);

/* An executor of model m on backend be for batches up to max_batch. It
 * plans one activation arena for max_batch. training = 0 builds an
 * inference-only executor (no gradient memory). The executor's parameter,
 * gradient and state buffers live in backend memory: on host backends
 * params/state ARE m->params/m->state. */
int wf_exec_create(wf_exec **out, wf_model *m, wf_backend *be, int max_batch, int training,
		   wf_err *err);
void wf_exec_free(wf_exec *ex);

/* Forward n <= max_batch samples. images: host [n,H,W,C] float, already
 * preprocessed; an inference executor on a host-memory backend reads them
 * in place (they must not change until forward returns), others copy them.
 * training selects batch-norm mode and dropout; dropout_seed keys the masks
 * (use wf_hash3(seed, step, micro)). */
int wf_exec_forward(wf_exec *ex, const float *images, int n, int training, uint64_t dropout_seed);
/* Set (fn NULL: clear) the hook every following forward calls before each
 * layer that reads parameters or state; none is set at creation, and a
 * forward without one costs nothing more. WF_ENOMEM when out of memory. */
int wf_exec_set_layer_hook(wf_exec *ex, wf_layer_hook_fn fn, void *arg);
/* After forward: host copy of logits [n,K] / softmax probabilities [n,K]. */
int wf_exec_logits(wf_exec *ex, float *out);
/* Backend memory the executor's buffers take (activations, gradients, and
 * its own copy of the parameters on a device backend); oneDNN's own
 * scratch and reordered weights are not counted. */
size_t wf_exec_bytes(const wf_exec *ex);
int wf_exec_probs(wf_exec *ex, float *out);
/* After forward: mean loss and number of correct top-1 predictions for
 * labels [n] (host). Also prepares backward. */
int wf_exec_loss(wf_exec *ex, const int32_t *labels, float *loss, int *correct);
/* Label smoothing s in [0, 1) for the following wf_exec_loss/backward
 * calls: targets (1 - s) * onehot + s / K, as Keras's label_smoothing. */
int wf_exec_set_label_smoothing(wf_exec *ex, float s);
/* Backward of the last forward+loss. Parameter gradients ACCUMULATE into
 * the gradient buffer, scaled by grad_scale (1/global batch when summing
 * micro-batches). ready (may be NULL) is called as the gradient prefix grows. */
int wf_exec_backward(wf_exec *ex, float grad_scale, wf_grad_ready_fn ready, void *arg);

/* Buffers in backend memory, [m->nparams] / [m->nstate]. The parameters
 * belong to the executor: read them here; they change only through
 * wf_exec_optim_step, wf_exec_params_from_host (after writing m->params) or
 * in place between wf_exec_params_begin and wf_exec_params_end (a
 * broadcast), and each of these drops what the executor derived from them
 * (an inference executor's reordered, fused weights). */
const float *wf_exec_params(const wf_exec *ex);
float *wf_exec_params_begin(wf_exec *ex);
int wf_exec_params_end(wf_exec *ex);
struct wf_optim_cfg;
/* One optimizer step (model/optim.h) on the executor's parameters with its
 * gradient times grad_scale and slots m, v (backend memory, NULL where the
 * optimizer has none). Errors are in the backend's err, as wf_optim_apply's. */
int wf_exec_optim_step(wf_exec *ex, const struct wf_optim_cfg *c, long step, float *m, float *v,
		       float grad_scale);
/* The same over the parameters [lo, hi) only, with the gradient g (backend
 * memory, the whole vector's [nparams]; NULL: the executor's): each float
 * ends as wf_exec_optim_step leaves it (see wf_optim_apply_range). */
int wf_exec_optim_step_range(wf_exec *ex, const struct wf_optim_cfg *c, long step, size_t lo,
			     size_t hi, const float *g, float *m, float *v, float grad_scale);
float *wf_exec_grads(wf_exec *ex);
float *wf_exec_state(wf_exec *ex);
int wf_exec_zero_grads(wf_exec *ex);
/* Copy params and state between backend memory and m->params/m->state
 * (no-ops on host backends). An inference executor treats the parameters as
 * constant (its plans keep them reordered, fused): after changing
 * m->params, call wf_exec_params_from_host, which also rebuilds its plans. */
int wf_exec_params_to_host(wf_exec *ex);
int wf_exec_params_from_host(wf_exec *ex);
/* Layers an inference executor fused into convolutions (relu/relu6, add,
 * zero padding); a training executor: relus into batch norms and adds, zero
 * paddings into convolutions. */
int wf_exec_fused(const wf_exec *ex);
/* Threads that run an inference executor's layers at once (the parallel
 * branches of a cell: NASNet at batches up to 4 on a cpu backend of two
 * threads or more); 1: one layer after another. */
int wf_exec_branch_threads(const wf_exec *ex);
/* 1 while an inference executor still tries its ways of running (with
 * branches: its first 14 forwards time layers, plan again and try the
 * branches against one layer after another; at a batch of 8 or more its
 * first 8 forwards of max_batch rows try tiles against the whole batch,
 * unless the first took over 0.5 s); time forwards after it. */
int wf_exec_tuning(const wf_exec *ex);
/* Rows per tile where an inference executor runs a forward of a large batch
 * as tiles, each through every layer (chosen by its first forwards when
 * measured faster: the tiles' tensors stay in the cache); 0: whole. */
int wf_exec_tile_rows(const wf_exec *ex);
/* Before the first forward: run every forward over the whole batch, never
 * trying tiles (their trial costs 8 forwards). */
void wf_exec_whole_batches(wf_exec *ex);
/* Layers whose output the executor keeps in bf16 (bf16 precision). */
int wf_exec_bf16_layers(const wf_exec *ex);
/* Convolutions an inference executor runs in int8 (created on a backend
 * set to int8 precision, for a model with calibration ranges). */
int wf_exec_int8_convs(const wf_exec *ex);
/* The data type layer i's output is kept in: "f32", "bf16", "u8" or "s8"
 * (int8 tensors); NULL when out of range or when the layer keeps no tensor
 * (an inference executor's zero padding that its reader applies). */
const char *wf_exec_layer_dtype(const wf_exec *ex, int i);
/* Layer i's output after a forward, in backend memory: every layer's in a
 * training executor (also after an inference-mode forward; in bf16 for the
 * layers wf_exec_bf16_layers counts), except NULL for those that keep no
 * tensor of their own there (a zero padding its conv applies, a batch norm
 * or add whose relu runs inside it); an inference executor reuses memory, so only
 * the output layer's is meaningful there. */
const float *wf_exec_layer_output(const wf_exec *ex, int i);
wf_backend *wf_exec_backend(wf_exec *ex);
const char *wf_exec_error(wf_exec *ex); /* cause of the last failure */

#endif
