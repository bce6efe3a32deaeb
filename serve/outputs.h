/* outputs.h: what an inference gives back, whatever the protocol: the
 * outputs a request may ask for (checked once), softmax, top-k and class
 * labels, and the output tensors of a KServe v2 reply (FP32 values or BYTES
 * classification strings, or written into a client's shared memory), which
 * the JSON, binary and gRPC front ends only translate. Pure functions of
 * their arguments (but for the shared memory write), thread-safe. */
#ifndef WF_SERVE_OUTPUTS_H
#define WF_SERVE_OUTPUTS_H

#include "common/error.h"
#include "serve/shm.h"

#include <stddef.h>
#include <stdint.h>

/* The model's outputs, as the APIs name them. */
#define WF_SERVE_OUTPUT_PROBS  "probabilities"
#define WF_SERVE_OUTPUT_LOGITS "logits"
#define WF_SERVE_MAX_OUTPUTS   2

/* One output a request asks for, whatever its protocol. */
typedef struct wf_serve_output {
	int logits;	    /* 1: "logits", 0: "probabilities" */
	int binary;	    /* HTTP: in the binary section after the JSON */
	int classification; /* > 0: top-k "score:index:label" strings */
	/* written into a system shared memory region instead (shm.h): its
	 * name ("": not), and the bytes [offset, offset + size) it offers */
	char shm_region[128];
	uint64_t shm_offset, shm_size;
} wf_serve_output;

/* The outputs of a request that names none: both, probabilities first. */
int wf_serve_outputs_all(wf_serve_output out[WF_SERVE_MAX_OUTPUTS], int binary);
/* Check the n outputs a request named (names[i], with out[i]'s parameters
 * filled by the front end; classification[i] as given: 0 not asked, else
 * it must be positive) and set out[i].logits from the name: known names,
 * none twice, at most WF_SERVE_MAX_OUTPUTS, a shared memory region with its
 * size. An error names the output and the rule. */
int wf_serve_outputs_check(const char *const *names, const long *classification, int n,
			   wf_serve_output *out, wf_err *err);

/* One output tensor of a reply: its name, datatype and shape, and its bytes
 * as KServe's binary extension lays them out (FP32 values, or BYTES
 * elements: a 4-byte little-endian length, then the string). */
typedef struct wf_serve_tensor {
	const char *name;
	const char *datatype; /* "FP32" or "BYTES" */
	int64_t dims[2];
	int ndim;
	const uint8_t *data; /* NULL when written into shared memory */
	size_t len;	     /* bytes */
	int in_shm;	     /* written into the output's shared memory region */
	uint8_t *owned;	     /* what data points into, when it is not the result's */
} wf_serve_tensor;

/* The nout outputs of o from logits and probs [n,k] (labels: [k] class names
 * or NULL; unbatched: shapes without the batch dimension) into t[nout]
 * (free with wf_serve_tensors_free, also on failure); those asked into
 * shared memory are written into their region in shm. */
int wf_serve_tensors_make(const wf_serve_output *o, int nout, const float *logits,
			  const float *probs, int n, int k, int unbatched, char *const *labels,
			  wf_serve_shm *shm, wf_serve_tensor *t, wf_err *err);
void wf_serve_tensors_free(wf_serve_tensor *t, int n);

/* Indices of the top largest of p[k], best first (top <= k): the classes
 * every classification answer (TF Serving's, KServe's) lists. */
void wf_serve_top_k(const float *p, int k, int top, int *idx);
/* Class j's name: labels[j], or its index when there is none; into buf,
 * which it returns. */
const char *wf_serve_class_name(char *const *labels, int j, char *buf, size_t cap);
/* Softmax of logits [n,k] into probs [n,k] (probs may alias logits). */
void wf_serve_softmax(const float *logits, float *probs, int n, int k);
/* An output's shape: [n,width], or [width] when unbatched (n: -1 in
 * metadata). Returns the number of dimensions. */
int wf_serve_output_shape(int unbatched, long n, int width, int64_t dims[2]);

#endif
