/* grpc_kserve.c: KServe v2's inference.GRPCInferenceService (Triton's gRPC
 * protocol). The model has one input [N,H,W,C], named as the model names it
 * (or "input"): FP32 numbers (request.h says what they mean), UINT8 raw
 * pixels, or BYTES [N] / [N,1] of encoded
 * JPEG/PNG images, in raw_input_contents or the typed contents; and two
 * outputs, "probabilities" and "logits" [N,K] FP32 (both when the request
 * names none), or with the "classification" parameter BYTES [N,top]
 * "score:index:label" strings. Replies carry raw_output_contents, as Triton's
 * server does. */
#include "serve/grpc_services.h"

#include "common/util.h"
#include "serve/request.h"
#include "serve/settings.h"
#include "serve/proto/kserve_grpc_service.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef Inference__ModelInferRequest infer_req;
typedef Inference__ModelInferRequest__InferInputTensor in_tensor;

/* ---- helpers ------------------------------------------------------------ */

/* "" is the latest version (0); otherwise a positive integer. */
static int parse_version(const char *s, long *v, wf_grpc_call *call)
{
	*v = 0;
	if (!s || !*s)
		return WF_GRPC_OK;
	char *end;
	long x = strtol(s, &end, 10);
	if (*end || x <= 0 || strspn(s, "0123456789") != strlen(s))
		return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
				    "model version \"%.64s\" is not a positive integer", s);
	*v = x;
	return WF_GRPC_OK;
}

static int get_model(wf_grpc_adapter *a, const char *name, const char *version, wf_grpc_model *m,
		     wf_grpc_call *call)
{
	long v;
	int code = parse_version(version, &v, call);
	if (!code)
		code = wf_grpc_model_get(a, name, v, NULL, m, call->message, sizeof(call->message));
	if (code == WF_GRPC_NOT_FOUND) /* in Triton's words, not TF Serving's */
		wf_serve_kserve_unknown(name, v, 0, call->message, sizeof(call->message));
	return code;
}

/* ---- health and metadata ------------------------------------------------- */

static int server_live(void *ctx, wf_grpc_call *call)
{
	Inference__ServerLiveRequest *rq =
		wf_grpc_unpack(&inference__server_live_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ServerLiveRequest");
	inference__server_live_request__free_unpacked(rq, NULL);
	Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
	r.live = 1;
	return wf_grpc_reply(call, &r.base);
}

static int server_ready(void *ctx, wf_grpc_call *call)
{
	Inference__ServerReadyRequest *rq =
		wf_grpc_unpack(&inference__server_ready_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ServerReadyRequest");
	inference__server_ready_request__free_unpacked(rq, NULL);
	Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
	r.ready = wf_grpc_server_ready(ctx);
	return wf_grpc_reply(call, &r.base);
}

static int model_ready(void *ctx, wf_grpc_call *call)
{
	Inference__ModelReadyRequest *rq =
		wf_grpc_unpack(&inference__model_ready_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ModelReadyRequest");
	long v;
	int code = parse_version(rq->version, &v, call);
	Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
	if (!code) {
		r.ready = wf_grpc_model_ready(ctx, rq->name, v);
		code = wf_grpc_reply(call, &r.base);
	}
	inference__model_ready_request__free_unpacked(rq, NULL);
	return code;
}

static int server_metadata(void *ctx, wf_grpc_call *call)
{
	Inference__ServerMetadataRequest *rq =
		wf_grpc_unpack(&inference__server_metadata_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ServerMetadataRequest");
	inference__server_metadata_request__free_unpacked(rq, NULL);
	const char *ext[WF_SERVE_MAX_EXTENSIONS];
	Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
	r.name = WF_SERVE_NAME;
	r.version = WF_SERVE_VERSION;
	r.n_extensions = (size_t)wf_serve_extensions(wf_grpc_shm_enabled(ctx), ext);
	r.extensions = (char **)ext;
	return wf_grpc_reply(call, &r.base);
}

static int model_metadata(void *ctx, wf_grpc_call *call)
{
	Inference__ModelMetadataRequest *rq =
		wf_grpc_unpack(&inference__model_metadata_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ModelMetadataRequest");
	wf_grpc_model m;
	int code = get_model(ctx, rq->name, rq->version, &m, call);
	if (!code) {
		long served[WF_SERVE_MAX_SERVED];
		char ver[WF_SERVE_MAX_SERVED][24], *versions[WF_SERVE_MAX_SERVED];
		int nver = wf_grpc_model_served(ctx, m.name, served, WF_SERVE_MAX_SERVED);
		for (int i = 0; i < nver; i++) {
			snprintf(ver[i], sizeof(ver[i]), "%ld", served[i]);
			versions[i] = ver[i];
		}
		int64_t in_shape[4], out_shape[2];
		int nin = wf_serve_input_shape(&m.io, in_shape),
		    nout = wf_serve_output_shape(m.io.unbatched, -1, m.io.classes, out_shape);
		Inference__ModelMetadataResponse__TensorMetadata in =
			INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
		Inference__ModelMetadataResponse__TensorMetadata outs[2] = {
			INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT,
			INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT};
		Inference__ModelMetadataResponse__TensorMetadata *inp[1] = {&in},
								 *outp[2] = {&outs[0], &outs[1]};
		in.name = (char *)wf_serve_input_name(&m.io);
		in.datatype = "FP32";
		in.n_shape = (size_t)nin;
		in.shape = in_shape;
		outs[0].name = WF_SERVE_OUTPUT_PROBS;
		outs[1].name = WF_SERVE_OUTPUT_LOGITS;
		for (int i = 0; i < 2; i++) {
			outs[i].datatype = "FP32";
			outs[i].n_shape = (size_t)nout;
			outs[i].shape = out_shape;
		}
		Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
		r.name = (char *)m.name;
		r.n_versions = (size_t)nver;
		r.versions = versions;
		r.platform = "weft";
		r.n_inputs = 1;
		r.inputs = inp;
		r.n_outputs = 2;
		r.outputs = outp;
		code = wf_grpc_reply(call, &r.base);
		wf_grpc_model_put(ctx, &m);
	}
	inference__model_metadata_request__free_unpacked(rq, NULL);
	return code;
}

/* The pieces of a ModelVersionPolicy message (it points into them). */
typedef struct version_policy_parts {
	Inference__ModelVersionPolicy__Latest latest;
	Inference__ModelVersionPolicy__Specific specific;
	Inference__ModelVersionPolicy__All all;
	int64_t versions[WF_SERVE_MAX_SPECIFIC];
} version_policy_parts;

/* The model's version policy, as HTTP's config gives it. */
static void version_policy(const wf_serve_model_config *c, version_policy_parts *p,
			   Inference__ModelVersionPolicy *vp)
{
	inference__model_version_policy__init(vp);
	if (c->policy == WF_SERVE_POLICY_SPECIFIC) {
		inference__model_version_policy__specific__init(&p->specific);
		for (int i = 0; i < c->nspecific; i++)
			p->versions[i] = c->specific[i];
		p->specific.n_versions = (size_t)c->nspecific;
		p->specific.versions = p->versions;
		vp->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC;
		vp->specific = &p->specific;
	} else if (c->policy == WF_SERVE_POLICY_ALL) {
		inference__model_version_policy__all__init(&p->all);
		vp->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL;
		vp->all = &p->all;
	} else {
		inference__model_version_policy__latest__init(&p->latest);
		p->latest.num_versions = (uint32_t)c->num_versions;
		vp->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST;
		vp->latest = &p->latest;
	}
}

/* The parameter weft_version_labels of a ModelConfig (it points into them). */
typedef struct labels_parts {
	char text[WF_SERVE_LABELS_CAP];
	Inference__ModelParameter value;
	Inference__ModelConfig__ParametersEntry entry, *entries[1];
} labels_parts;

static void labels_param(const wf_serve_model_config *c, labels_parts *p)
{
	wf_serve_labels_string(c, p->text, sizeof(p->text));
	inference__model_parameter__init(&p->value);
	p->value.string_value = p->text;
	inference__model_config__parameters_entry__init(&p->entry);
	p->entry.key = "weft_version_labels";
	p->entry.value = &p->value;
	p->entries[0] = &p->entry;
}

static int model_config(void *ctx, wf_grpc_call *call)
{
	Inference__ModelConfigRequest *rq =
		wf_grpc_unpack(&inference__model_config_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ModelConfigRequest");
	wf_grpc_model m;
	int code = get_model(ctx, rq->name, rq->version, &m, call);
	if (!code) {
		int64_t in_dims[3] = {m.io.h, m.io.w, m.io.c}, out_dims[1] = {m.io.classes};
		Inference__ModelInput in = INFERENCE__MODEL_INPUT__INIT, *inp[1] = {&in};
		in.name = (char *)wf_serve_input_name(&m.io);
		in.data_type = INFERENCE__DATA_TYPE__TYPE_FP32;
		in.format = INFERENCE__MODEL_INPUT__FORMAT__FORMAT_NHWC;
		in.n_dims = 3;
		in.dims = in_dims;
		Inference__ModelOutput outs[2] = {INFERENCE__MODEL_OUTPUT__INIT,
						  INFERENCE__MODEL_OUTPUT__INIT};
		Inference__ModelOutput *outp[2] = {&outs[0], &outs[1]};
		outs[0].name = WF_SERVE_OUTPUT_PROBS;
		outs[1].name = WF_SERVE_OUTPUT_LOGITS;
		for (int i = 0; i < 2; i++) {
			outs[i].data_type = INFERENCE__DATA_TYPE__TYPE_FP32;
			outs[i].n_dims = 1;
			outs[i].dims = out_dims;
			outs[i].label_filename = m.cfg.label_filename;
		}
		version_policy_parts vpp;
		Inference__ModelVersionPolicy vp;
		version_policy(&m.cfg, &vpp, &vp);
		Inference__ModelInstanceGroup ig = INFERENCE__MODEL_INSTANCE_GROUP__INIT,
					      *igp[1] = {&ig};
		char ig_name[300];
		snprintf(ig_name, sizeof(ig_name), "%s_0", m.name);
		ig.name = ig_name;
		ig.kind = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU;
		ig.count = m.instances;
		Inference__ModelDynamicBatching db = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
		db.max_queue_delay_microseconds = (uint64_t)m.batch_timeout_us;
		db.n_preferred_batch_size = (size_t)m.cfg.npreferred;
		db.preferred_batch_size = m.cfg.preferred;
		Inference__ModelConfig cfg = INFERENCE__MODEL_CONFIG__INIT;
		cfg.name = (char *)m.name;
		cfg.platform = "weft";
		cfg.backend = "weft";
		cfg.version_policy = &vp;
		cfg.max_batch_size = m.max_batch;
		cfg.n_input = 1;
		cfg.input = inp;
		cfg.n_output = 2;
		cfg.output = outp;
		if (m.batching) {
			cfg.scheduling_choice_case =
				INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
			cfg.dynamic_batching = &db;
		}
		cfg.n_instance_group = 1;
		cfg.instance_group = igp;
		cfg.default_model_filename = WF_SERVE_MODEL_FILENAME;
		labels_parts lp;
		labels_param(&m.cfg, &lp);
		cfg.n_parameters = 1;
		cfg.parameters = lp.entries;
		Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
		r.config = &cfg;
		code = wf_grpc_reply(call, &r.base);
		wf_grpc_model_put(ctx, &m);
	}
	inference__model_config_request__free_unpacked(rq, NULL);
	return code;
}

/* ---- statistics and repository ------------------------------------------ */

static void duration(Inference__StatisticDuration *d, const wf_grpc_duration *s)
{
	inference__statistic_duration__init(d);
	d->count = s->count;
	d->ns = s->ns;
}

static int model_statistics(void *ctx, wf_grpc_call *call)
{
	Inference__ModelStatisticsRequest *rq =
		wf_grpc_unpack(&inference__model_statistics_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "ModelStatisticsRequest");
	long v;
	int code = parse_version(rq->version, &v, call);
	const char *names[64];
	int nnames = 0;
	if (!code && *rq->name) {
		names[0] = rq->name;
		nnames = 1;
	} else if (!code) {
		nnames = wf_grpc_model_names(ctx, names, (int)WF_ARRAY_LEN(names));
	}
	Inference__ModelStatistics ms[64], *msp[64];
	Inference__InferStatistics is[64];
	Inference__StatisticDuration d[64][6];
	char vers[64][32];
	int n = 0;
	for (int i = 0; !code && i < nnames; i++) {
		/* one entry per version asked for, or per available version as
		 * Triton lists them */
		long want[64];
		int nwant = 0;
		if (v) {
			want[nwant++] = v;
		} else {
			wf_grpc_version_info vi[64];
			int nv = wf_grpc_model_versions(ctx, names[i], vi, 64);
			for (int k = 0; k < nv; k++)
				if (vi[k].state == WF_GRPC_VERSION_AVAILABLE)
					want[nwant++] = vi[k].version;
			if (!nwant && *rq->name)
				code = WF_GRPC_NOT_FOUND;
			wf_serve_kserve_unknown(names[i], 0, 1, call->message,
						sizeof(call->message));
		}
		for (int k = 0; !code && k < nwant && n < 64; k++) {
			wf_grpc_stats st;
			code = wf_grpc_model_stats(ctx, names[i], want[k], &st, call->message,
						   sizeof(call->message));
			if (code)
				break;
			inference__model_statistics__init(&ms[n]);
			inference__infer_statistics__init(&is[n]);
			ms[n].name = (char *)names[i];
			snprintf(vers[n], sizeof(vers[n]), "%ld", want[k]);
			ms[n].version = vers[n];
			ms[n].last_inference = st.last_inference_ms;
			ms[n].inference_count = st.inference_count;
			ms[n].execution_count = st.execution_count;
			duration(&d[n][0], &st.success);
			duration(&d[n][1], &st.fail);
			duration(&d[n][2], &st.queue);
			duration(&d[n][3], &st.compute_input);
			duration(&d[n][4], &st.compute_infer);
			duration(&d[n][5], &st.compute_output);
			is[n].success = &d[n][0];
			is[n].fail = &d[n][1];
			is[n].queue = &d[n][2];
			is[n].compute_input = &d[n][3];
			is[n].compute_infer = &d[n][4];
			is[n].compute_output = &d[n][5];
			ms[n].inference_stats = &is[n];
			msp[n] = &ms[n];
			n++;
		}
	}
	if (!code) {
		Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
		r.n_model_stats = (size_t)n;
		r.model_stats = msp;
		code = wf_grpc_reply(call, &r.base);
	}
	inference__model_statistics_request__free_unpacked(rq, NULL);
	return code;
}

static int repository_index(void *ctx, wf_grpc_call *call)
{
	Inference__RepositoryIndexRequest *rq =
		wf_grpc_unpack(&inference__repository_index_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "RepositoryIndexRequest");
	const char *names[64];
	int nnames = wf_grpc_model_names(ctx, names, (int)WF_ARRAY_LEN(names)), n = 0;
	enum { MAXI = 64 };
	Inference__RepositoryIndexResponse__ModelIndex mi[MAXI], *mip[MAXI];
	char vers[MAXI][32], reasons[MAXI][256];
	for (int i = 0; i < nnames && n < MAXI; i++) {
		wf_grpc_version_info vi[8];
		int nv = wf_grpc_model_versions(ctx, names[i], vi, 8);
		for (int k = 0; k < nv && n < MAXI; k++) {
			int ready = vi[k].state == WF_GRPC_VERSION_AVAILABLE;
			if (rq->ready && !ready)
				continue;
			inference__repository_index_response__model_index__init(&mi[n]);
			snprintf(vers[n], sizeof(vers[n]), "%ld", vi[k].version);
			snprintf(reasons[n], sizeof(reasons[n]), "%s", vi[k].reason);
			mi[n].name = (char *)names[i];
			mi[n].version = vers[n];
			mi[n].state = ready					 ? "READY"
				      : vi[k].state == WF_GRPC_VERSION_LOADING	 ? "LOADING"
				      : vi[k].state == WF_GRPC_VERSION_UNLOADING ? "UNLOADING"
										 : "UNAVAILABLE";
			mi[n].reason = reasons[n];
			mip[n] = &mi[n];
			n++;
		}
	}
	Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
	r.n_models = (size_t)n;
	r.models = mip;
	inference__repository_index_request__free_unpacked(rq, NULL);
	return wf_grpc_reply(call, &r.base);
}

static int repository_load(void *ctx, wf_grpc_call *call)
{
	Inference__RepositoryModelLoadRequest *rq =
		wf_grpc_unpack(&inference__repository_model_load_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "RepositoryModelLoadRequest");
	const char *config = NULL;
	int code = WF_GRPC_OK;
	for (size_t i = 0; !code && i < rq->n_parameters; i++) {
		const Inference__ModelRepositoryParameter *v = rq->parameters[i]->value;
		if (strcmp(rq->parameters[i]->key, "config"))
			code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "%s",
					    WF_SERVE_LOAD_FILES_REFUSED);
		else if (
			!v ||
			v->parameter_choice_case !=
				INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
			code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "%s",
					    WF_SERVE_LOAD_CONFIG_NOT_STRING);
		else
			config = v->string_param;
	}
	if (!code)
		code = wf_grpc_repository_load(ctx, rq->model_name, config, call->message,
					       sizeof(call->message));
	inference__repository_model_load_request__free_unpacked(rq, NULL);
	if (code)
		return code;
	Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
	return wf_grpc_reply(call, &r.base);
}

static int repository_unload(void *ctx, wf_grpc_call *call)
{
	Inference__RepositoryModelUnloadRequest *rq =
		wf_grpc_unpack(&inference__repository_model_unload_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "RepositoryModelUnloadRequest");
	int code = wf_grpc_repository_unload(ctx, rq->model_name, call->message,
					     sizeof(call->message));
	inference__repository_model_unload_request__free_unpacked(rq, NULL);
	if (code)
		return code;
	Inference__RepositoryModelUnloadResponse r =
		INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
	return wf_grpc_reply(call, &r.base);
}

/* ---- system shared memory (Triton's extension, shm.h) --------------------- */

static int shm_status(void *ctx, wf_grpc_call *call)
{
	Inference__SystemSharedMemoryStatusRequest *rq =
		wf_grpc_unpack(&inference__system_shared_memory_status_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "SystemSharedMemoryStatusRequest");
	wf_serve_shm *s = wf_grpc_shm(ctx, call->local, call->message, sizeof(call->message));
	wf_serve_shm_info *a = NULL;
	int n = 0, code = s ? WF_GRPC_OK : WF_GRPC_PERMISSION_DENIED;
	wf_err err = {0};
	if (s && wf_serve_shm_status(s, rq->name, &a, &n, &err))
		code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "%s", err.msg);
	inference__system_shared_memory_status_request__free_unpacked(rq, NULL);
	if (code)
		return code;
	Inference__SystemSharedMemoryStatusResponse__RegionsEntry *e =
		calloc((size_t)n + 1, sizeof(*e));
	Inference__SystemSharedMemoryStatusResponse__RegionsEntry **ep =
		calloc((size_t)n + 1, sizeof(*ep));
	Inference__SystemSharedMemoryStatusResponse__RegionStatus *st =
		calloc((size_t)n + 1, sizeof(*st));
	if (!e || !ep || !st) {
		code = wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		inference__system_shared_memory_status_response__region_status__init(&st[i]);
		st[i].name = a[i].name;
		st[i].key = a[i].key;
		st[i].offset = a[i].offset;
		st[i].byte_size = a[i].byte_size;
		inference__system_shared_memory_status_response__regions_entry__init(&e[i]);
		e[i].key = a[i].name;
		e[i].value = &st[i];
		ep[i] = &e[i];
	}
	Inference__SystemSharedMemoryStatusResponse r =
		INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
	r.n_regions = (size_t)n;
	r.regions = ep;
	code = wf_grpc_reply(call, &r.base);
out:
	free(e);
	free(ep);
	free(st);
	free(a);
	return code;
}

static int shm_register(void *ctx, wf_grpc_call *call)
{
	Inference__SystemSharedMemoryRegisterRequest *rq =
		wf_grpc_unpack(&inference__system_shared_memory_register_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "SystemSharedMemoryRegisterRequest");
	wf_serve_shm *s = wf_grpc_shm(ctx, call->local, call->message, sizeof(call->message));
	int code = s ? WF_GRPC_OK : WF_GRPC_PERMISSION_DENIED;
	wf_err err = {0};
	if (s && wf_serve_shm_register(s, rq->name, rq->key, rq->offset, rq->byte_size, &err))
		code = wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT, "%s", err.msg);
	inference__system_shared_memory_register_request__free_unpacked(rq, NULL);
	if (code)
		return code;
	Inference__SystemSharedMemoryRegisterResponse r =
		INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
	return wf_grpc_reply(call, &r.base);
}

static int shm_unregister(void *ctx, wf_grpc_call *call)
{
	Inference__SystemSharedMemoryUnregisterRequest *rq = wf_grpc_unpack(
		&inference__system_shared_memory_unregister_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "SystemSharedMemoryUnregisterRequest");
	wf_serve_shm *s = wf_grpc_shm(ctx, call->local, call->message, sizeof(call->message));
	if (s)
		wf_serve_shm_unregister(s, rq->name);
	inference__system_shared_memory_unregister_request__free_unpacked(rq, NULL);
	if (!s)
		return WF_GRPC_PERMISSION_DENIED;
	Inference__SystemSharedMemoryUnregisterResponse r =
		INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
	return wf_grpc_reply(call, &r.base);
}

/* CUDA shared memory: none can be registered; status lists none and
 * unregister has nothing to do (clients unregister "all" of both kinds). */
static int cuda_shm_status(void *ctx, wf_grpc_call *call)
{
	(void)ctx;
	Inference__CudaSharedMemoryStatusRequest *rq =
		wf_grpc_unpack(&inference__cuda_shared_memory_status_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "CudaSharedMemoryStatusRequest");
	int code = rq->name && *rq->name
			   ? wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
					  "Unable to find cuda shared memory region: '%.200s'",
					  rq->name)
			   : WF_GRPC_OK;
	inference__cuda_shared_memory_status_request__free_unpacked(rq, NULL);
	if (code)
		return code;
	Inference__CudaSharedMemoryStatusResponse r =
		INFERENCE__CUDA_SHARED_MEMORY_STATUS_RESPONSE__INIT;
	return wf_grpc_reply(call, &r.base);
}

static int cuda_shm_register(void *ctx, wf_grpc_call *call)
{
	(void)ctx;
	return wf_grpc_fail(call, WF_GRPC_UNIMPLEMENTED,
			    "CUDA shared memory is not supported: weft-serve takes tensors in host "
			    "memory; use system shared memory");
}

static int cuda_shm_unregister(void *ctx, wf_grpc_call *call)
{
	(void)ctx;
	Inference__CudaSharedMemoryUnregisterResponse r =
		INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
	return wf_grpc_reply(call, &r.base);
}

/* ---- inference ------------------------------------------------------------ */

/* The shared memory fields of a tensor's parameters (shm.h). */
typedef struct shm_ref {
	char region[128]; /* "": none named */
	uint64_t offset, size;
} shm_ref;

/* A parameter's integer value (int64 or uint64); 0 when it is neither. */
static int param_u64(const Inference__InferParameter *p, uint64_t *v)
{
	if (p &&
	    p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
	    p->int64_param >= 0)
		*v = (uint64_t)p->int64_param;
	else if (p && p->parameter_choice_case ==
			      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM)
		*v = p->uint64_param;
	else
		return 0;
	return 1;
}

/* Parameter (key, v) into r when it is one of the shared memory ones;
 * WF_EINVAL for a bad value. */
static int shm_param(const char *tensor, const char *key, const Inference__InferParameter *v,
		     shm_ref *r, wf_err *err)
{
	int ok = 1;
	if (!strcmp(key, "shared_memory_region"))
		ok = v &&
		     v->parameter_choice_case ==
			     INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM &&
		     *v->string_param && strlen(v->string_param) < sizeof(r->region) &&
		     snprintf(r->region, sizeof(r->region), "%s", v->string_param) > 0;
	else if (!strcmp(key, "shared_memory_byte_size"))
		ok = param_u64(v, &r->size) && r->size > 0;
	else if (!strcmp(key, "shared_memory_offset"))
		ok = param_u64(v, &r->offset);
	if (ok)
		return 0;
	return wf_errf(err, WF_EINVAL,
		       "'%.200s': parameter \"%s\" has a wrong value (a region name, a positive "
		       "byte size, an offset)",
		       tensor, key);
}

/* What a ModelInferRequest's tensor view points into besides the message:
 * its typed contents converted (freed with the call). */
typedef struct view_parts {
	float *u8;	   /* uint_contents as numbers */
	wf_serve_bytes *e; /* bytes_contents */
} view_parts;

static void view_parts_free(view_parts *p)
{
	free(p->u8);
	free(p->e);
	p->u8 = NULL;
	p->e = NULL;
}

/* The one input tensor of rq as serve/request.h's tensor view *v (which the
 * core builds into model input with wf_serve_tensor_input): it reads rq's
 * raw contents or a shared memory region in place, or p's arrays. */
static int input_view(const wf_image_io *io, const infer_req *rq, wf_serve_tensor_view *v,
		      view_parts *p, wf_err *err)
{
	if (rq->n_inputs != 1)
		return wf_errf(err, WF_EINVAL,
			       "expected 1 input, \"%.200s\"; got a different number",
			       wf_serve_input_name(io));
	const in_tensor *t = rq->inputs[0];
	const Inference__InferTensorContents *tc = t->contents;
	if (rq->n_raw_input_contents && rq->n_raw_input_contents != rq->n_inputs)
		return wf_errf(err, WF_EINVAL, "raw_input_contents must have one entry per input");
	if (rq->n_raw_input_contents && tc)
		return wf_errf(err, WF_EINVAL,
			       "input '%.200s' has both raw_input_contents and contents", t->name);
	shm_ref r = {0};
	for (size_t k = 0; k < t->n_parameters; k++) {
		int rc =
			shm_param(t->name, t->parameters[k]->key, t->parameters[k]->value, &r, err);
		if (rc)
			return rc;
	}
	*v = (wf_serve_tensor_view){.name = t->name,
				    .datatype = t->datatype,
				    .dims = t->shape,
				    .ndim = (int)t->n_shape,
				    .raw_what = "raw_input_contents",
				    .raw_borrow = 1, /* the call's message outlives the input */
				    .shm_offset = r.offset,
				    .shm_size = r.size};
	memcpy(v->shm_region, r.region, sizeof(r.region));
	int oom = 0;
	if (rq->n_raw_input_contents) {
		v->raw = rq->raw_input_contents[0].data;
		v->raw_len = rq->raw_input_contents[0].len;
		v->has_raw = 1;
	} else if (tc && tc->n_bytes_contents) {
		v->values_what = "bytes_contents";
		v->nelements = tc->n_bytes_contents;
		v->has_elements = 1;
		v->elements = p->e = calloc(v->nelements, sizeof(*p->e));
		for (size_t i = 0; p->e && i < v->nelements; i++)
			p->e[i] = (wf_serve_bytes){tc->bytes_contents[i].data,
						   tc->bytes_contents[i].len};
		oom = !p->e;
	} else if (tc && tc->n_uint_contents) {
		v->values_what = "uint_contents";
		v->nvalues = tc->n_uint_contents;
		v->has_values = 1;
		v->values = p->u8 = malloc(sizeof(*p->u8) * v->nvalues);
		for (size_t i = 0; p->u8 && i < v->nvalues; i++)
			p->u8[i] = (float)tc->uint_contents[i];
		oom = !p->u8;
	} else if (tc) {
		v->values_what = "fp32_contents";
		v->values = tc->fp32_contents;
		v->nvalues = tc->n_fp32_contents;
		v->has_values = 1;
	}
	return oom ? wf_errf(err, WF_ENOMEM, "out of memory") : 0;
}

static const uint8_t empty_msg[1]; /* what an empty body unpacks from */

/* ---- ModelInferRequest without copying its tensor bytes ---------------- */

static int varint(const uint8_t *m, size_t len, size_t *pos, uint64_t *v)
{
	*v = 0;
	for (int s = 0; s < 64 && *pos < len; s += 7) {
		uint8_t b = m[(*pos)++];
		*v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}

/* The top-level field at *pos: its number and, for a length-delimited one,
 * its payload (*p; NULL for other wire types); *pos moves past it.
 * -1: malformed (protobuf-c then says so). */
static int next_field(const uint8_t *m, size_t len, size_t *pos, uint64_t *field, const uint8_t **p,
		      size_t *plen)
{
	uint64_t tag, v;
	*p = NULL;
	*plen = 0;
	if (varint(m, len, pos, &tag))
		return -1;
	*field = tag >> 3;
	switch (tag & 7) {
	case 0: return varint(m, len, pos, &v);
	case 1: return len - *pos < 8 ? -1 : (*pos += 8, 0);
	case 5: return len - *pos < 4 ? -1 : (*pos += 4, 0);
	case 2:
		if (varint(m, len, pos, &v) || v > len - *pos)
			return -1;
		*p = m + *pos;
		*plen = (size_t)v;
		*pos += (size_t)v;
		return 0;
	default: return -1;
	}
}

#define RAW_INPUT_CONTENTS 7 /* ModelInferRequest's field number */

/* rq from msg, its raw_input_contents (megabytes of tensor data that
 * protobuf-c would copy) views into msg: the other fields are unpacked on
 * their own. msg must outlive rq; free rq with infer_request_free. NULL when
 * msg does not parse. */
static infer_req *infer_request_unpack(const uint8_t *msg, size_t len)
{
	size_t nraw = 0, kept = 0, pos = 0, pl;
	uint64_t f;
	const uint8_t *p;
	while (pos < len) {
		size_t at = pos;
		if (next_field(msg, len, &pos, &f, &p, &pl))
			return inference__model_infer_request__unpack(NULL, len, msg);
		if (f == RAW_INPUT_CONTENTS && p)
			nraw++;
		else
			kept += pos - at;
	}
	if (!nraw)
		return inference__model_infer_request__unpack(NULL, len, len ? msg : empty_msg);
	ProtobufCBinaryData *raw = calloc(nraw, sizeof(*raw));
	uint8_t *rest = malloc(kept ? kept : 1);
	infer_req *rq = NULL;
	if (raw && rest) {
		size_t k = 0, r = 0;
		for (pos = 0; pos < len;) {
			size_t at = pos;
			next_field(msg, len, &pos, &f, &p, &pl);
			if (f == RAW_INPUT_CONTENTS && p) {
				raw[r].data = (uint8_t *)p; /* read only */
				raw[r++].len = pl;
			} else {
				memcpy(rest + k, msg + at, pos - at);
				k += pos - at;
			}
		}
		rq = inference__model_infer_request__unpack(NULL, kept, kept ? rest : empty_msg);
	}
	free(rest);
	if (!rq) {
		free(raw);
		return NULL;
	}
	rq->n_raw_input_contents = nraw;
	rq->raw_input_contents = raw;
	return rq;
}

static void infer_request_free(infer_req *rq)
{
	if (!rq)
		return;
	free(rq->raw_input_contents);
	rq->raw_input_contents = NULL;
	rq->n_raw_input_contents = 0;
	inference__model_infer_request__free_unpacked(rq, NULL);
}

static int param_int(const Inference__InferParameter *p, long *v)
{
	if (!p)
		return 0;
	if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
		*v = (long)p->int64_param;
	else if (p->parameter_choice_case ==
		 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM)
		*v = p->uint64_param > 100000 ? 100000 : (long)p->uint64_param;
	else
		return -1;
	return 1;
}

/* The outputs rq asks for (both when it names none): their parameters read
 * here, the rules checked by wf_serve_outputs_check. */
static int requested_outputs(const infer_req *rq, wf_serve_output *o, int *no, wf_err *err)
{
	if (!rq->n_outputs) {
		*no = wf_serve_outputs_all(o, 0);
		return 0;
	}
	const char *names[WF_SERVE_MAX_OUTPUTS];
	long cls[WF_SERVE_MAX_OUTPUTS];
	size_t n = rq->n_outputs;
	for (size_t i = 0; i < WF_MIN(n, (size_t)WF_SERVE_MAX_OUTPUTS); i++) {
		const Inference__ModelInferRequest__InferRequestedOutputTensor *t = rq->outputs[i];
		names[i] = t->name;
		cls[i] = 0;
		shm_ref r = {0};
		for (size_t k = 0; k < t->n_parameters; k++) {
			const char *key = t->parameters[k]->key;
			int rc = shm_param(t->name, key, t->parameters[k]->value, &r, err);
			if (rc)
				return rc;
			long v = 0;
			if (!strcmp(key, "classification"))
				cls[i] = param_int(t->parameters[k]->value, &v) == 1 && v > 0 ? v
											      : -1;
		}
		o[i] = (wf_serve_output){.shm_offset = r.offset, .shm_size = r.size};
		memcpy(o[i].shm_region, r.region, sizeof(r.region));
	}
	int rc = wf_serve_outputs_check(names, cls, (int)WF_MIN(n, 1000), o, err);
	if (!rc)
		*no = (int)n;
	return rc;
}

/* A ModelInfer call between its decoding and its reply: everything the
 * reply needs, kept while the batcher runs it. */
typedef struct infer_call {
	wf_grpc_adapter *a;
	wf_grpc_call *call;
	infer_req *rq;
	wf_grpc_model m;
	view_parts parts;
	wf_serve_request req; /* for the request core (serve/infer.h) */
	wf_serve_response res;
} infer_call;

/* ModelInfer's message for the core: its outputs, its one input as a
 * tensor view. */
static int read_infer(void *arg, const wf_image_io *io, wf_serve_request *req, wf_err *err)
{
	infer_call *ic = arg;
	int rc = requested_outputs(ic->rq, req->out, &req->nout, err);
	if (!rc)
		rc = input_view(io, ic->rq, &req->tensor, &ic->parts, err);
	req->has_tensor = !rc;
	return rc;
}

static void infer_call_free(infer_call *ic)
{
	wf_grpc_model_put(ic->a, &ic->m);
	wf_serve_request_free(&ic->req);
	wf_serve_response_free(&ic->res);
	view_parts_free(&ic->parts);
	infer_request_free(ic->rq);
	free(ic);
}

int wf_grpc_kserve_decode_input(const wf_grpc_io *io, const uint8_t *msg, size_t len, float **x,
				int *n, char *why, size_t cap)
{
	*x = NULL;
	*n = 0;
	infer_call *ic = calloc(1, sizeof(*ic));
	if (ic && !(ic->rq = infer_request_unpack(msg, len))) {
		free(ic);
		snprintf(why, cap, "cannot parse the ModelInferRequest message");
		return WF_GRPC_INVALID_ARGUMENT;
	}
	wf_err err = {0};
	int rc = !ic ? wf_errf(&err, WF_ENOMEM, "out of memory")
		     : read_infer(ic, io, &ic->req, &err);
	if (!rc)
		rc = wf_serve_request_input(io, &ic->req, &err);
	if (!rc) { /* the caller's own copy: rq's contents go with it */
		size_t bytes = (size_t)ic->req.input.n * io->h * io->w * io->c * sizeof(float);
		if ((*x = malloc(bytes ? bytes : 1)) != NULL) {
			memcpy(*x, ic->req.input.x, bytes);
			*n = ic->req.input.n;
		} else {
			rc = wf_errf(&err, WF_ENOMEM, "out of memory");
		}
	}
	if (rc)
		snprintf(why, cap, "%s", err.msg);
	if (ic)
		infer_call_free(ic);
	return !rc		 ? WF_GRPC_OK
	       : rc == WF_ENOMEM ? WF_GRPC_RESOURCE_EXHAUSTED
				 : WF_GRPC_INVALID_ARGUMENT;
}

/* The reply's outputs (the core's tensors) as raw_output_contents; those
 * written into shared memory leave an empty entry, which keeps the others
 * at their index. */
static int build_infer_reply(wf_grpc_call *call, const infer_call *ic)
{
	char ver[32];
	snprintf(ver, sizeof(ver), "%ld", ic->m.version);
	const wf_serve_tensor *t = ic->res.t;
	int no = ic->res.nout;
	Inference__ModelInferResponse__InferOutputTensor ot[WF_SERVE_MAX_OUTPUTS],
		*otp[WF_SERVE_MAX_OUTPUTS];
	ProtobufCBinaryData raw[WF_SERVE_MAX_OUTPUTS] = {{0}};
	for (int i = 0; i < no; i++) {
		inference__model_infer_response__infer_output_tensor__init(&ot[i]);
		ot[i].name = (char *)t[i].name;
		ot[i].datatype = (char *)t[i].datatype;
		ot[i].n_shape = (size_t)t[i].ndim;
		ot[i].shape = (int64_t *)t[i].dims;
		otp[i] = &ot[i];
		raw[i].data = (uint8_t *)t[i].data;
		raw[i].len = t[i].len;
	}
	Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
	r.model_name = (char *)ic->m.name;
	r.model_version = ver;
	r.id = ic->rq->id;
	r.n_outputs = (size_t)no;
	r.outputs = otp;
	r.n_raw_output_contents = (size_t)no;
	r.raw_output_contents = raw;
	return wf_grpc_reply(call, &r.base);
}

/* The core finished the call (in a batch thread): reply. */
static void infer_finished(void *arg, int rc, const char *why)
{
	infer_call *ic = arg;
	wf_grpc_call *call = ic->call;
	int code = wf_grpc_model_ran(ic->a, WF_SERVE_EP_V2_INFER, &ic->req, &ic->res, rc);
	if (code == WF_GRPC_OK)
		code = build_infer_reply(call, ic);
	else
		snprintf(call->message, sizeof(call->message), "%s", why);
	infer_call_free(ic);
	wf_grpc_call_done(call, code);
}

/* Decode, hand to the request core and return WF_GRPC_PENDING (the reply
 * comes from infer_finished), or fail at once. Never waits: small calls run
 * in the event loop (wf_grpc_method.loop_below). */
static int model_infer(void *ctx, wf_grpc_call *call)
{
	double t0 = wf_now();
	wf_grpc_adapter *a = ctx;
	infer_call *ic = calloc(1, sizeof(*ic));
	infer_req *rq = ic ? infer_request_unpack(call->msg, call->len) : NULL;
	if (!rq) {
		free(ic);
		wf_grpc_model_failed(a, WF_SERVE_EP_V2_INFER, WF_GRPC_INVALID_ARGUMENT,
				     wf_now() - t0);
		return ic ? wf_grpc_bad_message(call, "ModelInferRequest")
			  : wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	}
	ic->a = a;
	ic->call = call;
	ic->rq = rq;
	ic->req = (wf_serve_request){.read = read_infer,
				     .read_arg = ic,
				     .shm = wf_grpc_shm(a, call->local, NULL, 0),
				     .t0 = t0};
	int code = get_model(a, rq->model_name, rq->model_version, &ic->m, call);
	if (code) {
		wf_grpc_model_failed(a, WF_SERVE_EP_V2_INFER, code, wf_now() - t0);
	} else {
		code = wf_grpc_model_run(a, &ic->m, WF_SERVE_EP_V2_INFER, &ic->req, &ic->res,
					 call->deadline, infer_finished, ic, call->message,
					 sizeof(call->message));
		if (code == WF_GRPC_PENDING)
			return code; /* ic is infer_finished's now */
	}
	infer_call_free(ic);
	return code;
}
/* ---- trace and log settings (serve/settings.h) -------------------------- */

static int too_many_settings(wf_grpc_call *call, size_t n)
{
	return wf_grpc_fail(call, WF_GRPC_INVALID_ARGUMENT,
			    "%zu settings: at most %d in one request", n, WF_SERVE_MAX_SETTINGS);
}

static int trace_setting(void *ctx, wf_grpc_call *call)
{
	Inference__TraceSettingRequest *rq =
		wf_grpc_unpack(&inference__trace_setting_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "TraceSettingRequest");
	const char *model = rq->model_name[0] ? rq->model_name : NULL;
	wf_serve_setting s[WF_SERVE_MAX_SETTINGS];
	int code = WF_GRPC_OK, n = (int)rq->n_settings;
	if (model) { /* a model's settings name a model being served, as over HTTP */
		wf_grpc_model m;
		code = get_model(ctx, model, NULL, &m, call);
		if (!code)
			wf_grpc_model_put(ctx, &m);
	}
	if (!code && rq->n_settings > WF_SERVE_MAX_SETTINGS)
		code = too_many_settings(call, rq->n_settings);
	for (int i = 0; !code && i < n; i++) {
		const Inference__TraceSettingRequest__SettingValue *v = rq->settings[i]->value;
		s[i] = (wf_serve_setting){.key = rq->settings[i]->key,
					  .kind = WF_SETTING_STRINGS,
					  .v = v ? (const char *const *)v->value : NULL,
					  .n = v ? (int)v->n_value : 0};
	}
	if (!code && n && wf_serve_trace_update(model, s, n, call->message, sizeof(call->message)))
		code = WF_GRPC_INVALID_ARGUMENT;
	if (!code) {
		wf_serve_trace t;
		wf_serve_trace_get(model, &t);
		Inference__TraceSettingResponse__SettingValue val[WF_TRACE_NKEYS];
		Inference__TraceSettingResponse__SettingsEntry ent[WF_TRACE_NKEYS],
			*entp[WF_TRACE_NKEYS];
		char *strs[WF_TRACE_NKEYS][WF_TRACE_MAX_VALUES];
		for (int k = 0; k < WF_TRACE_NKEYS; k++) {
			inference__trace_setting_response__setting_value__init(&val[k]);
			inference__trace_setting_response__settings_entry__init(&ent[k]);
			for (int j = 0; j < t.n[k]; j++)
				strs[k][j] = t.v[k][j];
			val[k].n_value = (size_t)t.n[k];
			val[k].value = strs[k];
			ent[k].key = (char *)wf_serve_trace_keys[k];
			ent[k].value = &val[k];
			entp[k] = &ent[k];
		}
		Inference__TraceSettingResponse r = INFERENCE__TRACE_SETTING_RESPONSE__INIT;
		r.n_settings = WF_TRACE_NKEYS;
		r.settings = entp;
		code = wf_grpc_reply(call, &r.base);
	}
	inference__trace_setting_request__free_unpacked(rq, NULL);
	return code;
}

static int log_settings(void *ctx, wf_grpc_call *call)
{
	Inference__LogSettingsRequest *rq =
		wf_grpc_unpack(&inference__log_settings_request__descriptor, call);
	if (!rq)
		return wf_grpc_bad_message(call, "LogSettingsRequest");
	wf_serve_setting s[WF_SERVE_MAX_SETTINGS];
	int code = rq->n_settings > WF_SERVE_MAX_SETTINGS ? too_many_settings(call, rq->n_settings)
							  : WF_GRPC_OK;
	int n = (int)rq->n_settings;
	for (int i = 0; !code && i < n; i++) {
		const Inference__LogSettingsRequest__SettingValue *v = rq->settings[i]->value;
		s[i] = (wf_serve_setting){.key = rq->settings[i]->key, .kind = WF_SETTING_NULL};
		switch (v ? v->parameter_choice_case : 0) {
		case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM:
			s[i].kind = WF_SETTING_BOOL;
			s[i].b = v->bool_param;
			break;
		case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM:
			s[i].kind = WF_SETTING_UINT;
			s[i].u = v->uint32_param;
			break;
		case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM:
			s[i].kind = WF_SETTING_STRING;
			s[i].s = v->string_param;
			break;
		default: break;
		}
	}
	if (!code && n && wf_serve_log_update(s, n, call->message, sizeof(call->message)))
		code = WF_GRPC_INVALID_ARGUMENT;
	if (!code) {
		wf_serve_log l;
		wf_serve_log_get(&l);
		enum { FILE_, INFO, WARNING, ERROR_, VERBOSE, FORMAT, N };
		static const char *const keys[N] = {"log_file",	 "log_info",	      "log_warning",
						    "log_error", "log_verbose_level", "log_format"};
		const int flags[N] = {0, l.info, l.warning, l.error, 0, 0};
		Inference__LogSettingsResponse__SettingValue val[N];
		Inference__LogSettingsResponse__SettingsEntry ent[N], *entp[N];
		for (int k = 0; k < N; k++) {
			inference__log_settings_response__setting_value__init(&val[k]);
			inference__log_settings_response__settings_entry__init(&ent[k]);
			if (k == FILE_ || k == FORMAT) {
				val[k].parameter_choice_case =
					INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
				val[k].string_param = k == FILE_ ? l.file : l.format;
			} else if (k == VERBOSE) {
				val[k].parameter_choice_case =
					INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM;
				val[k].uint32_param = l.verbose_level;
			} else {
				val[k].parameter_choice_case =
					INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
				val[k].bool_param = flags[k];
			}
			ent[k].key = (char *)keys[k];
			ent[k].value = &val[k];
			entp[k] = &ent[k];
		}
		Inference__LogSettingsResponse r = INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
		r.n_settings = N;
		r.settings = entp;
		code = wf_grpc_reply(call, &r.base);
	}
	inference__log_settings_request__free_unpacked(rq, NULL);
	return code;
}

/* ModelStreamInfer answers each request with a ModelStreamInferResponse:
 * the ModelInferResponse in infer_response (field 2), or the failure in
 * error_message (field 1), and the stream goes on, as in Triton. The
 * message is written around the reply's bytes, not packed again. */
static int stream_infer_reply(wf_grpc_call *call, int code)
{
	const uint8_t *body = (const uint8_t *)call->message;
	size_t n = strlen(call->message);
	uint8_t tag = 1 << 3 | 2; /* error_message, length-delimited */
	if (code == WF_GRPC_OK && call->reply) {
		body = call->reply + 5; /* after the gRPC prefix */
		n = call->reply_len;
		tag = 2 << 3 | 2; /* infer_response */
	} else if (!n) {
		n = (size_t)snprintf(
			call->message, sizeof(call->message), "%s",
			wf_grpc_code_name(code == WF_GRPC_OK ? WF_GRPC_INTERNAL : code));
	}
	uint8_t head[11];
	size_t h = 0;
	head[h++] = tag;
	for (uint64_t v = n; h == 1 || v; v >>= 7)
		head[h++] = (uint8_t)((v & 127) | (v >> 7 ? 128 : 0));
	uint8_t *old = call->reply; /* body may point into it */
	call->reply = NULL;
	uint8_t *out = wf_grpc_reply_buf(call, h + n);
	if (out) {
		memcpy(out, head, h);
		memcpy(out + h, body, n);
	}
	free(old);
	return out ? WF_GRPC_OK : wf_grpc_fail(call, WF_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

#define KS(m) "/inference.GRPCInferenceService/" m

const wf_grpc_method wf_grpc_kserve_methods[] = {
	{KS("ServerLive"), server_live, 1, 1, 0, NULL},
	{KS("ServerReady"), server_ready, 1, 1, 0, NULL},
	{KS("ModelReady"), model_ready, 1, 0, 0, NULL},
	{KS("ServerMetadata"), server_metadata, 1, 0, 0, NULL},
	{KS("ModelMetadata"), model_metadata, 1, 0, 0, NULL},
	{KS("ModelConfig"), model_config, 1, 0, 0, NULL},
	{KS("ModelStatistics"), model_statistics, 1, 0, 0, NULL},
	{KS("RepositoryIndex"), repository_index, 1, 0, 0, NULL},
	{KS("RepositoryModelLoad"), repository_load, 0, 0, 0, NULL},
	{KS("RepositoryModelUnload"), repository_unload, 0, 0, 0, NULL},
	/* a message without tensor data (shared memory, a few values) is decoded
	 * in the event loop; one with an image's bytes in a worker */
	{KS("ModelInfer"), model_infer, 0, 0, 4096, NULL},
	{KS("ModelStreamInfer"), model_infer, 0, 0, 4096, stream_infer_reply},
	{KS("SystemSharedMemoryStatus"), shm_status, 1, 0, 0, NULL},
	{KS("SystemSharedMemoryRegister"), shm_register, 1, 0, 0, NULL},
	{KS("SystemSharedMemoryUnregister"), shm_unregister, 1, 0, 0, NULL},
	{KS("CudaSharedMemoryStatus"), cuda_shm_status, 1, 0, 0, NULL},
	{KS("CudaSharedMemoryRegister"), cuda_shm_register, 1, 0, 0, NULL},
	{KS("CudaSharedMemoryUnregister"), cuda_shm_unregister, 1, 0, 0, NULL},
	{KS("TraceSetting"), trace_setting, 1, 0, 0, NULL},
	{KS("LogSettings"), log_settings, 1, 0, 0, NULL},
};
const int wf_grpc_kserve_nmethods = (int)WF_ARRAY_LEN(wf_grpc_kserve_methods);
