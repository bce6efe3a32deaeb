/* fuzz_tf_config.c: libFuzzer target for the TF_CONFIG reader, with and
 * without the pod's task counts (WEFT_NUM_*). Any input is read or refused
 * with a message; a read cluster places its task inside it (a trainer's rank
 * inside the world, the index inside its job unless an unlisted evaluator). */
#include "trainer/cluster.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void one(const char *text, const wf_cluster_counts *counts)
{
	wf_cluster c;
	wf_err err = {0};
	if (wf_cluster_parse_tf_config_counts(&c, text, counts, &err) != 0) {
		if (err.msg[0] == '\0')
			abort(); /* every refusal names its cause */
		return;
	}
	const wf_cluster_job *j = &c.jobs[c.role];
	if (c.source == WF_CLUSTER_SRC_TF_CONFIG) {
		if (c.index < 0 || (j->n > 0 && (c.index >= j->n || !j->addr[c.index])))
			abort();
		if (c.rank >= 0 && c.rank >= c.world_size)
			abort();
	}
	wf_cluster_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	wf_cluster_counts counts = {{-1, 1, 5, 2, 1}};
	one(text, NULL);
	one(text, &counts);
	free(text);
	return 0;
}
