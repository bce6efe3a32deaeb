/* reader.c: the reader thread of data.h. One producer thread fills a ring of
 * prefetch + 1 batch slots (the extra one is the batch the consumer holds),
 * all allocated at create; the main thread takes them in order with
 * wf_reader_next. Order and augmentation follow data.h exactly. */
#include "worker/data.h"

#include "common/image.h"
#include "common/util.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PERM_KEY	    0x5045524dULL /* "PERM": permutation stream */
#define AUGMENT_KEY	    0x415547ULL	  /* "AUG": per-sample augmentation stream */
#define READER_MAX_PREFETCH 64
#define READER_MAX_THREADS  64

struct wf_reader {
	wf_dataset *ds;
	wf_reader_cfg cfg;
	int h, w, c;
	long count;	      /* N */
	long per_batch;	      /* samples in one of this reader's batches: batch * slices */
	long global;	      /* G = batch * total_slices */
	long steps_per_epoch; /* shuffle: floor(N / G); eval: batches this reader yields */
	size_t sample_bytes;  /* h*w*c */
	float lut[4][256];    /* preprocessed value of each channel and pixel value */

	/* producer-only state */
	long *perm; /* [N] permutation of perm_epoch (shuffle only) */
	long perm_epoch;
	long pos_epoch, pos_offset;	  /* by_position: where the batch being made starts */
	long *idx;			  /* [per_batch] sample indices of the batch being made */
	uint8_t *raw;			  /* [per_batch, H, W, C] gathered bytes */
	int encoded;			  /* decode in the batch threads */
	int threads;			  /* batch threads (>= 1) */
	uint8_t *tmp[READER_MAX_THREADS]; /* [H,W,C] scratch per batch thread */

	/* the ring: slots [head, head + filled) are ready; with held, the consumer
	 * is using slots[head] */
	int nslots;
	wf_batch *slots;
	int head, filled, held;
	int stop, done, failed;
	wf_err thread_err;
	pthread_mutex_t mu;
	pthread_cond_t can_fill, can_take;
	pthread_t thread;
	int thread_started;
};

void wf_reader_cfg_default(wf_reader_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->batch = 32;
	cfg->first = 0;
	cfg->slices = 1;
	cfg->total_slices = 1;
	cfg->seed = 1;
	cfg->shuffle = 1;
	cfg->augment = 0;
	cfg->pad = WF_READER_PAD_DEFAULT;
	cfg->start_step = 0;
	cfg->scale = 1.0f / 255.0f;
	for (int i = 0; i < 4; i++) {
		cfg->mean[i] = 0.0f;
		cfg->std[i] = 1.0f;
	}
	cfg->prefetch = 2;
	cfg->rrc_scale[0] = (float)WF_READER_RRC_SCALE_MIN;
	cfg->rrc_scale[1] = (float)WF_READER_RRC_SCALE_MAX;
	cfg->rrc_ratio[0] = (float)WF_READER_RRC_RATIO_MIN;
	cfg->rrc_ratio[1] = (float)WF_READER_RRC_RATIO_MAX;
}

long wf_reader_steps_per_epoch(const wf_reader *r)
{
	return r->steps_per_epoch;
}

long wf_reader_units_per_epoch(const wf_reader *r)
{
	long groups = r->cfg.total_slices / r->cfg.slices;
	return r->steps_per_epoch * (groups > 0 ? groups : 1);
}

/* permutation(seed, epoch): Fisher-Yates over [0, N). */
static void make_perm(wf_reader *r, long epoch)
{
	wf_rng g;
	wf_rng_seed(&g, wf_hash3(r->cfg.seed, (uint64_t)epoch, PERM_KEY));
	for (long i = 0; i < r->count; i++)
		r->perm[i] = i;
	for (long i = r->count - 1; i > 0; i--) {
		long j = (long)wf_rng_below(&g, (uint64_t)i + 1);
		long t = r->perm[i];
		r->perm[i] = r->perm[j];
		r->perm[j] = t;
	}
	r->perm_epoch = epoch;
}

/* Random resized crop box (torchvision RandomResizedCrop.get_params): ten
 * tries at an area fraction in scale and a log-uniform aspect ratio in ratio,
 * then a centre crop clamped to the ratio range. */
static void rrc_box(const wf_reader *r, wf_rng *g, int *y0, int *x0, int *ch, int *cw)
{
	const int h = r->h, w = r->w;
	const double area = (double)h * w;
	const double lr0 = log(r->cfg.rrc_ratio[0]), lr1 = log(r->cfg.rrc_ratio[1]);
	for (int t = 0; t < 10; t++) {
		double a = area * (r->cfg.rrc_scale[0] +
				   (r->cfg.rrc_scale[1] - r->cfg.rrc_scale[0]) * wf_rng_uniform(g));
		double ar = exp(lr0 + (lr1 - lr0) * wf_rng_uniform(g));
		int bw = (int)lround(sqrt(a * ar)), bh = (int)lround(sqrt(a / ar));
		if (bw > 0 && bw <= w && bh > 0 && bh <= h) {
			*y0 = (int)wf_rng_below(g, (uint64_t)(h - bh + 1));
			*x0 = (int)wf_rng_below(g, (uint64_t)(w - bw + 1));
			*ch = bh;
			*cw = bw;
			return;
		}
	}
	double in = (double)w / h;
	int bw = w, bh = h;
	if (in < r->cfg.rrc_ratio[0])
		bh = (int)lround(w / r->cfg.rrc_ratio[0]);
	else if (in > r->cfg.rrc_ratio[1])
		bw = (int)lround(h * r->cfg.rrc_ratio[1]);
	bw = WF_MAX(1, WF_MIN(bw, w));
	bh = WF_MAX(1, WF_MIN(bh, h));
	*y0 = (h - bh) / 2;
	*x0 = (w - bw) / 2;
	*ch = bh;
	*cw = bw;
}

static float jitter_factor(wf_rng *g, float x)
{
	double lo = 1.0 - x < 0 ? 0 : 1.0 - x;
	return (float)(lo + (1.0 + x - lo) * wf_rng_uniform(g));
}

static inline float clamp255(float v)
{
	return v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
}

/* Augment one sample: random resized crop, crop (offsets in [0, 2*pad] of
 * the zero-padded image), flip, colour jitter, then preprocess. The random
 * draws come in a fixed order from one stream per (seed, epoch, index); crop
 * and flip draw first, so `augment` gives the same bytes as before the other
 * switches existed. tmp: [H,W,C] scratch for the resized crop. */
static void augment_sample(const wf_reader *r, const uint8_t *src, float *dst, long epoch,
			   long index, uint8_t *tmp)
{
	const wf_reader_cfg *cfg = &r->cfg;
	const int h = r->h, w = r->w, c = r->c;
	const int crop = cfg->augment || cfg->crop, flip_on = cfg->augment || cfg->flip;
	const int pad = crop ? cfg->pad : 0;
	wf_rng g;
	wf_rng_seed(&g, wf_hash3(cfg->seed ^ AUGMENT_KEY, (uint64_t)epoch, (uint64_t)index));
	int oy = 0, ox = 0, flip = 0;
	if (crop) {
		oy = (int)wf_rng_below(&g, (uint64_t)(2 * pad + 1));
		ox = (int)wf_rng_below(&g, (uint64_t)(2 * pad + 1));
	}
	if (flip_on)
		flip = wf_rng_uniform(&g) < 0.5;
	if (cfg->rrc) {
		int y0, x0, ch, cw;
		rrc_box(r, &g, &y0, &x0, &ch, &cw);
		wf_image_resize_rect(src + ((size_t)y0 * w + x0) * c, (size_t)w, ch, cw, c, tmp, h,
				     w);
		src = tmp;
	}
	float bf = 1.0f, cf = 1.0f, sf = 1.0f;
	if (cfg->brightness > 0)
		bf = jitter_factor(&g, cfg->brightness);
	if (cfg->contrast > 0)
		cf = jitter_factor(&g, cfg->contrast);
	if (cfg->saturation > 0)
		sf = jitter_factor(&g, cfg->saturation);
	const int jitter = bf != 1.0f || cf != 1.0f || sf != 1.0f;
	float gmean = 0.0f; /* contrast blends with the mean gray level (after brightness) */
	if (cf != 1.0f) {
		double s = 0;
		for (size_t p = 0; p < (size_t)h * w; p++) {
			const uint8_t *q = src + p * c;
			float y = c >= 3 ? 0.299f * q[0] + 0.587f * q[1] + 0.114f * q[2] : q[0];
			s += clamp255(y * bf);
		}
		gmean = (float)(s / ((double)h * w));
	}
	for (int y = 0; y < h; y++) {
		int sy = y + oy - pad;
		for (int x = 0; x < w; x++) {
			int sx = (flip ? w - 1 - x : x) + ox - pad;
			float *o = dst + ((size_t)y * w + x) * c;
			int in = sy >= 0 && sy < h && sx >= 0 && sx < w;
			const uint8_t *q = in ? src + ((size_t)sy * w + sx) * c : NULL;
			if (!jitter) {
				for (int ch = 0; ch < c; ch++)
					o[ch] = r->lut[ch][q ? q[ch] : 0];
				continue;
			}
			float v[4];
			for (int ch = 0; ch < c; ch++) {
				v[ch] = clamp255((q ? q[ch] : 0) * bf);
				if (cf != 1.0f)
					v[ch] = clamp255((v[ch] - gmean) * cf + gmean);
			}
			if (sf != 1.0f && c >= 3) {
				float gy = 0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2];
				for (int ch = 0; ch < 3; ch++)
					v[ch] = clamp255((v[ch] - gy) * sf + gy);
			}
			for (int ch = 0; ch < c; ch++)
				o[ch] = (v[ch] * cfg->scale - cfg->mean[ch]) / cfg->std[ch];
		}
	}
}

static void preprocess_sample(const wf_reader *r, const uint8_t *src, float *dst)
{
	const int c = r->c;
	size_t pixels = (size_t)r->h * r->w;
	for (size_t p = 0; p < pixels; p++)
		for (int ch = 0; ch < c; ch++)
			dst[p * c + ch] = r->lut[ch][src[p * c + ch]];
}

/* One batch's per-sample work, shared by the batch threads. */
typedef struct batch_work {
	wf_reader *r;
	wf_batch *b;
	long n, epoch;
	atomic_long next;
	atomic_int failed;
	wf_err err; /* the first failure */
	pthread_mutex_t mu;
} batch_work;

static void *batch_main(void *arg)
{
	batch_work *bw = ((void **)arg)[0];
	uint8_t *tmp = ((void **)arg)[1];
	wf_reader *r = bw->r;
	const wf_reader_cfg *cfg = &r->cfg;
	const int aug = cfg->augment || cfg->flip || cfg->crop || cfg->rrc || cfg->brightness > 0 ||
			cfg->contrast > 0 || cfg->saturation > 0;
	for (;;) {
		long k = atomic_fetch_add(&bw->next, 1);
		if (k >= bw->n || atomic_load(&bw->failed))
			break;
		uint8_t *s = r->raw + (size_t)k * r->sample_bytes;
		if (r->encoded) {
			wf_err e = {0};
			int rc = wf_dataset_load_sample(r->ds, r->idx[k], s, &e);
			if (rc) {
				pthread_mutex_lock(&bw->mu);
				if (!atomic_load(&bw->failed)) {
					bw->err = e;
					atomic_store(&bw->failed, rc);
				}
				pthread_mutex_unlock(&bw->mu);
				break;
			}
		}
		float *d = bw->b->images + (size_t)k * r->sample_bytes;
		if (aug)
			augment_sample(r, s, d, bw->epoch, r->idx[k], tmp);
		else
			preprocess_sample(r, s, d);
	}
	return NULL;
}

/* Fill slot b with training step / eval batch `step`, or (unit >= 0) with
 * data unit `unit` (data.h: wf_reader_unit). */
static int produce(wf_reader *r, long step, long unit, wf_batch *b, wf_err *err)
{
	int rc;
	long epoch = 0, n;
	const wf_reader_cfg *cfg = &r->cfg;
	uint8_t *raw = r->encoded ? NULL : r->raw; /* encoded: the batch threads decode */
	if (cfg->shuffle) {
		long upe = wf_reader_units_per_epoch(r), groups = upe / r->steps_per_epoch;
		epoch = unit >= 0 ? unit / upe : step / r->steps_per_epoch;
		long bi = unit >= 0 ? (unit % upe) / groups : step % r->steps_per_epoch;
		long at =
			unit >= 0 ? (unit % groups) * r->per_batch : (long)cfg->first * cfg->batch;
		long base = bi * r->global;
		if (cfg->by_position && unit < 0) {
			epoch = r->pos_epoch;
			base = r->pos_offset;
		}
		if (epoch != r->perm_epoch)
			make_perm(r, epoch);
		n = r->per_batch;
		const long *src = r->perm + base + at;
		memcpy(r->idx, src, sizeof(*r->idx) * (size_t)n);
		rc = wf_dataset_gather(r->ds, r->idx, n, raw, b->labels, err);
	} else {
		long begin = step * r->global + (long)cfg->first * cfg->batch;
		n = WF_MIN(r->per_batch, r->count - begin);
		for (long k = 0; k < n; k++)
			r->idx[k] = begin + k;
		rc = wf_dataset_read(r->ds, begin, n, raw, b->labels, err);
	}
	if (rc)
		return rc;
	batch_work bw = {.r = r, .b = b, .n = n, .epoch = epoch};
	atomic_init(&bw.next, 0);
	atomic_init(&bw.failed, 0);
	pthread_mutex_init(&bw.mu, NULL);
	int t = 1;
	void *args[READER_MAX_THREADS][2];
	pthread_t tid[READER_MAX_THREADS];
	for (int i = 0; i < r->threads; i++) {
		args[i][0] = &bw;
		args[i][1] = r->tmp[i];
	}
	for (; t < r->threads && t < n; t++)
		if (pthread_create(&tid[t], NULL, batch_main, args[t]) != 0)
			break;
	batch_main(args[0]);
	for (int i = 1; i < t; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&bw.mu);
	if (atomic_load(&bw.failed)) {
		if (err)
			*err = bw.err;
		return atomic_load(&bw.failed);
	}
	b->step = unit >= 0 ? unit : step;
	b->epoch = epoch;
	b->n = (int)n;
	return 0;
}

int wf_reader_unit(wf_reader *r, long unit, wf_batch **b, wf_err *err)
{
	*b = NULL;
	if (!r->cfg.by_unit || !r->cfg.shuffle || unit < 0 ||
	    r->cfg.total_slices % r->cfg.slices != 0)
		return wf_errf(err, WF_EINVAL,
			       "reader: unit %ld: want a shuffling by_unit reader whose slices "
			       "divide total_slices",
			       unit);
	int rc = produce(r, -1, unit, &r->slots[0], err);
	if (rc)
		return rc;
	*b = &r->slots[0];
	return 1;
}

static void *reader_main(void *arg)
{
	wf_reader *r = arg;
	wf_err err;
	wf_err_clear(&err);
	r->pos_epoch = r->cfg.start_epoch;
	r->pos_offset = r->cfg.start_offset;
	for (long step = r->cfg.start_step;; step++) {
		/* by_position: a global batch that does not fit in what is left of
		 * the epoch's order starts the next epoch (as by step) */
		if (r->cfg.by_position && r->pos_offset + r->global > r->count) {
			r->pos_epoch++;
			r->pos_offset = 0;
		}
		pthread_mutex_lock(&r->mu);
		if (!r->cfg.shuffle && step >= r->steps_per_epoch)
			r->done = 1;
		while (!r->stop && !r->done && r->filled == r->nslots)
			pthread_cond_wait(&r->can_fill, &r->mu);
		if (r->stop || r->done) {
			pthread_cond_broadcast(&r->can_take);
			pthread_mutex_unlock(&r->mu);
			break;
		}
		wf_batch *b = &r->slots[(r->head + r->filled) % r->nslots];
		pthread_mutex_unlock(&r->mu);

		int rc = produce(r, step, -1, b, &err);
		r->pos_offset += r->global;

		pthread_mutex_lock(&r->mu);
		if (rc) {
			r->failed = rc;
			r->thread_err = err;
		} else {
			r->filled++;
		}
		pthread_cond_broadcast(&r->can_take);
		pthread_mutex_unlock(&r->mu);
		if (rc)
			break;
	}
	return NULL;
}

static int check_cfg(const wf_reader_cfg *cfg, const wf_dataset_info *in, wf_err *err)
{
	if (cfg->batch < 1)
		return wf_errf(err, WF_EINVAL, "reader: batch = %d, want >= 1", cfg->batch);
	if (cfg->total_slices < 1 || cfg->slices < 1 || cfg->first < 0 ||
	    cfg->first + cfg->slices > cfg->total_slices)
		return wf_errf(err, WF_EINVAL,
			       "reader: slices [%d, %d) do not fit in total_slices = %d",
			       cfg->first, cfg->first + cfg->slices, cfg->total_slices);
	if (cfg->prefetch < 1 || cfg->prefetch > READER_MAX_PREFETCH)
		return wf_errf(err, WF_EINVAL, "reader: prefetch = %d, want 1..%d", cfg->prefetch,
			       READER_MAX_PREFETCH);
	if ((cfg->augment || cfg->crop) && (cfg->pad < 0 || cfg->pad > 4096))
		return wf_errf(err, WF_EINVAL, "reader: pad = %d, want 0..4096", cfg->pad);
	if (cfg->rrc && !(cfg->rrc_scale[0] > 0 && cfg->rrc_scale[0] <= cfg->rrc_scale[1] &&
			  cfg->rrc_scale[1] <= 1 && cfg->rrc_ratio[0] > 0 &&
			  cfg->rrc_ratio[0] <= cfg->rrc_ratio[1]))
		return wf_errf(
			err, WF_EINVAL,
			"reader: random resized crop scale [%g, %g] and ratio [%g, %g]: want "
			"0 < scale_min <= scale_max <= 1 and 0 < ratio_min <= ratio_max",
			cfg->rrc_scale[0], cfg->rrc_scale[1], cfg->rrc_ratio[0], cfg->rrc_ratio[1]);
	if (!(cfg->brightness >= 0 && cfg->contrast >= 0 && cfg->saturation >= 0 &&
	      cfg->brightness <= 10 && cfg->contrast <= 10 && cfg->saturation <= 10))
		return wf_errf(err, WF_EINVAL,
			       "reader: brightness %g, contrast %g, saturation %g: want 0..10",
			       cfg->brightness, cfg->contrast, cfg->saturation);
	if (cfg->threads < 0 || cfg->threads > READER_MAX_THREADS)
		return wf_errf(err, WF_EINVAL, "reader: threads = %d, want 0..%d", cfg->threads,
			       READER_MAX_THREADS);
	if (cfg->by_position && (cfg->start_epoch < 0 || cfg->start_offset < 0 || !cfg->shuffle))
		return wf_errf(err, WF_EINVAL,
			       "reader: data position epoch %ld, sample %ld: want >= 0, on a "
			       "shuffled training reader",
			       cfg->start_epoch, cfg->start_offset);
	if (cfg->start_step < 0)
		return wf_errf(err, WF_EINVAL, "reader: start_step = %ld, want >= 0",
			       cfg->start_step);
	if (!isfinite(cfg->scale))
		return wf_errf(err, WF_EINVAL, "reader: scale is not finite");
	for (int ch = 0; ch < in->c; ch++) {
		if (!isfinite(cfg->mean[ch]) || !isfinite(cfg->std[ch]) || cfg->std[ch] == 0.0f)
			return wf_errf(err, WF_EINVAL,
				       "reader: mean[%d] = %g, std[%d] = %g: want "
				       "finite values and std != 0",
				       ch, cfg->mean[ch], ch, cfg->std[ch]);
	}
	if (in->c > 4)
		return wf_errf(err, WF_EINVAL, "reader: %d channels, want 1..4", in->c);
	return 0;
}

int wf_reader_create(wf_reader **out, wf_dataset *ds, const wf_reader_cfg *cfg, wf_err *err)
{
	int rc = 0;
	*out = NULL;
	const wf_dataset_info *in = wf_dataset_info_get(ds);
	rc = check_cfg(cfg, in, err);
	if (rc)
		return rc;
	wf_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return wf_errf(err, WF_ENOMEM, "reader: out of memory");
	r->ds = ds;
	r->cfg = *cfg;
	r->h = in->h;
	r->w = in->w;
	r->c = in->c;
	r->count = in->count;
	r->per_batch = (long)cfg->batch * cfg->slices;
	r->global = (long)cfg->batch * cfg->total_slices;
	r->sample_bytes = (size_t)in->h * in->w * in->c;
	r->perm_epoch = -1;
	r->encoded = in->encoded;
	r->threads = cfg->threads;
	if (r->threads == 0) {
		long cores = in->encoded ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
		r->threads = (int)WF_MAX(1, WF_MIN(cores, 16));
	}
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->can_fill, NULL);
	pthread_cond_init(&r->can_take, NULL);
	for (int ch = 0; ch < r->c; ch++)
		for (int v = 0; v < 256; v++)
			r->lut[ch][v] = ((float)v * cfg->scale - cfg->mean[ch]) / cfg->std[ch];

	if (cfg->shuffle) {
		r->steps_per_epoch = r->count / r->global;
		if (r->steps_per_epoch < 1) {
			rc = wf_errf(err, WF_EINVAL,
				     "reader: the dataset has %ld samples, fewer than one global "
				     "batch of %ld (batch %d x %d slices)",
				     r->count, r->global, cfg->batch, cfg->total_slices);
			goto fail;
		}
		r->perm = malloc(sizeof(*r->perm) * (size_t)r->count);
		if (!r->perm)
			goto oom;
	} else {
		long first = (long)cfg->first * cfg->batch;
		r->steps_per_epoch =
			r->count > first ? (r->count - first + r->global - 1) / r->global : 0;
	}
	r->idx = malloc(sizeof(*r->idx) * (size_t)r->per_batch);
	r->raw = malloc(r->sample_bytes * (size_t)r->per_batch);
	r->nslots = cfg->prefetch + 1;
	r->slots = calloc((size_t)r->nslots, sizeof(*r->slots));
	if (!r->idx || !r->raw || !r->slots)
		goto oom;
	for (int i = 0; i < r->threads; i++)
		if (!(r->tmp[i] = malloc(r->sample_bytes)))
			goto oom;
	for (int i = 0; i < r->nslots; i++) {
		size_t bytes = sizeof(float) * r->sample_bytes * (size_t)r->per_batch;
		r->slots[i].images = cfg->alloc ? cfg->alloc(cfg->alloc_ctx, bytes) : malloc(bytes);
		r->slots[i].labels = malloc(sizeof(int32_t) * (size_t)r->per_batch);
		if (!r->slots[i].images || !r->slots[i].labels)
			goto oom;
	}
	if (cfg->by_unit) { /* no thread: wf_reader_unit reads on demand */
		*out = r;
		return 0;
	}
	if (pthread_create(&r->thread, NULL, reader_main, r) != 0) {
		rc = wf_errf(err, WF_EINTERNAL, "reader: cannot start the reader thread");
		goto fail;
	}
	r->thread_started = 1;
	*out = r;
	return 0;
oom:
	rc = wf_errf(err, WF_ENOMEM, "reader: out of memory for %d slots of %ld samples",
		     cfg->prefetch + 1, r->per_batch);
fail:
	wf_reader_free(r);
	return rc;
}

int wf_reader_next(wf_reader *r, wf_batch **b, wf_err *err)
{
	int rc;
	*b = NULL;
	pthread_mutex_lock(&r->mu);
	if (r->held) {
		r->head = (r->head + 1) % r->nslots;
		r->filled--;
		r->held = 0;
		pthread_cond_signal(&r->can_fill);
	}
	while (r->filled == 0 && !r->done && !r->failed)
		pthread_cond_wait(&r->can_take, &r->mu);
	if (r->filled > 0) {
		r->held = 1;
		*b = &r->slots[r->head];
		rc = 1;
	} else if (r->failed) {
		rc = r->failed;
		if (err)
			*err = r->thread_err;
	} else {
		rc = 0;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

int wf_reader_ready(wf_reader *r, int *slots)
{
	pthread_mutex_lock(&r->mu);
	int filled = r->filled;
	*slots = r->nslots;
	pthread_mutex_unlock(&r->mu);
	return filled;
}

void wf_reader_free(wf_reader *r)
{
	if (!r)
		return;
	if (r->thread_started) {
		pthread_mutex_lock(&r->mu);
		r->stop = 1;
		pthread_cond_broadcast(&r->can_fill);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	if (r->slots) {
		for (int i = 0; i < r->nslots; i++) {
			if (r->cfg.release)
				r->cfg.release(r->cfg.alloc_ctx, r->slots[i].images);
			else
				free(r->slots[i].images);
			free(r->slots[i].labels);
		}
	}
	free(r->slots);
	free(r->perm);
	free(r->idx);
	free(r->raw);
	for (int i = 0; i < READER_MAX_THREADS; i++)
		free(r->tmp[i]);
	pthread_cond_destroy(&r->can_take);
	pthread_cond_destroy(&r->can_fill);
	pthread_mutex_destroy(&r->mu);
	free(r);
}
