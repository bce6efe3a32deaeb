"""keras_model.py: the Keras side of keras_serve_test.py, run with the peers
venv's python (bench/peers_venv.sh: Keras 3 on TensorFlow when it is there,
else on PyTorch).

    keras_model.py make OUT.keras K
        a model with weft's smallcnn layer names on 8x8x3 inputs whose input
        layer is named "pixels" and whose first layers are Rescaling(1/255)
        and Normalization: it takes raw 0-255 pixels, as Keras models often
        do; K classes, softmax
    keras_model.py predict MODEL.keras X.npy DUMP OUT.npy [DUMP OUT.npy ...]
        Keras's probabilities for X (raw pixels, [N,8,8,3] float32) with the
        weights of each DUMP (`weft inspect --dump` of a weft model:
        "layer/param v0 v1 ..."), or of the .keras file itself when DUMP is
        "-", into its OUT (one process: importing Keras takes most of the time)
Exits 77 when Keras cannot be imported, saying so."""
import os
import sys

import numpy as np


def keras_module():
    if "KERAS_BACKEND" not in os.environ:
        try:
            import tensorflow  # noqa: F401
            os.environ["KERAS_BACKEND"] = "tensorflow"
        except ImportError:
            os.environ["KERAS_BACKEND"] = "torch"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import keras
    except ImportError as e:
        print("skip: Keras cannot be imported in %s (%s)" % (sys.executable, e), file=sys.stderr)
        sys.exit(77)
    return keras


def make(out, k):
    keras = keras_module()
    L = keras.layers
    keras.utils.set_random_seed(7)
    inp = L.Input(shape=(8, 8, 3), name="pixels")
    x = L.Rescaling(1.0 / 255, name="rescale")(inp)
    x = L.Normalization(mean=[0.45, 0.5, 0.4], variance=[0.05, 0.08, 0.06], name="norm")(x)
    x = L.Conv2D(32, 3, padding="same", name="conv1")(x)
    x = L.ReLU(name="relu1")(x)
    x = L.MaxPooling2D(2, name="pool1")(x)
    x = L.Conv2D(64, 3, padding="same", name="conv2")(x)
    x = L.ReLU(name="relu2")(x)
    x = L.MaxPooling2D(2, name="pool2")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(128, name="dense1")(x)
    x = L.ReLU(name="relu3")(x)
    y = L.Dense(k, activation="softmax", name="logits")(x)
    m = keras.Model(inp, y, name="pixels_cnn")
    # biases that are not zero, kernels large enough that the classes differ
    rng = np.random.default_rng(3)
    for layer in m.layers:
        ws = layer.get_weights()
        if ws:
            layer.set_weights([w * 1.5 if w.ndim > 1 else rng.normal(0, 0.2, w.shape)
                               .astype(np.float32) for w in ws])
    m.save(out)
    print("%s: Keras %s on %s" % (out, keras.__version__, keras.backend.backend()))


def predict(keras, model, dump, x, out):
    m = keras.saving.load_model(model)
    if dump != "-":
        tensors = {}
        for line in open(dump):
            f = line.split()
            if f:
                tensors[f[0]] = np.array([float(v) for v in f[1:]], dtype=np.float32)
        for layer in m.layers:
            ws = layer.get_weights()
            if not ws:
                continue
            names = ["kernel", "bias"][:len(ws)]
            layer.set_weights([tensors["%s/%s" % (layer.name, n)].reshape(w.shape)
                               for n, w in zip(names, ws)])
    np.save(out, np.asarray(m.predict(x, verbose=0), dtype=np.float32))


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "make":
        make(a[1], int(a[2]))
    elif len(a) >= 5 and len(a) % 2 == 1 and a[0] == "predict":
        keras, x = keras_module(), np.load(a[2])
        for dump, out in zip(a[3::2], a[4::2]):
            predict(keras, a[1], dump, x, out)
    else:
        sys.exit(__doc__)
