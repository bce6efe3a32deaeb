/* grpc_tfs.c: TF Serving's gRPC API: tensorflow.serving.PredictionService
 * (Predict, Classify, Regress, GetModelMetadata) and ModelService
 * (GetModelStatus, HandleReloadConfigRequest). The signatures have one
 * input [N,H,W,C], named as the model names it (requests may also say
 * "input"): DT_FLOAT numbers (request.h says what they mean), DT_UINT8 raw
 * pixels, or DT_STRING [N] encoded JPEG/PNG images, in tensor_content or the
 * typed *_val fields; "serving_default" has the output "probabilities",
 * "serving_all" also "logits" ([N,K] DT_FLOAT, returned in float_val).
 * Classify takes tf.Examples whose feature ("image/encoded", "image",
 * "input", the input's name, or the only one) is an encoded image
 * (bytes_list) or model input (float_list) and returns the top 5 classes
 * with their probabilities. */
#include "serve/grpc_services.h"

#include "common/util.h"
#include "serve/request.h"
#include "serve/proto/tf_serving.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLASSIFY_TOP 5
#define SIGDEF_TYPE  "type.googleapis.com/tensorflow.serving.SignatureDefMap"

typedef Tensorflow__Serving__ModelSpec model_spec;

/* The version a ModelSpec asks for, held in m. */
static int get_model(wf_grpc_adapter *a, const model_spec *spec, int check_signature,
		     wf_grpc_model *m, wf_grpc_call *call)
{
	if (!spec)
		return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "Missing ModelSpec");
	if (check_signature && *spec->signature_name &&
	    strcmp(spec->signature_name, WF_SERVE_SIGNATURE_DEFAULT) != 0 &&
	    strcmp(spec->signature_name, WF_SERVE_SIGNATURE_ALL) != 0)
		return wf_grpc_fail(call, WF_GRPC_FAILED_PRECONDITION,
				    "Serving signature key \"%.200s\" not found (the model has "
				    "\"" WF_SERVE_SIGNATURE_DEFAULT
				    "\" and \"" WF_SERVE_SIGNATURE_ALL "\")",
				    spec->signature_name);
	long version = 0;
	const char *label = NULL;
	if (spec->version_choice_case == TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION &&
	    spec->version)
		version = (long)spec->version->value;
	else if (spec->version_choice_case ==
		 TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION_LABEL)
		label = spec->version_label;
	return wf_grpc_model_get(a, spec->name, version, label, m, call->message,
				 sizeof(call->message));
}

/* The signature a request names: 1 for the one with every output. */
static int all_outputs(const model_spec *spec)
{
	return spec && !strcmp(spec->signature_name, WF_SERVE_SIGNATURE_ALL);
}

/* The reply's ModelSpec: name, the version served, the signature. */
static void fill_spec(model_spec *s, Google__Protobuf__Int64Value *v, const wf_grpc_model *m,
		      int all)
{
	tensorflow__serving__model_spec__init(s);
	google__protobuf__int64_value__init(v);
	v->value = m->version;
	s->name = (char *)m->name;
	s->version_choice_case = TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION;
	s->version = v;
	s->signature_name = all ? WF_SERVE_SIGNATURE_ALL : WF_SERVE_SIGNATURE_DEFAULT;
}

/* ---- input -------------------------------------------------------------- */

/* A Predict or Classify message for the request core (serve/infer.h), and
 * what its input view points into besides the message. */
typedef struct tfs_call {
	const Tensorflow__Serving__PredictRequest *predict;
	const Tensorflow__Serving__Input *examples; /* Classify */
	int all;				    /* the signature with every output */
	int want[2];				    /* probabilities, logits */
	int64_t dims[8];
	float *ints;		    /* int_val as numbers */
	wf_serve_bytes *e;	    /* string_val */
	wf_serve_feature *features; /* each example's */
} tfs_call;

static void tfs_call_free(tfs_call *t)
{
	free(t->ints);
	free(t->e);
	free(t->features);
}

/* The TensorProto pt of input `name` as serve/request.h's tensor view v. */
static int tensor_view(const char *name, const Tensorflow__TensorProto *pt, tfs_call *t,
		       wf_serve_tensor_view *v, wf_err *err)
{
	const Tensorflow__TensorShapeProto *sh = pt->tensor_shape;
	size_t nd = sh ? sh->n_dim : 0;
	if (nd < 1 || nd > 8)
		return wf_errf(err, WF_EINVAL,
			       "input tensor must have a shape of 1 to 8 dimensions");
	for (size_t i = 0; i < nd; i++)
		t->dims[i] = sh->dim[i]->size;
	*v = (wf_serve_tensor_view){
		.name = name, .dims = t->dims, .ndim = (int)nd, .raw_what = "tensor_content"};
	switch (pt->dtype) {
	case TENSORFLOW__DATA_TYPE__DT_FLOAT: v->datatype = "FP32"; break;
	case TENSORFLOW__DATA_TYPE__DT_UINT8: v->datatype = "UINT8"; break;
	case TENSORFLOW__DATA_TYPE__DT_STRING: v->datatype = "BYTES"; break;
	default:
		return wf_errf(err, WF_EINVAL,
			       "input dtype %d is not supported (DT_FLOAT, DT_UINT8 or DT_STRING "
			       "images)",
			       (int)pt->dtype);
	}
	int oom = 0;
	if (pt->dtype == TENSORFLOW__DATA_TYPE__DT_STRING) {
		v->values_what = "string_val";
		v->nelements = pt->n_string_val;
		v->has_elements = 1;
		v->elements = t->e = calloc(v->nelements + 1, sizeof(*t->e));
		for (size_t i = 0; t->e && i < v->nelements; i++)
			t->e[i] = (wf_serve_bytes){pt->string_val[i].data, pt->string_val[i].len};
		oom = !t->e;
	} else if (pt->tensor_content.len) {
		v->raw = pt->tensor_content.data;
		v->raw_len = pt->tensor_content.len;
		v->has_raw = 1;
	} else if (pt->dtype == TENSORFLOW__DATA_TYPE__DT_UINT8) {
		v->values_what = "int_val";
		v->nvalues = pt->n_int_val;
		v->has_values = 1;
		v->values = t->ints = malloc(sizeof(*t->ints) * (v->nvalues + 1));
		for (size_t i = 0; t->ints && i < v->nvalues; i++)
			t->ints[i] = (float)pt->int_val[i];
		oom = !t->ints;
	} else {
		v->values_what = "float_val";
		v->values = pt->float_val;
		v->nvalues = pt->n_float_val;
		v->has_values = 1;
	}
	return oom ? wf_errf(err, WF_ENOMEM, "out of memory") : 0;
}

/* Predict's outputs (the signature's, or those of its filter) and its one
 * input as a tensor view. */
static int read_predict(void *arg, const wf_image_io *io, wf_serve_request *req, wf_err *err)
{
	tfs_call *t = arg;
	const Tensorflow__Serving__PredictRequest *rq = t->predict;
	t->want[0] = 1;
	t->want[1] = t->all;
	if (rq->n_output_filter)
		t->want[0] = t->want[1] = 0;
	for (size_t i = 0; i < rq->n_output_filter; i++) {
		if (!strcmp(rq->output_filter[i], WF_SERVE_OUTPUT_PROBS))
			t->want[0] = 1;
		else if (t->all && !strcmp(rq->output_filter[i], WF_SERVE_OUTPUT_LOGITS))
			t->want[1] = 1;
		else
			return wf_errf(err, WF_EINVAL,
				       "output tensor alias \"%.200s\" not found in signature "
				       "outputs",
				       rq->output_filter[i]);
	}
	const char *name = wf_serve_input_name(io);
	if (rq->n_inputs != 1 || !rq->inputs[0]->value)
		return wf_errf(err, WF_EINVAL, "expected one input, \"%.200s\"; got %zu", name,
			       rq->n_inputs);
	if (!wf_serve_input_name_ok(io, rq->inputs[0]->key))
		return wf_errf(err, WF_EINVAL,
			       "input \"%.200s\" is not in the signature (it has \"%.200s\")",
			       rq->inputs[0]->key, name);
	int rc = tensor_view(rq->inputs[0]->key, rq->inputs[0]->value, t, &req->tensor, err);
	req->has_tensor = !rc;
	return rc;
}

/* The feature of an Example that holds the sample. */
static const Tensorflow__Feature *example_feature(const wf_grpc_io *io,
						  const Tensorflow__Example *e)
{
	const Tensorflow__Features *f = e ? e->features : NULL;
	const Tensorflow__Feature *best = NULL;
	for (size_t i = 0, rank = 0; f && i < f->n_feature; i++) {
		int r = wf_serve_example_rank(io, f->feature[i]->key, f->n_feature);
		if (r >= 0 && (!best || (size_t)r < rank)) {
			best = f->feature[i]->value;
			rank = (size_t)r;
		}
	}
	return best;
}

/* Classify's examples, each as the feature that holds its sample. */
static int read_classify(void *arg, const wf_image_io *io, wf_serve_request *req, wf_err *err)
{
	tfs_call *t = arg;
	const Tensorflow__Serving__Input *in = t->examples;
	Tensorflow__Example **ex = NULL;
	size_t nex = 0;
	if (in && in->kind_case == TENSORFLOW__SERVING__INPUT__KIND_EXAMPLE_LIST &&
	    in->example_list) {
		ex = in->example_list->examples;
		nex = in->example_list->n_examples;
	} else if (in &&
		   in->kind_case == TENSORFLOW__SERVING__INPUT__KIND_EXAMPLE_LIST_WITH_CONTEXT &&
		   in->example_list_with_context) {
		ex = in->example_list_with_context->examples;
		nex = in->example_list_with_context->n_examples;
	}
	if (nex < 1 || nex > 4096)
		return wf_errf(err, WF_EINVAL,
			       "Input is empty: a ClassificationRequest needs 1 to 4096 examples");
	if ((double)nex * io->h * io->w * io->c > (double)WF_SERVE_MAX_INPUT_FLOATS)
		return wf_errf(err, WF_EINVAL, "too many examples");
	if (!(t->features = calloc(nex, sizeof(*t->features))))
		return wf_errf(err, WF_ENOMEM, "out of memory");
	for (size_t i = 0; i < nex; i++) {
		const Tensorflow__Feature *f = example_feature(io, ex[i]);
		wf_serve_feature *v = &t->features[i];
		if (f && f->kind_case == TENSORFLOW__FEATURE__KIND_BYTES_LIST && f->bytes_list) {
			v->kind = WF_SERVE_FEATURE_BYTES;
			v->n = f->bytes_list->n_value;
			v->data = v->n ? f->bytes_list->value[0].data : NULL;
			v->len = v->n ? f->bytes_list->value[0].len : 0;
		} else if (f && f->kind_case == TENSORFLOW__FEATURE__KIND_FLOAT_LIST &&
			   f->float_list) {
			v->kind = WF_SERVE_FEATURE_FLOATS;
			v->n = f->float_list->n_value;
			v->floats = f->float_list->value;
		}
	}
	req->examples = t->features;
	req->nexamples = nex;
	req->has_examples = 1;
	return 0;
}

static const uint8_t empty_msg[1]; /* what an empty body unpacks from */

int wf_grpc_tfs_decode_input(const wf_grpc_io *io, const uint8_t *msg, size_t len, int classify,
			     float **x, int *n, char *why, size_t cap)
{
	*x = NULL;
	*n = 0;
	const uint8_t *d = len ? msg : empty_msg;
	Tensorflow__Serving__ClassificationRequest *crq =
		classify ? tensorflow__serving__classification_request__unpack(NULL, len, d) : NULL;
	Tensorflow__Serving__PredictRequest *prq =
		classify ? NULL : tensorflow__serving__predict_request__unpack(NULL, len, d);
	if (!crq && !prq) {
		snprintf(why, cap, "cannot parse the %s message",
			 classify ? "ClassificationRequest" : "PredictRequest");
		return WF_GRPC_INVALID_ARGUMENT;
	}
	tfs_call t = {.predict = prq, .examples = crq ? crq->input : NULL};
	wf_serve_request req = {0};
	wf_err err = {0};
	int rc = classify ? read_classify(&t, io, &req, &err) : read_predict(&t, io, &req, &err);
	if (!rc)
		rc = wf_serve_request_input(io, &req, &err);
	if (!rc) {
		*x = req.input.x; /* not borrowed: raw_borrow is off */
		*n = req.input.n;
		req.input.x = NULL;
	}
	wf_serve_request_free(&req);
	tfs_call_free(&t);
	if (crq)
		tensorflow__serving__classification_request__free_unpacked(crq, NULL);
	if (prq)
		tensorflow__serving__predict_request__free_unpacked(prq, NULL);
	if (rc)
		snprintf(why, cap, "%s", err.msg);
	return !rc		 ? WF_GRPC_OK
	       : rc == WF_ENOMEM ? WF_GRPC_RESOURCE_EXHAUSTED
				 : WF_GRPC_INVALID_ARGUMENT;
}

/* ---- Predict, Classify, Regress ---------------------------------------- */

/* t's message run through m by the request core into res. */
static int run(wf_grpc_adapter *a, wf_grpc_model *m, wf_serve_endpoint ep, tfs_call *t,
	       wf_serve_read_fn read, double t0, wf_serve_request *req, wf_serve_response *res,
	       wf_grpc_call *call)
{
	*req = (wf_serve_request){.read = read, .read_arg = t, .t0 = t0};
	return wf_grpc_model_run(a, m, ep, req, res, call->deadline, NULL, NULL, call->message,
				 sizeof(call->message));
}

static int predict(void *ctx, wf_grpc_call *call)
{
	double t0 = wf_now();
	wf_grpc_adapter *a = ctx;
	Tensorflow__Serving__PredictRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__predict_request__descriptor, call);
	if (!rq) {
		wf_grpc_model_failed(a, WF_SERVE_EP_V1_PREDICT, WF_GRPC_INVALID_ARGUMENT,
				     wf_now() - t0);
		return wf_grpc_bad_message(call, "PredictRequest");
	}
	wf_grpc_model m = {0};
	tfs_call c = {.predict = rq, .all = all_outputs(rq->model_spec)};
	int *want = c.want, all = c.all;
	wf_serve_request req = {0};
	wf_serve_response res = {0};
	int code = get_model(a, rq->model_spec, 1, &m, call);
	if (code)
		wf_grpc_model_failed(a, WF_SERVE_EP_V1_PREDICT, code, wf_now() - t0);
	else
		code = run(a, &m, WF_SERVE_EP_V1_PREDICT, &c, read_predict, t0, &req, &res, call);
	if (!code) {
		int n = req.input.n;
		const wf_serve_result *out = &res.res;
		Tensorflow__Serving__ModelSpec spec;
		Google__Protobuf__Int64Value ver;
		fill_spec(&spec, &ver, &m, all);
		Tensorflow__TensorShapeProto__Dim d0 = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT,
						  d1 = TENSORFLOW__TENSOR_SHAPE_PROTO__DIM__INIT;
		Tensorflow__TensorShapeProto__Dim *dims[2] = {&d0, &d1};
		d0.size = n;
		d1.size = m.io.classes;
		Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
		shape.n_dim = 2;
		shape.dim = dims;
		Tensorflow__TensorProto t[2] = {TENSORFLOW__TENSOR_PROTO__INIT,
						TENSORFLOW__TENSOR_PROTO__INIT};
		Tensorflow__Serving__PredictResponse__OutputsEntry e[2], *ep[2];
		int no = 0;
		for (int i = 0; i < 2; i++) {
			if (!want[i])
				continue;
			t[i].dtype = TENSORFLOW__DATA_TYPE__DT_FLOAT;
			t[i].tensor_shape = &shape;
			t[i].n_float_val = (size_t)n * m.io.classes;
			t[i].float_val = i ? out->logits : out->probs;
			tensorflow__serving__predict_response__outputs_entry__init(&e[no]);
			e[no].key = i ? WF_SERVE_OUTPUT_LOGITS : WF_SERVE_OUTPUT_PROBS;
			e[no].value = &t[i];
			ep[no] = &e[no];
			no++;
		}
		Tensorflow__Serving__PredictResponse r =
			TENSORFLOW__SERVING__PREDICT_RESPONSE__INIT;
		r.model_spec = &spec;
		r.n_outputs = (size_t)no;
		r.outputs = ep;
		code = wf_grpc_reply(call, &r.base);
	}
	wf_grpc_model_put(a, &m);
	wf_serve_response_free(&res);
	wf_serve_request_free(&req);
	tfs_call_free(&c);
	tensorflow__serving__predict_request__free_unpacked(rq, NULL);
	return code;
}

/* The top classes of each sample: a ClassificationResult over arrays that
 * class_parts_free releases (after the reply is packed). */
typedef struct class_parts {
	Tensorflow__Serving__Classifications *cl, **clp;
	Tensorflow__Serving__Class *c, **cp;
	char (*labels)[256];
	int *idx;
} class_parts;

static void class_parts_free(class_parts *p)
{
	free(p->cl);
	free(p->clp);
	free(p->c);
	free(p->cp);
	free(p->labels);
	free(p->idx);
}

/* probs [n,K] of model m as res; RESOURCE_EXHAUSTED when out of memory. */
static int classification_result(const wf_grpc_model *m, const float *probs, int n,
				 Tensorflow__Serving__ClassificationResult *res, class_parts *p,
				 wf_grpc_call *call)
{
	int k = m->io.classes, top = WF_MIN(CLASSIFY_TOP, k);
	size_t nt = (size_t)n * top;
	p->cl = calloc((size_t)n, sizeof(*p->cl));
	p->clp = calloc((size_t)n, sizeof(*p->clp));
	p->c = calloc(nt, sizeof(*p->c));
	p->cp = calloc(nt, sizeof(*p->cp));
	p->labels = calloc(nt, sizeof(*p->labels));
	p->idx = malloc(sizeof(int) * (size_t)top);
	if (!p->cl || !p->clp || !p->c || !p->cp || !p->labels || !p->idx)
		return wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	for (int s = 0; s < n; s++) {
		wf_serve_top_k(probs + (size_t)s * k, k, top, p->idx);
		tensorflow__serving__classifications__init(&p->cl[s]);
		p->cl[s].n_classes = (size_t)top;
		p->cl[s].classes = p->cp + (size_t)s * top;
		p->clp[s] = &p->cl[s];
		for (int u = 0; u < top; u++) {
			size_t q = (size_t)s * top + u;
			tensorflow__serving__class__init(&p->c[q]);
			p->c[q].label = (char *)wf_serve_class_name(
				m->labels, p->idx[u], p->labels[q], sizeof(p->labels[q]));
			p->c[q].score = probs[(size_t)s * k + p->idx[u]];
			p->cp[q] = &p->c[q];
		}
	}
	tensorflow__serving__classification_result__init(res);
	res->n_classifications = (size_t)n;
	res->classifications = p->clp;
	return WF_GRPC_OK;
}

/* The model of spec, the examples of in classified: res over p (the
 * caller frees p and the model). */
static int classify_examples(wf_grpc_adapter *a, const model_spec *spec,
			     const Tensorflow__Serving__Input *in, wf_grpc_model *m,
			     Tensorflow__Serving__ClassificationResult *res, class_parts *p,
			     wf_grpc_call *call)
{
	double t0 = wf_now();
	tfs_call t = {.examples = in};
	wf_serve_request req = {0};
	wf_serve_response r = {0};
	int code = get_model(a, spec, 0, m, call);
	if (code)
		wf_grpc_model_failed(a, WF_SERVE_EP_V1_CLASSIFY, code, wf_now() - t0);
	else
		code = run(a, m, WF_SERVE_EP_V1_CLASSIFY, &t, read_classify, t0, &req, &r, call);
	if (!code)
		code = classification_result(m, r.res.probs, r.res.n, res, p, call);
	wf_serve_response_free(&r);
	wf_serve_request_free(&req);
	tfs_call_free(&t);
	return code;
}

static int classify(void *ctx, wf_grpc_call *call)
{
	wf_grpc_adapter *a = ctx;
	Tensorflow__Serving__ClassificationRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__classification_request__descriptor, call);
	if (!rq) {
		wf_grpc_model_failed(a, WF_SERVE_EP_V1_CLASSIFY, WF_GRPC_INVALID_ARGUMENT, 0);
		return wf_grpc_bad_message(call, "ClassificationRequest");
	}
	wf_grpc_model m = {0};
	class_parts p = {0};
	Tensorflow__Serving__ClassificationResult res;
	int code = classify_examples(a, rq->model_spec, rq->input, &m, &res, &p, call);
	if (!code) {
		Tensorflow__Serving__ModelSpec spec;
		Google__Protobuf__Int64Value ver;
		fill_spec(&spec, &ver, &m, 0);
		Tensorflow__Serving__ClassificationResponse r =
			TENSORFLOW__SERVING__CLASSIFICATION_RESPONSE__INIT;
		r.model_spec = &spec;
		r.result = &res;
		code = wf_grpc_reply(call, &r.base);
	}
	class_parts_free(&p);
	wf_grpc_model_put(a, &m);
	tensorflow__serving__classification_request__free_unpacked(rq, NULL);
	return code;
}

/* Regress, and a MultiInference regress task: weft models classify. */
static int no_regression(wf_grpc_call *call, const char *model)
{
	return wf_grpc_fail(call, WF_GRPC_UNIMPLEMENTED,
			    "model %.200s is a classifier and has no regression signature; use "
			    "Predict or Classify",
			    model);
}

#define METHOD_CLASSIFY "tensorflow/serving/classify"
#define METHOD_REGRESS	"tensorflow/serving/regress"

/* MultiInference: the tasks' checks as TF Serving makes them (one model,
 * each signature once, classify or regress), then the examples classified
 * once, that result answered for each task. */
static int check_tasks(const Tensorflow__Serving__MultiInferenceRequest *rq, wf_grpc_call *call)
{
	if (rq->n_tasks < 1)
		return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "Tasks is empty");
	for (size_t i = 0; i < rq->n_tasks; i++) {
		const Tensorflow__Serving__InferenceTask *t = rq->tasks[i];
		if (!t->model_spec)
			return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "Missing ModelSpec");
		if (strcmp(t->model_spec->name, rq->tasks[0]->model_spec->name))
			return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
					    "All ModelSpecs in a MultiInferenceRequest must access "
					    "the same model name");
		for (size_t j = 0; j < i; j++)
			if (!strcmp(rq->tasks[j]->model_spec->signature_name,
				    t->model_spec->signature_name))
				return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
						    "Duplicate evaluation of signature: %.200s",
						    t->model_spec->signature_name);
		if (!strcmp(t->method_name, METHOD_REGRESS))
			return no_regression(call, t->model_spec->name);
		if (strcmp(t->method_name, METHOD_CLASSIFY))
			return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
					    "Unsupported signature method_name: %.200s",
					    t->method_name);
	}
	return WF_GRPC_OK;
}

static int multi_inference(void *ctx, wf_grpc_call *call)
{
	wf_grpc_adapter *a = ctx;
	Tensorflow__Serving__MultiInferenceRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__multi_inference_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "MultiInferenceRequest");
	wf_grpc_model m = {0};
	class_parts p = {0};
	Tensorflow__Serving__ClassificationResult res;
	size_t nt = rq->n_tasks;
	int code = check_tasks(rq, call);
	if (!code)
		code = classify_examples(a, rq->tasks[0]->model_spec, rq->input, &m, &res, &p,
					 call);
	Tensorflow__Serving__InferenceResult *ir = code ? NULL : calloc(nt, sizeof(*ir));
	Tensorflow__Serving__InferenceResult **irp = code ? NULL : calloc(nt, sizeof(*irp));
	model_spec *specs = code ? NULL : calloc(nt, sizeof(*specs));
	Google__Protobuf__Int64Value *vers = code ? NULL : calloc(nt, sizeof(*vers));
	if (!code && (!ir || !irp || !specs || !vers))
		code = wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	for (size_t i = 0; !code && i < nt; i++) {
		fill_spec(&specs[i], &vers[i], &m, 0);
		specs[i].signature_name = rq->tasks[i]->model_spec->signature_name;
		tensorflow__serving__inference_result__init(&ir[i]);
		ir[i].model_spec = &specs[i];
		ir[i].result_case =
			TENSORFLOW__SERVING__INFERENCE_RESULT__RESULT_CLASSIFICATION_RESULT;
		ir[i].classification_result = &res;
		irp[i] = &ir[i];
	}
	if (!code) {
		Tensorflow__Serving__MultiInferenceResponse r =
			TENSORFLOW__SERVING__MULTI_INFERENCE_RESPONSE__INIT;
		r.n_results = nt;
		r.results = irp;
		code = wf_grpc_reply(call, &r.base);
	}
	free(ir);
	free(irp);
	free(specs);
	free(vers);
	class_parts_free(&p);
	wf_grpc_model_put(a, &m);
	tensorflow__serving__multi_inference_request__free_unpacked(rq, NULL);
	return code;
}

static int regress(void *ctx, wf_grpc_call *call)
{
	Tensorflow__Serving__RegressionRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__regression_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "RegressionRequest");
	wf_grpc_model m = {0};
	int code = get_model(ctx, rq->model_spec, 0, &m, call);
	if (!code) {
		code = no_regression(call, m.name);
		wf_grpc_model_put(ctx, &m);
	}
	tensorflow__serving__regression_request__free_unpacked(rq, NULL);
	return code;
}

/* ---- metadata and status ------------------------------------------------ */

static void tensor_info(Tensorflow__TensorInfo *ti, Tensorflow__TensorShapeProto *sh,
			Tensorflow__TensorShapeProto__Dim *d,
			Tensorflow__TensorShapeProto__Dim **dp, const int *dims, int nd, char *name)
{
	tensorflow__tensor_info__init(ti);
	tensorflow__tensor_shape_proto__init(sh);
	for (int i = 0; i < nd; i++) {
		tensorflow__tensor_shape_proto__dim__init(&d[i]);
		d[i].size = dims[i];
		dp[i] = &d[i];
	}
	sh->n_dim = (size_t)nd;
	sh->dim = dp;
	ti->encoding_case = TENSORFLOW__TENSOR_INFO__ENCODING_NAME;
	ti->name = name;
	ti->dtype = TENSORFLOW__DATA_TYPE__DT_FLOAT;
	ti->tensor_shape = sh;
}

static int get_model_metadata(void *ctx, wf_grpc_call *call)
{
	Tensorflow__Serving__GetModelMetadataRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__get_model_metadata_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "GetModelMetadataRequest");
	wf_grpc_model m = {0};
	int code = WF_GRPC_OK;
	if (rq->n_metadata_field == 0)
		code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "GetModelMetadataRequest must specify at least one "
				    "metadata_field");
	for (size_t i = 0; !code && i < rq->n_metadata_field; i++)
		if (strcmp(rq->metadata_field[i], "signature_def") != 0)
			code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
					    "Metadata field %.200s is not supported",
					    rq->metadata_field[i]);
	if (!code)
		code = get_model(ctx, rq->model_spec, 0, &m, call);
	if (!code) {
		int in_dims[4] = {-1, m.io.h, m.io.w, m.io.c}, out_dims[2] = {-1, m.io.classes};
		Tensorflow__TensorInfo ti[3];
		Tensorflow__TensorShapeProto sh[3];
		Tensorflow__TensorShapeProto__Dim d[3][4], *dp[3][4];
		char tname[160];
		snprintf(tname, sizeof(tname), "%s:0", wf_serve_input_name(&m.io));
		tensor_info(&ti[0], &sh[0], d[0], dp[0], in_dims, 4, tname);
		tensor_info(&ti[1], &sh[1], d[1], dp[1], out_dims, 2, WF_SERVE_OUTPUT_PROBS ":0");
		tensor_info(&ti[2], &sh[2], d[2], dp[2], out_dims, 2, WF_SERVE_OUTPUT_LOGITS ":0");
		Tensorflow__SignatureDef__InputsEntry
			ie = TENSORFLOW__SIGNATURE_DEF__INPUTS_ENTRY__INIT,
			*iep[1] = {&ie};
		ie.key = (char *)wf_serve_input_name(&m.io);
		ie.value = &ti[0];
		Tensorflow__SignatureDef__OutputsEntry oe[2], *oep[2] = {&oe[0], &oe[1]};
		tensorflow__signature_def__outputs_entry__init(&oe[0]);
		tensorflow__signature_def__outputs_entry__init(&oe[1]);
		oe[0].key = WF_SERVE_OUTPUT_PROBS;
		oe[0].value = &ti[1];
		oe[1].key = WF_SERVE_OUTPUT_LOGITS;
		oe[1].value = &ti[2];
		/* serving_default: probabilities; serving_all: both outputs */
		Tensorflow__SignatureDef sig[2] = {TENSORFLOW__SIGNATURE_DEF__INIT,
						   TENSORFLOW__SIGNATURE_DEF__INIT};
		Tensorflow__Serving__SignatureDefMap__SignatureDefEntry se[2], *sep[2];
		for (int k = 0; k < 2; k++) {
			sig[k].n_inputs = 1;
			sig[k].inputs = iep;
			sig[k].n_outputs = (size_t)(k + 1);
			sig[k].outputs = oep;
			sig[k].method_name = "tensorflow/serving/predict";
			tensorflow__serving__signature_def_map__signature_def_entry__init(&se[k]);
			se[k].key = k ? WF_SERVE_SIGNATURE_ALL : WF_SERVE_SIGNATURE_DEFAULT;
			se[k].value = &sig[k];
			sep[k] = &se[k];
		}
		Tensorflow__Serving__SignatureDefMap map =
			TENSORFLOW__SERVING__SIGNATURE_DEF_MAP__INIT;
		map.n_signature_def = 2;
		map.signature_def = sep;
		size_t mlen = tensorflow__serving__signature_def_map__get_packed_size(&map);
		uint8_t *mbuf = malloc(mlen ? mlen : 1);
		if (!mbuf) {
			code = wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		} else {
			tensorflow__serving__signature_def_map__pack(&map, mbuf);
			Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
			any.type_url = SIGDEF_TYPE;
			any.value.data = mbuf;
			any.value.len = mlen;
			Tensorflow__Serving__GetModelMetadataResponse__MetadataEntry me =
				TENSORFLOW__SERVING__GET_MODEL_METADATA_RESPONSE__METADATA_ENTRY__INIT;
			Tensorflow__Serving__GetModelMetadataResponse__MetadataEntry *mep[1] = {
				&me};
			me.key = "signature_def";
			me.value = &any;
			Tensorflow__Serving__ModelSpec spec;
			Google__Protobuf__Int64Value ver;
			fill_spec(&spec, &ver, &m, 0);
			spec.signature_name = "";
			Tensorflow__Serving__GetModelMetadataResponse r =
				TENSORFLOW__SERVING__GET_MODEL_METADATA_RESPONSE__INIT;
			r.model_spec = &spec;
			r.n_metadata = 1;
			r.metadata = mep;
			code = wf_grpc_reply(call, &r.base);
			free(mbuf);
		}
		wf_grpc_model_put(ctx, &m);
	}
	tensorflow__serving__get_model_metadata_request__free_unpacked(rq, NULL);
	return code;
}

static int get_model_status(void *ctx, wf_grpc_call *call)
{
	Tensorflow__Serving__GetModelStatusRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__get_model_status_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "GetModelStatusRequest");
	const model_spec *spec = rq->model_spec;
	int code = WF_GRPC_OK;
	long want = 0;
	if (!spec)
		code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "Missing ModelSpec");
	else if (spec->version_choice_case ==
			 TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION &&
		 spec->version)
		want = (long)spec->version->value;
	else if (spec->version_choice_case ==
		 TENSORFLOW__SERVING__MODEL_SPEC__VERSION_CHOICE_VERSION_LABEL) {
		wf_grpc_model m; /* the version the label names */
		code = wf_grpc_model_get(ctx, spec->name, 0, spec->version_label, &m, call->message,
					 sizeof(call->message));
		want = m.version;
		wf_grpc_model_put(ctx, &m);
	}
	wf_grpc_version_info vi[8];
	int nv = code ? 0 : wf_grpc_model_versions(ctx, spec->name, vi, 8);
	if (!code && nv < 0)
		code = wf_grpc_fail(call, WF_GRPC_NOT_FOUND,
				    "Could not find any versions of model %.200s", spec->name);
	Tensorflow__Serving__ModelVersionStatus st[8], *stp[8];
	Tensorflow__Serving__StatusProto sp[8];
	int n = 0;
	for (int i = 0; !code && i < nv; i++) {
		if (want && vi[i].version != want)
			continue;
		tensorflow__serving__model_version_status__init(&st[n]);
		tensorflow__serving__status_proto__init(&sp[n]);
		st[n].version = vi[i].version;
		st[n].state = vi[i].state == WF_GRPC_VERSION_AVAILABLE
				      ? TENSORFLOW__SERVING__MODEL_VERSION_STATUS__STATE__AVAILABLE
			      : vi[i].state == WF_GRPC_VERSION_LOADING
				      ? TENSORFLOW__SERVING__MODEL_VERSION_STATUS__STATE__LOADING
			      : vi[i].state == WF_GRPC_VERSION_UNLOADING
				      ? TENSORFLOW__SERVING__MODEL_VERSION_STATUS__STATE__UNLOADING
				      : TENSORFLOW__SERVING__MODEL_VERSION_STATUS__STATE__END;
		if (vi[i].state == WF_GRPC_VERSION_FAILED) {
			sp[n].error_code = TENSORFLOW__ERROR__CODE__UNKNOWN;
			sp[n].error_message = vi[i].reason;
		}
		st[n].status = &sp[n];
		stp[n] = &st[n];
		n++;
	}
	if (!code && n == 0)
		code = want ? wf_grpc_fail(call, WF_GRPC_NOT_FOUND,
					   "Could not find version %ld of model %.200s", want,
					   spec->name)
			    : wf_grpc_fail(call, WF_GRPC_NOT_FOUND,
					   "Could not find any versions of model %.200s",
					   spec->name);
	if (!code) {
		Tensorflow__Serving__GetModelStatusResponse r =
			TENSORFLOW__SERVING__GET_MODEL_STATUS_RESPONSE__INIT;
		r.n_model_version_status = (size_t)n;
		r.model_version_status = stp;
		code = wf_grpc_reply(call, &r.base);
	}
	tensorflow__serving__get_model_status_request__free_unpacked(rq, NULL);
	return code;
}

#define SVP(x)                                                                                     \
	TENSORFLOW__SERVING__FILE_SYSTEM_STORAGE_PATH_SOURCE_CONFIG__SERVABLE_VERSION_POLICY__##x

/* A TF Serving ModelConfig message as the repository's model config; a gRPC
 * code naming the field that does not fit. */
static int model_config(const Tensorflow__Serving__ModelConfig *p, wf_serve_model_config *c,
			wf_grpc_call *call)
{
	wf_serve_model_config_init(c);
	if (!p->name || !*p->name || strlen(p->name) >= sizeof(c->name))
		return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "a model config needs a name (under %zu bytes)",
				    sizeof(c->name));
	if (!p->base_path || !*p->base_path || strlen(p->base_path) >= sizeof(c->base_path))
		return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "model %.200s: a model config needs a base_path", p->name);
	snprintf(c->name, sizeof(c->name), "%s", p->name);
	snprintf(c->base_path, sizeof(c->base_path), "%s", p->base_path);
	snprintf(c->platform, sizeof(c->platform), "%s",
		 p->model_platform ? p->model_platform : "");
	const Tensorflow__Serving__FileSystemStoragePathSourceConfig__ServableVersionPolicy *vp =
		p->model_version_policy;
	if (vp && vp->policy_choice_case == SVP(POLICY_CHOICE_ALL)) {
		c->policy = WF_SERVE_POLICY_ALL;
	} else if (vp && vp->policy_choice_case == SVP(POLICY_CHOICE_SPECIFIC) && vp->specific) {
		if (vp->specific->n_versions > WF_SERVE_MAX_SPECIFIC)
			return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
					    "model %.200s: more than %d specific versions", p->name,
					    WF_SERVE_MAX_SPECIFIC);
		c->policy = WF_SERVE_POLICY_SPECIFIC;
		c->nspecific = (int)vp->specific->n_versions;
		for (int i = 0; i < c->nspecific; i++)
			c->specific[i] = vp->specific->versions[i];
	} else if (vp && vp->policy_choice_case == SVP(POLICY_CHOICE_LATEST) && vp->latest &&
		   vp->latest->num_versions > 0) {
		c->num_versions = (int)WF_MIN(vp->latest->num_versions, 1000000u);
	}
	if (p->n_version_labels > WF_SERVE_MAX_LABELS)
		return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "model %.200s: more than %d version labels", p->name,
				    WF_SERVE_MAX_LABELS);
	for (size_t i = 0; i < p->n_version_labels; i++) {
		const Tensorflow__Serving__ModelConfig__VersionLabelsEntry *e =
			p->version_labels[i];
		if (!e->key || !*e->key || strlen(e->key) >= sizeof(c->labels[0].key) ||
		    e->value <= 0)
			return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
					    "model %.200s: version label %.100s must name a "
					    "positive version",
					    p->name, e->key ? e->key : "");
		snprintf(c->labels[c->nlabels].key, sizeof(c->labels[0].key), "%s", e->key);
		c->labels[c->nlabels++].version = e->value;
	}
	return WF_GRPC_OK;
}

static int reload_config(void *ctx, wf_grpc_call *call)
{
	Tensorflow__Serving__ReloadConfigRequest *rq =
		wf_grpc_unpack(&tensorflow__serving__reload_config_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ReloadConfigRequest");
	int code = WF_GRPC_OK;
	const Tensorflow__Serving__ModelServerConfig *cfg = rq->config;
	if (!cfg ||
	    cfg->config_case !=
		    TENSORFLOW__SERVING__MODEL_SERVER_CONFIG__CONFIG_MODEL_CONFIG_LIST ||
	    !cfg->model_config_list)
		code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "ReloadConfigRequest needs a config with a model_config_list");
	enum { MAXM = 64 };
	int n = code ? 0 : (int)WF_MIN(cfg->model_config_list->n_config, (size_t)MAXM + 1);
	if (n > MAXM)
		code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "more than %d models in the config", MAXM);
	wf_serve_model_config *mc = code ? NULL : calloc((size_t)n + 1, sizeof(*mc));
	if (!code && !mc)
		code = wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	for (int i = 0; !code && i < n; i++)
		code = model_config(cfg->model_config_list->config[i], &mc[i], call);
	if (!code)
		code = wf_grpc_reload_config(ctx, mc, n, call->message, sizeof(call->message));
	free(mc);
	tensorflow__serving__reload_config_request__free_unpacked(rq, NULL);
	if (code)
		return code;
	Tensorflow__Serving__StatusProto sp = TENSORFLOW__SERVING__STATUS_PROTO__INIT;
	Tensorflow__Serving__ReloadConfigResponse r =
		TENSORFLOW__SERVING__RELOAD_CONFIG_RESPONSE__INIT;
	r.status = &sp;
	return wf_grpc_reply(call, &r.base);
}

const wf_grpc_method wf_grpc_tfs_methods[] = {
	{"/tensorflow.serving.PredictionService/Predict", predict, 0, 0, 0, NULL},
	{"/tensorflow.serving.PredictionService/Classify", classify, 0, 0, 0, NULL},
	{"/tensorflow.serving.PredictionService/Regress", regress, 0, 0, 0, NULL},
	{"/tensorflow.serving.PredictionService/MultiInference", multi_inference, 0, 0, 0, NULL},
	{"/tensorflow.serving.PredictionService/GetModelMetadata", get_model_metadata, 1, 0, 0,
	 NULL},
	{"/tensorflow.serving.ModelService/GetModelStatus", get_model_status, 1, 0, 0, NULL},
	{"/tensorflow.serving.ModelService/HandleReloadConfigRequest", reload_config, 0, 0, 0,
	 NULL},
};
const int wf_grpc_tfs_nmethods = (int)WF_ARRAY_LEN(wf_grpc_tfs_methods);
