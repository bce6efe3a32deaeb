/* fuzz_config.c: libFuzzer target for the training-config parser. Any input
 * is either accepted (and then round-trips through the resolved JSON) or
 * rejected with a message; nothing crashes, leaks or reads out of bounds.
 * The input's first line, when it contains '=', is also tried as --set. */
#include "trainer/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	wf_config c;
	wf_err err = {0};
	if (wf_config_parse_string(&c, text, &err) == 0) {
		json_t *j = wf_config_to_json(&c);
		char *dump = json_dumps(j, 0);
		wf_config again;
		if (dump && wf_config_parse_string(&again, dump, &err) != 0)
			abort(); /* the resolved config must parse back */
		free(dump);
		json_decref(j);
	} else if (err.msg[0] == '\0') {
		abort(); /* every rejection names its cause */
	}

	char *nl = strchr(text, '\n');
	if (nl)
		*nl = '\0';
	if (strchr(text, '=')) {
		wf_config_default(&c);
		wf_config_set(&c, text, &err);
		wf_config_validate(&c, &err);
	}
	free(text);
	return 0;
}
