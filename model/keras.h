/* keras.h: import of Keras model files written by model.save('x.h5') (the
 * legacy HDF5 format of Keras 2 and Keras 3) and Keras 3 `.keras` archives
 * into a weft model (models nested as layers are flattened): the graph
 * from the root `model_config` JSON, the weights from `model_weights`, and
 * the preprocessing from leading Rescaling/Normalization layers (or, for the
 * Keras applications, from the model's name). A layer weft cannot run is an
 * error naming the layer and its Keras class, never a silently wrong model. */
#ifndef WF_KERAS_H
#define WF_KERAS_H

#include "common/error.h"
#include "model/model.h"

#include <stdint.h>

/* 1 when the open HDF5 file (an hid_t) is a Keras model file: a root
 * model_config attribute and no weft_format. */
int wf_keras_is_model_file(int64_t file);
/* 1 when path is a zip archive (a Keras 3 `.keras` file: config.json and
 * model.weights.h5), which wf_keras_load reads. */
int wf_keras_is_archive(const char *path);
/* When path is a zip archive: 0 when it holds a readable config.json and
 * model.weights.h5, else an error saying what is wrong; 0 otherwise (also
 * when path cannot be read: the caller's open says why). */
int wf_keras_check_archive(const char *path, wf_err *err);
/* Import the Keras model file (.h5 or .keras archive) at path; meta (may be NULL) receives the
 * preprocessing. Errors name the file, and the layer and class at fault. */
int wf_keras_load(wf_model **out, wf_model_meta *meta, const char *path, wf_err *err);
/* The same on an HDF5 file already open (hid_t); path is for messages. */
int wf_keras_load_h5(int64_t file, wf_model **out, wf_model_meta *meta, const char *path,
		     wf_err *err);

#endif
