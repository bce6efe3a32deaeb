/* fuzz_sslconfig.c: libFuzzer target for TF Serving's SSLConfig text
 * (serve/sslconfig.h). Any input gives 0 or an error, never a crash; what it
 * accepts holds NUL-terminated strings. */
#include "serve/sslconfig.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	wf_serve_ssl_config c;
	wf_err err = {0};
	if (wf_serve_ssl_config_parse((const char *)data, size, &c, &err) == 0) {
		size_t n = 0;
		if (c.server_key)
			n += strlen(c.server_key);
		if (c.server_cert)
			n += strlen(c.server_cert);
		if (c.custom_ca)
			n += strlen(c.custom_ca);
		if (n > size)
			__builtin_trap();
		wf_serve_ssl_config_free(&c);
	}
	return 0;
}
