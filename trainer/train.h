/* train.h: the training loop of one process (one worker, or a whole run
 * with `--accumulate N`): data, forward/backward, the gradient exchange,
 * evaluation, metrics (metrics.jsonl, TensorBoard), checkpoints and resume,
 * and a clean stop on SIGINT/SIGTERM. */
#ifndef WF_TRAIN_H
#define WF_TRAIN_H

#include "common/error.h"
#include "trainer/config.h"

typedef struct wf_train_opts {
	int resume;   /* continue from the newest complete checkpoint, if any */
	int tty;      /* progress display: 1 terminal, 0 plain lines, -1 detect */
	long stop_at; /* > 0: checkpoint and return 0 once this many steps are done */

	int fresh; /* a parameter-server chief starts over even when a checkpoint exists */
} wf_train_opts;

typedef struct wf_train_result {
	long steps_done; /* steps completed when the run ended */
	double loss;	 /* training loss of the last logging window */
	double accuracy;
	double eval_loss; /* last evaluation (-1 when none ran) */
	double eval_accuracy;
	int reports; /* 1 when this process prints progress and its summary */
} wf_train_result;

/* Train as cfg says (validated). Returns 0, WF_ESTOPPED after a signal (a
 * checkpoint was written), or an error naming the cause. */
int wf_train(const wf_config *cfg, const wf_train_opts *opts, wf_train_result *res, wf_err *err);

#endif
