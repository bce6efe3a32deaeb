/* exec_tile.c: a large inference batch run as tiles of a few rows, each tile
 * through every layer before the next starts.
 *
 * At batch 32 a network's tensors no longer fit in the caches: on a 2-core
 * AMD EPYC (2 MiB L2 per core, 32 MiB L3) ResNet50 int8's 1x1 convs that add
 * the residual (a 25 MiB u8 tensor at 56x56x256) ran at 221 GMAC/s against
 * ~900 without the add, reading the residual back from memory. Tiles of 8
 * rows keep each tile's tensors in the cache (ResNet50 and MobileNetV2 int8
 * 1.09-1.13x). On a Sapphire Rapids Xeon the same tiles were not faster
 * (0.85-1.03x), so the executor measures both ways and keeps the faster.
 *
 * A tile needs no memory of its own: every tensor holds its rows one after
 * another (N outermost), so tile r runs each layer over rows [r, r + rows)
 * of the memory planned for the whole batch (the executor's act[] moved by
 * r rows of each tensor, in its own element size). A later tile's layers
 * write their rows over memory the planner reused; only the output must
 * outlive the tiles, and the planner places it apart from everything. The
 * tiles' plans are built for `rows`; during the trial each way has its own
 * plan slots and the loser's are freed. */
#include "model/exec_priv.h"
#include "kernels/ops.h"

#include "common/util.h"

#include <stdlib.h>

/* The trial: forward 0 the whole batch and forward 1 tiles (building each
 * way's plans), then WF_TILE_TRIES pairs of both; tiles are kept when the
 * median of the pairs' whole / tiles time ratios is at least TILE_MIN_GAIN
 * (the same work either way: a small margin keeps noise from choosing). */
#define TILE_MIN_GAIN 1.03
/* An executor whose first forward (plans built) took longer is not tried:
 * 8 such forwards would add seconds to a model's load (fp32 ResNet50 at
 * batch 32 on 2 cores: ~0.8 s, where tiles were not faster either) */
#define TILE_MAX_SECS 0.5
#define T_DONE	      (2 + 2 * WF_TILE_TRIES)

void wf_tiles_init(wf_exec *ex)
{
	int b = ex->max_batch, rows = b >= 16 ? 8 : b / 2;
	ex->tile = 0;
	ex->tile_trial = -1;
	if (ex->training || !ex->fused || !(ex->be->caps & WF_CAP_HOST_MEM) ||
	    ex->be->opts.sequential || ex->br || b < 8 || b % rows)
		return;
	ex->tile_rows = rows;
	ex->tile_trial = 0;
}

int wf_exec_tile_rows(const wf_exec *ex)
{
	return ex->tile;
}

void wf_exec_whole_batches(wf_exec *ex)
{
	ex->tile_trial = -1;
}

void wf_tiles_free(wf_exec *ex)
{
	for (int i = 0; ex->tile_plans && i < ex->m->nlayers; i++)
		wf_backend_plan_free(ex->be, &ex->tile_plans[i]);
	free(ex->tile_plans);
	ex->tile_plans = NULL;
}

/* The trial's other plan slots in, the current ones aside. */
static void swap_plans(wf_exec *ex)
{
	wf_plan **t = ex->plans;
	ex->plans = ex->tile_plans, ex->tile_plans = t;
}

int wf_tiles_before(wf_exec *ex, int n)
{
	if (ex->tile_trial < 0 || n != ex->max_batch)
		return ex->tile && n % ex->tile == 0 ? ex->tile : 0;
	if (!(ex->tile_plans = ex->tile_plans ? ex->tile_plans
					      : calloc((size_t)ex->m->nlayers, sizeof(wf_plan *))))
		return -1;
	if (ex->tile_trial % 2 == 0)
		return 0;
	swap_plans(ex); /* tiles run on their own slots */
	return ex->tile_rows;
}

void wf_tiles_after(wf_exec *ex, int n, int rows, double secs)
{
	if (ex->tile_trial < 0 || n != ex->max_batch)
		return;
	if (rows) { /* back to the whole batch's slots */
		swap_plans(ex);
	}
	if (secs < 0) /* failed */
		return;
	int f = ex->tile_trial++;
	if (f == 0 && secs > TILE_MAX_SECS) {
		wf_tiles_free(ex);
		ex->tile_trial = -1;
		return;
	}
	if (f >= 2)
		ex->tile_secs[f % 2][(f - 2) / 2] = secs;
	if (ex->tile_trial < T_DONE)
		return;
	double ratio[WF_TILE_TRIES];
	for (int k = 0; k < WF_TILE_TRIES; k++)
		ratio[k] = ex->tile_secs[0][k] / ex->tile_secs[1][k];
	if (wf_median(ratio, WF_TILE_TRIES) >= TILE_MIN_GAIN) {
		swap_plans(ex);
		ex->tile = ex->tile_rows;
	}
	wf_tiles_free(ex);
	ex->tile_trial = -1;
}
