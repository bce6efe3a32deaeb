/* data.h: the dataset file (HDF5: `images` uint8 [N,H,W,C], `labels` int32
 * [N], attribute `classes`), its converters, and the reader that feeds a
 * worker: deterministic order, a prefetch thread, augmentation.
 *
 * Order (docs/architecture.md): epoch e uses permutation(seed, e) of [0, N);
 * global batch b of an epoch is samples [b*G, (b+1)*G) of it (the remainder
 * of an epoch is dropped); a reader takes `slices` consecutive slices of
 * length `batch` starting at slice `first`, so G = batch * total_slices.
 * Training step s reads epoch s / steps_per_epoch, batch s % steps_per_epoch.
 * Augmentation (random resized crop, random crop after zero padding,
 * horizontal flip, brightness/contrast/saturation jitter, in that order) is a
 * pure function of (seed, epoch, sample index), so any reader sees the same
 * bytes, whatever its thread count. */
#ifndef WF_DATA_H
#define WF_DATA_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct wf_dataset wf_dataset;

typedef struct wf_dataset_info {
	long count;	/* N */
	int h, w, c;	/* image shape */
	int nclasses;	/* from the `classes` attribute */
	char **classes; /* [nclasses] label strings (owned by the dataset) */
	int encoded;	/* 1: JPEG/PNG bytes decoded (and resized) on read */
} wf_dataset_info;

/* Open a dataset file for reading; checks shapes, types and labels range.
 * Errors name the file and the dataset or attribute at fault. */
int wf_dataset_open(wf_dataset **out, const char *path, wf_err *err);
/* Image bytes that wf_dataset_open loads into memory (larger datasets are
 * read from the file per batch), for the whole process: mb MiB (the program
 * passes data.memory_mb / WEFT_DATA_MEMORY_MB); < 0: the default. */
#define WF_DATA_MEMORY_MB_DEFAULT 1024
void wf_dataset_set_memory_mb(long mb);
void wf_dataset_close(wf_dataset *ds);
const wf_dataset_info *wf_dataset_info_get(const wf_dataset *ds);
/* Read samples [start, start+n) in file order (uint8 images, int32 labels).
 * Thread-safe. */
int wf_dataset_read(wf_dataset *ds, long start, long n, uint8_t *images, int32_t *labels,
		    wf_err *err);
/* Read the samples whose indices are idx[0..n) (any order). Thread-safe. */
int wf_dataset_gather(wf_dataset *ds, const long *idx, long n, uint8_t *images, int32_t *labels,
		      wf_err *err);

/* Sample idx as uint8 [H,W,C] (an encoded one decoded and resized by the
 * image module). Thread-safe; decoding runs outside the HDF5 lock. */
int wf_dataset_load_sample(wf_dataset *ds, long idx, uint8_t *image, wf_err *err);

/* Writer: create a dataset file of count samples of h x w x c with class
 * names, then append samples in order, then close (temporary name renamed
 * into place on close). Chunked so readers can stream. */
typedef struct wf_dataset_writer wf_dataset_writer;
int wf_dataset_create(wf_dataset_writer **out, const char *path, long count, int h, int w, int c,
		      int nclasses, const char *const *classes, wf_err *err);
int wf_dataset_append(wf_dataset_writer *wr, const uint8_t *images, const int32_t *labels, long n,
		      wf_err *err);
int wf_dataset_writer_close(wf_dataset_writer *wr, wf_err *err); /* frees wr */
/* The encoded form: the original JPEG/PNG bytes of each sample, decoded and
 * resized to h x w x c (resize: wf_image_resize) when read. */
int wf_dataset_create_encoded(wf_dataset_writer **out, const char *path, long count, int h, int w,
			      int c, int resize, int nclasses, const char *const *classes,
			      wf_err *err);
int wf_dataset_append_encoded(wf_dataset_writer *wr, const uint8_t *const *bytes,
			      const size_t *lens, const int32_t *labels, long n, wf_err *err);
/* Let close end with fewer samples than declared (at least 1): converters
 * that skip unreadable inputs declare the most they may write. */
void wf_dataset_writer_allow_short(wf_dataset_writer *wr);

/* Converters (`weft data ...`). */
typedef struct wf_synth_cfg {
	long count; /* samples */
	int size;   /* images are size x size x 3 */
	uint64_t seed;
	int classes; /* <= 10 */
} wf_synth_cfg;
int wf_data_synth(const char *out_path, const wf_synth_cfg *cfg, wf_err *err);
/* CIFAR-10 binary batches (files of 3073-byte records) into one dataset. */
int wf_data_cifar10(const char *out_path, const char *const *batch_files, int nfiles, wf_err *err);

/* ---- the reader ---- */

typedef struct wf_reader_cfg {
	int batch;	  /* samples per slice (per-worker batch size) */
	int first;	  /* first slice this reader takes */
	int slices;	  /* consecutive slices this reader takes */
	int total_slices; /* slices per global batch (workers x accumulation) */
	uint64_t seed;
	int shuffle; /* 0: file order, every sample once (evaluation) */
	int augment; /* random crop with padding `pad` and horizontal flip */
	int pad;     /* crop padding in pixels */
	/* augmentation switches, each on its own (augment = crop + flip) */
	int flip;	    /* horizontal flip, p = 0.5 */
	int crop;	    /* random crop after zero padding `pad` */
	int rrc;	    /* random resized crop (torchvision RandomResizedCrop) */
	float rrc_scale[2]; /* area fraction range */
	float rrc_ratio[2]; /* aspect ratio range (width / height) */
	float brightness;   /* jitter factors drawn from [max(0, 1-x), 1+x]; 0: off */
	float contrast;
	float saturation;
	int threads;	 /* threads decoding and augmenting a batch; 0: 1, or all cores
			  * for an encoded dataset */
	long start_step; /* the first step to read (resume) */
	/* 1: read from a data position instead (elastic allreduce, whose global
	 * batch changes with the workers): batch k of this reader starts at
	 * sample start_offset + k x global of epoch start_epoch's order, a batch
	 * that does not fit in the epoch starting the next one at 0; batches
	 * still carry step = start_step + k */
	int by_position;
	long start_epoch, start_offset;
	float scale; /* preprocessing: (pixel*scale - mean[c]) / std[c] */
	float mean[4], std[4];
	int prefetch; /* batches read ahead (>= 1) */
	/* The batches' image buffers (NULL: malloc/free), e.g. the backend's
	 * page-locked memory, which uploads fastest. A batch is reused only
	 * after the next wf_reader_next call. */
	void *(*alloc)(void *ctx, size_t bytes);
	void (*release)(void *ctx, void *p);
	void *alloc_ctx;
	/* 1: no reader thread and no order by step: batches are read on demand
	 * with wf_reader_unit (backup workers, where the servers hand out units) */
	int by_unit;
} wf_reader_cfg;

/* One batch: images float [n,H,W,C] preprocessed, labels [n]. */
typedef struct wf_batch {
	long step; /* training step (shuffle) or batch index (eval) */
	long epoch;
	int n; /* samples in this batch (batch * slices; eval: last may be short) */
	float *images;
	int32_t *labels;
} wf_batch;

typedef struct wf_reader wf_reader;

/* The augmentation defaults, written here once (the trainer's config table
 * shows them through these macros): crop padding, random resized crop's
 * area and aspect-ratio ranges (torchvision's). */
#define WF_READER_PAD_DEFAULT	4
#define WF_READER_RRC_SCALE_MIN 0.08
#define WF_READER_RRC_SCALE_MAX 1
#define WF_READER_RRC_RATIO_MIN 0.75
#define WF_READER_RRC_RATIO_MAX 1.3333333333333333
void wf_reader_cfg_default(wf_reader_cfg *cfg);
/* Start a reader thread over ds (which must outlive the reader). */
int wf_reader_create(wf_reader **out, wf_dataset *ds, const wf_reader_cfg *cfg, wf_err *err);
/* Next batch in order; blocks until ready. Returns 1 with *b filled, 0 at the
 * end (eval readers only), or a negative code. *b stays valid until the next
 * call. */
int wf_reader_next(wf_reader *r, wf_batch **b, wf_err *err);
/* Steps per epoch for this configuration. */
long wf_reader_steps_per_epoch(const wf_reader *r);
/* Data units per epoch: steps_per_epoch x (total_slices / slices). Unit u
 * is the `slices` consecutive slices starting at slice (u % G) x slices of
 * global batch (u % units_per_epoch) / G of epoch u / units_per_epoch, G =
 * total_slices / slices: with one reader per worker, unit b x W + w is what
 * worker w reads at step b of an epoch. */
long wf_reader_units_per_epoch(const wf_reader *r);
/* A by_unit reader: read unit u now (on the caller's thread) into *b
 * (valid until the next call). Returns 1, or a negative code. */
int wf_reader_unit(wf_reader *r, long unit, wf_batch **b, wf_err *err);
/* Batches ready in the ring now (made, not yet taken), and the ring's size
 * in *slots: the reader thread waits while the two are equal. Thread-safe. */
int wf_reader_ready(wf_reader *r, int *slots);
void wf_reader_free(wf_reader *r);

#endif
