/* fuzz_ps_key.c: the CURVE key-file parser (ps/auth.h) on arbitrary bytes:
 * never reads outside them, and a key it returns is 40 Z85 characters. */
#include "ps/auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[WF_PS_KEY_Z85];
	char *copy = malloc(size ? size : 1); /* exact size: ASan sees overreads */
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	if (wf_ps_key_parse(copy, size, out) == 0 && strlen(out) != WF_PS_KEY_Z85 - 1)
		abort();
	free(copy);
	return 0;
}
