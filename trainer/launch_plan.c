/* launch_plan.c: `weft launch --dry-run`, what a parameter-server job would
 * be without starting it: the model's size, which server keeps which bytes
 * (ps/placement.h: chunks placed by size, largest first on the least loaded
 * server), the copies with ps.replicas, and the bytes each link carries in a
 * step (pushes at half with ps.compression bf16, at 2F with topk:F), with the time they take at
 * common link rates. */
#include "trainer/launch.h"

#include "model/model.h"
#include "ps/placement.h"
#include "trainer/job.h"

#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

/* Server s's share of the parameters, in bytes. */
static double share(const wf_ps_placement *pl, int s)
{
	return (double)pl->load[s] * sizeof(float);
}

int wf_launch_plan(FILE *out, const wf_config *cfg, int nps, int ntrainers, wf_err *err)
{
	wf_model *m = NULL;
	wf_ps_placement pl = {0};
	int rc = wf_job_model(cfg, &m, err);
	if (rc == 0)
		rc = wf_ps_place(&pl, m->views, m->nviews, m->nparams, nps,
				 (size_t)cfg->ps.chunk_bytes, err);
	if (rc != 0) {
		wf_model_free(m);
		return rc;
	}
	int R = (int)cfg->ps.replicas, sync = strncmp(cfg->strategy.mode, "sync", 4) == 0;
	double total = (double)m->nparams * sizeof(float);
	/* the bytes of a push per byte of values: bf16 gradients are half, a
	 * topk:F push carries F of the entries at 8 bytes each (about: each
	 * chunk rounds its count up) */
	double push = cfg->ps.comp == WF_PS_COMPRESSION_BF16   ? 0.5
		      : cfg->ps.comp == WF_PS_COMPRESSION_TOPK ? 2 * cfg->ps.topk
							       : 1.0;
	fprintf(out,
		"model %s: %zu parameters (%.2f MiB), %d tensors; %d trainers, %d servers, "
		"mode %s, ps.replicas %d, ps.compression %s\n",
		cfg->model.name, m->nparams, total / MIB, m->nviews, ntrainers, nps,
		cfg->strategy.mode, R, cfg->ps.compression);
	fprintf(out,
		"placement: %d chunks of at most %ld bytes (ps.chunk_bytes), each on the server "
		"then holding the fewest bytes, largest first\n",
		pl.nchunks, cfg->ps.chunk_bytes);
	/* group g is server g's share, kept by servers g .. g+R-1 (mod nps);
	 * a step's update goes from the primary to each of the R-1 others */
	double busiest = 0;
	int busiest_s = 0;
	for (int s = 0; s < nps; s++) {
		double own = share(&pl, s), copies = 0;
		char held[128] = "";
		for (int k = 1; k < R; k++) {
			int g = (s - k + nps) % nps;
			copies += share(&pl, g);
			size_t n = strlen(held);
			snprintf(held + n, sizeof(held) - n, "%sps %d's",
				 k == 1 ? " + a copy of " : ", ", g);
		}
		/* in: every trainer's push of this share, plus the copies of
		 * the groups it backs; out: the replies, plus its own copies */
		double in = ntrainers * own * push + copies, outb = ntrainers * own + (R - 1) * own;
		fprintf(out,
			"  ps %d: %d chunks, %.2f MiB (%.1f%%)%s; a step: %.2f MiB in, %.2f MiB "
			"out\n",
			s, wf_ps_placement_count(&pl, s), own / MIB,
			total > 0 ? 100.0 * own / total : 0.0, held, in / MIB, outb / MIB);
		if (in > busiest || outb > busiest) {
			busiest = in > outb ? in : outb;
			busiest_s = s;
		}
	}
	fprintf(out, "  each trainer: a step pushes %.2f MiB and pulls %.2f MiB\n",
		total * push / MIB, total / MIB);
	fprintf(out,
		"busiest link: ps %d, %.2f MiB a step%s; at 1 / 10 / 100 Gbit/s that is %.1f / "
		"%.2f / %.3f ms a step\n",
		busiest_s, busiest / MIB,
		sync ? "" : " (async and SSP: per round of pushes, one from each trainer)",
		busiest * 8 / 1e9 * 1e3, busiest * 8 / 10e9 * 1e3, busiest * 8 / 100e9 * 1e3);
	double lo = share(&pl, 0), hi = lo;
	for (int s = 1; s < nps; s++) {
		lo = share(&pl, s) < lo ? share(&pl, s) : lo;
		hi = share(&pl, s) > hi ? share(&pl, s) : hi;
	}
	if (nps > 1 && hi > 1.5 * lo) {
		char why[64];
		snprintf(why, sizeof(why),
			 lo > 0 ? "the busiest with %.1fx the bytes of another"
				: "some servers with nothing",
			 lo > 0 ? hi / lo : 0.0);
		fprintf(out,
			"note: %d chunks over %d servers leave %s: a smaller ps.chunk_bytes cuts "
			"the "
			"model into more pieces and balances the links\n",
			pl.nchunks, nps, why);
	}
	wf_ps_placement_free(&pl);
	wf_model_free(m);
	return 0;
}
