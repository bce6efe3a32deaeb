/* options.c: weft-serve's settings table, and their resolution: defaults <
 * environment < flags, the ranges and choices checked, TF Serving's
 * parameter files applied, then what follows from them. The one place
 * weft-serve reads its environment. */
#include "serve/options.h"

#include "common/cpus.h"
#include "common/log.h"
#include "common/util.h"
#include "serve/modelconfig.h"
#include "serve/repo.h"
#include "serve/shm.h"

#include <arpa/inet.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One setting: a flag with its other spellings, where its value goes, its
 * default written once as a flag value, the environment variable that sets
 * it when no flag does, its range and its help. */
typedef struct setting {
	const char *name; /* "rest_api_port|http-port": messages use the first */
	wf_flag_kind kind;
	size_t off;	     /* offsetof(wf_serve_options, field); NOFIELD: ignored */
	const char *metavar; /* "N" */
	const char *def;     /* the default as a flag value; NULL: none, or the help says */
	const char *env;     /* NULL: none */
	double lo, hi;	     /* a number's range; lo == hi: none */
	const char *help;    /* NULL: accepted, not listed */
} setting;

#define NOFIELD	 SIZE_MAX
#define F(field) offsetof(wf_serve_options, field)
#define UNSET	 (-1L - 65535) /* an integer setting not given: its default is derived */

static const setting settings[] = {
	/* ports and addresses */
	{"rest_api_port|http-port", WF_FLAG_INT, F(port), "N", NULL, NULL, 0, 65535,
	 "HTTP port (default 8501, with --model_repository 8000 as in Triton; 0 = any free "
	 "port)"},
	{"port", WF_FLAG_INT, F(tf_grpc_port), "N", "8500", NULL, 0, 65535,
	 "TF Serving gRPC API: PredictionService and ModelService (0 = off)"},
	{"grpc_port|grpc-port", WF_FLAG_INT, F(grpc_port), "N", "8001", NULL, 0, 65535,
	 "KServe v2 gRPC API, GRPCInferenceService (0 = off; a default gRPC port found in use "
	 "is skipped with a warning, a port given is required)"},
	{"grpc_max_message_bytes", WF_FLAG_INT, F(grpc_max_message), "N", "67108864", NULL, 1024,
	 (double)(1L << 31), "largest gRPC request message (images are not limited to 4 MB)"},
	{"grpc_threads|grpc-infer-thread-count|grpc_infer_thread_count", WF_FLAG_INT,
	 F(grpc_threads), "N", NULL, NULL, 1, 4096,
	 "gRPC handler threads per API at most, started as calls need them (an idle server "
	 "holds one per core, up to 4; a KServe ModelInfer waiting for its batch holds none) "
	 "(default as --http_threads)"},
	{"bind_address", WF_FLAG_STR, F(bind_address), "A", "0.0.0.0", NULL, 0, 0,
	 "IPv4 address to listen on"},
	{"http-address|http_address", WF_FLAG_STR, F(http_address), "A", NULL, NULL, 0, 0,
	 "the HTTP port's address (default --bind_address)"},
	{"grpc-address|grpc_address", WF_FLAG_STR, F(grpc_address), "A", NULL, NULL, 0, 0,
	 "both gRPC ports' address (default --bind_address)"},
	{"metrics-address|metrics_address", WF_FLAG_STR, F(metrics_address), "A", NULL, NULL, 0, 0,
	 "--metrics-port's address (default --bind_address)"},
	{"allow-http|allow_http", WF_FLAG_TOGGLE, F(allow_http), NULL, "true", NULL, 0, 0,
	 "false: no HTTP port"},
	{"allow-grpc|allow_grpc", WF_FLAG_TOGGLE, F(allow_grpc), NULL, "true", NULL, 0, 0,
	 "false: neither gRPC port is opened, whatever --port and --grpc_port say"},
	{"allow-metrics|allow_metrics", WF_FLAG_TOGGLE, F(allow_metrics), NULL, "true", NULL, 0, 0,
	 "false: no /metrics, neither on the HTTP port nor on --metrics-port"},
	{"metrics-port|metrics_port", WF_FLAG_INT, F(metrics_port), "N", "0", NULL, 0, 65535,
	 "also serve Prometheus /metrics (only) on port N, as Triton does (0: metrics on the "
	 "HTTP port only)"},
	/* models */
	{"model_name", WF_FLAG_STR, F(model_name), "NAME", "default", NULL, 0, 0, "name in URLs"},
	{"model_base_path", WF_FLAG_STR, F(base_path), "DIR", NULL, NULL, 0, 0,
	 "holds <version>/model.h5 (one model)"},
	{"model_config_file", WF_FLAG_STR, F(config_file), "FILE", NULL, NULL, 0, 0,
	 "many models: TF Serving's ModelServerConfig text (model_config_list { config { name "
	 "base_path model_version_policy version_labels } })"},
	{"model_config_file_poll_wait_seconds", WF_FLAG_DOUBLE, F(config_poll_seconds), "S", "0",
	 NULL, 0, 86400, "re-read FILE every S s (0: never)"},
	{"model_repository|model-repository|model-store", WF_FLAG_STR, F(repository), "DIR", NULL,
	 NULL, 0, 0,
	 "many models, Triton style: DIR/<model>/<version>/model.h5 and an optional "
	 "DIR/<model>/config.pbtxt (version_policy, max_batch_size: the most samples a request "
	 "may hold, 0: unbatched tensors, dynamic_batching, instance_group count: batch threads "
	 "the model may hold at once, parameters weft_threads)"},
	{"model_control_mode|model-control-mode", WF_FLAG_STR, F(control_mode), "M", "none", NULL,
	 0, 0,
	 "none (load the repository once), poll (follow it) or explicit "
	 "(/v2/repository/models/NAME/load|unload)"},
	{"load-model|load_model", WF_FLAG_LIST, F(load_models), "NAME", NULL, NULL, 0, 0,
	 "explicit mode: load NAME at start ('*': all; repeatable)"},
	{"model-load-thread-count|model_load_thread_count", WF_FLAG_INT, F(load_threads), "N", "1",
	 NULL, 1, WF_SERVE_MAX_LOAD_THREADS,
	 "models loaded and warmed at once (1: one after another); files are read one at a "
	 "time"},
	{"max_num_load_retries", WF_FLAG_INT, F(load_retries), "N", "0", NULL, 0, 1000,
	 "a version that fails to load is tried again N times (TF Serving retries 5 times; "
	 "weft-serve tries a failed version again when its file changes)"},
	{"load_retry_interval_micros", WF_FLAG_INT, F(load_retry_us), "U", "60000000", NULL, 0,
	 3600000000.0, "between those tries (as TF Serving)"},
	{"batching_parameters_file", WF_FLAG_STR, F(batching_file), "F", NULL, NULL, 0, 0,
	 "TF Serving's BatchingParameters text: max_batch_size, batch_timeout_micros, "
	 "num_batch_threads ({ value: N }) replace --max_batch_size, --batch_timeout_micros, "
	 "--num_batch_threads; max_enqueued_batches x max_batch_size is --max_queue_size; other "
	 "fields are logged as unused"},
	{"monitoring_config_file", WF_FLAG_STR, F(monitoring_file), "F", NULL, NULL, 0, 0,
	 "TF Serving's MonitoringConfig text: prometheus_config { enable: false } turns the REST "
	 "port's metrics off; its path must be /monitoring/prometheus/metrics or /metrics "
	 "(weft-serve serves both; without the file too)"},
	{"rest_api_enable_cors_support", WF_FLAG_TOGGLE, F(cors), NULL, "false", NULL, 0, 0,
	 "CORS: Access-Control-Allow-Origin: * on every HTTP reply, and OPTIONS preflights "
	 "answered (204; with --auth_token_file they need the token too)"},
	{"repository-poll-secs", WF_FLAG_DOUBLE, F(poll_seconds), "S", NULL, NULL, 0, 0,
	 "Triton's name for --file_system_poll_wait_seconds"},
	{"file_system_poll_wait_seconds", WF_FLAG_DOUBLE, F(poll_seconds), "S", "1", NULL, 0, 86400,
	 "poll DIR every S seconds (0 = load once, never poll)"},
	/* batching and compute */
	{"enable_batching", WF_FLAG_TOGGLE, F(batching), NULL, "false", NULL, 0, 0,
	 "batch concurrent requests"},
	{"max_batch_size", WF_FLAG_INT, F(max_batch), "N", "32", NULL, 1, 4096,
	 "samples per forward"},
	{"batch_timeout_micros", WF_FLAG_INT, F(timeout_us), "U", "1000", NULL, 0, 10000000,
	 "a partial batch waits U us for more"},
	{"num_batch_threads", WF_FLAG_INT, F(batch_threads), "N", NULL, NULL, 1, 256,
	 "forward threads (default 2 with batching, else the number of cores, at most 16)"},
	{"device", WF_FLAG_STR, F(device), "D", "auto", NULL, 0, 0, "auto, cpu, cuda or ref"},
	{"precision", WF_FLAG_STR, F(precision), "P", NULL, "WEFT_PRECISION", 0, 0,
	 "compute precision: fp32, bf16 (fp32 with a notice where the device lacks native bf16), "
	 "int8 (versions exported with --quantize int8; fp32 with a notice for others), tf32 or "
	 "fp16 (the cuda device's; fp32 with a notice elsewhere) or auto (default: what each "
	 "model file names (weft export --precision), else fp32)"},
	{"threads", WF_FLAG_INT, F(threads), "N", "0", NULL, 0, 1024,
	 "compute threads per forward thread (0: cores / forward threads)"},
	/* requests and connections */
	{"max_request_bytes", WF_FLAG_INT, F(max_body), "N", "67108864", NULL, 1024,
	 (double)(1L << 34), "larger bodies get 413"},
	{"request_timeout_seconds", WF_FLAG_DOUBLE, F(request_timeout), "S", "30", NULL, 0.001,
	 86400, "longest wait for a forward thread before 503"},
	{"rest_api_timeout_in_ms", WF_FLAG_DOUBLE, F(request_timeout_ms), "MS", "0", NULL, 0,
	 86400000, NULL},
	{"idle_timeout_seconds", WF_FLAG_INT, F(idle_timeout), "S", "60", NULL, 1, 86400,
	 "close idle connections after S"},
	{"drain_timeout_seconds|exit-timeout-secs", WF_FLAG_DOUBLE, F(drain_timeout), "S", "30",
	 NULL, 0, 86400, "on SIGTERM, wait at most S for in-flight requests"},
	{"max_image_pixels", WF_FLAG_INT, F(max_image_pixels), "N", "67108864", NULL, 1,
	 (double)(1L << 32),
	 "refuse request images larger than N pixels (width x height, read from the header "
	 "before decoding)"},
	{"http_threads|http-thread-count|rest_api_num_threads", WF_FLAG_INT, F(http_threads), "N",
	 NULL, NULL, 1, 1024,
	 "HTTP handler threads at most, started as requests need them (an idle server holds one "
	 "per core, up to 4) (default 4 per forward thread, at least 16; with batching 2 x "
	 "max_batch_size x forward threads + 4, at most 256); connections are event-driven, a "
	 "thread is held only while a request runs"},
	{"max_connections", WF_FLAG_INT, F(max_connections), "N", "10000", NULL, 1, 1000000,
	 "open connections in all (the open-file limit is raised to fit)"},
	{"max_connections_per_client", WF_FLAG_INT, F(max_per_client), "N", "0", NULL, 0, 1000000,
	 "open connections per client address, like nginx limit_conn (0 = no limit, as behind a "
	 "load balancer)"},
	{"client_header_timeout_seconds", WF_FLAG_DOUBLE, F(header_timeout), "S", "10", NULL, 0.1,
	 86400,
	 "a request header must arrive within S of the connection or previous reply (+ idle "
	 "timeout on keep-alive)"},
	{"client_body_timeout_seconds", WF_FLAG_DOUBLE, F(body_timeout), "S", "60", NULL, 0.1,
	 86400, "a body must arrive within S of its header"},
	{"max_body_bytes_in_flight", WF_FLAG_INT, F(body_budget), "N", NULL, NULL, 1024,
	 (double)(1L << 40),
	 "request bodies held at once, with the JSON trees parsed from them; over it 503 with "
	 "Retry-After (a tree: 413 when it alone is over, else 429) (default 4 x "
	 "max_request_bytes)"},
	{"max_queue_size", WF_FLAG_INT, F(max_queue), "N", "128", NULL, 0, 1000000,
	 "inference requests waiting for a handler thread (and as many for a forward thread); "
	 "more get 429 with Retry-After at once (0 = no bound)"},
	{"retry_after_seconds", WF_FLAG_INT, F(retry_after), "S", "1", NULL, 1, 3600,
	 "Retry-After of 429/503 answers"},
	/* security */
	{"ssl_cert_file", WF_FLAG_STR, F(ssl_cert), "F", NULL, NULL, 0, 0,
	 "serve HTTPS and gRPC over TLS only, with this PEM certificate (chain) ..."},
	{"ssl_key_file", WF_FLAG_STR, F(ssl_key), "F", NULL, NULL, 0, 0, "... and key"},
	{"ssl_config_file", WF_FLAG_STR, F(ssl_config), "F", NULL, NULL, 0, 0,
	 "instead: TF Serving's SSLConfig text (server_key, server_cert: PEM strings)"},
	{"auth_token_file", WF_FLAG_STR, F(token_file), "F", NULL, NULL, 0, 0,
	 "require \"Authorization: Bearer TOKEN\" (TOKEN: F's first line; 401 otherwise) on all "
	 "but /v2/health/live and /ready (probes), and as gRPC metadata on all calls but "
	 "ServerLive/ServerReady (UNAUTHENTICATED otherwise)"},
	{"shared_memory|shared-memory", WF_FLAG_STR, F(shared_memory), "M", "none", NULL, 0, 0,
	 "who may use Triton's system shared memory (tensors passed in POSIX shared memory "
	 "instead of the request body): none, local (clients connecting from loopback) or all. "
	 "A client names an object that weft-serve then reads and writes with its own rights: "
	 "allow only clients you trust"},
	{"allow-client-shm|allow_client_shm", WF_FLAG_STR, F(allow_client_shm), "B", NULL, NULL, 0,
	 0, "Triton's form: true = --shared_memory=all, false = none"},
	/* the log */
	{"verbose", WF_FLAG_TOGGLE, F(verbose), NULL, "false", NULL, 0, 0, "debug logging"},
	{"log-verbose|log_verbose", WF_FLAG_INT, F(log_verbose), "N", "0", NULL, 0, 1000,
	 "Triton's form: N > 0 is --verbose"},
	{"log-info|log_info", WF_FLAG_TOGGLE, F(log_info), NULL, "true", NULL, 0, 0,
	 "false: no information lines"},
	{"log-warning|log_warning", WF_FLAG_TOGGLE, F(log_warning), NULL, "true", NULL, 0, 0,
	 "false with --log-info=false: errors only"},
	{"log-error|log_error", WF_FLAG_TOGGLE, F(log_error), NULL, "true", NULL, 0, 0,
	 "false with the two above: no log at all"},
	{"log-file|log_file", WF_FLAG_STR, F(log_file), "F", NULL, NULL, 0, 0,
	 "append the log to file F instead of stderr"},
	/* accepted for TF Serving and Triton command lines, ignored (--help's epilog) */
	{"enable_model_warmup", WF_FLAG_TOGGLE, NOFIELD, NULL, NULL, NULL, 0, 0, NULL},
	{"allow_version_labels_for_unavailable_models", WF_FLAG_TOGGLE, NOFIELD, NULL, NULL, NULL,
	 0, 0, NULL},
	{"tensorflow_intra_op_parallelism", WF_FLAG_STR, NOFIELD, "N", NULL, NULL, 0, 0, NULL},
	{"tensorflow_inter_op_parallelism", WF_FLAG_STR, NOFIELD, "N", NULL, NULL, 0, 0, NULL},
	{"tensorflow_session_parallelism", WF_FLAG_STR, NOFIELD, "N", NULL, NULL, 0, 0, NULL},
	{"strict-model-config", WF_FLAG_TOGGLE, NOFIELD, NULL, NULL, NULL, 0, 0, NULL},
};
#define NSETTINGS WF_ARRAY_LEN(settings)

static const wf_command_help serve_help = {
	"weft-serve (--model_base_path DIR | --model_config_file FILE |\n"
	"                  --model_repository DIR) [flags]",
	"Serves DIR/<version>/model.h5 (the highest numeric version) over HTTP: the\n"
	"TensorFlow Serving REST API (/v1/models/NAME...), the KServe v2 protocol\n"
	"(/v2/...) and Prometheus /metrics, all on one port. New versions appearing\n"
	"under DIR are loaded and warmed in the background and swapped in without\n"
	"failing a request.\n"
	"\n"
	"Input: one per model, named as the model names it (its input layer: a Keras\n"
	"model's InputLayer name) or \"input\". Numbers in :predict bodies and FP32\n"
	"tensors are the model's input after preprocessing, or raw pixels that get it\n"
	"when it is the model's own first layers (a Keras Rescaling/Normalization, as\n"
	"model.predict takes them); JPEG and PNG images ({\"b64\": ...}, BYTES) and\n"
	"UINT8 tensors are raw pixels that get the model's recorded preprocessing\n"
	"(images are also resized; PNG alpha is dropped).\n"
	"\n"
	"Flags take --flag=value or --flag value."};

static const char serve_epilog[] =
	"  --help-flags               the flags as the README's table (markdown)\n"
	"\n"
	"On SIGTERM/SIGINT readiness fails, a model load in progress stops, the port\n"
	"stops accepting, every request already received or arriving (from its\n"
	"request line on) is answered (with \"Connection: close\"), then the process\n"
	"exits, at the latest after --drain_timeout_seconds.\n"
	"TF Serving's --rest_api_timeout_in_ms sets the request timeout; accepted and\n"
	"ignored: --enable_model_warmup (always on),\n"
	"--tensorflow_{intra,inter}_op_parallelism, --tensorflow_session_parallelism,\n"
	"--allow_version_labels_for_unavailable_models.\n"
	"Accepted for Triton command lines and ignored: --strict-model-config.\n"
	"Triton's log switches set one level, the most verbose one on: --log-verbose N\n"
	"(N > 0: debug, as --verbose), --log-info, --log-warning, --log-error (each\n"
	"true by default; all false: no log).\n"
	"\n"
	"environment: WEFT_PRECISION (as --precision, which wins), WEFT_CUDNN_WORKSPACE_MB,\n"
	"and the GPU index from OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK,\n"
	"SLURM_LOCALID, LOCAL_RANK or WEFT_CUDA_DEVICE (the first set), as for weft.\n"
	"\n"
	"exit status: 0 after SIGTERM/SIGINT and a clean drain; 1 on bad flags or a\n"
	"base path that is not a directory.\n";

/* ---- the table as flags, help and markdown --------------------------------- */

/* A setting's help with its default and environment variable, into buf. */
static const char *full_help(const setting *s, char *buf, size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "%s", s->help);
	if (s->def && n < cap)
		n += (size_t)snprintf(buf + n, cap - n, " (default %s)", s->def);
	if (s->env && n < cap)
		snprintf(buf + n, cap - n, " (environment: %s)", s->env);
	return buf;
}

/* The flag parser's table of the settings, writing into o, with their help
 * texts in helps; flags[NSETTINGS + 1]. */
static void make_flags(wf_serve_options *o, wf_flag *flags, char (*helps)[1024])
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const setting *s = &settings[i];
		flags[i] = (wf_flag){
			.name = s->name,
			.kind = s->kind,
			.dst = s->off == NOFIELD ? NULL : (char *)o + s->off,
			.metavar = s->metavar,
			.help = s->help ? full_help(s, helps[i], sizeof(helps[i])) : NULL,
		};
	}
	flags[NSETTINGS] = (wf_flag){0};
}

/* Text for a markdown table cell: pipes escaped. */
static void md_cell(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', out);
		fputc(*s, out);
	}
}

/* The README's flag table: one row per listed setting. */
static void print_table(FILE *out)
{
	fputs("| flag | default | environment | what it does |\n|---|---|---|---|\n", out);
	for (size_t i = 0; i < NSETTINGS; i++) {
		const setting *s = &settings[i];
		if (!s->help)
			continue;
		fputs("| ", out);
		for (const char *a = s->name; *a;) {
			size_t len = strcspn(a, "|");
			fprintf(out, "%s`--%.*s`", a == s->name ? "" : ", ", (int)len, a);
			a += len + (a[len] == '|');
		}
		if (s->kind == WF_FLAG_TOGGLE)
			fputs(" [=true\\|false]", out);
		else if (s->metavar)
			fprintf(out, " %s", s->metavar);
		fprintf(out, " | %s%s%s | %s%s%s | ", s->def ? "`" : "", s->def ? s->def : "",
			s->def ? "`" : "", s->env ? "`" : "", s->env ? s->env : "",
			s->env ? "`" : "");
		md_cell(out, s->help);
		fputs(" |\n", out);
	}
}

/* Apply value to setting s as the flag parser would (a default, or a value
 * from the environment: both outlive o, so a string is kept as it is);
 * what names it in messages: "default", or the environment variable. */
static int apply_value(const wf_flag *flags, const setting *s, const char *value, const char *what,
		       wf_err *err)
{
	const wf_flag *f = &flags[s - settings];
	if (s->kind == WF_FLAG_STR) {
		*(const char **)f->dst = value;
		return 0;
	}
	char arg[1024];
	snprintf(arg, sizeof(arg), "--%.*s=%s", (int)strcspn(s->name, "|"), s->name, value);
	char *argv[] = {(char *)what, arg};
	wf_cli_list pos = {0};
	int rc = wf_cli_parse(&serve_help, f, 2, argv, &pos, 0, err);
	wf_cli_list_free(&pos);
	return rc;
}

/* ---- checks -------------------------------------------------------------- */

/* The ranges of the numeric settings given (an integer not given keeps
 * UNSET), each named by its first spelling. */
static int check_ranges(const wf_serve_options *o, wf_err *err)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const setting *s = &settings[i];
		if (s->lo == s->hi || s->off == NOFIELD)
			continue;
		const char *p = (const char *)o + s->off;
		int len = (int)strcspn(s->name, "|");
		if (s->kind == WF_FLAG_INT) {
			long v = *(const long *)p;
			if (v != UNSET && (v < (long)s->lo || v > (long)s->hi))
				return wf_errf(err, WF_EINVAL,
					       "flag --%.*s: %ld is not an integer in [%ld, %ld]",
					       len, s->name, v, (long)s->lo, (long)s->hi);
		} else if (s->kind == WF_FLAG_DOUBLE) {
			double v = *(const double *)p;
			if (!(v >= s->lo && v <= s->hi))
				return wf_errf(err, WF_EINVAL,
					       "flag --%.*s: %g is not a number in [%g, %g]", len,
					       s->name, v, s->lo, s->hi);
		}
	}
	return 0;
}

/* The values that must be one of a list, turned into what they name. */
static int check_choices(wf_serve_options *o, wf_err *err)
{
	if (!strcmp(o->control_mode, "none"))
		o->control = WF_SERVE_CONTROL_NONE;
	else if (!strcmp(o->control_mode, "poll"))
		o->control = WF_SERVE_CONTROL_POLL;
	else if (!strcmp(o->control_mode, "explicit"))
		o->control = WF_SERVE_CONTROL_EXPLICIT;
	else
		return wf_errf(err, WF_EINVAL,
			       "flag --model_control_mode: \"%s\" is not none, poll or explicit",
			       o->control_mode);
	if (o->allow_client_shm) {
		if (strcmp(o->allow_client_shm, "true") && strcmp(o->allow_client_shm, "false"))
			return wf_errf(err, WF_EINVAL,
				       "flag --allow-client-shm: \"%s\" is not true or false",
				       o->allow_client_shm);
		o->shared_memory = strcmp(o->allow_client_shm, "true") ? "none" : "all";
	}
	if ((o->shm_policy = wf_serve_shm_policy_parse(o->shared_memory)) < 0)
		return wf_errf(err, WF_EINVAL,
			       "flag --shared_memory: \"%s\" is not none, local or all",
			       o->shared_memory);
	if (!*o->model_name || strcspn(o->model_name, "/: ?#") != strlen(o->model_name))
		return wf_errf(err, WF_EINVAL,
			       "flag --model_name: \"%s\" must be non-empty without "
			       "'/', ':', spaces, '?' or '#'",
			       o->model_name);
	const char *prec = o->precision ? wf_backend_precision_canon(o->precision) : NULL;
	if (o->precision && !prec)
		return wf_errf(
			err, WF_EINVAL,
			"flag --precision (or WEFT_PRECISION): '%s' is not one of " WF_PRECISIONS,
			o->precision);
	o->precision = prec;
	if (o->load_models.n > 64)
		return wf_errf(err, WF_EINVAL, "more than %d --load-model flags", 64);
	if (!!o->base_path + !!o->config_file + !!o->repository != 1)
		return wf_errf(err, WF_EINVAL,
			       "give one of --model_base_path, --model_config_file or "
			       "--model_repository (see --help)");
	return 0;
}

/* The listening addresses, each an IPv4 address; Triton's per-protocol ones
 * default to --bind_address. */
static int check_addresses(wf_serve_options *o, wf_err *err)
{
	const struct {
		const char *flag;
		const char **v;
	} a[] = {
		{"--bind_address", &o->bind_address},
		{"--http-address", &o->http_address},
		{"--grpc-address", &o->grpc_address},
		{"--metrics-address", &o->metrics_address},
	};
	struct in_addr ip;
	for (size_t i = 0; i < WF_ARRAY_LEN(a); i++) {
		if (!*a[i].v)
			*a[i].v = o->bind_address;
		if (inet_pton(AF_INET, *a[i].v, &ip) != 1)
			return wf_errf(err, WF_EINVAL, "flag %s: \"%s\" is not an IPv4 address",
				       a[i].flag, *a[i].v);
	}
	return 0;
}

/* The text of the file a flag names (malloc'd); an error names the flag. */
static int flag_file(const char *flag, const char *path, char **text, size_t *len, wf_err *err)
{
	if (wf_read_file(path, text, len) != 0)
		return wf_errf(err, WF_EINVAL, "flag %s: cannot read %s", flag, path);
	return 0;
}

/* TF Serving's --batching_parameters_file and --monitoring_config_file, over
 * the flags they stand for. */
static int apply_tf_files(wf_serve_options *o, wf_err *err)
{
	char *text = NULL;
	size_t len = 0;
	wf_serve_batching_params b;
	wf_serve_monitoring m;
	int rc = 0;
	if (o->batching_file &&
	    !(rc = flag_file("--batching_parameters_file", o->batching_file, &text, &len, err))) {
		rc = wf_serve_parse_batching_parameters(text, len, &b, err);
		free(text);
		if (rc)
			return wf_err_wrap(err, "%s", o->batching_file);
		if (b.max_batch_size > 0)
			o->max_batch = b.max_batch_size;
		if (b.batch_timeout_micros >= 0)
			o->timeout_us = b.batch_timeout_micros;
		if (b.num_batch_threads > 0)
			o->batch_threads = b.num_batch_threads;
		if (b.max_enqueued_batches > 0)
			o->max_queue = WF_MIN(b.max_enqueued_batches * o->max_batch, 1000000);
		if (b.ignored[0])
			wf_warn("weft-serve: %s: fields weft-serve does not use: %s",
				o->batching_file, b.ignored);
	}
	if (!rc && o->monitoring_file &&
	    !(rc = flag_file("--monitoring_config_file", o->monitoring_file, &text, &len, err))) {
		rc = wf_serve_parse_monitoring_config(text, len, &m, err);
		free(text);
		if (rc)
			return wf_err_wrap(err, "%s", o->monitoring_file);
		if (m.path[0] && strcmp(m.path, "/monitoring/prometheus/metrics") &&
		    strcmp(m.path, "/metrics"))
			return wf_errf(err, WF_EINVAL,
				       "%s: path \"%s\": weft-serve serves Prometheus metrics at "
				       "/monitoring/prometheus/metrics and /metrics only",
				       o->monitoring_file, m.path);
		if (!m.enable)
			o->allow_metrics = 0;
	}
	return rc;
}

/* ---- resolution ----------------------------------------------------------- */

/* Handler threads a protocol may hold at most, by default: a request holds
 * one while it waits for its forward, so a few per forward thread; with
 * batching every request of the batches filling and of the next ones. */
static long handler_threads(const wf_serve_options *o)
{
	if (o->batching)
		return WF_MIN(256, WF_MAX(16, 2 * o->max_batch * o->batch_threads + 4));
	return WF_MIN(256, WF_MAX(16, 4 * o->batch_threads));
}

/* The settings that follow from others: the defaults of those not given
 * (UNSET), Triton's switches, TF Serving's millisecond timeout, the thread
 * counts from the cores. */
static void derive(wf_serve_options *o)
{
	if (o->log_verbose > 0)
		o->verbose = 1;
	if (!o->allow_metrics)
		o->metrics_port = 0;
	if (o->request_timeout_ms > 0)
		o->request_timeout = o->request_timeout_ms / 1000;
	if (!o->allow_grpc)
		o->tf_grpc_port = o->grpc_port = 0;
	if (o->port == UNSET)
		o->port = o->repository ? 8000 : 8501; /* Triton's HTTP port */
	if (o->body_budget == UNSET)
		o->body_budget = 4 * o->max_body;
	o->cores = wf_cpus_default_threads(o->busy_at_start);
	if (o->batch_threads == UNSET)
		o->batch_threads = o->batching ? 2 : WF_MIN(o->cores, 16);
	if (!o->threads)
		o->threads = WF_MAX(1, o->cores / o->batch_threads);
	if (o->http_threads == UNSET)
		o->http_threads = handler_threads(o);
	if (o->grpc_threads == UNSET)
		o->grpc_threads = handler_threads(o);
}

/* What weft-serve reads from the environment besides the table's settings,
 * as weft reads it (README, environment variables): the GPU settings and
 * the busy CPUs found before the OpenMP re-exec. */
static void resolve_env(wf_serve_options *o)
{
	static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
					    "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
					    "LOCAL_RANK", "WEFT_CUDA_DEVICE"};
	const char *v;
	for (size_t i = 0; i < WF_ARRAY_LEN(local); i++)
		if ((v = getenv(local[i])) && *v) {
			o->backend.device_index = atoi(v);
			break;
		}
	if ((v = getenv("WEFT_CUDNN_WORKSPACE_MB")) && *v)
		o->backend.workspace_mb = atol(v);
	v = getenv(WF_CPUS_BUSY_ENV); /* set by openmp_wait before the re-exec */
	o->busy_at_start = v && *v >= '0' && *v <= '9' ? atoi(v) : -1;
}

/* Every setting's field marked not given: integers UNSET, numbers NaN,
 * toggles -1, strings NULL. */
static void mark_unset(wf_serve_options *o)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		char *p = (char *)o + settings[i].off;
		if (settings[i].off == NOFIELD)
			continue;
		switch (settings[i].kind) {
		case WF_FLAG_INT: *(long *)p = UNSET; break;
		case WF_FLAG_DOUBLE: *(double *)p = NAN; break;
		case WF_FLAG_TOGGLE: *(int *)p = -1; break;
		default: break; /* strings NULL, lists empty */
		}
	}
}

static int given(const wf_serve_options *o, const setting *s)
{
	const char *p = (const char *)o + s->off;
	switch (s->kind) {
	case WF_FLAG_INT: return *(const long *)p != UNSET;
	case WF_FLAG_DOUBLE: return !isnan(*(const double *)p);
	case WF_FLAG_TOGGLE: return *(const int *)p != -1;
	case WF_FLAG_STR: return *(const char *const *)p != NULL;
	default: return 1;
	}
}

/* The settings no flag gave from their environment variable, else their
 * default. */
static int fill_unset(wf_serve_options *o, const wf_flag *flags, wf_err *err)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const setting *s = &settings[i];
		if (s->off == NOFIELD || given(o, s))
			continue;
		const char *env = s->env ? getenv(s->env) : NULL;
		int rc = env && *env ? apply_value(flags, s, env, s->env, err)
			 : s->def    ? apply_value(flags, s, s->def, "default", err)
				     : 0;
		if (rc)
			return rc;
	}
	return 0;
}

int wf_serve_options_resolve(int argc, char **argv, wf_serve_options *o, wf_err *err)
{
	static char helps[NSETTINGS][1024];
	wf_flag flags[NSETTINGS + 1];
	*o = (wf_serve_options){0};
	mark_unset(o);
	make_flags(o, flags, helps);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help-flags")) {
			print_table(stdout);
			return 1;
		}
	wf_cli_list pos = {0};
	char *cmd = argv[0];
	argv[0] = "weft-serve"; /* messages name the program, not its path */
	int rc = wf_cli_parse(&serve_help, flags, argc, argv, &pos, 0, err);
	argv[0] = cmd;
	wf_cli_list_free(&pos);
	if (rc == 1)
		fputs(serve_epilog, stdout);
	if (rc)
		return rc;
	o->tf_grpc_default = o->tf_grpc_port == UNSET;
	o->grpc_default = o->grpc_port == UNSET;
	resolve_env(o);
	if (!(rc = fill_unset(o, flags, err)) && !(rc = check_ranges(o, err)) &&
	    !(rc = check_choices(o, err)) && !(rc = check_addresses(o, err)) &&
	    !(rc = apply_tf_files(o, err)))
		derive(o);
	return rc;
}

void wf_serve_options_free(wf_serve_options *o)
{
	wf_cli_list_free(&o->load_models);
}
