/* make_keras_layers.c: `make_keras_layers PATH N` writes the Keras 2 .h5 file
 * whose model_config lists N layers (tests/model/keras_layers_file.h), a
 * hostile input too large to keep in the repository (about 140 bytes a
 * layer). Exits 0, or 1 with a message. */
#include "tests/model/keras_layers_file.h"

int main(int argc, char **argv)
{
	char *end = NULL;
	long n = argc == 3 ? strtol(argv[2], &end, 10) : 0;
	if (argc != 3 || *end || n < 1 || n > 10000000) {
		fprintf(stderr, "usage: make_keras_layers PATH N (1 <= N <= 10000000)\n");
		return 1;
	}
	if (wf_test_keras_layers_file(argv[1], (int)n) != 0) {
		fprintf(stderr, "make_keras_layers: %s: cannot write the file\n", argv[1]);
		return 1;
	}
	return 0;
}
