"""A Keras model's own input name and preprocessing in weft-serve (driven by
test_keras_serve.sh).

keras_model.py (Keras, in the peers venv) makes a model whose input layer is
named "pixels" and whose first layers are Rescaling(1/255) and Normalization,
so it takes raw 0-255 pixels. As a user would, it is fine-tuned with `weft train
--set model.init_from=m.keras` and exported (`weft export`), and imported
as it is (`weft import-keras`); weft-serve serves both. Every request form a
client of the Keras model would send (TF Serving REST instances and inputs,
named and unnamed, numbers and b64 PNGs; KServe v2 JSON, binary and gRPC with
the name "pixels", FP32 0-255, UINT8 and BYTES; TF Serving gRPC) must answer
what Keras's model.predict answers for the same pixels (with the fine-tuned
weights read back from the exported file), within 1e-4; metadata names the
input "pixels". Every process started here is stopped in `finally`."""
import base64
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib

import grpc
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (get_model_metadata_pb2, predict_pb2,
                                     prediction_service_pb2_grpc)

from testlib import check, finish, free_port, stop  # tests/serve/testlib.py

WEFT = os.environ["WEFT"]
SERVE = os.environ["WEFT_SERVE"]
KPY = os.environ["WEFT_KERAS_PYTHON"]
HERE = os.path.dirname(os.path.abspath(__file__))
K = 4  # classes
TOL = 1e-4
procs = []


def run(tmp, name, argv, stdout=None):
    """argv in tmp with its output in tmp/name.log (stdout in tmp/stdout
    when given); a failure ends the test, a skip (77) skips it."""
    with open(os.path.join(tmp, name + ".log"), "w") as log:
        out = open(os.path.join(tmp, stdout), "w") if stdout else log
        rc = subprocess.call(argv, stdout=out, stderr=log if stdout else subprocess.STDOUT,
                             cwd=tmp)
        if stdout:
            out.close()
    if rc == 77:
        print(open(os.path.join(tmp, name + ".log")).read())
        sys.exit(77)
    if rc != 0:
        print(open(os.path.join(tmp, name + ".log")).read()[-3000:])
        raise SystemExit("%s failed (exit %d)" % (name, rc))


def png(px):
    """A PNG (8-bit RGB, no filter) of px [H,W,3] uint8."""
    h, w, _ = px.shape
    raw = b"".join(b"\0" + px[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def http(port, method, path, body=None):
    """(status, parsed JSON or text) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            st, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        st, text = e.code, e.read()
    try:
        return st, json.loads(text)
    except ValueError:
        return st, text.decode(errors="replace")


def close(got, want, what):
    got = np.asarray(got, dtype=np.float64)
    ok = got.shape == want.shape and float(np.max(np.abs(got - want))) <= TOL
    err = float(np.max(np.abs(got - want))) if got.shape == want.shape else None
    check(ok, "%s: answers Keras's probabilities (max |diff| %s, shape %s)" %
          (what, "%.2g" % err if err is not None else "-", got.shape))


def start(tmp, repo, models):
    """weft-serve on repo (Triton's repository form) with REST, KServe gRPC
    and TF Serving gRPC on free ports; waits until it answers ready."""
    for _ in range(3):
        ports = {k: free_port() for k in ("rest", "grpc", "tfs", "metrics")}
        log = open(os.path.join(tmp, "serve-%d.log" % ports["rest"]), "w")
        p = subprocess.Popen([SERVE, "--model-repository=" + repo, "--bind_address=127.0.0.1",
                              "--http-port=%d" % ports["rest"], "--grpc-port=%d" % ports["grpc"],
                              "--port=%d" % ports["tfs"], "--metrics-port=%d" % ports["metrics"]],
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        deadline = time.time() + 90
        while time.time() < deadline and p.poll() is None:
            try:
                if all(http(ports["rest"], "GET", "/v2/models/%s/ready" % m)[0] == 200
                       for m in models):
                    return p, ports
            except OSError:
                pass
            time.sleep(0.05)  # polling the server's readiness, not a fixed wait
        stop(p)
    raise SystemExit("weft-serve did not become ready; see the serve-*.log in " + tmp)


def answer(what, call):
    """call()'s result; a client's exception is a failed check, and None."""
    try:
        return call()
    except Exception as e:  # tritonclient's and grpc's errors alike
        check(False, "%s: %s" % (what, str(e)[:300]))
        return None


def model_checks(ports, model, x, want):
    rest = ports["rest"]
    xs = x.tolist()
    imgs = [base64.b64encode(png(s.astype(np.uint8))).decode() for s in x]

    # metadata: the input as the model names it
    st, md = http(rest, "GET", "/v1/models/%s/metadata" % model)
    sig = md["metadata"]["signature_def"]["signature_def"] if st == 200 else {}
    check(st == 200 and list(sig["serving_default"]["inputs"]) == ["pixels"]
          and list(sig["serving_all"]["inputs"]) == ["pixels"],
          "%s: TF Serving REST metadata names the input \"pixels\"" % model)
    st, md = http(rest, "GET", "/v2/models/%s" % model)
    check(st == 200 and [i["name"] for i in md["inputs"]] == ["pixels"],
          "%s: KServe v2 metadata names the input \"pixels\"" % model)
    st, cfg = http(rest, "GET", "/v2/models/%s/config" % model)
    check(st == 200 and [i["name"] for i in cfg["input"]] == ["pixels"],
          "%s: Triton config names the input \"pixels\"" % model)

    # TF Serving REST: every form a client of the Keras model sends
    forms = {
        "instances, named": {"instances": [{"pixels": s} for s in xs]},
        "instances, unnamed": {"instances": xs},
        "inputs, named": {"inputs": {"pixels": xs}},
        "inputs, unnamed": {"inputs": xs},
        "inputs, generic name": {"inputs": {"input": xs}},
        "instances, named b64 PNG": {"instances": [{"pixels": {"b64": b}} for b in imgs]},
        "instances, b64 PNG": {"instances": [{"b64": b} for b in imgs]},
    }
    for what, body in forms.items():
        st, doc = http(rest, "POST", "/v1/models/%s:predict" % model, body)
        got = doc.get("predictions", doc.get("outputs")) if st == 200 else None
        if st != 200:
            check(False, "%s: TF Serving REST %s: %d %s" % (model, what, st, doc))
        else:
            close(got, want, "%s: TF Serving REST %s" % (model, what))
    st, doc = http(rest, "POST", "/v1/models/%s:predict" % model,
                   {"instances": [{"image": xs[0]}]})
    check(st == 400 and "pixels" in str(doc),
          "%s: an unknown input name gets 400 naming \"pixels\" (%d %s)" % (model, st, doc))

    # KServe v2 JSON
    tensors = {
        "FP32 0-255": {"name": "pixels", "datatype": "FP32", "shape": list(x.shape),
                       "data": x.ravel().tolist()},
        "UINT8": {"name": "pixels", "datatype": "UINT8", "shape": list(x.shape),
                  "data": x.astype(np.uint8).ravel().tolist()},
        "BYTES PNG": {"name": "pixels", "datatype": "BYTES", "shape": [len(x)],
                      "data": [{"b64": b} for b in imgs]},
        "FP32, generic name": {"name": "input", "datatype": "FP32", "shape": list(x.shape),
                               "data": x.ravel().tolist()},
    }
    for what, t in tensors.items():
        st, doc = http(rest, "POST", "/v2/models/%s/infer" % model,
                       {"inputs": [t], "outputs": [{"name": "probabilities"}]})
        if st != 200:
            check(False, "%s: KServe v2 JSON %s: %d %s" % (model, what, st, doc))
            continue
        o = doc["outputs"][0]
        close(np.reshape(o["data"], o["shape"]), want, "%s: KServe v2 JSON %s" % (model, what))

    # KServe v2 binary tensors (tritonclient.http) and gRPC (tritonclient.grpc)
    hc = th.InferenceServerClient("127.0.0.1:%d" % rest)
    i = th.InferInput("pixels", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=True)
    what = "%s: KServe v2 binary FP32 (tritonclient.http)" % model
    r = answer(what, lambda: hc.infer(model, [i],
                                      outputs=[th.InferRequestedOutput("probabilities")]))
    if r:
        close(r.as_numpy("probabilities"), want, what)
    gc = tg.InferenceServerClient("127.0.0.1:%d" % ports["grpc"])
    gmd = gc.get_model_metadata(model, as_json=True)
    check([t["name"] for t in gmd["inputs"]] == ["pixels"],
          "%s: KServe gRPC metadata names the input \"pixels\"" % model)
    pngs = np.array([png(s.astype(np.uint8)) for s in x], dtype=np.object_)
    for dtype, arr in (("FP32", x), ("UINT8", x.astype(np.uint8)), ("BYTES", pngs)):
        gi = tg.InferInput("pixels", list(arr.shape), dtype)
        gi.set_data_from_numpy(arr)
        what = "%s: KServe gRPC %s (tritonclient.grpc)" % (model, dtype)
        r = answer(what, lambda: gc.infer(model, [gi],
                                          outputs=[tg.InferRequestedOutput("probabilities")]))
        if r:
            close(r.as_numpy("probabilities"), want, what)

    # TF Serving gRPC
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports["tfs"])
    ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    mreq = get_model_metadata_pb2.GetModelMetadataRequest()
    mreq.model_spec.name = model
    mreq.metadata_field.append("signature_def")
    sd = get_model_metadata_pb2.SignatureDefMap()
    ps.GetModelMetadata(mreq, timeout=60).metadata["signature_def"].Unpack(sd)
    check(list(sd.signature_def["serving_default"].inputs) == ["pixels"],
          "%s: TF Serving gRPC GetModelMetadata names the input \"pixels\"" % model)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    t = req.inputs["pixels"]
    t.dtype = types_pb2.DT_FLOAT
    for d in x.shape:
        t.tensor_shape.dim.add().size = d
    t.tensor_content = x.tobytes()
    what = "%s: TF Serving gRPC Predict, named \"pixels\"" % model
    resp = answer(what, lambda: ps.Predict(req, timeout=60))
    if resp:
        p = resp.outputs["probabilities"]
        close(np.reshape(p.float_val, [d.size for d in p.tensor_shape.dim]), want, what)
    ch.close()


def main():
    tmp = tempfile.mkdtemp(prefix="weft-keras-serve-")
    skipped = []
    try:
        keras_py = [KPY, os.path.join(HERE, "keras_model.py")]
        run(tmp, "keras-make", keras_py + ["make", "m.keras", str(K)])
        # the fine-tuning data: synthetic 8x8 images of K classes
        run(tmp, "data", [WEFT, "data", "synth", "--out", "d.h5", "--count", "64", "--size", "8",
                          "--seed", "3", "--classes", str(K)])
        with open(os.path.join(tmp, "cfg.json"), "w") as f:
            json.dump({"model": {"name": "smallcnn", "init_from": "m.keras"},
                       "data": {"train": "d.h5"},
                       "train": {"batch_size": 16, "steps": 4, "seed": 1},
                       "optimizer": {"name": "sgd", "lr": 0.01},
                       "checkpoint": {"dir": "ckpt"}, "log": {"dir": "logs"}}, f)
        run(tmp, "train", [WEFT, "train", "--config", "cfg.json", "--device", "cpu",
                           "--threads", "1", "--no-progress-line"])
        repo = os.path.join(tmp, "repo")
        run(tmp, "export", [WEFT, "export", "--checkpoint", "ckpt", "--out", repo + "/ft/1"])
        os.makedirs(repo + "/k/1")
        run(tmp, "import", [WEFT, "import-keras", "m.keras", repo + "/k/1/model.h5", "--quiet"])
        run(tmp, "dump", [WEFT, "inspect", "--model", repo + "/ft/1/model.h5", "--dump"],
            stdout="ft.dump")
        rng = np.random.default_rng(5)
        x = rng.integers(0, 256, size=(3, 8, 8, 3)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        run(tmp, "keras-predict", keras_py + ["predict", "m.keras", "x.npy", "ft.dump",
                                              "want_ft.npy", "-", "want_k.npy"])
        want = {m: np.load(os.path.join(tmp, "want_%s.npy" % m)).astype(np.float64)
                for m in ("ft", "k")}
        # the inputs are not trivial: Keras answers each differently
        check(float(np.max(np.ptp(want["k"], axis=0))) > 0.01,
              "Keras's answers differ between the samples (%s)" % want["k"].round(3).tolist())
        p, ports = start(tmp, repo, ("ft", "k"))
        for m in ("ft", "k"):
            model_checks(ports, m, x, want[m])
        stop(p)
    finally:
        code = finish(procs, tmp, skipped)
    return code


if __name__ == "__main__":
    sys.exit(main())
