/* request.h: the JSON (and binary) bodies of the inference APIs, parsed into
 * model input and formatted from model output. TensorFlow Serving REST
 * (:predict, :classify) and KServe v2 (/infer, with the binary-data and
 * classification extensions). No HTTP here: these are pure functions of their
 * arguments, thread-safe, and the fuzz target drives them directly.
 *
 * What numbers mean: numbers in a TF "instances"/"inputs" body and KServe FP32
 * tensors are the model's input as its graph takes it (TF Serving feeds them
 * to the graph unchanged): after the recorded preprocessing, unless that
 * preprocessing is the model's own first layers (a Keras Rescaling or
 * Normalization: io->raw_numbers), when numbers are raw pixels and get it as
 * Keras would. Raw pixels are sent as images ({"b64": JPEG or PNG}, KServe
 * BYTES) or as UINT8 tensors; those always get the model's preprocessing
 * (and images are resized). Every front end builds model input with the
 * wf_serve_input_* functions below, the one place these rules live. */
#ifndef WF_SERVE_REQUEST_H
#define WF_SERVE_REQUEST_H

#include "common/error.h"
#include "common/image.h"
#include "serve/outputs.h"
#include "serve/shm.h"

#include <stddef.h>
#include <stdint.h>

/* The model's one input, as the APIs name it (its outputs: outputs.h). The
 * input also answers to the model's own name for it (wf_serve_input_name). */
#define WF_SERVE_INPUT_NAME "input"
/* Signatures, as TF Serving names them: the default one has one output
 * (probabilities: replies are plain lists); WF_SERVE_SIGNATURE_ALL has both
 * outputs (replies keyed by output name, TF Serving's form for several). */
#define WF_SERVE_SIGNATURE_DEFAULT "serving_default"
#define WF_SERVE_SIGNATURE_ALL	   "serving_all"
/* Most input floats one request may carry (bounds memory per request). */
#define WF_SERVE_MAX_INPUT_FLOATS (1L << 26)

/* A parsed request's input: n samples of model input. */
typedef struct wf_serve_input {
	int n;			/* samples */
	float *x;		/* [n,H,W,C], preprocessed: malloc'd, or borrowed */
	int borrowed;		/* x is a binary FP32 tensor read in place: of the body, */
	wf_serve_shm_view view; /* or of this shared memory region (held until freed) */
} wf_serve_input;

void wf_serve_input_free(wf_serve_input *in);

/* ---- model input: the one place request values become model input ---- */

/* The input's name as metadata lists it: the model's own (its input layer's,
 * as `weft summary` shows it: a Keras model's InputLayer name), else
 * WF_SERVE_INPUT_NAME. */
const char *wf_serve_input_name(const wf_image_io *io);
/* 1 when a request may name the input `name`: the model's own name or
 * WF_SERVE_INPUT_NAME. */
int wf_serve_input_name_ok(const wf_image_io *io, const char *name);
/* 1 when numbers are the model input as they are (may be read in place). */
int wf_serve_numbers_as_is(const wf_image_io *io);
/* n samples of numbers x [n,H,W,C] into model input, in place. */
void wf_serve_input_numbers(const wf_image_io *io, float *x, size_t n);
/* One sample of raw pixels px [H,W,C] (RGB) into model input dst. */
void wf_serve_input_pixels(const wf_image_io *io, const uint8_t *px, float *dst);
/* One encoded image (JPEG or PNG) decoded, resized and preprocessed into
 * dst [H,W,C]; WF_EINVAL with a reason for a bad image. */
int wf_serve_input_image(const wf_image_io *io, const uint8_t *bytes, size_t len, float *dst,
			 wf_err *err);
/* in: n samples [H,W,C] of a dense tensor at data: FP32 numbers or, with u8,
 * UINT8 pixels. With borrow, FP32 numbers that are the model input as they
 * are and aligned are read in place (in->borrowed); otherwise copied with
 * wf_serve_copy_guarded (data may be a client's shared memory: a shrunk
 * object is WF_EINVAL). */
int wf_serve_input_dense(const wf_image_io *io, size_t n, const void *data, int u8, int borrow,
			 wf_serve_input *in, wf_err *err);

/* ---- one input tensor, whatever the protocol ---- */

/* One BYTES element: an encoded image, or its base64 text. */
typedef struct wf_serve_bytes {
	const uint8_t *p;
	size_t len;
} wf_serve_bytes;

/* An input tensor as a request carries it: KServe over JSON, the binary
 * extension or gRPC, TF Serving's Predict over gRPC. Views into the request
 * (which must outlive the model input when raw_borrow says so).
 * wf_serve_tensor_input checks it and builds the model input: the one
 * validator and builder of input tensors. */
typedef struct wf_serve_tensor_view {
	const char *name;     /* as the request names it; NULL: none */
	const char *datatype; /* FP32, UINT8 or BYTES; others are refused */
	const int64_t *dims;
	int ndim;
	/* its values, in one of these forms (named in messages by *_what): */
	const uint8_t *raw; /* FP32 (little-endian), UINT8, or BYTES elements (each a 4-byte
			     * little-endian length, then the bytes) */
	size_t raw_len;
	int has_raw;
	int raw_borrow;	      /* FP32 raw may be read in place (it outlives the input) */
	const char *raw_what; /* "binary_data_size", "raw_input_contents", "tensor_content" */
	const float *values;  /* numbers; UINT8: whole numbers 0..255 */
	size_t nvalues;
	int has_values;
	const wf_serve_bytes *elements; /* BYTES: one encoded image per sample */
	size_t nelements;
	int has_elements;
	int elements_b64;	  /* the elements are base64 text (p NULL: not text) */
	const char *values_what;  /* "\"data\"", "fp32_contents" */
	const char *element_what; /* how messages name element i ("input element" when
				   * NULL; TF Serving REST's "instance") */
	/* or a system shared memory region (shm.h): its name ("": none) */
	char shm_region[128];
	uint64_t shm_offset, shm_size;
} wf_serve_tensor_view;

/* t into model input in (its shared memory region from shm, NULL: none
 * available to this client): the name, datatype, shape against the model
 * (wf_serve_dense_samples), the values against the shape, UINT8 ranges,
 * images decoded. An FP32 tensor that is the model input as it is, aligned
 * and borrowable (or in shared memory), is read in place. Errors name the
 * input and the rule. */
int wf_serve_tensor_input(const wf_image_io *io, const wf_serve_tensor_view *t, wf_serve_shm *shm,
			  wf_serve_input *in, wf_err *err);

/* ---- TF Serving's tf.Example: Classify's samples (gRPC and REST) ---- */

/* One feature of an example as a request gives it. */
typedef struct wf_serve_feature {
	enum { WF_SERVE_FEATURE_NONE, WF_SERVE_FEATURE_BYTES, WF_SERVE_FEATURE_FLOATS } kind;
	size_t n;	     /* values: byte strings or floats */
	const uint8_t *data; /* BYTES: the first string ... */
	size_t len;	     /* ... of len bytes */
	const float *floats; /* FLOATS: [n] */
} wf_serve_feature;

/* Which feature of an example holds its sample: the lower the better, the
 * first of "image/encoded", "image", "input", the model's input name, or
 * (of an example with one feature) any; -1: not this one. */
int wf_serve_example_rank(const wf_image_io *io, const char *key, size_t nfeatures);
/* Example i's sample from its feature f (NULL: none found) into model
 * input dst [H,W,C]: one encoded image, or the model input's H*W*C floats
 * (numbers, request.h's rule for them). Errors name example i and what it
 * needs. */
int wf_serve_example_sample(const wf_image_io *io, size_t i, const wf_serve_feature *f, float *dst,
			    wf_err *err);

/* ---- one request, whatever the protocol ---- */

/* Every front end translates its message into this, and the core
 * (infer.h's wf_serve_infer) runs it: the input as one tensor or as
 * examples (built here, by the one builder), or built by the front end's
 * own reader (HTTP's JSON bodies); the outputs asked for; the time limits. */
typedef struct wf_serve_request wf_serve_request;

/* A front end's reader, called by the core once the model (io) is found:
 * fills rq's input (its tensor, its examples, or rq->input itself) and
 * outputs from the message in arg. Errors name the field. */
typedef int (*wf_serve_read_fn)(void *arg, const wf_image_io *io, wf_serve_request *rq,
				wf_err *err);

struct wf_serve_request {
	wf_serve_read_fn read;
	void *read_arg;
	/* the input, in one of these forms */
	wf_serve_tensor_view tensor; /* one tensor (KServe, TF Serving's Predict) */
	int has_tensor;
	const wf_serve_feature *examples; /* TF Serving's Classify: each example's feature */
	size_t nexamples;
	int has_examples;
	wf_serve_input input; /* built (by wf_serve_request_input, or by read) */
	wf_serve_shm *shm;    /* regions the tensor and outputs may name; NULL: none */
	/* the outputs as tensors (wf_serve_tensors_make); nout 0: logits and
	 * probabilities only */
	int nout;
	wf_serve_output out[WF_SERVE_MAX_OUTPUTS];
	/* time */
	double t0;	  /* wf_now() when it arrived; 0: when the core gets it */
	double timeout_s; /* longest wait for a batch thread */
	double deadline;  /* wf_now() time the client gives up; 0: none */
};

/* rq->input from rq's tensor (wf_serve_tensor_input) or examples
 * (wf_serve_examples_input), unless the reader built it. */
int wf_serve_request_input(const wf_image_io *io, wf_serve_request *rq, wf_err *err);
/* Frees what the request owns (its input). */
void wf_serve_request_free(wf_serve_request *rq);
/* n examples (f[i]: example i's feature, kind NONE when it has none) into
 * model input in, each by wf_serve_example_sample. */
int wf_serve_examples_input(const wf_image_io *io, const wf_serve_feature *f, size_t n,
			    wf_serve_input *in, wf_err *err);

/* ---- TensorFlow Serving REST ---- */

typedef struct wf_serve_tf_req {
	wf_serve_input in;
	int columnar;	 /* 1: body had "inputs" (reply "outputs"); 0: "instances" */
	int top_k;	 /* :classify: classes per result (body "top_k", default 5) */
	int all_outputs; /* signature_name WF_SERVE_SIGNATURE_ALL */
} wf_serve_tf_req;

/* Parse a :predict or :classify body ("instances", "inputs" or, for
 * classify, "examples": tf.Examples as objects of features, an image as
 * {"b64": ...}, numbers as a list, flat or nested). Errors name the
 * instance or example and what is wrong. */
int wf_serve_tf_parse(const wf_image_io *io, const char *body, size_t len, wf_serve_tf_req *req,
		      wf_err *err);
void wf_serve_tf_req_free(wf_serve_tf_req *req);
/* {"predictions": probs} or {"outputs": probs}; probs [n,K]. With
 * all_outputs, every output by name: {"predictions": [{"probabilities": [..],
 * "logits": [..]}, ...]} or {"outputs": {"probabilities": probs, "logits":
 * logits}}. malloc'd. */
char *wf_serve_tf_predict_reply(const float *probs, const float *logits, int n, int k, int columnar,
				int all_outputs);
/* {"results": [[[label, score], ...] per sample]}, top_k best first. malloc'd. */
char *wf_serve_tf_classify_reply(const float *probs, int n, int k, char *const *labels, int top_k);
/* {"error": msg}. malloc'd. */
char *wf_serve_error_json(const char *msg);

/* ---- KServe v2 ---- */

typedef struct wf_serve_kv2_req {
	wf_serve_input in;
	char id[256]; /* echoed back when present */
	int has_id;
	int unbatched;	 /* the model's: outputs have no batch dimension */
	long timeout_us; /* request parameters "timeout" (0: none) */
	int nout;
	wf_serve_output out[WF_SERVE_MAX_OUTPUTS]; /* the outputs asked for */
} wf_serve_kv2_req;

/* Parse an /infer body. json_len: bytes of JSON at the start of body (the
 * Inference-Header-Content-Length; len when there is no binary part). An
 * input whose parameters name a "shared_memory_region" is read from it in
 * shm (NULL: shared memory is not available to this client). */
int wf_serve_kv2_parse(const wf_image_io *io, const char *body, size_t len, size_t json_len,
		       wf_serve_shm *shm, wf_serve_kv2_req *req, wf_err *err);
void wf_serve_kv2_req_free(wf_serve_kv2_req *req);

/* The /infer reply of req's outputs t[req->nout] (outputs.h's tensors: those
 * in shared memory are named only). *header_len is the JSON part's length
 * when the reply has a binary part, else 0. */
int wf_serve_kv2_reply(const wf_serve_kv2_req *req, const wf_serve_tensor *t, const char *model,
		       long version, char **body, size_t *len, size_t *header_len, wf_err *err);

/* ---- the server's metadata, for every KServe front end ---- */

#define WF_SERVE_NAME		"weft-serve"
#define WF_SERVE_VERSION	"0.1.0"
#define WF_SERVE_MAX_EXTENSIONS 10
/* The KServe / Triton extensions the server has into out[WF_SERVE_MAX_EXTENSIONS]
 * (system_shared_memory when shm, the shared memory policy, is not none);
 * returns the count. */
int wf_serve_extensions(int shm, const char **out);

/* Triton's words for a model that is not served: "Request for unknown
 * model: 'NAME' [version V ]is not found" (version > 0: that version), or,
 * with none_available, "... 'NAME' has no available versions"; into buf,
 * which it returns. */
const char *wf_serve_kserve_unknown(const char *name, long version, int none_available, char *buf,
				    size_t cap);

/* What a load request with parameters other than "config" (Triton's
 * "file:..." model files) is told, on both protocols. */
#define WF_SERVE_LOAD_FILES_REFUSED                                                                \
	"load parameters other than \"config\" (model files) are not supported: weft-serve "       \
	"loads the files of the model's folder"
#define WF_SERVE_LOAD_CONFIG_NOT_STRING                                                            \
	"load parameter \"config\" must be a string: the model configuration as JSON"

/* ---- the model's tensor shapes, for every KServe front end ---- */

/* A dense (FP32, UINT8) input of shape dims[ndim] holds *n samples: the
 * model input [N,H,W,C], or one sample [H,W,C] when the model is unbatched
 * (io->unbatched: config.pbtxt max_batch_size 0). An error names the shape
 * wanted and the one given. */
int wf_serve_dense_samples(const wf_image_io *io, const int64_t *dims, int ndim, long *n,
			   wf_err *err);
/* The input's shape as metadata gives it: [-1,H,W,C], or [H,W,C] when
 * unbatched. Returns the number of dimensions. */
int wf_serve_input_shape(const wf_image_io *io, int64_t dims[4]);
/* dims[nd] as a new JSON array (jansson's json_t). */
struct json_t *wf_serve_dims_json(const int64_t *dims, int nd);

#endif
