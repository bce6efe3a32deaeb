/* config.h: the training config (docs/formats.md): one JSON file, every key
 * with a default, `--set a.b=v` overrides, and errors that name the full key
 * path. The schema is one table in config.c, which also prints the reference
 * (`weft train --help-config`). */
#ifndef WF_CONFIG_H
#define WF_CONFIG_H

#include "common/error.h"
#include "kernels/kernels.h"
#include "model/optim.h"
#include "ps/proto.h"

#include <jansson.h>
#include <stdio.h>

#define WF_CFG_PATH_MAX 1024

typedef struct wf_config {
	struct {
		char name[64];
		long classes;		     /* 0: from the data file */
		char input_shape[32];	     /* "H,W,C"; "": from the data file */
		char kernel_initializer[32]; /* auto (as Keras builds the model) or a Keras name */
		double bn_momentum;	     /* 0: the model's own */
		double alpha;		     /* mobilenetv2 width */
		char init_from[WF_CFG_PATH_MAX]; /* weft model, checkpoint dir or Keras .h5 */
		char freeze[1024];		 /* comma-separated prefixes, or "backbone" */
	} model;
	struct {
		char train[WF_CFG_PATH_MAX];
		char eval[WF_CFG_PATH_MAX]; /* "" = no evaluation */
		int augment;		    /* the boolean form: crop + flip */
		long crop_padding;	    /* pixels */
		long memory_mb;		    /* image bytes loaded at open (MiB) */
		struct {		    /* the object form: data.augment.* */
			int flip, crop, random_resized_crop;
			double scale_min, scale_max, ratio_min, ratio_max;
			double brightness, contrast, saturation;
		} aug;
	} data;
	struct {
		long batch_size; /* per worker, per micro-batch */
		long steps;
		long seed;
		long eval_every_steps; /* 0: only at the end */
		long threads;	       /* 0: library default */
		char device[16];       /* cpu, ref, cuda, auto */
		long accumulate;       /* micro-batches per step */
		double label_smoothing;
		double divergence_factor; /* stop when loss > factor x first loss; 0: off */
		char precision[16];	  /* WF_PRECISIONS but int8 (kernels.h), one spelling */
		long cuda_device;	  /* GPU without a launcher local rank */
		long cudnn_workspace_mb;
	} train;
	struct {
		char name[16]; /* sgd, adam, adamw */
		double lr, momentum;
		int nesterov;
		double beta1, beta2, epsilon, weight_decay;
		double clipnorm, global_clipnorm, clipvalue; /* 0: off (Keras None) */
		struct {
			char name[16]; /* constant, step, cosine */
			long warmup_steps, decay_steps;
			double decay_rate, min_lr;
		} schedule;
	} optimizer;
	struct {
		char name[32];		/* local, parameter_server, allreduce */
		char mode[16];		/* sync, async, ssp:K */
		long staleness;		/* K of ssp:K, 0 otherwise (derived) */
		long backup_workers;	/* sync parameter_server: steps complete without the
					 * last B workers' pushes; 0: none */
		long min_workers;	/* sync parameter_server: elastic membership; 0: off */
		char elastic_lr[16];	/* linear, fixed */
		char elastic_batch[16]; /* worker, global (elastic allreduce) */
		double elastic_timeout; /* seconds with fewer than min_workers; 0: for ever */
		double bucket_mb;
		int debug_host_copy; /* elastic allreduce: the GPU path's host copy on CPUs */
		double stall_timeout, rendezvous_timeout; /* allreduce, seconds */
		char elastic_service[256]; /* elastic allreduce: the membership service's
					    * "host:port" */
		long commit_every;	   /* elastic allreduce: steps between commits */
		int layer_ready; /* the next forward starts layer by layer as its values land */
	} strategy;
	struct {
		char dir[WF_CFG_PATH_MAX];
		long every_steps; /* 0: only at the end */
		long keep;
	} checkpoint;
	struct {
		char dir[WF_CFG_PATH_MAX];
		long every_steps;
		char events[WF_CFG_PATH_MAX]; /* "": no event file */
	} log;
	struct {
		char dir[WF_CFG_PATH_MAX];
	} export_;
	struct {
		char key_dir[WF_CFG_PATH_MAX]; /* CURVE key files (WEFT_KEY_DIR); "": none */
		int insecure;		       /* plain TCP, no authentication */
		int malloc_tune;	       /* ps receive buffers kept warm in the heap */
	} cluster;
	struct { /* parameter_server tuning (the WEFT_PS_* variables) */
		long chunk_bytes;
		long replicas;		/* servers that keep each chunk */
		char compression[32];	/* none, bf16, topk:F */
		wf_ps_compression comp; /* compression parsed (derived) */
		double topk;		/* topk:F's F, the fraction a push keeps (derived) */
		long priority_kb;	/* priority by layer: KiB in flight per server; 0 off */
		double timeout, connect_timeout, server_timeout;      /* worker, seconds */
		double heartbeat_timeout, stall_timeout, stats_every; /* server, seconds */
		char debug_stall[64]; /* "rank:step:seconds"; "": off */
		char debug_slow[64];  /* "rank:factor"; "": off */
		wf_ps_mode mode;      /* strategy.mode parsed (derived) */
	} ps;
} wf_config;

/* Every key at its default. */
void wf_config_default(wf_config *c);
/* Merge a JSON file into c. Syntax errors name file:line:column; unknown
 * keys and wrong types name the key path. Does not validate values. */
int wf_config_load_file(wf_config *c, const char *path, wf_err *err);
/* What every command taking --config/--set does: defaults, then the file,
 * then the environment variables of the keys that have one (a malformed
 * value is a warning and keeps the file's), then each "a.b=value" of
 * sets[0..nsets) in order: flag > environment > file > default. */
int wf_config_load(wf_config *c, const char *path, const char *const *sets, int nsets, wf_err *err);
/* Merge a JSON document given as text (origin names it in errors). */
int wf_config_load_string(wf_config *c, const char *text, const char *origin, wf_err *err);
/* Apply one "a.b=value" override (value parsed as JSON when it parses,
 * else taken as a string). */
int wf_config_set(wf_config *c, const char *assignment, wf_err *err);
/* model.input_shape: 1 and *h, *w, *c when set, 0 when empty, -1 when malformed. */
int wf_config_input_shape(const wf_config *c, int *h, int *w, int *ch);
/* Check values (ranges, names, required keys); fills derived fields. Does not
 * touch the file system. */
int wf_config_validate(wf_config *c, wf_err *err);
/* The checks that need the job's number of training workers (chief and
 * workers): strategy.backup_workers < workers, strategy.min_workers <= workers. */
int wf_config_check_workers(const wf_config *c, int workers, wf_err *err);
/* ps.debug_slow "rank:factor": *factor for this rank, 1 when it names another. */
double wf_config_slow_factor(const wf_config *c, int rank);
/* Defaults + text + validate: what the fuzz target drives. */
int wf_config_parse_string(wf_config *c, const char *text, wf_err *err);
/* The resolved config as a JSON object (every key); caller decrefs. */
json_t *wf_config_to_json(const wf_config *c);
/* Write the resolved config to path (pretty JSON). */
int wf_config_write(const wf_config *c, const char *path, wf_err *err);
/* The optimizer settings as optim.h wants them (total_steps = train.steps). */
void wf_config_optim(const wf_config *c, wf_optim_cfg *o);
/* Print the key reference (markdown table: key, type, default, environment
 * variable, meaning). */
void wf_config_print_reference(FILE *out);
/* Print every environment variable weft reads (markdown table: variable,
 * key, default, meaning): the keys' column and the process identity a
 * launcher sets. */
void wf_config_print_env_reference(FILE *out);
/* The backend settings: threads, precision, workspace, and the GPU: the
 * launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID, LOCAL_RANK) when set, else train.cuda_device. */
void wf_config_backend_opts(const wf_config *c, wf_backend_opts *o);
/* The process-wide settings of the libraries (data.memory_mb,
 * cluster.malloc_tune); main calls it with wf_config_from_env's, a command
 * again once it has its config. */
void wf_config_apply_process(const wf_config *c);
/* Defaults, then the environment: the settings of commands without --config. */
void wf_config_from_env(wf_config *c);
/* Unless OMP_WAIT_POLICY or GOMP_SPINCOUNT already say, set OpenMP's wait
 * for this machine (wf_cpus_openmp_wait_env) and WF_CPUS_BUSY_ENV, and
 * execute the program again so the OpenMP runtime sees them. Call first in
 * main; returns when nothing had to be done or the re-exec failed. */
void wf_config_openmp_wait(char **argv);
/* wf_cpus_default_threads with the busy CPUs found at start
 * (WF_CPUS_BUSY_ENV) when the wait choice above set it, else sampled now. */
int wf_config_default_threads(void);

#endif
