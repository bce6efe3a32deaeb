#include "trainer/config.h"

#include "common/cpus.h"
#include "common/json.h"
#include "common/log.h"
#include "model/model.h"
#include "trainer/cluster.h"
#include "ps/client.h"
#include "ps/placement.h"
#include "ps/proto.h"
#include "ps/server.h"
#include "worker/data.h"
#include "worker/exchange_mpi.h"
#include "worker/rendezvous.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- the schema -------------------------------------------------------- */

typedef enum { T_STR, T_INT, T_NUM, T_BOOL } key_type;

typedef struct key_def {
	const char *path; /* "optimizer.schedule.name" */
	key_type type;
	size_t offset;	 /* into wf_config */
	size_t size;	 /* strings: buffer bytes */
	const char *def; /* default, as JSON text */
	const char *doc; /* one line for the reference */
} key_def;

#define F(field) offsetof(wf_config, field), sizeof(((wf_config *)0)->field)
#define STR_(x)	 #x
#define STR(x)	 STR_(x) /* a library's default macro as the key's default text */

static const key_def keys[] = {
	{"model.name", T_STR, F(model.name), "\"smallcnn\"",
	 "model from the zoo (`weft train --help` lists them)"},
	{"model.classes", T_INT, F(model.classes), "0",
	 "number of classes; 0 takes it from the train data, otherwise it must match the data"},
	{"model.input_shape", T_STR, F(model.input_shape), "\"\"",
	 "[H, W, C] of the input images, as Keras' input_shape; with model.classes the "
	 "parameter servers build the model without reading data.train; empty: from the data, "
	 "otherwise it must match the data"},
	{"data.train", T_STR, F(data.train), "\"\"", "training dataset file (required)"},
	{"data.eval", T_STR, F(data.eval), "\"\"", "evaluation dataset file; empty: no evaluation"},
	{"data.augment", T_BOOL, F(data.augment), "false",
	 "true: random crop (after zero padding) and horizontal flip of training images; or an "
	 "object of the data.augment.* switches below"},
	{"data.crop_padding", T_INT, F(data.crop_padding), STR(WF_READER_PAD_DEFAULT),
	 "zero padding in pixels before the random crop"},
	{"data.augment.flip", T_BOOL, F(data.aug.flip), "false", "random horizontal flip"},
	{"data.augment.crop", T_BOOL, F(data.aug.crop), "false",
	 "random crop after zero padding of data.crop_padding pixels"},
	{"data.augment.random_resized_crop", T_BOOL, F(data.aug.random_resized_crop), "false",
	 "random resized crop (torchvision RandomResizedCrop) back to the stored size"},
	{"data.augment.scale_min", T_NUM, F(data.aug.scale_min), STR(WF_READER_RRC_SCALE_MIN),
	 "random resized crop: smallest area fraction"},
	{"data.augment.scale_max", T_NUM, F(data.aug.scale_max), STR(WF_READER_RRC_SCALE_MAX),
	 "random resized crop: largest area fraction"},
	{"data.augment.ratio_min", T_NUM, F(data.aug.ratio_min), STR(WF_READER_RRC_RATIO_MIN),
	 "random resized crop: smallest aspect ratio (width / height)"},
	{"data.augment.ratio_max", T_NUM, F(data.aug.ratio_max), STR(WF_READER_RRC_RATIO_MAX),
	 "random resized crop: largest aspect ratio"},
	{"data.augment.brightness", T_NUM, F(data.aug.brightness), "0",
	 "brightness jitter x: factor from [max(0, 1-x), 1+x]; 0: off"},
	{"data.augment.contrast", T_NUM, F(data.aug.contrast), "0",
	 "contrast jitter (blend with the mean gray level), as brightness"},
	{"data.augment.saturation", T_NUM, F(data.aug.saturation), "0",
	 "saturation jitter (blend with each pixel's gray level), as brightness"},
	{"train.batch_size", T_INT, F(train.batch_size), "64",
	 "samples per micro-batch, per worker"},
	{"train.steps", T_INT, F(train.steps), "1000", "optimizer steps in the whole run"},
	{"train.seed", T_INT, F(train.seed), "1",
	 "seed of initialisation, data order, augmentation and dropout"},
	{"train.eval_every_steps", T_INT, F(train.eval_every_steps), "0",
	 "evaluate every N steps; 0: only at the end"},
	{"train.threads", T_INT, F(train.threads), "0", "CPU threads; 0: library default"},
	{"train.device", T_STR, F(train.device), "\"auto\"",
	 "kernel backend: cpu, ref, cuda or auto (cuda when usable, else cpu)"},
	{"train.accumulate", T_INT, F(train.accumulate), "1",
	 "micro-batches summed before each optimizer step"},
	{"train.precision", T_STR, F(train.precision), "\"fp32\"",
	 "compute precision of the training plans, as --precision everywhere (master weights, "
	 "optimizer state and sums stay fp32): fp32; bf16 (the tensors between a conv, its batch "
	 "norm and the next conv or add stay bf16 too); tf32 or fp16 (the cuda device's); auto "
	 "(bf16 where native, else fp32); float32, bfloat16, float16 are accepted for fp32, bf16, "
	 "fp16; one the device lacks trains in fp32 with a notice; int8 is an error (inference "
	 "only)"},
	{"optimizer.name", T_STR, F(optimizer.name), "\"sgd\"", "sgd, adam or adamw"},
	{"optimizer.lr", T_NUM, F(optimizer.lr), STR(WF_OPTIM_LR_DEFAULT), "base learning rate"},
	{"optimizer.momentum", T_NUM, F(optimizer.momentum), STR(WF_OPTIM_MOMENTUM_DEFAULT),
	 "SGD momentum; 0: plain SGD"},
	{"optimizer.nesterov", T_BOOL, F(optimizer.nesterov), "false", "SGD Nesterov momentum"},
	{"optimizer.beta1", T_NUM, F(optimizer.beta1), STR(WF_OPTIM_BETA1_DEFAULT),
	 "Adam/AdamW first moment decay"},
	{"optimizer.beta2", T_NUM, F(optimizer.beta2), STR(WF_OPTIM_BETA2_DEFAULT),
	 "Adam/AdamW second moment decay"},
	{"optimizer.epsilon", T_NUM, F(optimizer.epsilon), STR(WF_OPTIM_EPSILON_DEFAULT),
	 "Adam/AdamW epsilon"},
	{"optimizer.weight_decay", T_NUM, F(optimizer.weight_decay), "0",
	 "L2 added to the gradient (SGD, Adam); decoupled decay (AdamW)"},
	{"optimizer.schedule.name", T_STR, F(optimizer.schedule.name), "\"constant\"",
	 "learning-rate schedule: constant, step or cosine"},
	{"optimizer.schedule.warmup_steps", T_INT, F(optimizer.schedule.warmup_steps), "0",
	 "linear warm-up from 0 to lr over this many steps"},
	{"optimizer.schedule.decay_steps", T_INT, F(optimizer.schedule.decay_steps), "0",
	 "step: multiply lr by decay_rate every decay_steps steps"},
	{"optimizer.schedule.decay_rate", T_NUM, F(optimizer.schedule.decay_rate),
	 STR(WF_OPTIM_DECAY_RATE_DEFAULT), "step: the factor applied every decay_steps"},
	{"optimizer.schedule.min_lr", T_NUM, F(optimizer.schedule.min_lr), "0",
	 "cosine: the learning rate reached at the last step"},
	{"strategy.name", T_STR, F(strategy.name), "\"local\"",
	 "local, parameter_server or allreduce"},
	{"strategy.mode", T_STR, F(strategy.mode), "\"sync\"",
	 "parameter_server: sync, async or ssp:K (at most K steps ahead)"},
	{"strategy.backup_workers", T_INT, F(strategy.backup_workers), "0",
	 "parameter_server, mode sync: a step completes once all but this many workers pushed "
	 "(backup workers, as TensorFlow's SyncReplicasOptimizer with replicas_to_aggregate = "
	 "workers - B); later pushes are dropped and their batches trained again in the same "
	 "epoch; 0 <= B < workers; 0: every worker, every step"},
	{"strategy.min_workers", T_INT, F(strategy.min_workers), "0",
	 "parameter_server (mode sync) and allreduce: elastic membership: workers may join "
	 "(start one with its TF_CONFIG index) and leave (SIGTERM: it leaves for good) a "
	 "running job, which goes on while at least this many of the cluster's workers are "
	 "alive; no sample of an epoch is lost (the servers hand out the data; allreduce "
	 "commits the data position with the model); allreduce then runs over a TCP ring "
	 "formed by the service of strategy.elastic_service; 0: not elastic (every worker is "
	 "awaited)"},
	{"strategy.elastic_service", T_STR, F(strategy.elastic_service), "\"\"",
	 "allreduce with strategy.min_workers: host:port of the membership service (`weft "
	 "launch --elastic` runs one and sets it; on Kubernetes, the `weft membership` pod)"},
	{"strategy.commit_every", T_INT, F(strategy.commit_every), "1",
	 "elastic allreduce: steps between in-memory commits of the state a failure rolls "
	 "back to (a failure repeats at most this many steps); joins and leaves commit too"},
	{"strategy.elastic_lr", T_STR, F(strategy.elastic_lr), "\"linear\"",
	 "elastic: linear keeps the per-worker batch and scales the learning rate by the "
	 "step's workers / the cluster's workers (the update is the sum of the step's "
	 "gradients / the cluster's workers); fixed keeps the learning rate (the update is "
	 "the mean over the step's workers)"},
	{"strategy.elastic_batch", T_STR, F(strategy.elastic_batch), "\"worker\"",
	 "elastic: worker keeps each worker's batch, so the step's global batch is the "
	 "workers present x train.batch_size x train.accumulate (strategy.elastic_lr sets "
	 "the learning rate); global keeps the global batch of all the cluster's workers: "
	 "every step trains that many micro-batches (allreduce) or data units (sync "
	 "parameter_server, without backup workers), shared among the "
	 "workers present (a worker trains more of them by accumulation while others are "
	 "missing), and the update is their mean whoever trained them"},
	{"strategy.elastic_timeout", T_NUM, F(strategy.elastic_timeout), "600",
	 "elastic: seconds the job waits with fewer than strategy.min_workers alive before it "
	 "fails for good; 0: wait for ever"},
	{"strategy.bucket_mb", T_NUM, F(strategy.bucket_mb), "25",
	 "allreduce: gradient bucket size in MiB"},
	{"strategy.debug_host_copy", T_BOOL, F(strategy.debug_host_copy), "false",
	 "elastic allreduce: sum a host copy of the gradient and pass the state's broadcasts "
	 "through it on every device, as on a GPU (tests of the GPU path on CPUs; not for "
	 "production); false: on GPUs only"},
	{"strategy.layer_ready", T_BOOL, F(strategy.layer_ready), "false",
	 "parameter_server (sync, without backup workers or elastic membership) and allreduce "
	 "(MPI, without gradient clipping), on CPUs: the next step's forward starts layer by "
	 "layer as each layer's new parameters land (parameter servers: their chunks' replies; "
	 "allreduce: their buckets, started first layers first among those backward completes "
	 "together and updated bucket by bucket) instead of after the last; with parameter "
	 "servers it pays only with ps.priority_kb. Results are unchanged"},
	{"checkpoint.dir", T_STR, F(checkpoint.dir), "\"run/ckpt\"",
	 "directory of the step-N checkpoint directories"},
	{"checkpoint.every_steps", T_INT, F(checkpoint.every_steps), "0",
	 "checkpoint every N steps; 0: only at the end (and on SIGINT/SIGTERM)"},
	{"checkpoint.keep", T_INT, F(checkpoint.keep), "3",
	 "complete checkpoints kept (from 2 on, the newest one a later healthy loss "
	 "confirmed among them)"},
	{"log.dir", T_STR, F(log.dir), "\"run/logs\"",
	 "metrics.jsonl, TensorBoard events and the resolved config.json"},
	{"log.every_steps", T_INT, F(log.every_steps), "10", "log metrics every N steps"},
	{"log.events", T_STR, F(log.events), "\"\"",
	 "append machine-readable events (one JSON object per line; see Events) to this "
	 "file, shared by every process of the job; empty: none"},
	{"export.dir", T_STR, F(export_.dir), "\"\"",
	 "at the end of training, export the model as the next version under this "
	 "BASE/NAME directory (weft-serve's --model_base_path); empty: no export"},
	{"cluster.key_dir", T_STR, F(cluster.key_dir), "\"\"",
	 "parameter_server (CURVE) and allreduce over NCCL through the TF_CONFIG chief (the "
	 "id hand-out): directory of the key files (`weft keygen`); empty: none (`weft "
	 "launch` makes its own)"},
	{"cluster.insecure", T_BOOL, F(cluster.insecure), "false",
	 "plain TCP without keys: anyone who reaches a parameter server's port can read and "
	 "overwrite the model, or the NCCL chief's port get the job's NCCL id"},
	/* training that does what Keras does */
	{"model.kernel_initializer", T_STR, F(model.kernel_initializer), "\"auto\"",
	 "conv and dense kernels: auto (as Keras builds the model: glorot_uniform, "
	 "he_normal for nasnet), glorot_uniform, glorot_normal, he_normal, he_uniform, "
	 "lecun_normal or lecun_uniform"},
	{"model.bn_momentum", T_NUM, F(model.bn_momentum), "0",
	 "batch-norm moving-average momentum (Keras `momentum`); 0: the model's own"},
	{"model.alpha", T_NUM, F(model.alpha), "1",
	 "mobilenetv2: width multiplier (0.35, 0.5, 0.75, 1.0, 1.3, 1.4)"},
	{"model.init_from", T_STR, F(model.init_from), "\"\"",
	 "start from this weft model file, checkpoint directory (its newest complete step) or "
	 "Keras .h5/.keras: every layer whose name and shapes match is copied, the rest is listed "
	 "and starts fresh; the output layer's rows are taken by class name (classes in another "
	 "order, a subset, a partial overlap: classes the source lacks start fresh)"},
	{"model.freeze", T_STR, F(model.freeze), "\"\"",
	 "layers not trained (Keras trainable=False; their batch norms in inference mode): "
	 "a list (or comma-separated string) of layer-name prefixes, or \"backbone\" = every "
	 "layer model.init_from initialised (without it: all but the last layer)"},
	{"optimizer.clipnorm", T_NUM, F(optimizer.clipnorm), "0",
	 "clip each parameter's gradient to this L2 norm (Keras clipnorm); 0: off"},
	{"optimizer.global_clipnorm", T_NUM, F(optimizer.global_clipnorm), "0",
	 "clip all gradients together to this global L2 norm (Keras global_clipnorm); 0: off"},
	{"optimizer.clipvalue", T_NUM, F(optimizer.clipvalue), "0",
	 "clip every gradient element to [-v, v] (Keras clipvalue); 0: off"},
	{"train.label_smoothing", T_NUM, F(train.label_smoothing), "0",
	 "cross-entropy against (1 - s) * one-hot + s / classes (Keras label_smoothing)"},
	{"train.divergence_factor", T_NUM, F(train.divergence_factor), "10",
	 "stop (exit 2, as a bad setting) when a step's loss exceeds this many times the first "
	 "step's loss, or is not finite; 0: only the non-finite check"},
	/* settings the libraries once read from the environment */
	{"train.cuda_device", T_INT, F(train.cuda_device), "0",
	 "cuda: the GPU (modulo the GPUs present) when the launcher sets no local rank "
	 "(OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK: "
	 "that picks it then)"},
	{"train.cudnn_workspace_mb", T_INT, F(train.cudnn_workspace_mb),
	 STR(WF_CUDNN_WORKSPACE_MB_DEFAULT),
	 "cuda: MiB of workspace cuDNN's algorithm search may use; <= 0: the default"},
	{"data.memory_mb", T_INT, F(data.memory_mb), STR(WF_DATA_MEMORY_MB_DEFAULT),
	 "a dataset's image bytes up to this many MiB are loaded into memory at open, larger "
	 "ones are read per batch; 0: always per batch"},
	{"strategy.stall_timeout", T_NUM, F(strategy.stall_timeout),
	 STR(WF_MPI_STALL_TIMEOUT_DEFAULT),
	 "allreduce: seconds a rank waits for its peers in one collective before naming the "
	 "missing ranks and exiting 138; <= 0: the default"},
	{"strategy.rendezvous_timeout", T_NUM, F(strategy.rendezvous_timeout),
	 STR(WF_RDV_TIMEOUT_DEFAULT),
	 "allreduce over NCCL with TF_CONFIG: seconds the chief waits for every rank to "
	 "fetch the NCCL id (and a rank for the chief); <= 0: the default"},
	{"cluster.malloc_tune", T_BOOL, F(cluster.malloc_tune), "true",
	 "parameter_server: keep receive buffers warm in the heap (glibc mallopt); false "
	 "(or 0 in the environment) turns it off"},
	/* the parameter server's tuning, once read by trainer/role.c */
	{"ps.chunk_bytes", T_INT, F(ps.chunk_bytes), STR(WF_PS_CHUNK_BYTES_JOB_DEFAULT),
	 "parameter_server: chunk size cap in bytes (>= 1024; servers and workers must agree)"},
	{"ps.replicas", T_INT, F(ps.replicas), "1",
	 "parameter_server: servers that keep each chunk (1 <= R <= ps tasks); with 2 or more a "
	 "killed server costs no rollback: its backup takes over (docs/promises.md)"},
	{"ps.compression", T_STR, F(ps.compression), "\"none\"",
	 "parameter_server: how pushes carry the gradient: none (fp32), bf16 (half the bytes, "
	 "rounded to nearest even) or topk:F with 0 < F <= 1 (each chunk's fraction F of entries "
	 "of largest magnitude as index + fp32 value, 2F of the bytes; each worker adds what it "
	 "did not send to its next gradient); the servers sum and keep fp32, replies stay fp32; "
	 "servers and workers must agree on the kind"},
	{"ps.priority_kb", T_INT, F(ps.priority_kb), "0",
	 "parameter_server, sync: priority by layer: each worker hands its pushes to ZeroMQ "
	 "only while fewer than this many KiB to their server wait there (and as many unsent "
	 "in the kernel: TCP_NOTSENT_LOWAT), in the backward's order until the whole gradient "
	 "is in, then the first layers' chunks first; the servers answer the chunks completed "
	 "together first layers first; 0: off. Results are unchanged"},
	{"ps.timeout", T_NUM, F(ps.timeout), STR(WF_PS_TIMEOUT_DEFAULT),
	 "parameter_server worker: seconds to wait for a reply"},
	{"ps.connect_timeout", T_NUM, F(ps.connect_timeout), STR(WF_PS_CONNECT_TIMEOUT_DEFAULT),
	 "parameter_server worker: seconds to wait for the servers to come up"},
	{"ps.server_timeout", T_NUM, F(ps.server_timeout), STR(WF_PS_SERVER_TIMEOUT_DEFAULT),
	 "parameter_server worker: seconds of heartbeat silence after which a server is gone"},
	{"ps.heartbeat_timeout", T_NUM, F(ps.heartbeat_timeout),
	 STR(WF_PS_HEARTBEAT_TIMEOUT_DEFAULT),
	 "ps server: seconds of worker silence after which it is dead (`weft ps "
	 "--heartbeat-timeout`); 0: never"},
	{"ps.stall_timeout", T_NUM, F(ps.stall_timeout), STR(WF_PS_STALL_TIMEOUT_DEFAULT),
	 "ps server: seconds a sync step waits before the server names the workers it waits for "
	 "(`weft ps --stall-timeout`); 0: no reports"},
	{"ps.stats_every", T_NUM, F(ps.stats_every), STR(WF_PS_STATS_EVERY_DEFAULT),
	 "ps server: seconds between stats lines (`weft ps --stats-every`); 0: none"},
	{"ps.debug_stall", T_STR, F(ps.debug_stall), "\"\"",
	 "\"rank:step:seconds\": that worker sleeps once, before pushing that step or the first "
	 "one after it (tests of stall "
	 "reports; not for production); empty: never"},
	{"ps.debug_slow", T_STR, F(ps.debug_slow), "\"\"",
	 "\"rank:factor\": that parameter_server worker takes factor times as long per step (it "
	 "sleeps factor - 1 times its compute time before pushing): a straggler to try "
	 "strategy.backup_workers on; empty: none"},
};

/* The environment column of the table: the variable that sets a key
 * (precedence: flag > environment > config file > default). Every variable
 * weft reads is either here or in env_only below. */
static const struct {
	const char *path, *env;
} key_env[] = {
	{"train.precision", "WEFT_PRECISION"},
	{"log.events", "WEFT_EVENTS"},
	{"train.cuda_device", "WEFT_CUDA_DEVICE"},
	{"train.cudnn_workspace_mb", "WEFT_CUDNN_WORKSPACE_MB"},
	{"data.memory_mb", "WEFT_DATA_MEMORY_MB"},
	{"strategy.min_workers", "WEFT_MIN_WORKERS"},
	{"strategy.elastic_service", "WEFT_ELASTIC_SERVICE"},
	{"strategy.layer_ready", "WEFT_LAYER_READY"},
	{"strategy.elastic_timeout", "WEFT_ELASTIC_TIMEOUT"},
	{"strategy.stall_timeout", "WEFT_STALL_TIMEOUT"},
	{"strategy.rendezvous_timeout", "WEFT_RENDEZVOUS_TIMEOUT"},
	{"cluster.malloc_tune", "WEFT_PS_MALLOC_TUNE"},
	{"ps.chunk_bytes", "WEFT_PS_CHUNK_BYTES"},
	{"ps.replicas", "WEFT_PS_REPLICAS"},
	{"ps.compression", "WEFT_PS_COMPRESSION"},
	{"ps.priority_kb", "WEFT_PS_PRIORITY_KB"},
	{"ps.timeout", "WEFT_PS_TIMEOUT"},
	{"ps.connect_timeout", "WEFT_PS_CONNECT_TIMEOUT"},
	{"ps.server_timeout", "WEFT_PS_SERVER_TIMEOUT"},
	{"ps.heartbeat_timeout", "WEFT_PS_HEARTBEAT_TIMEOUT"},
	{"ps.stall_timeout", "WEFT_PS_STALL_TIMEOUT"},
	{"ps.stats_every", "WEFT_PS_STATS_EVERY"},
	{"ps.debug_stall", "WEFT_PS_DEBUG_STALL"},
	{"ps.debug_slow", "WEFT_PS_DEBUG_SLOW"},
	{"cluster.key_dir", "WEFT_KEY_DIR"},
};

/* Environment variables that are not config keys: the process identity a
 * launcher (mpirun, Kubernetes, `weft launch`) sets, and debugging hooks.
 * trainer/ reads them (cluster.c, role.c, strategy.c, launch.c, commands.c,
 * cmd_tfconfig.c); they are listed here so that the README names every
 * variable weft reads. */
typedef struct env_def {
	const char *name, *def, *doc;
} env_def;

static const env_def env_only[] = {
	{"TF_CONFIG", "",
	 "the cluster and this task (TensorFlow's JSON); `weft tfconfig` shows it"},
	{"OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE", "",
	 "rank and size under mpirun (Open MPI); a cluster without TF_CONFIG"},
	{"OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK", "",
	 "rank on this host: picks the GPU (before `train.cuda_device`)"},
	{"OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE", "",
	 "any of them set: started by mpirun, so allreduce initialises MPI"},
	{"WEFT_ROLE, WEFT_INDEX, WEFT_PORT, WEFT_DOMAIN", "",
	 "Kubernetes pod identity (role, task index, port, DNS domain) without TF_CONFIG"},
	{"JOB_COMPLETION_INDEX", "", "Kubernetes indexed Job: the task index"},
	{"WEFT_NUM_CHIEF, WEFT_NUM_WORKERS, WEFT_NUM_PS, WEFT_NUM_EVALUATORS", "",
	 "Kubernetes: tasks of each role; with TF_CONFIG, the size of a job given as a sparse "
	 "index map (required then)"},
	{"WEFT_CHIEF_SERVICE, WEFT_WORKER_SERVICE, WEFT_PS_SERVICE, WEFT_EVALUATOR_SERVICE", "",
	 "Kubernetes: headless service of each role"},
	{"WEFT_CHIEF_NAME, WEFT_WORKER_NAME, WEFT_PS_NAME, WEFT_EVALUATOR_NAME", "",
	 "Kubernetes: pod name prefix of each role"},
	{"WEFT_LAUNCH", "", "set by `weft launch` in its children (it prefixes their log lines)"},
	{WF_JOB_TOKEN_ENV, "",
	 "a random value every process of one job shares (`weft launch` makes one per run); "
	 "the job id mixes it in so that it cannot be computed from the model and the "
	 "addresses (needed with --insecure)"},
	{"OMP_NUM_THREADS", "", "set: `train.threads` 0 leaves the thread count to the library"},
	{"OMP_WAIT_POLICY, GOMP_SPINCOUNT", "",
	 "OpenMP spinning: both unset, weft sets GOMP_SPINCOUNT to the rounds of a " STR(
		 WF_CPUS_IDLE_SPIN_US) " us spin on this CPU when no CPU is busy at start, else "
				       "OMP_WAIT_POLICY=passive, and re-executes "
				       "itself once; `weft launch` gives its processes passive "
				       "waits; `weft version` shows "
				       "them"},
	{WF_CPUS_BUSY_ENV, "",
	 "set by weft for its re-executed self: the CPUs found busy at start"},
};

/* The environment variable of key k, or NULL. */
static const char *env_of(const key_def *k)
{
	for (size_t i = 0; i < sizeof(key_env) / sizeof(key_env[0]); i++)
		if (strcmp(key_env[i].path, k->path) == 0)
			return key_env[i].env;
	return NULL;
}

static const char *type_name(key_type t)
{
	switch (t) {
	case T_STR: return "string";
	case T_INT: return "integer";
	case T_NUM: return "number";
	case T_BOOL: return "boolean";
	}
	return "?";
}

static const key_def *find_key(const char *path)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strcmp(keys[i].path, path) == 0)
			return &keys[i];
	return NULL;
}

/* 1 when path names a section (an object holding keys). */
static int is_section(const char *path)
{
	size_t n = strlen(path);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strncmp(keys[i].path, path, n) == 0 && keys[i].path[n] == '.')
			return 1;
	return 0;
}

/* ---- setting values ---------------------------------------------------- */

/* A list of strings into a comma-separated string key (model.freeze). */
static int set_list(char *field, const key_def *k, const json_t *v, wf_err *err)
{
	size_t i, len = 0;
	json_t *e;
	char buf[1024] = "";
	json_array_foreach(v, i, e)
	{
		if (!json_is_string(e))
			return wf_errf(err, WF_EINVAL, "%s[%zu]: expected a string, got %s",
				       k->path, i, wf_json_type_name(e));
		const char *s = json_string_value(e);
		if (strchr(s, ',') || len + strlen(s) + 2 > sizeof(buf) ||
		    len + strlen(s) + 2 > k->size)
			return wf_errf(err, WF_EINVAL,
				       "%s[%zu]: '%s' has a comma or the list is too long", k->path,
				       i, s);
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? "," : "", s);
	}
	strcpy(field, buf);
	return 0;
}

/* model.input_shape given as a JSON array [H, W, C] -> "H,W,C". */
static int set_shape(char *field, const key_def *k, const json_t *v, wf_err *err)
{
	long d[3];
	if (json_array_size(v) != 3)
		return wf_errf(err, WF_EINVAL, "%s: expected [H, W, C], got %zu numbers", k->path,
			       json_array_size(v));
	for (size_t i = 0; i < 3; i++) {
		const json_t *e = json_array_get(v, i);
		if (!json_is_integer(e))
			return wf_errf(err, WF_EINVAL, "%s[%zu]: expected an integer, got %s",
				       k->path, i, wf_json_type_name(e));
		d[i] = (long)json_integer_value(e);
	}
	snprintf(field, k->size, "%ld,%ld,%ld", d[0], d[1], d[2]);
	return 0;
}

int wf_config_input_shape(const wf_config *c, int *h, int *w, int *ch)
{
	long d[3];
	char end;
	const char *s = c->model.input_shape;
	if (!s[0])
		return 0;
	if (sscanf(s, "%ld%*[,x ]%ld%*[,x ]%ld%c", &d[0], &d[1], &d[2], &end) != 3 || d[0] < 1 ||
	    d[0] > 16384 || d[1] < 1 || d[1] > 16384 || d[2] < 1 || d[2] > 4)
		return -1;
	*h = (int)d[0], *w = (int)d[1], *ch = (int)d[2];
	return 1;
}

static int set_value(wf_config *c, const key_def *k, const json_t *v, const char *raw, wf_err *err)
{
	char *field = (char *)c + k->offset;
	switch (k->type) {
	case T_STR: {
		if (json_is_array(v) && strcmp(k->path, "model.freeze") == 0)
			return set_list(field, k, v, err);
		if (json_is_array(v) && strcmp(k->path, "model.input_shape") == 0)
			return set_shape(field, k, v, err);
		const char *s = json_is_string(v) ? json_string_value(v) : raw;
		if (!s)
			return wf_errf(err, WF_EINVAL, "%s: expected a string, got %s", k->path,
				       wf_json_type_name(v));
		if (strlen(s) >= k->size)
			return wf_errf(err, WF_EINVAL,
				       "%s: value too long (%zu bytes, at most %zu)", k->path,
				       strlen(s), k->size - 1);
		strcpy(field, s);
		return 0;
	}
	case T_INT: {
		double d;
		if (json_is_integer(v)) {
			*(long *)field = (long)json_integer_value(v);
			return 0;
		}
		if (json_is_real(v) && fabs(d = json_real_value(v)) < 9e15 &&
		    d == (double)(long)d) {
			*(long *)field = (long)d;
			return 0;
		}
		if (json_is_real(v))
			return wf_errf(err, WF_EINVAL, "%s: expected an integer, got %g", k->path,
				       json_real_value(v));
		return wf_errf(err, WF_EINVAL, "%s: expected an integer, got %s", k->path,
			       wf_json_type_name(v));
	}
	case T_NUM:
		if (!json_is_number(v))
			return wf_errf(err, WF_EINVAL, "%s: expected a number, got %s", k->path,
				       wf_json_type_name(v));
		*(double *)field = json_number_value(v);
		return 0;
	case T_BOOL:
		if (!json_is_boolean(v))
			return wf_errf(err, WF_EINVAL, "%s: expected a boolean, got %s", k->path,
				       wf_json_type_name(v));
		*(int *)field = json_is_true(v);
		return 0;
	}
	return wf_errf(err, WF_EINTERNAL, "%s: bad schema type", k->path);
}

static int unknown_key(const char *path, const char *section, wf_err *err)
{
	char known[1024] = "";
	size_t n = strlen(section), used = 0;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *p = keys[i].path;
		if (n && (strncmp(p, section, n) != 0 || p[n] != '.'))
			continue;
		const char *rest = n ? p + n + 1 : p;
		size_t len = strcspn(rest, ".");
		/* list each direct child once */
		char child[64];
		snprintf(child, sizeof(child), "%.*s", (int)len, rest);
		int seen = 0;
		for (const char *s = known; (s = strstr(s, child)) != NULL; s += len) {
			if ((s == known || s[-1] == ' ') && (s[len] == ',' || s[len] == '\0')) {
				seen = 1;
				break;
			}
		}
		if (!seen && used + len + 3 < sizeof(known))
			used += (size_t)snprintf(known + used, sizeof(known) - used, "%s%s",
						 used ? ", " : "", child);
	}
	return wf_errf(err, WF_EINVAL, "%s: unknown key (known %s%s: %s)", path,
		       n ? "keys in " : "sections", section, known);
}

/* Merge obj (the section at prefix, "" for the root) into c. */
static int merge(wf_config *c, const json_t *obj, const char *prefix, wf_err *err)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)obj, key, v)
	{
		char path[256];
		wf_json_path(path, sizeof(path), prefix, key);
		if (is_section(path) && !(find_key(path) && !json_is_object(v))) {
			if (!json_is_object(v))
				return wf_errf(err, WF_EINVAL, "%s: expected an object, got %s",
					       path, wf_json_type_name(v));
			int rc = merge(c, v, path, err);
			if (rc != 0)
				return rc;
			continue;
		}
		const key_def *k = find_key(path);
		if (!k)
			return unknown_key(path, prefix, err);
		int rc = set_value(c, k, v, NULL, err);
		if (rc != 0)
			return rc;
	}
	return 0;
}

void wf_config_default(wf_config *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_loads(keys[i].def, JSON_DECODE_ANY, NULL);
		set_value(c, &keys[i], v, NULL, NULL);
		json_decref(v);
	}
}

static int merge_root(wf_config *c, json_t *root, const char *origin, wf_err *err)
{
	int rc;
	if (!json_is_object(root))
		rc = wf_errf(err, WF_EINVAL, "%s: the config must be a JSON object, got %s", origin,
			     wf_json_type_name(root));
	else
		rc = merge(c, root, "", err);
	json_decref(root);
	return rc;
}

/* The keys' environment variables over what the file set. Like --set, a
 * value is JSON when it parses, else a string; booleans also take 0 and 1.
 * A malformed value (or a negative number) is a warning that keeps the
 * file's value, as the libraries that read these variables once did. */
static void apply_env(wf_config *c)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const key_def *k = &keys[i];
		const char *env = env_of(k), *s = env ? getenv(env) : NULL;
		if (!s || !*s)
			continue;
		json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
		if (k->type == T_BOOL && json_is_integer(v)) {
			json_t *b = json_boolean(json_integer_value(v) != 0);
			json_decref(v);
			v = b;
		}
		if (!v)
			v = json_string(s);
		wf_config t = *c;
		wf_err e = {0};
		int rc = v ? set_value(&t, k, v, s, &e) : WF_EINVAL;
		if (rc == 0 && json_is_number(v) && json_number_value(v) < 0)
			rc = wf_errf(&e, WF_EINVAL, "%s: must not be negative", k->path);
		if (rc == 0)
			*c = t;
		else
			wf_warn("%s=%s ignored (%s)", env, s, e.msg[0] ? e.msg : "not valid UTF-8");
		json_decref(v);
	}
}

int wf_config_load(wf_config *c, const char *path, const char *const *sets, int nsets, wf_err *err)
{
	wf_config_default(c);
	int rc = wf_config_load_file(c, path, err);
	if (rc == 0)
		apply_env(c);
	for (int i = 0; rc == 0 && i < nsets; i++)
		rc = wf_config_set(c, sets[i], err);
	return rc;
}

int wf_config_load_file(wf_config *c, const char *path, wf_err *err)
{
	json_t *root;
	int rc = wf_json_load_file(&root, path, err);
	if (rc != 0)
		return rc;
	rc = merge_root(c, root, path, err);
	if (rc != 0 && strncmp(err ? err->msg : "", path, strlen(path)) != 0)
		wf_err_wrap(err, "%s", path);
	return rc;
}

int wf_config_load_string(wf_config *c, const char *text, const char *origin, wf_err *err)
{
	json_t *root;
	int rc = wf_json_load_string(&root, text, origin, err);
	if (rc != 0)
		return rc;
	return merge_root(c, root, origin, err);
}

int wf_config_set(wf_config *c, const char *assignment, wf_err *err)
{
	const char *eq = strchr(assignment, '=');
	if (!eq || eq == assignment)
		return wf_errf(err, WF_EINVAL, "--set %s: expected key=value", assignment);
	char path[256];
	size_t n = (size_t)(eq - assignment);
	if (n >= sizeof(path))
		return wf_errf(err, WF_EINVAL, "--set: key too long");
	memcpy(path, assignment, n);
	path[n] = '\0';
	const char *raw = eq + 1;
	json_t *v = json_loads(raw, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	int rc;
	if (is_section(path) && !(find_key(path) && !json_is_object(v))) {
		if (json_is_object(v))
			rc = merge(c, v, path, err);
		else
			rc = wf_errf(err, WF_EINVAL, "%s: expected an object, got %s", path,
				     v ? wf_json_type_name(v) : "string");
	} else {
		const key_def *k = find_key(path);
		if (!k) {
			const char *dot = strrchr(path, '.');
			char section[256] = "";
			if (dot)
				snprintf(section, sizeof(section), "%.*s", (int)(dot - path), path);
			rc = unknown_key(path, section, err);
		} else if (!v) {
			json_t *s = json_string(raw);
			rc = s ? set_value(c, k, s, raw, err)
			       : wf_errf(err, WF_EINVAL, "%s: value is not valid UTF-8", path);
			json_decref(s);
		} else {
			rc = set_value(c, k, v, raw, err);
		}
	}
	json_decref(v);
	if (rc != 0)
		wf_err_wrap(err, "--set");
	return rc;
}

int wf_config_parse_string(wf_config *c, const char *text, wf_err *err)
{
	wf_config_default(c);
	int rc = wf_config_load_string(c, text, "config", err);
	return rc != 0 ? rc : wf_config_validate(c, err);
}

/* ---- output ------------------------------------------------------------ */

static json_t *value_json(const wf_config *c, const key_def *k)
{
	const char *field = (const char *)c + k->offset;
	switch (k->type) {
	case T_STR: return json_string(field);
	case T_INT: return json_integer(*(const long *)field);
	case T_NUM: return json_real(*(const double *)field);
	case T_BOOL: return json_boolean(*(const int *)field);
	}
	return json_null();
}

json_t *wf_config_to_json(const wf_config *cfg)
{
	/* data.augment is a boolean or an object: the resolved config writes the
	 * object, with the boolean folded into its crop and flip */
	wf_config folded = *cfg;
	const wf_config *c = &folded;
	if (folded.data.augment)
		folded.data.aug.flip = folded.data.aug.crop = 1;
	folded.data.augment = 0;
	json_t *root = json_object();
	for (size_t i = 0; root && i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *obj = root;
		char part[256];
		const char *p = keys[i].path;
		for (;;) {
			size_t len = strcspn(p, ".");
			snprintf(part, sizeof(part), "%.*s", (int)len, p);
			if (p[len] == '\0')
				break;
			json_t *sub = json_object_get(obj, part);
			if (!sub || !json_is_object(sub)) { /* a key that is also a section */
				sub = json_object();
				json_object_set_new(obj, part, sub);
			}
			obj = sub;
			p += len + 1;
		}
		json_object_set_new(obj, part, value_json(c, &keys[i]));
	}
	return root;
}

int wf_config_write(const wf_config *c, const char *path, wf_err *err)
{
	json_t *root = wf_config_to_json(c);
	if (!root)
		return wf_errf(err, WF_ENOMEM, "out of memory");
	int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (rc != 0)
		return wf_errf(err, WF_EIO, "%s: cannot write: %s", path, strerror(errno));
	return 0;
}

void wf_config_optim(const wf_config *c, wf_optim_cfg *o)
{
	wf_optim_cfg_default(o);
	o->kind = strcmp(c->optimizer.name, "adam") == 0    ? WF_OPT_ADAM
		  : strcmp(c->optimizer.name, "adamw") == 0 ? WF_OPT_ADAMW
							    : WF_OPT_SGD;
	o->lr = c->optimizer.lr;
	o->momentum = c->optimizer.momentum;
	o->nesterov = c->optimizer.nesterov;
	o->beta1 = c->optimizer.beta1;
	o->beta2 = c->optimizer.beta2;
	o->eps = c->optimizer.epsilon;
	o->weight_decay = c->optimizer.weight_decay;
	o->schedule = strcmp(c->optimizer.schedule.name, "step") == 0	  ? WF_SCHED_STEP
		      : strcmp(c->optimizer.schedule.name, "cosine") == 0 ? WF_SCHED_COSINE
									  : WF_SCHED_CONSTANT;
	o->warmup_steps = c->optimizer.schedule.warmup_steps;
	o->total_steps = c->train.steps;
	o->min_lr = c->optimizer.schedule.min_lr;
	o->decay_steps = c->optimizer.schedule.decay_steps;
	o->decay_rate = c->optimizer.schedule.decay_rate;
	o->clipnorm = c->optimizer.clipnorm;
	o->global_clipnorm = c->optimizer.global_clipnorm;
	o->clipvalue = c->optimizer.clipvalue;
}

void wf_config_print_reference(FILE *out)
{
	fprintf(out, "| key | type | default | environment | meaning |\n|---|---|---|---|---|\n");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *env = env_of(&keys[i]);
		fprintf(out, "| `%s` | %s | `%s` | %s%s%s | %s |\n", keys[i].path,
			type_name(keys[i].type), keys[i].def, env ? "`" : "", env ? env : "",
			env ? "`" : "", keys[i].doc);
	}
}

void wf_config_print_env_reference(FILE *out)
{
	fprintf(out, "| variable | key | default | meaning |\n|---|---|---|---|\n");
	for (size_t i = 0; i < sizeof(key_env) / sizeof(key_env[0]); i++) {
		const key_def *k = find_key(key_env[i].path);
		fprintf(out, "| `%s` | `%s` | `%s` | %s |\n", key_env[i].env, k->path, k->def,
			k->doc);
	}
	for (size_t i = 0; i < sizeof(env_only) / sizeof(env_only[0]); i++)
		fprintf(out, "| `%s` | | %s%s%s | %s |\n", env_only[i].name,
			*env_only[i].def ? "`" : "", env_only[i].def, *env_only[i].def ? "`" : "",
			env_only[i].doc);
}

void wf_config_backend_opts(const wf_config *c, wf_backend_opts *o)
{
	static const char *const local_rank[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
						 "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
						 "LOCAL_RANK"};
	memset(o, 0, sizeof(*o));
	o->threads = (int)c->train.threads;
	o->device_index = (int)c->train.cuda_device;
	for (size_t i = 0; i < sizeof(local_rank) / sizeof(local_rank[0]); i++) {
		const char *v = getenv(local_rank[i]);
		if (v && *v) {
			o->device_index = atoi(v);
			break;
		}
	}
	o->workspace_mb = c->train.cudnn_workspace_mb;
}

void wf_config_from_env(wf_config *c)
{
	wf_config_default(c);
	apply_env(c);
}

void wf_config_openmp_wait(char **argv)
{
	static char env[2][WF_CPUS_ENV_LEN]; /* putenv keeps the strings */
	if (wf_cpus_openmp_wait_env(getenv("OMP_WAIT_POLICY"), getenv("GOMP_SPINCOUNT"), env) &&
	    putenv(env[0]) == 0 && putenv(env[1]) == 0)
		wf_cpus_reexec(argv);
}

int wf_config_default_threads(void)
{
	const char *seen = getenv(WF_CPUS_BUSY_ENV); /* this process's start */
	return wf_cpus_default_threads(seen && *seen >= '0' && *seen <= '9' ? atoi(seen) : -1);
}

void wf_config_apply_process(const wf_config *c)
{
	wf_dataset_set_memory_mb(c->data.memory_mb);
	wf_ps_tune_malloc_enable(c->cluster.malloc_tune);
}
