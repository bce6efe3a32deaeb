/* train_priv.h: the state of one training run, shared by train.c (set-up,
 * the loop, logging) and finetune.c (model.init_from, model.freeze). Not part
 * of the public API. */
#ifndef WF_TRAIN_PRIV_H
#define WF_TRAIN_PRIV_H

#include "common/error.h"
#include "common/progress.h"
#include "common/tfevents.h"
#include "model/model.h"
#include "model/optim.h"
#include "trainer/config.h"
#include "worker/data.h"
#include "worker/exchange.h"

#include <stdio.h>

/* Everything a run owns, released in reverse order by run_free(). */
typedef struct run {
	const wf_config *cfg;
	wf_dataset *train_ds, *eval_ds;
	wf_backend *be;
	wf_model *m;
	wf_model_meta meta;
	wf_exec *ex;
	wf_exchange *x;
	wf_reader *rd;
	FILE *metrics;
	wf_tfevents *tb;
	int log_failed;			/* the last log write failed (warned once) */
	wf_tfevents *tb_train, *tb_val; /* log.dir/train, log.dir/validation (Keras's runs) */
	int bn_warned;
	wf_optim_cfg optim;
	long start; /* 0-based step to run next */
	long steps_per_epoch;
	wf_progress prog;
	int reports;	       /* prints progress (see wf_train_result.reports) */
	size_t *segs;	       /* the trainable parameters' boundaries (clipnorm) */
	double first_loss;     /* the first step's loss (divergence check); 0 before */
	long last_healthy;     /* the last step (1-based) whose loss was <= first_loss */
	int diverged;	       /* the run stopped for divergence */
	unsigned char *frozen; /* per segment (model.freeze) */
	char *initialised;     /* per layer: copied from model.init_from */
	wf_model *src;	       /* model.init_from, until copied */
	wf_model_meta src_meta;
	char src_file[WF_CFG_PATH_MAX + 4300];
	/* micro-batches this worker trains a step: train.accumulate, or its share
	 * of the cluster's with elastic_batch global (set with the reader) */
	int micro;
	/* backup workers: the servers hand out data units (exchange.h) */
	int by_unit;
	wf_exchange_feed fd; /* what to train next */
	long epochs_logged;  /* chief: epochs whose counts are logged */
	long own_applied;    /* this worker's steps whose gradient was applied */
	long own_dropped;    /* ... dropped as late (their units re-queued) */
	long own_partial;    /* ... whose chunks did not all share that fate */
} run;

/* finetune.c */
/* Load model.init_from (a model file, a directory's model.h5 or its newest
 * complete checkpoint's) into r->src, r->src_meta. */
int wf_finetune_load_source(run *r, wf_err *err);
/* Copy r->src's layers that match r->m by name and shape (r->initialised
 * marks them), log the rest, take its preprocessing; frees r->src. */
int wf_finetune_init_from(run *r, wf_err *err);
/* model.freeze: mark the layers non-trainable (before the executor is built). */
int wf_finetune_freeze(run *r, wf_err *err);

#endif
