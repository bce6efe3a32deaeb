/* options.h: weft-serve's settings. One table names every flag with its
 * other spellings, its default (written once, as a flag value), the
 * environment variable that may set it, its range and its help; --help and
 * the README's flag table (--help-flags) are printed from it. Settings are
 * resolved once, defaults < environment < flags, then what follows from
 * them (the ports, thread counts), and handed down in option structs. */
#ifndef WF_SERVE_OPTIONS_H
#define WF_SERVE_OPTIONS_H

#include "common/error.h"
#include "common/flags.h"
#include "kernels/kernels.h"

#include <stdio.h>

typedef struct wf_serve_options {
	long port; /* HTTP; 8501, or Triton's 8000 with a repository */
	const char *bind_address;
	/* Triton's per-protocol addresses (resolved: bind_address when not given) */
	const char *http_address, *grpc_address, *metrics_address;
	int allow_http, allow_grpc, allow_metrics; /* Triton's --allow-*: 0 closes the ports */
	const char *model_name;
	const char *base_path;
	double poll_seconds;
	int batching;
	long max_batch;
	long timeout_us;
	long batch_threads; /* forward threads */
	const char *device;
	const char *precision; /* WF_PRECISIONS, canonical; NULL: each model file's, else fp32 */
	long threads;	       /* compute threads per forward thread */
	long max_body;
	double request_timeout;
	double request_timeout_ms; /* --rest_api_timeout_in_ms; 0: not given */
	long idle_timeout;
	double drain_timeout;
	int verbose;
	long log_verbose;		      /* Triton's --log-verbose N: verbose when N > 0 */
	int log_info, log_warning, log_error; /* Triton's --log-*: the most verbose on wins */
	const char *log_file;		      /* --log-file: the log goes there, appended */
	long max_image_pixels;		      /* 0: the image module's default */
	/* hardening: connections, memory, overload, TLS and token */
	long http_threads; /* handler threads at most */
	long max_connections;
	long max_per_client;
	double header_timeout;
	double body_timeout;
	long body_budget; /* bytes */
	long max_queue;
	long retry_after;
	const char *ssl_cert, *ssl_key, *ssl_config, *token_file;
	/* many models and the TF Serving / Triton command lines */
	const char *config_file;	   /* --model_config_file */
	double config_poll_seconds;	   /* --model_config_file_poll_wait_seconds */
	const char *repository;		   /* --model_repository, --model-repository */
	const char *control_mode;	   /* --model_control_mode none|poll|explicit */
	int control;			   /* wf_serve_control */
	wf_cli_list load_models;	   /* --load-model (repeatable) */
	long load_threads;		   /* --model-load-thread-count: models loaded at once */
	long load_retries;		   /* TF Serving's --max_num_load_retries */
	long load_retry_us;		   /* --load_retry_interval_micros */
	const char *batching_file;	   /* --batching_parameters_file */
	const char *monitoring_file;	   /* --monitoring_config_file */
	int cors;			   /* --rest_api_enable_cors_support */
	long tf_grpc_port;		   /* --port: TF Serving's gRPC port; 0: off */
	long grpc_port;			   /* --grpc_port, --grpc-port: KServe v2 gRPC; 0: off */
	int tf_grpc_default, grpc_default; /* that port was not given (in use: skipped) */
	long grpc_max_message;
	long grpc_threads;	      /* handler threads per gRPC API at most */
	long metrics_port;	      /* --metrics-port: /metrics on its own port too; 0: off */
	const char *shared_memory;    /* --shared_memory none|local|all (shm.h) */
	const char *allow_client_shm; /* Triton's --allow-client-shm true|false: all|none */
	int shm_policy;
	/* from the environment, as weft reads them (README, environment variables) */
	wf_backend_opts backend; /* GPU index, cuDNN workspace */
	int busy_at_start;	 /* CPUs found busy at start (WF_CPUS_BUSY_ENV); -1: not known */
	long cores;		 /* CPUs this process may use (affinity, quota, busy ones) */
} wf_serve_options;

/* Resolve o from the defaults, the environment and argv: 0 to run, 1 when
 * --help or --help-flags was printed, or WF_EINVAL naming the flag and the
 * value. Free o with wf_serve_options_free either way. */
int wf_serve_options_resolve(int argc, char **argv, wf_serve_options *o, wf_err *err);
void wf_serve_options_free(wf_serve_options *o);

#endif
