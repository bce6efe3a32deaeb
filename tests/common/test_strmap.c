/* test_strmap.c: the string map keeps the latest value of each key through
 * its growth, and says -1 for a key it does not hold. */
#include "common/strmap.h"
#include "tests/test.h"

#include <stdio.h>

static void test_put_get_replace(void)
{
	wf_strmap m = {0};
	WF_CHECK_INT(wf_strmap_get(&m, "a"), -1); /* an empty map */
	WF_CHECK_INT(wf_strmap_put(&m, "a", 1), 0);
	WF_CHECK_INT(wf_strmap_put(&m, "b", 2), 0);
	WF_CHECK_INT(wf_strmap_put(&m, "a", 3), 0); /* a duplicate name: the latest wins */
	WF_CHECK_INT(wf_strmap_get(&m, "a"), 3);
	WF_CHECK_INT(wf_strmap_get(&m, "b"), 2);
	WF_CHECK_INT(wf_strmap_get(&m, "c"), -1);
	WF_CHECK_INT(wf_strmap_get(&m, ""), -1);
	WF_CHECK_INT((int)m.n, 2);
	wf_strmap_free(&m);
	wf_strmap_free(&m); /* a freed map is a zeroed one */
}

static void test_many_keys_survive_growth(void)
{
	wf_strmap m = {0};
	char key[32];
	for (int i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "layer_%d", i);
		WF_CHECK_INT(wf_strmap_put(&m, key, i), 0);
	}
	int wrong = 0;
	for (int i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "layer_%d", i);
		wrong += wf_strmap_get(&m, key) != i;
	}
	WF_CHECK_INT(wrong, 0);
	WF_CHECK_INT(wf_strmap_get(&m, "layer_100000"), -1);
	wf_strmap_free(&m);
}

int main(void)
{
	WF_RUN(test_put_get_replace);
	WF_RUN(test_many_keys_survive_growth);
	return wf_test_summary();
}
