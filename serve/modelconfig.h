/* modelconfig.h: the configurations weft-serve reads from outside (and TF
 * Serving's batching and monitoring files):
 * TF Serving's ModelServerConfig in protobuf text format (--model_config_file:
 * model_config_list { config { name base_path model_platform
 * model_version_policy version_labels } }) and the subset of Triton's
 * config.pbtxt that applies to weft models (name, platform/backend,
 * version_policy, max_batch_size, dynamic_batching max_queue_delay_microseconds
 * and preferred_batch_size, instance_group.count, input name, output names and
 * label_filename, parameters weft_threads and weft_memory_mb), as text or as
 * JSON. Unknown fields are
 * skipped (both formats carry many that do not apply). Pure functions of
 * their input; the fuzz target drives them directly. */
#ifndef WF_SERVE_MODELCONFIG_H
#define WF_SERVE_MODELCONFIG_H

#include "common/error.h"

#include <stddef.h>

#define WF_SERVE_MAX_NAME      128
#define WF_SERVE_MAX_SPECIFIC  64
#define WF_SERVE_MAX_LABELS    32
#define WF_SERVE_MAX_PREFERRED 16

typedef enum {
	WF_SERVE_POLICY_LATEST = 0, /* the num_versions highest that load */
	WF_SERVE_POLICY_SPECIFIC,   /* exactly the listed versions */
	WF_SERVE_POLICY_ALL,	    /* every version found */
} wf_serve_policy_kind;

typedef struct wf_serve_label {
	char key[WF_SERVE_MAX_NAME];
	long version;
} wf_serve_label;

/* One model: where its versions live and how they are served. */
typedef struct wf_serve_model_config {
	char name[WF_SERVE_MAX_NAME];
	char base_path[4096];
	char platform[64]; /* as configured ("" when absent) */
	wf_serve_policy_kind policy;
	int num_versions; /* LATEST: how many (default 1) */
	int nspecific;
	long specific[WF_SERVE_MAX_SPECIFIC];
	int nlabels;
	wf_serve_label labels[WF_SERVE_MAX_LABELS];
	int max_batch;	     /* samples per request; 0: unbatched (inputs without the batch
			      * dimension); -1: not given (the server's --max_batch_size) */
	long batch_delay_us; /* -1: the server's --batch_timeout_micros */
	int instances;	     /* instance_group count (0: not given) */
	int threads;	     /* compute threads per forward (0: the server's --threads) */
	long memory_mb;	     /* parameters weft_memory_mb: budget of a version (0: none) */
	/* Triton's input/output declarations: checked against the model */
	char input_name[WF_SERVE_MAX_NAME]; /* input { name } ("": not given) */
	char label_filename[256]; /* output { label_filename }: class labels, one a line, in
				   * the model's folder ("": the model file's own) */
	int npreferred;		  /* dynamic_batching { preferred_batch_size } */
	int preferred[WF_SERVE_MAX_PREFERRED];
} wf_serve_model_config;

/* The version labels as "key:version,..." into buf (what Triton's model
 * configuration shows as parameter weft_version_labels, on both APIs). */
void wf_serve_labels_string(const wf_serve_model_config *c, char *buf, size_t cap);
#define WF_SERVE_LABELS_CAP (WF_SERVE_MAX_LABELS * (WF_SERVE_MAX_NAME + 24))
/* A version's file in its folder (the configuration's default_model_filename). */
#define WF_SERVE_MODEL_FILENAME "model.h5"

/* Defaults of one model config (latest 1, server settings for the rest). */
void wf_serve_model_config_init(wf_serve_model_config *c);

/* Parse a ModelServerConfig text (what --model_config_file holds) into a
 * malloc'd array of *n configs. Errors name the line and the field;
 * duplicate model names and missing name/base_path are errors. */
int wf_serve_parse_model_server_config(const char *text, size_t len, wf_serve_model_config **out,
				       int *n, wf_err *err);

/* Parse a Triton config.pbtxt text into c (which holds name/base_path
 * already; a "name" in the file must match it). An input or output that a
 * weft model cannot have (more than one input, an output other than
 * "probabilities" and "logits") is an error naming the field. */
int wf_serve_parse_triton_config(const char *text, size_t len, wf_serve_model_config *c,
				 wf_err *err);
/* The same fields from Triton's model configuration as JSON (what
 * tritonclient's load_model(config=...) sends), read by the same rules. */
int wf_serve_parse_triton_config_json(const char *text, size_t len, wf_serve_model_config *c,
				      wf_err *err);

/* TF Serving's BatchingParameters text (--batching_parameters_file):
 * max_batch_size, batch_timeout_micros, num_batch_threads and
 * max_enqueued_batches, each { value: N }; -1 where not given. Fields that
 * weft has no use for are listed in ignored (for the log). */
typedef struct wf_serve_batching_params {
	long max_batch_size, batch_timeout_micros, num_batch_threads, max_enqueued_batches;
	char ignored[256]; /* "f1, f2" */
} wf_serve_batching_params;
int wf_serve_parse_batching_parameters(const char *text, size_t len, wf_serve_batching_params *p,
				       wf_err *err);

/* TF Serving's MonitoringConfig text (--monitoring_config_file):
 * prometheus_config { enable path }. */
typedef struct wf_serve_monitoring {
	int enable;	/* 0 when not given */
	char path[256]; /* "" when not given */
} wf_serve_monitoring;
int wf_serve_parse_monitoring_config(const char *text, size_t len, wf_serve_monitoring *m,
				     wf_err *err);

#endif
