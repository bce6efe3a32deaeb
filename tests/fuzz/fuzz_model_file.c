/* fuzz_model_file.c: libFuzzer target for the model files weft-serve and
 * `weft eval` load from outside: weft model files and Keras model.save('x.h5')
 * files (the Keras importer, model/keras.c), both through wf_model_load. The
 * input is written to a file and loaded; any input gives a model or an error
 * with a message, never a crash, a hang or a leak of ours. Corrupt
 * variable-length strings, which crash libhdf5 itself, are read first in a
 * child process (common/sandbox) and refused. Seeds: a weft model file and
 * Keras 2 and 3 files (tests/fuzz/seeds/fuzz_model_file). */
#include "model/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char in_path[256];

/* libhdf5 is not ours: see fuzz_data.c. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1:detect_leaks=0";
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(in_path, sizeof(in_path), "/tmp/weft_fuzz_model_%ld.h5", (long)getpid());
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1 << 20))
		return 0;
	FILE *f = fopen(in_path, "wb");
	if (!f)
		return 0;
	size_t n = size ? fwrite(data, 1, size, f) : 0;
	fclose(f);
	if (n == size) {
		wf_model *m = NULL;
		wf_model_meta meta;
		wf_err err = {0};
		if (wf_model_load(&m, &meta, in_path, &err) == 0) {
			wf_model_meta_free(&meta);
			wf_model_free(m);
		} else if (!err.msg[0]) {
			__builtin_trap(); /* every refusal names its cause */
		}
	}
	unlink(in_path);
	return 0;
}
