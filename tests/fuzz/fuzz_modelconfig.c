/* fuzz_modelconfig.c: libFuzzer target for weft-serve's protobuf text
 * readers: TF Serving's ModelServerConfig (--model_config_file) and Triton's
 * config.pbtxt. The first byte picks the reader. Any input must give 0 or
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
		wf_serve_parse_triton_config(text, len, &c, &err);
	} else {
		wf_serve_model_config *c = NULL;
		int n = 0;
		if (wf_serve_parse_model_server_config(text, len, &c, &n, &err) == 0)
			free(c);
	}
	return 0;
}
