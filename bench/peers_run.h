/* peers_run.h: bench/peers.py (the peer engines, from the venv of
 * bench/peers_venv.sh) run from bench_zoo and bench_train: its JSON lines,
 * once a round, and lookups in them. */
#ifndef WEFT_BENCH_PEERS_RUN_H
#define WEFT_BENCH_PEERS_RUN_H

#include <stddef.h>

/* Run the peers (infer: batch list such as "1,32", or "" for none;
 * train_batch 0 for none) and keep their output until the next call. */
void peers_run(const char *models, const char *infer, int train_batch, int threads, int reps);

/* The fastest peer engine's images/s for (model, mode, batch), or engine
 * `want`'s when not NULL; its name in eng ("-" and 0 when none ran). */
double peers_ips(const char *model, const char *mode, int batch, const char *want, char *eng,
		 size_t cap);

#endif
