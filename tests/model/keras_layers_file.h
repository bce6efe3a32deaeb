/* keras_layers_file.h: writes the Keras file listing many layers, shared by
 * the importer's linear-time test and the hostile-file suite (through
 * make_keras_layers). */
#ifndef WF_TEST_MODEL_KERAS_LAYERS_FILE_H
#define WF_TEST_MODEL_KERAS_LAYERS_FILE_H

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>

/* A Keras 2 file whose model_config lists n layers: the input, then n - 1
 * relu Activation layers each fed by the input (every name lookup goes back
 * to the first layer). It has no weights and no classifier head, so even
 * when it parses the import ends in an error: what counts is how soon. */
static int wf_test_keras_layers_file(const char *path, int n)
{
	size_t cap = 256 + (size_t)n * 200, k = 0;
	char *cfg = malloc(cap);
	if (!cfg)
		return -1;
	k += (size_t)snprintf(cfg + k, cap - k,
			      "{\"class_name\": \"Functional\", \"config\": {\"name\": \"wide\", "
			      "\"layers\": [{\"class_name\": \"InputLayer\", \"name\": \"in\", "
			      "\"config\": {\"batch_input_shape\": [null, 4, 4, 1], \"name\": "
			      "\"in\"}, \"inbound_nodes\": []}");
	for (int i = 1; i < n; i++)
		k += (size_t)snprintf(cfg + k, cap - k,
				      ", {\"class_name\": \"Activation\", \"name\": \"a%d\", "
				      "\"config\": {\"name\": \"a%d\", \"activation\": \"relu\"}, "
				      "\"inbound_nodes\": [[[\"in\", 0, 0, {}]]]}",
				      i, i);
	snprintf(cfg + k, cap - k,
		 "], \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"a%d\", 0, "
		 "0]]}}",
		 n - 1);
	hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
	H5Tset_size(t, H5T_VARIABLE);
	hid_t a = H5Acreate2(f, "model_config", t, sp, H5P_DEFAULT, H5P_DEFAULT);
	int rc = a < 0 || H5Awrite(a, t, &cfg) < 0 ? -1 : 0;
	H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
	H5Fclose(f);
	free(cfg);
	return rc;
}

#endif
