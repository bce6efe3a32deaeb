/* peers_run.c: see peers_run.h. WEFT_BENCH_DIR is bench/'s source folder. */
#include "peers_run.h"

#include "bench/bench_wait.h"

#include <stdio.h>
#include <string.h>

static char peer_out[32768];

void peers_run(const char *models, const char *infer, int train_batch, int threads, int reps)
{
	char cmd[1536];
	snprintf(cmd, sizeof(cmd),
		 "py=$(sh %s/peers_venv.sh) && %s\"$py\" %s/peers.py --models '%s' --infer-batch "
		 "'%s' "
		 "--train-batch %d --threads %d --reps %d 2>/dev/null",
		 WEFT_BENCH_DIR, bench_peer_env(), WEFT_BENCH_DIR, models, infer, train_batch,
		 threads, reps);
	peer_out[0] = '\0';
	FILE *p = popen(cmd, "r");
	if (!p)
		return;
	size_t n = fread(peer_out, 1, sizeof(peer_out) - 1, p);
	peer_out[n] = '\0';
	pclose(p);
}

double peers_ips(const char *model, const char *mode, int batch, const char *want, char *eng,
		 size_t cap)
{
	char key[160];
	double best = 0;
	snprintf(key, sizeof(key), "{\"model\": \"%s\", \"mode\": \"%s\", \"batch\": %d, ", model,
		 mode, batch);
	snprintf(eng, cap, "-");
	for (const char *at = strstr(peer_out, key); at; at = strstr(at + 1, key)) {
		char name[64];
		double ips = 0;
		if (sscanf(at + strlen(key), "\"engine\": \"%63[^\"]\", \"images_per_sec\": %lf",
			   name, &ips) == 2 &&
		    (!want || !strcmp(name, want)) && ips > best) {
			best = ips;
			snprintf(eng, cap, "%s", name);
		}
	}
	return best;
}
