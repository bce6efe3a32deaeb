/* fuzz_modelconfig.c: libFuzzer target for weft-serve's model configuration
 * readers: TF Serving's ModelServerConfig (--model_config_file), Triton's
 * config.pbtxt and Triton's configuration as JSON (a load request's
 * "config"), and TF Serving's BatchingParameters and MonitoringConfig
 * text. The first byte picks the reader: odd, Triton's (JSON with bit 7
 * set); even, ModelServerConfig (bit 7: BatchingParameters, bits 7 and 6:
 * MonitoringConfig). Any input must give 0 or
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
	wf_serve_model_config c, *list = NULL;
	wf_serve_batching_params b;
	wf_serve_monitoring m;
	int n = 0;
	wf_serve_model_config_init(&c);
	strcpy(c.name, "m");
	int odd = data[0] & 1, high = data[0] & 0x80, mid = data[0] & 0x40;
	if (odd && high)
		wf_serve_parse_triton_config_json(text, len, &c, &err);
	else if (odd)
		wf_serve_parse_triton_config(text, len, &c, &err);
	else if (high && mid)
		wf_serve_parse_monitoring_config(text, len, &m, &err);
	else if (high)
		wf_serve_parse_batching_parameters(text, len, &b, &err);
	else if (wf_serve_parse_model_server_config(text, len, &list, &n, &err) == 0)
		free(list);
	return 0;
}
