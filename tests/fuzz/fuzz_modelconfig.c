/* fuzz_modelconfig.c: libFuzzer target for weft-serve's model configuration
 * readers: TF Serving's ModelServerConfig (--model_config_file), Triton's
 * config.pbtxt and Triton's configuration as JSON (a load request's
 * "config"). The first byte picks the reader. Any input must give 0 or
 * an error, never a crash. Seeds: tests/fuzz/seeds/fuzz_modelconfig/. */
#include "serve/modelconfig.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *text = (const char *)(data + 1);
	size_t len = size - 1;
	wf_err err = {0};
	if (data[0] & 1) {
		wf_serve_model_config c;
		wf_serve_model_config_init(&c);
		strcpy(c.name, "m");
		if (data[0] & 2)
			wf_serve_parse_triton_config_json(text, len, &c, &err);
		else
			wf_serve_parse_triton_config(text, len, &c, &err);
	} else {
		wf_serve_model_config *c = NULL;
		int n = 0;
		if (wf_serve_parse_model_server_config(text, len, &c, &n, &err) == 0)
			free(c);
	}
	return 0;
}
