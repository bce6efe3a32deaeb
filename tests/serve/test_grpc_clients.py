"""weft-serve over gRPC with the real clients (driven by test_grpc.sh).

One weft-serve with a smallcnn model on free loopback ports: REST, TF Serving
gRPC (--port) and KServe v2 gRPC (--grpc_port). Every answer over gRPC is
compared with the HTTP API's answer for the same input, so a wrong tensor
layout, preprocessing or output order fails here. Every process started here
is stopped in `finally`."""
import base64
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib

import grpc
import numpy as np
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                     get_model_status_pb2, inference_pb2, model_management_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)

from testlib import check, failures, free_port  # tests/serve/testlib.py
from testlib import http as http_req

SERVE = os.environ["WEFT_SERVE"]
TOOL = os.environ["WEFT_SERVE_TOOL"]
H = W = 32
C = 3
MAX_MSG = 8 << 20
procs = []


def start_kserve_server(base, port, log, *flags):
    """weft-serve with model m from base, KServe gRPC on port; waits until ready."""
    p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base,
                          "--bind_address", "127.0.0.1", "--rest_api_port", "0", "--port", "0",
                          "--grpc_port", str(port), *flags],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    c = tg.InferenceServerClient("127.0.0.1:%d" % port)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if c.is_server_ready():
                break
        except InferenceServerException:
            time.sleep(0.1)
    return p, c


def http_infer(port, inputs):
    body = json.dumps({"inputs": inputs, "outputs": [{"name": "logits"}]}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v2/models/m/infer" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.load(r)["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


def http_metric(port, name, label):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def close(a, b, tol=1e-4):
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= tol


def status_of(fn):
    """The gRPC status name a call fails with ("OK" when it does not)."""
    try:
        fn()
        return "OK"
    except InferenceServerException as e:
        return str(e.status()).replace("StatusCode.", "")
    except grpc.RpcError as e:
        return e.code().name


def make_png(w, h, rgb):
    raw = b"".join(b"\0" + bytes(rgb[y].ravel()) for y in range(h))
    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def start(tmp, base):
    ports = [free_port() for _ in range(3)]
    log = open(os.path.join(tmp, "serve.log"), "w")
    p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base,
                          "--bind_address", "127.0.0.1", "--rest_api_port", str(ports[0]),
                          "--port", str(ports[1]), "--grpc_port", str(ports[2]),
                          "--grpc_max_message_bytes", str(MAX_MSG), "--enable_batching",
                          "--max_batch_size", "8", "--batch_timeout_micros", "2000",
                          "--num_batch_threads", "2"], stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    client = tg.InferenceServerClient("127.0.0.1:%d" % ports[2])
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        try:
            if client.is_server_ready():
                return p, ports, client
        except InferenceServerException:
            pass
        time.sleep(0.1)
    raise RuntimeError("weft-serve did not become ready over gRPC; see " + log.name)


def infer_input(x, dtype="FP32"):
    i = tg.InferInput("input", list(x.shape), dtype)
    i.set_data_from_numpy(x)
    return i


def kserve_checks(ports, c, tmp):
    rest = ports[0]
    rng = np.random.default_rng(1)
    # health and metadata
    check(c.is_server_live() and c.is_server_ready(), "KServe ServerLive/ServerReady")
    check(c.is_model_ready("m") and c.is_model_ready("m", "1"), "ModelReady m and m v1")
    check(not c.is_model_ready("m", "2") and not c.is_model_ready("nope"),
          "ModelReady false for a missing version or model")
    meta = c.get_server_metadata(as_json=True)
    check("statistics" in meta.get("extensions", []), "ServerMetadata lists extensions")
    md = c.get_model_metadata("m", as_json=True)
    check(md["versions"] == ["1"] and md["inputs"][0]["shape"] == ["-1", "32", "32", "3"]
          and md["inputs"][0]["name"] == "image"
          and [o["name"] for o in md["outputs"]] == ["probabilities", "logits"],
          "ModelMetadata: versions, input (the model's own name) and shape, outputs")
    cfg = c.get_model_config("m", as_json=True)["config"]
    check(cfg["max_batch_size"] == 8 and cfg["input"][0]["dims"] == ["32", "32", "3"]
          and cfg["input"][0]["name"] == "image"
          and cfg["input"][0]["data_type"] == "TYPE_FP32" and "dynamic_batching" in cfg,
          "ModelConfig: max_batch_size, input dims and type, dynamic_batching")

    # FP32 in raw_input_contents == HTTP
    x = rng.random((3, H, W, C), dtype=np.float32)
    want = http_infer(rest, [{"name": "input", "datatype": "FP32", "shape": [3, H, W, C],
                               "data": x.ravel().tolist()}])
    r = c.infer("m", [infer_input(x)])
    check(close(r.as_numpy("logits"), want), "ModelInfer FP32 raw contents == HTTP logits")
    p = r.as_numpy("probabilities")
    check(p is not None and close(p.sum(axis=1), np.ones(3), 1e-4),
          "ModelInfer without outputs named returns probabilities too")
    resp = r.get_response()
    check(resp.model_name == "m" and resp.model_version == "1" and len(resp.raw_output_contents) == 2,
          "reply names model and version and carries raw_output_contents")

    # FP32 in the typed contents (fp32_contents), through Triton's own stub
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel("127.0.0.1:%d" % ports[2]))
    req = service_pb2.ModelInferRequest(model_name="m", id="typed-1")
    t = req.inputs.add(name="input", datatype="FP32", shape=[3, H, W, C])
    t.contents.fp32_contents.extend(x.ravel().tolist())
    req.outputs.add(name="logits")
    tr = stub.ModelInfer(req, timeout=60)
    got = np.frombuffer(tr.raw_output_contents[0], np.float32).reshape(3, -1)
    check(tr.id == "typed-1" and close(got, want), "ModelInfer FP32 fp32_contents == HTTP; id echoed")

    # UINT8 pixels, raw and typed, == HTTP's UINT8
    px = rng.integers(0, 256, (2, H, W, C), dtype=np.uint8)
    want_u8 = http_infer(rest, [{"name": "input", "datatype": "UINT8", "shape": [2, H, W, C],
                                 "data": px.ravel().tolist()}])
    r = c.infer("m", [infer_input(px, "UINT8")], outputs=[tg.InferRequestedOutput("logits")])
    check(close(r.as_numpy("logits"), want_u8), "ModelInfer UINT8 raw == HTTP UINT8")
    req = service_pb2.ModelInferRequest(model_name="m")
    t = req.inputs.add(name="input", datatype="UINT8", shape=[2, H, W, C])
    t.contents.uint_contents.extend(px.ravel().tolist())
    req.outputs.add(name="logits")
    got = np.frombuffer(stub.ModelInfer(req, timeout=60).raw_output_contents[0], np.float32)
    check(close(got.reshape(2, -1), want_u8), "ModelInfer UINT8 uint_contents == HTTP UINT8")

    # BYTES: an encoded JPEG and PNG, == HTTP's BYTES
    jpg = os.path.join(tmp, "a.jpg")
    subprocess.check_call([TOOL, "jpeg", jpg, "40", "30", "7"])
    jpeg = open(jpg, "rb").read()
    png = make_png(W, H, px[0])
    imgs = np.array([jpeg, png], dtype=np.object_)
    want_img = http_infer(rest, [{"name": "input", "datatype": "BYTES", "shape": [2],
                                  "data": [base64.b64encode(jpeg).decode(),
                                           base64.b64encode(png).decode()]}])
    r = c.infer("m", [infer_input(imgs, "BYTES")], outputs=[tg.InferRequestedOutput("logits")])
    check(close(r.as_numpy("logits"), want_img), "ModelInfer BYTES JPEG+PNG == HTTP BYTES")
    check(close(r.as_numpy("logits")[1], want_u8[0]), "a PNG of the pixels == the UINT8 pixels")

    # classification extension
    r = c.infer("m", [infer_input(x)],
                outputs=[tg.InferRequestedOutput("probabilities", class_count=3)])
    cls = r.as_numpy("probabilities")
    top = np.argsort(-p, axis=1)[:, :3]
    check(cls.shape == (3, 3) and all(int(cls[i][j].decode().split(":")[1]) == top[i][j]
                                       for i in range(3) for j in range(3)),
          "classification: top-3 'score:index:label' in order")

    # compression, both ways a client may send it
    for algo in ("gzip", "deflate"):
        r = c.infer("m", [infer_input(x)], compression_algorithm=algo)
        check(close(r.as_numpy("logits"), want), "ModelInfer with %s request compression" % algo)

    # messages over gRPC's 4 MB default, and over --grpc_max_message_bytes
    big = rng.random((400, H, W, C), dtype=np.float32)  # 4.9 MB
    r = c.infer("m", [infer_input(big)], outputs=[tg.InferRequestedOutput("logits")])
    check(r.as_numpy("logits").shape == (400, 10)
          and close(r.as_numpy("logits")[:3], c.infer("m", [infer_input(big[:3])]).as_numpy("logits")),
          "a 4.9 MB request is served (no 4 MB limit)")
    huge = np.zeros((int(MAX_MSG / (H * W * C * 4)) + 8, H, W, C), np.float32)
    check(status_of(lambda: c.infer("m", [infer_input(huge)])) == "RESOURCE_EXHAUSTED",
          "a message over --grpc_max_message_bytes: RESOURCE_EXHAUSTED")

    # async_infer: many concurrent calls, all answered with their own results
    results = queue.Queue()
    xs = [rng.random((1, H, W, C), dtype=np.float32) for _ in range(48)]
    for k, xi in enumerate(xs):
        c.async_infer("m", [infer_input(xi)], partial(results, k),
                      outputs=[tg.InferRequestedOutput("logits")])
    got = {}
    for _ in xs:
        k, res, err = results.get(timeout=120)
        got[k] = None if err else res.as_numpy("logits")
        if err: print("DBG", k, err)
    ref = c.infer("m", [infer_input(np.concatenate(xs))], outputs=[tg.InferRequestedOutput("logits")])
    check(all(got[k] is not None and close(got[k][0], ref.as_numpy("logits")[k]) for k in got),
          "48 async_infer calls: each gets its own sample's logits")

    # many connections at once, each its own client
    def one_client(k, out):
        cc = tg.InferenceServerClient("127.0.0.1:%d" % ports[2])
        try:
            out[k] = [cc.infer("m", [infer_input(xs[(k + i) % len(xs)])]).as_numpy("logits")
                      for i in range(3)]
        finally:
            cc.close()
    outs = {}
    threads = [threading.Thread(target=one_client, args=(k, outs)) for k in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    check(len(outs) == 24 and all(close(outs[k][i][0], ref.as_numpy("logits")[(k + i) % len(xs)])
                                  for k in outs for i in range(3)),
          "24 connections x 3 calls at once: every answer right")

    # statistics
    st = c.get_inference_statistics("m", as_json=True)["model_stats"][0]
    succ = int(st["inference_stats"]["success"].get("count", 0))
    check(st["name"] == "m" and st["version"] == "1" and succ >= 55
          and int(st.get("inference_count", 0)) >= 500, "ModelStatistics counts the calls")

    # repository
    idx = c.get_model_repository_index(as_json=True)["models"]
    check(idx == [{"name": "m", "version": "1", "state": "READY"}], "RepositoryIndex lists m READY")
    # model control needs --model_repository --model_control_mode explicit
    # (repository_checks); elsewhere it is refused as HTTP refuses it (400)
    check(status_of(lambda: c.load_model("m")) == "INVALID_ARGUMENT",
          "RepositoryModelLoad without explicit model control: INVALID_ARGUMENT")
    check(status_of(lambda: c.unload_model("m")) == "INVALID_ARGUMENT",
          "RepositoryModelUnload without explicit model control: INVALID_ARGUMENT")

    # errors
    check(status_of(lambda: c.infer("nope", [infer_input(x)])) == "NOT_FOUND", "unknown model: NOT_FOUND")
    check(status_of(lambda: c.infer("m", [infer_input(x)], model_version="7")) == "NOT_FOUND",
          "unknown version: NOT_FOUND")
    check(status_of(lambda: c.infer("m", [infer_input(x[:, :16])])) == "INVALID_ARGUMENT",
          "wrong shape: INVALID_ARGUMENT")
    bad = tg.InferInput("pixels", [1, H, W, C], "FP32")
    bad.set_data_from_numpy(x[:1])
    check(status_of(lambda: c.infer("m", [bad])) == "INVALID_ARGUMENT", "wrong input name: INVALID_ARGUMENT")
    corrupt = np.array([b"\xff\xd8 not a jpeg"], dtype=np.object_)
    check(status_of(lambda: c.infer("m", [infer_input(corrupt, "BYTES")])) == "INVALID_ARGUMENT",
          "corrupt JPEG: INVALID_ARGUMENT")
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports[2])
    raw = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    check(status_of(lambda: raw(b"\x0a\xff\xff\xff\x0f garbage", timeout=30)) == "INVALID_ARGUMENT",
          "a ModelInferRequest that is not protobuf: INVALID_ARGUMENT")
    nomethod = ch.unary_unary("/inference.GRPCInferenceService/NoSuchMethod")
    check(status_of(lambda: nomethod(b"", timeout=30)) == "UNIMPLEMENTED", "unknown method: UNIMPLEMENTED")
    ch.close()
    return xs


def fail_count_checks(ports, c):
    """A request that fails once its model is found (here a wrong shape) is
    counted once in the model's inference_stats.fail, as Triton counts it,
    whichever API carried it: KServe over HTTP and gRPC, TF Serving over
    REST and gRPC (Predict and Classify)."""
    def fails():
        st = c.get_inference_statistics("m", as_json=True)["model_stats"][0]
        return int(st["inference_stats"]["fail"].get("count", 0))

    x = np.zeros((1, H, 16, C), np.float32)
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.ravel().tolist()}]}).encode()
    n = fails()
    code = http_req(ports[0], "/v2/models/m/infer", {"Content-Type": "application/json"},
                    body)[0]
    got = fails()
    check(code == 400 and got == n + 1, "KServe HTTP, wrong shape: 400, fail.count %d -> %d"
          % (n, got))
    n = got
    code = status_of(lambda: c.infer("m", [infer_input(x)]))
    got = fails()
    check(code == "INVALID_ARGUMENT" and got == n + 1,
          "KServe gRPC, wrong shape: INVALID_ARGUMENT, fail.count %d -> %d" % (n, got))
    n = got
    code = http_req(ports[0], "/v1/models/m:predict", {"Content-Type": "application/json"},
                    json.dumps({"instances": x.tolist()}).encode())[0]
    got = fails()
    check(code == 400 and got == n + 1, "TF Serving REST, wrong shape: 400, fail.count %d -> %d"
          % (n, got))
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports[1])
    ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
    n = got
    code = status_of(lambda: ps.Predict(req, timeout=60))
    got = fails()
    check(code == "INVALID_ARGUMENT" and got == n + 1,
          "TF Serving gRPC Predict, wrong shape: INVALID_ARGUMENT, fail.count %d -> %d" % (n, got))
    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name = "m"
    creq.input.example_list.examples.add().features.feature["input"].float_list.value.extend(
        x.ravel().tolist())
    n = got
    code = status_of(lambda: ps.Classify(creq, timeout=60))
    got = fails()
    check(code == "INVALID_ARGUMENT" and got == n + 1,
          "TF Serving gRPC Classify, wrong size: INVALID_ARGUMENT, fail.count %d -> %d" % (n, got))
    n = got
    code = status_of(lambda: c.infer("nope", [infer_input(x)]))
    check(code == "NOT_FOUND" and fails() == n, "an unknown model is counted in no model's fails")
    ch.close()


def partial(results, k):
    return lambda result, error: results.put((k, result, error))


def tensor(req, x, dtype):
    t = req.inputs["input"]
    t.dtype = dtype
    for d in x.shape:
        t.tensor_shape.dim.add().size = d
    return t


def rest_classify_checks(port, ps, jpeg, x):
    """REST :classify takes the tf.Examples gRPC Classify takes (an
    "image/encoded" image as {"b64": ...}, the model input as flat float
    features) and answers the same top classes."""
    def grpc_classes(feature, fill):
        req = classification_pb2.ClassificationRequest()
        req.model_spec.name = "m"
        fill(req.input.example_list.examples.add().features.feature[feature])
        r = ps.Classify(req, timeout=60)
        return [(k.label, k.score) for k in r.result.classifications[0].classes]

    def rest_classes(example):
        body = json.dumps({"examples": [example]}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/models/m:classify" % port, body,
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return [(l, s) for l, s in json.load(r)["results"][0]]
        except urllib.error.HTTPError as e:
            return e.read().decode()

    def same(a, b):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b) == 5 and
                all(la == lb and abs(sa - sb) < 1e-5 for (la, sa), (lb, sb) in zip(a, b)))
    img = {"image/encoded": {"b64": base64.b64encode(jpeg).decode()}}
    g = grpc_classes("image/encoded", lambda f: f.bytes_list.value.append(jpeg))
    r = rest_classes(img)
    check(same(r, g), "REST :classify with an image/encoded example == gRPC Classify (%s)" % r)
    flat = x[0].ravel().tolist()
    g = grpc_classes("input", lambda f: f.float_list.value.extend(flat))
    r = rest_classes({"input": flat})
    check(same(r, g), "REST :classify with flat float features == gRPC Classify (%s)" % r)
    r = rest_classes({"input": flat[:-1]})
    check(isinstance(r, str) and "example 0 needs a feature" in r,
          "REST :classify with too few floats: 400 saying what an example needs (%s)" % r[:120])


def multi_inference_checks(ps, creq, classes):
    """MultiInference with TF Serving's stubs: each classify task answered
    with what Classify answers for the same examples; TF Serving's rules
    on the tasks (one model, each signature once, no regression here)."""
    def multi(*tasks):
        req = inference_pb2.MultiInferenceRequest()
        req.input.CopyFrom(creq.input)
        for model, sig, method in tasks:
            t = req.tasks.add()
            t.model_spec.name = model
            t.model_spec.signature_name = sig
            t.method_name = method
        return req
    cls = "tensorflow/serving/classify"
    r = ps.MultiInference(multi(("m", "serving_default", cls), ("m", "serving_all", cls)),
                          timeout=60)
    got = [[(k.label, k.score) for k in res.classification_result.classifications[0].classes]
           for res in r.results]
    want = [(k.label, k.score) for k in classes]
    check(len(got) == 2 and got[0] == want and got[1] == want and
          [res.model_spec.signature_name for res in r.results] == ["serving_default",
                                                                    "serving_all"]
          and r.results[0].model_spec.version.value == 1,
          "MultiInference: two classify tasks, each answered as Classify answers (%s)" % got)
    for what, req, code in (
            ("no task", multi(), "INVALID_ARGUMENT"),
            ("two models", multi(("m", "a", cls), ("other", "b", cls)), "INVALID_ARGUMENT"),
            ("a signature twice", multi(("m", "s", cls), ("m", "s", cls)), "INVALID_ARGUMENT"),
            ("a regress task", multi(("m", "s", "tensorflow/serving/regress")), "UNIMPLEMENTED"),
            ("an unknown method", multi(("m", "s", "tensorflow/serving/predict")),
             "INVALID_ARGUMENT"),
            ("an unknown model", multi(("nope", "s", cls)), "NOT_FOUND")):
        got = status_of(lambda: ps.MultiInference(req, timeout=60))
        check(got == code, "MultiInference with %s: %s (%s)" % (what, code, got))


def tfs_checks(ports, c, tmp):
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports[1])
    ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    ms = model_service_pb2_grpc.ModelServiceStub(ch)
    rng = np.random.default_rng(2)
    x = rng.random((2, H, W, C), dtype=np.float32)
    kv = c.infer("m", [infer_input(x)])
    want, want_p = kv.as_numpy("logits"), kv.as_numpy("probabilities")

    # serving_default has one output (probabilities), serving_all both
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    req.model_spec.signature_name = "serving_default"
    tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
    r = ps.Predict(req, timeout=60)
    pr = r.outputs["probabilities"]
    check(r.model_spec.version.value == 1 and list(r.outputs.keys()) == ["probabilities"]
          and [d.size for d in pr.tensor_shape.dim] == [2, 10]
          and close(np.array(pr.float_val, np.float32).reshape(2, 10), want_p),
          "Predict serving_default (tensor_content) == KServe probabilities; version in model_spec")
    req.model_spec.signature_name = "serving_all"
    r = ps.Predict(req, timeout=60)
    lg = r.outputs["logits"]
    check(sorted(r.outputs.keys()) == ["logits", "probabilities"]
          and r.model_spec.signature_name == "serving_all"
          and close(np.array(lg.float_val, np.float32).reshape(2, 10), want),
          "Predict serving_all: both outputs, logits == KServe logits")
    req.model_spec.signature_name = ""
    req.output_filter.append("logits")
    check(status_of(lambda: ps.Predict(req, timeout=60)) == "INVALID_ARGUMENT",
          "Predict output_filter logits on serving_default: not in the signature")
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    req.model_spec.version.value = 1
    tensor(req, x, types_pb2.DT_FLOAT).float_val.extend(x.ravel().tolist())
    req.output_filter.append("probabilities")
    r = ps.Predict(req, timeout=60)
    check(list(r.outputs.keys()) == ["probabilities"]
          and abs(sum(r.outputs["probabilities"].float_val) - 2.0) < 1e-4,
          "Predict (float_val, version 1, output_filter)")

    px = rng.integers(0, 256, (1, H, W, C), dtype=np.uint8)
    want_u8 = c.infer("m", [infer_input(px, "UINT8")]).as_numpy("probabilities")
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    tensor(req, px, types_pb2.DT_UINT8).int_val.extend(px.ravel().tolist())
    r = ps.Predict(req, timeout=60)
    check(close(np.array(r.outputs["probabilities"].float_val, np.float32).reshape(1, 10), want_u8),
          "Predict DT_UINT8 == KServe UINT8")
    jpeg = open(os.path.join(tmp, "a.jpg"), "rb").read()
    want_img = c.infer("m", [infer_input(np.array([jpeg], np.object_), "BYTES")]).as_numpy("probabilities")
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    t = req.inputs["input"]
    t.dtype = types_pb2.DT_STRING
    t.tensor_shape.dim.add().size = 1
    t.string_val.append(jpeg)
    r = ps.Predict(req, timeout=60)
    check(close(np.array(r.outputs["probabilities"].float_val, np.float32).reshape(1, 10), want_img),
          "Predict DT_STRING JPEG == KServe BYTES")

    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name = "m"
    creq.input.example_list.examples.add().features.feature["image/encoded"].bytes_list.value.append(jpeg)
    cr = ps.Classify(creq, timeout=60)
    classes = cr.result.classifications[0].classes
    best = int(np.argmax(want_img[0]))
    check(len(classes) == 5 and classes[0].label == "class%d" % best
          and abs(classes[0].score - want_img[0][best]) < 1e-5, "Classify a tf.Example image: top 5 classes")

    multi_inference_checks(ps, creq, classes)
    rest_classify_checks(ports[0], ps, jpeg, x)

    rr = regression_pb2.RegressionRequest()
    rr.model_spec.name = "m"
    check(status_of(lambda: ps.Regress(rr, timeout=30)) == "UNIMPLEMENTED", "Regress: UNIMPLEMENTED")

    mreq = get_model_metadata_pb2.GetModelMetadataRequest()
    mreq.model_spec.name = "m"
    mreq.metadata_field.append("signature_def")
    mr = ps.GetModelMetadata(mreq, timeout=60)
    sd = get_model_metadata_pb2.SignatureDefMap()
    mr.metadata["signature_def"].Unpack(sd)
    sig = sd.signature_def["serving_default"]
    check([d.size for d in sig.inputs["image"].tensor_shape.dim] == [-1, H, W, C]
          and sorted(sig.outputs.keys()) == ["probabilities"]
          and sorted(sd.signature_def["serving_all"].outputs.keys()) == ["logits", "probabilities"]
          and sig.method_name == "tensorflow/serving/predict",
          "GetModelMetadata: SignatureDefMap in an Any (serving_default, serving_all)")

    sreq = get_model_status_pb2.GetModelStatusRequest()
    sreq.model_spec.name = "m"
    s = ms.GetModelStatus(sreq, timeout=30)
    check(len(s.model_version_status) == 1 and s.model_version_status[0].version == 1
          and s.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE,
          "GetModelStatus: version 1 AVAILABLE")
    sreq.model_spec.name = "nope"
    check(status_of(lambda: ms.GetModelStatus(sreq, timeout=30)) == "NOT_FOUND",
          "GetModelStatus of an unknown model: NOT_FOUND")
    rc = model_management_pb2.ReloadConfigRequest()
    cfg = rc.config.model_config_list.config.add()
    cfg.name = "m"
    cfg.base_path = os.path.join(tmp, "m")
    cfg.model_platform = "weft"
    cfg.model_version_policy.specific.versions.append(1)
    cfg.version_labels["stable"] = 1
    check(status_of(lambda: ms.HandleReloadConfigRequest(rc, timeout=30)) == "OK",
          "HandleReloadConfigRequest with the served model")
    lreq = predict_pb2.PredictRequest()
    lreq.model_spec.name = "m"
    lreq.model_spec.version_label = "stable"
    lreq.model_spec.signature_name = "serving_all"
    tensor(lreq, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
    lr = ps.Predict(lreq, timeout=60)
    check(lr.model_spec.version.value == 1
          and close(np.array(lr.outputs["logits"].float_val, np.float32).reshape(2, -1), want),
          "Predict with the version_label the reloaded config gave")
    rc.config.model_config_list.config.add().name = "other"
    check(status_of(lambda: ms.HandleReloadConfigRequest(rc, timeout=30)) == "INVALID_ARGUMENT",
          "HandleReloadConfigRequest with a model without base_path: INVALID_ARGUMENT")

    req = predict_pb2.PredictRequest()
    req.model_spec.name = "nope"
    tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
    check(status_of(lambda: ps.Predict(req, timeout=30)) == "NOT_FOUND", "Predict unknown model: NOT_FOUND")
    req.model_spec.name = "m"
    req.model_spec.signature_name = "other"
    check(status_of(lambda: ps.Predict(req, timeout=30)) == "FAILED_PRECONDITION",
          "Predict unknown signature: FAILED_PRECONDITION")
    req.model_spec.signature_name = ""
    req.inputs["input"].tensor_content = x.tobytes()[:100]
    check(status_of(lambda: ps.Predict(req, timeout=30)) == "INVALID_ARGUMENT",
          "Predict tensor_content of the wrong size: INVALID_ARGUMENT")

    # a NaN body under --grpc_max_message_bytes is served (protobuf's 4 bytes
    # a float, no JSON tree; smallcnn's relus turn NaN pixels into a uniform
    # answer); one over it is refused, and the next call is served as before
    n = int(MAX_MSG * 0.9) // (H * W * C * 4)
    nan = np.full((n, H, W, C), np.nan, np.float32)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    tensor(req, nan, types_pb2.DT_FLOAT).float_val.extend(nan.ravel())
    big = grpc.insecure_channel("127.0.0.1:%d" % ports[1],
                                options=[("grpc.max_send_message_length", -1)])
    pbig = prediction_service_pb2_grpc.PredictionServiceStub(big)
    r = pbig.Predict(req, timeout=120)
    check([d.size for d in r.outputs["probabilities"].tensor_shape.dim] == [n, 10]
          and len(r.outputs["probabilities"].float_val) == n * 10,
          "Predict of %d NaN samples (float_val, %.1f MB): served" % (n, req.ByteSize() / 1e6))
    over = np.full((n * 2, H, W, C), np.nan, np.float32)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    tensor(req, over, types_pb2.DT_FLOAT).tensor_content = over.tobytes()
    try:
        pbig.Predict(req, timeout=60)
        code, why = "OK", ""
    except grpc.RpcError as e:
        code, why = e.code().name, e.details()
    check(code == "RESOURCE_EXHAUSTED" and "larger than max" in why,
          "Predict over --grpc_max_message_bytes: RESOURCE_EXHAUSTED naming the limit (%s)" % why)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
    check(close(np.array(ps.Predict(req, timeout=60).outputs["probabilities"].float_val,
                         np.float32).reshape(2, 10), want_p),
          "Predict after the refused one: served")
    big.close()
    ch.close()


def hostile_checks(ports, c):
    """Garbage connections and stalled clients must not stop the others; the
    stalled connections are returned (still open) for stalled_closed()."""
    socks = []
    try:
        g = socket.create_connection(("127.0.0.1", ports[2]))
        g.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(2000))
        g.settimeout(10)
        try:
            closed = g.recv(65536) is not None  # GOAWAY or EOF, never a hang
        except OSError:
            closed = True
        g.close()
        check(closed, "a non-HTTP/2 client is answered or closed, not left hanging")
        for k in range(20):  # stalled: half a preface, then nothing
            s = socket.create_connection(("127.0.0.1", ports[2 - k % 2]))
            s.sendall(b"PRI * HTTP/2.0\r\n")
            socks.append(s)
        t0 = time.time()
        x = np.ones((1, H, W, C), np.float32)
        ok = all(c.infer("m", [infer_input(x)]).as_numpy("logits") is not None for _ in range(10))
        check(ok and c.is_server_live(), "20 stalled connections hold up nobody (10 calls in %.1fs)"
              % (time.time() - t0))
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def stalled_closed(socks, t_open):
    """The server closes connections that never sent HTTP/2 frames (10 s)."""
    deadline = t_open + 17  # the 10 s limit, and room for a loaded machine
    closed = 0
    for s in socks:  # each read waits for the close itself (EOF) until the deadline
        s.settimeout(max(0.1, deadline - time.time()))
        try:
            data = s.recv(65536)
            while data:  # the server's SETTINGS, then EOF
                data = s.recv(65536)
            closed += 1
        except OSError:
            closed += 1 if not isinstance(sys.exc_info()[1], socket.timeout) else 0
        s.close()
    check(closed == len(socks), "stalled connections are closed after 10 s (%d of %d)"
          % (closed, len(socks)))


def overload_check(tmp, base):
    """More calls than the server queues (--max_queue_size; handler threads
    do not wait for inference): RESOURCE_EXHAUSTED at once for the excess,
    the rest answered."""
    port = free_port()
    log = open(os.path.join(tmp, "serve-overload.log"), "w")
    p, c = start_kserve_server(base, port, log, "--grpc_threads", "1", "--max_queue_size", "4",
                          "--num_batch_threads", "1", "--threads", "1")
    x = np.random.default_rng(3).random((64, H, W, C), dtype=np.float32)
    results = queue.Queue()
    n = 40
    for k in range(n):
        c.async_infer("m", [infer_input(x)], partial(results, k))
    codes = []
    for _ in range(n):
        k, res, err = results.get(timeout=300)
        codes.append("OK" if err is None else str(err.status()).replace("StatusCode.", ""))
    ex = codes.count("RESOURCE_EXHAUSTED")
    check(ex > 0 and codes.count("OK") >= 5 and ex + codes.count("OK") == n,
          "40 calls, --max_queue_size 4: %d RESOURCE_EXHAUSTED, %d OK"
          % (ex, codes.count("OK")))
    c.close()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def one_thread_batches_check(tmp, base):
    """A ModelInfer holds no handler thread while it waits for its batch: with
    one handler thread, calls sent at once still share forwards. Small
    messages (UINT8 pixels here) are decoded in the event loop, larger ones
    (FP32) by the handler thread, which then moves on to the next."""
    port = free_port()
    log = open(os.path.join(tmp, "serve-one-thread.log"), "w")
    p, c = start_kserve_server(base, port, log, "--grpc_threads", "1", "--enable_batching",
                               "--max_batch_size", "16", "--batch_timeout_micros", "200000",
                               "--num_batch_threads", "1")
    deadline = time.time() + 60
    while not c.is_model_ready("m") and time.time() < deadline:
        time.sleep(0.1)

    def burst(xs, dtype):
        refs = [c.infer("m", [infer_input(x, dtype)]).as_numpy("logits") for x in xs[:2]]
        before = int(c.get_inference_statistics("m", as_json=True)["model_stats"][0]
                     .get("execution_count", 0))
        results = queue.Queue()
        for k, x in enumerate(xs):
            c.async_infer("m", [infer_input(x, dtype)], partial(results, k))
        got = dict((k, None if err else res.as_numpy("logits"))
                   for k, res, err in (results.get(timeout=120) for _ in xs))
        after = int(c.get_inference_statistics("m", as_json=True)["model_stats"][0]
                    .get("execution_count", 0))
        ok = all(v is not None for v in got.values()) and all(
            close(got[k], refs[k]) for k in range(2))
        return ok, after - before

    rng = np.random.default_rng(5)
    ok, runs = burst(rng.integers(0, 256, (32, 1, H, W, C), dtype=np.uint8), "UINT8")
    check(ok and runs <= 8, "1 handler thread, 32 UINT8 calls at once: all answered right, "
          "in %d forwards" % runs)
    ok, runs = burst(rng.random((4, 1, H, W, C), dtype=np.float32), "FP32")
    check(ok and runs <= 2, "1 handler thread, 4 FP32 calls at once: all answered right, "
          "in %d forwards" % runs)
    c.close()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def tfs_workers_grow_check(tmp, base):
    """A TF Serving Predict holds its handler thread until its batch ran, and
    handler threads start as calls need them: six calls whose batch fills
    only when all six are in get six threads (else the batch would wait out
    its 10 s timeout), and no more than --grpc-infer-thread-count."""
    ports = [free_port() for _ in range(2)]
    log = open(os.path.join(tmp, "serve-grow.log"), "w")
    p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base,
                          "--bind_address", "127.0.0.1", "--rest_api_port", "0",
                          "--port", str(ports[0]), "--grpc_port", str(ports[1]),
                          "--enable_batching", "--max_batch_size", "6",
                          "--batch_timeout_micros", "10000000", "--num_batch_threads", "1",
                          "--grpc-infer-thread-count", "8"],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    c = tg.InferenceServerClient("127.0.0.1:%d" % ports[1])
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        try:
            if c.is_model_ready("m"):
                break
        except InferenceServerException:
            pass
        time.sleep(0.1)

    def workers():
        names = []
        for t in os.listdir("/proc/%d/task" % p.pid):
            try:
                names.append(open("/proc/%d/task/%s/comm" % (p.pid, t)).read().strip())
            except OSError:
                pass  # a thread that ended meanwhile
        return names.count("grpc-worker")

    idle = workers()
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports[0])
    ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    x = np.random.default_rng(9).random((1, H, W, C), dtype=np.float32)
    answers = queue.Queue()

    def one():
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "m"
        tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
        try:
            answers.put(len(ps.Predict(req, timeout=60).outputs["probabilities"].float_val))
        except grpc.RpcError as e:
            answers.put(str(e))
    t0 = time.time()
    ts = [threading.Thread(target=one) for _ in range(6)]
    for t in ts:
        t.start()
    got = [answers.get(timeout=90) for _ in ts]
    took = time.time() - t0
    grown = workers()
    check(got == [10] * 6 and took < 8,
          "6 Predict calls of one batch: answered in %.1f s (%s)" % (took, got))
    # the TF Serving API's threads grew to hold the six; KServe's stayed idle
    check(idle <= 8 and 6 + idle // 2 <= grown <= 8 + idle // 2,
          "gRPC handler threads grow as calls need them: %d idle, %d after (at most 8 per API)"
          % (idle, grown))
    ch.close()
    c.close()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def perf_analyzer_check(ports):
    """Triton's perf_analyzer (shipped in tritonclient[all]'s bin/) over gRPC at
    concurrency 1..50 must run to the end and exit 0."""
    venv = os.path.dirname(os.path.dirname(sys.executable))
    pa = os.path.join(venv, "bin", "perf_analyzer")
    cudart = os.path.join(venv, "lib", "python%d.%d" % sys.version_info[:2], "site-packages",
                          "nvidia", "cuda_runtime", "lib")
    if not os.path.exists(pa):
        check(False, "perf_analyzer is in the client venv (%s)" % pa)
        return
    env = dict(os.environ, LD_LIBRARY_PATH=cudart + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    r = subprocess.run([pa, "-m", "m", "-i", "grpc", "-u", "127.0.0.1:%d" % ports[2],
                        "--concurrency-range", "1:50:7", "--measurement-interval", "1000",
                        "-s", "1000", "--max-trials", "3"], env=env, capture_output=True,
                       text=True, timeout=400)
    lines = [l for l in r.stdout.splitlines() if l.startswith("Concurrency: ")]
    print("\n".join(lines))
    check(r.returncode == 0 and len(lines) == 8 and lines[-1].startswith("Concurrency: 50,"),
          "perf_analyzer -i grpc at concurrency 1..50 exits 0 (rc %d)%s"
          % (r.returncode, "" if r.returncode == 0 else ": " + (r.stdout + r.stderr)[-800:]))


def drain_check(tmp, base):
    """SIGTERM while calls wait for a batch (2 s batching delay): readiness
    off, every call already received is answered, a new ModelInfer is
    served if it reaches the server (the drain rule: docs/promises.md) and
    otherwise fails to connect (the server sent GOAWAY and closed its
    listener), exit 0."""
    port = free_port()
    log = open(os.path.join(tmp, "serve-drain.log"), "w")
    p, c = start_kserve_server(base, port, log, "--enable_batching", "--max_batch_size", "64",
                          "--batch_timeout_micros", "2000000", "--num_batch_threads", "1")
    x = np.random.default_rng(4).random((1, H, W, C), dtype=np.float32)
    results = queue.Queue()
    for k in range(4):
        c.async_infer("m", [infer_input(x)], partial(results, k))
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        c.infer("m", [infer_input(x)])
        late = "OK"
    except InferenceServerException as e:
        late = str(e.status()).replace("StatusCode.", "") + ": " + str(e.message())
    try:
        ready = c.is_server_ready()
    except InferenceServerException:
        ready = "gone"
    codes = [results.get(timeout=120) for _ in range(4)]
    check(all(err is None and res.as_numpy("probabilities").shape == (1, 10)
              for _, res, err in codes), "SIGTERM: the 4 calls waiting for a batch are answered")
    # the drain runs partial batches at once, so the server may be gone by now
    check((late == "OK" or late.startswith("UNAVAILABLE") and "connect" in late)
          and ready in (False, "gone"),
          "SIGTERM: ServerReady false, a new ModelInfer served or not connected (%s; ready %s)"
          % (late, ready))
    check(p.wait(timeout=120) == 0, "SIGTERM with calls in flight: exit 0")
    c.close()


def tls_token_checks(tmp, base):
    """--ssl_cert_file/--ssl_key_file and --auth_token_file guard gRPC as they
    guard HTTP: both ports speak TLS only (tritonclient.grpc ssl=True and a
    secure channel of TF Serving's stub work with the certificate; a plain
    h2c client gets nothing), liveness and readiness stay open, every other
    call without "authorization: Bearer <token>" metadata gets
    UNAUTHENTICATED, a wrong token too, the right one is answered."""
    key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
    subprocess.check_call(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                           "2", "-subj", "/CN=localhost", "-addext",
                           "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key, "-out",
                           cert], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    token = "s3cret-token-0123456789"
    tf = os.path.join(tmp, "token.txt")
    with open(tf, "w") as f:
        f.write(token + "\n")
    port, tfs_port = free_port(), free_port()
    log = open(os.path.join(tmp, "serve-tls.log"), "w")
    p = subprocess.Popen([SERVE, "--model_name", "m", "--model_base_path", base,
                          "--bind_address", "127.0.0.1", "--rest_api_port", "0",
                          "--port", str(tfs_port), "--grpc_port", str(port),
                          "--ssl_cert_file", cert, "--ssl_key_file", key,
                          "--auth_token_file", tf], stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    pem = open(cert, "rb").read()
    c = tg.InferenceServerClient("localhost:%d" % port, ssl=True, root_certificates=cert)
    deadline = time.time() + 60
    ready = False
    while time.time() < deadline and not ready:
        try:
            ready = c.is_server_ready()
        except InferenceServerException:
            time.sleep(0.1)
    check(ready and c.is_server_live(), "TLS: liveness and readiness over TLS, open without a token")
    plain = tg.InferenceServerClient("127.0.0.1:%d" % port)
    check(status_of(lambda: plain.is_server_live()) == "UNAVAILABLE",
          "TLS: a plain-text (h2c) client gets nothing")
    plain.close()
    x = np.random.default_rng(5).random((1, H, W, C), dtype=np.float32)
    good = {"authorization": "Bearer " + token}
    check(status_of(lambda: c.infer("m", [infer_input(x)])) == "UNAUTHENTICATED",
          "token: ModelInfer without the token is UNAUTHENTICATED")
    check(status_of(lambda: c.get_model_metadata("m")) == "UNAUTHENTICATED",
          "token: ModelMetadata without the token is UNAUTHENTICATED")
    check(status_of(lambda: c.infer("m", [infer_input(x)],
                                    headers={"authorization": "Bearer " + token[:-1] + "x"}))
          == "UNAUTHENTICATED", "token: a wrong token is UNAUTHENTICATED")
    r = c.infer("m", [infer_input(x)], headers=good)
    check(r.as_numpy("probabilities").shape == (1, 10),
          "TLS + token: ModelInfer (tritonclient.grpc ssl=True)")
    big = np.random.default_rng(6).random((200, H, W, C), dtype=np.float32)  # 2.4 MB
    want = c.infer("m", [infer_input(big[:1])], headers=good).as_numpy("logits")
    r = c.infer("m", [infer_input(big)], headers=good)
    check(r.as_numpy("logits").shape == (200, 10) and close(r.as_numpy("logits")[:1], want),
          "TLS: a 2.4 MB request (many TLS records) is answered")
    ch = grpc.secure_channel("localhost:%d" % tfs_port, grpc.ssl_channel_credentials(pem))
    ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
    check(status_of(lambda: ps.Predict(req, timeout=60)) == "UNAUTHENTICATED",
          "token: TF Serving Predict without the token is UNAUTHENTICATED")
    r = ps.Predict(req, timeout=60, metadata=(("authorization", "Bearer " + token),))
    check(len(r.outputs["probabilities"].float_val) == 10,
          "TLS + token: TF Serving Predict over a secure channel")
    ch.close()
    c.close()
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=60) == 0, "TLS: SIGTERM, exit 0")


def wait_ready(p, port, log):
    client = tg.InferenceServerClient("127.0.0.1:%d" % port)
    deadline = time.time() + 90
    while time.time() < deadline and p.poll() is None:
        try:
            if client.is_server_ready():
                return client
        except InferenceServerException:
            pass
        time.sleep(0.1)
    raise RuntimeError("weft-serve did not become ready over gRPC; see " + log)


def http_model_infer(port, model, version, x):
    path = "/v2/models/%s%s/infer" % (model, "/versions/%d" % version if version else "")
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.ravel().tolist()}],
                       "outputs": [{"name": "logits"}]}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.load(r)["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


def start_http(tmp, name, args):
    """weft-serve with args on a free REST port (gRPC off); (process, port,
    log) once it is ready, or once it exited."""
    port = free_port()
    log = os.path.join(tmp, "serve-%s.log" % name)
    p = subprocess.Popen([SERVE, "--bind_address", "127.0.0.1", "--rest_api_port", str(port),
                          "--port", "0", "--grpc_port", "0"] + args,
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        try:
            if http_req(port, "/v2/health/ready")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    return p, port, log


def tfs_flags_checks(tmp, base):
    """TF Serving's --batching_parameters_file, --monitoring_config_file,
    --rest_api_enable_cors_support, --max_num_load_retries and
    --load_retry_interval_micros each take effect."""
    bp = os.path.join(tmp, "batching.txt")
    with open(bp, "w") as f:
        f.write("max_batch_size { value: 4 }\nbatch_timeout_micros { value: 500 }\n"
                "num_batch_threads { value: 1 }\nmax_enqueued_batches { value: 8 }\n"
                "pad_variable_length_inputs: true\n")
    mon_off = os.path.join(tmp, "monitoring-off.txt")
    with open(mon_off, "w") as f:
        f.write('prometheus_config { enable: false path: "/monitoring/prometheus/metrics" }\n')
    p, port, log = start_http(tmp, "tfsflags", [
        "--model_base_path", base, "--model_name", "m", "--enable_batching",
        "--batching_parameters_file", bp, "--monitoring_config_file", mon_off,
        "--rest_api_enable_cors_support"])
    st, _, body = http_req(port, "/v2/models/m/config")
    cfg = json.loads(body) if st == 200 else {}
    check(cfg.get("max_batch_size") == 4 and
          cfg.get("dynamic_batching", {}).get("max_queue_delay_microseconds") == 500,
          "--batching_parameters_file: max_batch_size 4, batch_timeout_micros 500 (%s)" % st)
    check("fields weft-serve does not use: pad_variable_length_inputs" in open(log).read(),
          "--batching_parameters_file: a field weft-serve does not use is logged")
    check([http_req(port, u)[0] for u in ("/monitoring/prometheus/metrics", "/metrics")] ==
          [404, 404], "--monitoring_config_file with enable: false: no metrics")
    st, hdrs, _ = http_req(port, "/v1/models/m", {"Origin": "http://example.com"})
    check(st == 200 and hdrs.get("Access-Control-Allow-Origin") == "*",
          "--rest_api_enable_cors_support: Access-Control-Allow-Origin on a reply")
    st, hdrs, _ = http_req(port, "/v1/models/m:predict", method="OPTIONS", headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    check(st == 204 and "POST" in hdrs.get("Access-Control-Allow-Methods", "") and
          hdrs.get("Access-Control-Allow-Headers") == "content-type",
          "--rest_api_enable_cors_support: an OPTIONS preflight is answered (%d %s)" % (st, hdrs))
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    mon_on = os.path.join(tmp, "monitoring-on.txt")
    with open(mon_on, "w") as f:
        f.write('prometheus_config { enable: true path: "/monitoring/prometheus/metrics" }\n')
    p, port, _ = start_http(tmp, "tfsflags2", ["--model_base_path", base, "--model_name", "m",
                                               "--monitoring_config_file", mon_on])
    st, hdrs, body = http_req(port, "/monitoring/prometheus/metrics")
    check(st == 200 and b"weft_serve_requests_total" in body and
          "Access-Control-Allow-Origin" not in hdrs,
          "--monitoring_config_file with enable: true: metrics at its path; no CORS without "
          "the flag")
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    with open(mon_on, "w") as f:
        f.write('prometheus_config { enable: true path: "/other" }\n')
    r = subprocess.run([SERVE, "--model_base_path", base, "--monitoring_config_file", mon_on,
                        "--rest_api_port", "0", "--port", "0", "--grpc_port", "0"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode not in (0, None) and '"/other"' in r.stderr,
          "--monitoring_config_file with another path: refused naming it (%s)" % r.stderr.strip())
    # a version that fails to load is tried again; fixed meanwhile, it loads
    rbase = os.path.join(tmp, "retry")
    os.makedirs(os.path.join(rbase, "1"))
    with open(os.path.join(rbase, "1", "model.h5"), "w") as f:
        f.write("not yet a model")
    port = free_port()
    log = os.path.join(tmp, "serve-retry.log")
    p = subprocess.Popen([SERVE, "--bind_address", "127.0.0.1", "--rest_api_port", str(port),
                          "--port", "0", "--grpc_port", "0", "--model_base_path", rbase,
                          "--model_name", "m", "--file_system_poll_wait_seconds", "0",
                          "--max_num_load_retries", "50", "--load_retry_interval_micros",
                          "200000"], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    deadline = time.time() + 60
    while time.time() < deadline and "trying again" not in open(log).read():
        time.sleep(0.05)
    good = os.path.join(rbase, "good.h5")
    subprocess.check_call([TOOL, "model", "smallcnn", good, "3", "32"])
    os.replace(good, os.path.join(rbase, "1", "model.h5"))
    deadline = time.time() + 60
    st = 0
    while time.time() < deadline and st != 200:
        try:
            st = http_req(port, "/v2/health/ready")[0]
        except OSError:
            pass
        time.sleep(0.1)
    check(st == 200 and "(1 of --max_num_load_retries 50)" in open(log).read(),
          "--max_num_load_retries: a failed load is tried again, and loads once the file is "
          "fixed (poll off)")
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=60) == 0, "the retrying server: SIGTERM exit 0")


def config_file_checks(tmp):
    """Two models from a TF Serving --model_config_file, versions and labels,
    over both gRPC APIs, answers equal to HTTP's; HandleReloadConfigRequest
    drops a model."""
    root = os.path.join(tmp, "cfg")
    for name, ver, seed in (("a", 1, 11), ("a", 2, 12), ("b", 1, 13)):
        os.makedirs(os.path.join(root, name, str(ver)))
        subprocess.check_call([TOOL, "model", "smallcnn",
                               os.path.join(root, name, str(ver), "model.h5"), str(seed), "32"])
    conf = os.path.join(root, "models.config")
    with open(conf, "w") as f:
        f.write('model_config_list {\n'
                '  config { name: "a" base_path: "%s/a" model_platform: "weft"\n'
                '    model_version_policy { specific { versions: 1 versions: 2 } }\n'
                '    version_labels { key: "stable" value: 1 }\n'
                '    version_labels { key: "canary" value: 2 } }\n'
                '  config { name: "b" base_path: "%s/b" model_platform: "weft" }\n'
                '}\n' % (root, root))
    ports = [free_port() for _ in range(3)]
    log = os.path.join(tmp, "serve-config.log")
    p = subprocess.Popen([SERVE, "--model_config_file", conf, "--bind_address", "127.0.0.1",
                          "--rest_api_port", str(ports[0]), "--port", str(ports[1]),
                          "--grpc_port", str(ports[2])],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    c = wait_ready(p, ports[2], log)
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports[1])
    ps = prediction_service_pb2_grpc.PredictionServiceStub(ch)
    ms = model_service_pb2_grpc.ModelServiceStub(ch)
    x = np.random.default_rng(7).random((2, H, W, C), dtype=np.float32)
    want = {(m, v): http_model_infer(ports[0], m, v, x) for m, v in (("a", 1), ("a", 2), ("b", 0))}
    check(not close(want[("a", 1)], want[("a", 2)]), "config file: a/1 and a/2 differ")
    got = {(m, v): c.infer(m, [infer_input(x)], model_version=str(v) if v else "").as_numpy("logits")
           for m, v in want}
    check(all(close(got[k], want[k]) for k in want),
          "KServe gRPC: a v1, a v2 and b answer as HTTP does")
    check(c.is_model_ready("a", "1") and c.is_model_ready("a", "2") and c.is_model_ready("b"),
          "KServe gRPC ModelReady for both models")
    names = sorted({(m["name"], m.get("version")) for m in
                    c.get_model_repository_index(as_json=True)["models"]})
    check(("a", "1") in names and ("a", "2") in names and ("b", "1") in names,
          "RepositoryIndex lists a/1, a/2, b/1 (%s)" % names)
    st = c.get_inference_statistics("a", "2", as_json=True)["model_stats"][0]
    check(int(st["inference_stats"]["success"].get("count", 0)) == 2,
          "ModelStatistics of a v2: the HTTP and the gRPC call (%s)" % st["inference_stats"])
    sts = c.get_inference_statistics("", as_json=True)["model_stats"]
    check(sorted((e["name"], e["version"]) for e in sts) == [("a", "1"), ("a", "2"), ("b", "1")],
          "ModelStatistics of every model: one entry per version (%s)"
          % [(e["name"], e["version"]) for e in sts])
    check(status_of(lambda: c.get_inference_statistics("a", "9")) == "NOT_FOUND",
          "ModelStatistics of a missing version: NOT_FOUND")

    def predict(model, label=None, version=None):
        req = predict_pb2.PredictRequest()
        req.model_spec.name = model
        if label:
            req.model_spec.version_label = label
        if version:
            req.model_spec.version.value = version
        req.model_spec.signature_name = "serving_all"
        tensor(req, x, types_pb2.DT_FLOAT).tensor_content = x.tobytes()
        r = ps.Predict(req, timeout=60)
        return r.model_spec.version.value, np.array(r.outputs["logits"].float_val,
                                                    np.float32).reshape(2, -1)
    v, out = predict("a", label="canary")
    check(v == 2 and close(out, want[("a", 2)]), "TF gRPC Predict version_label canary: a v2")
    v, out = predict("a", label="stable")
    check(v == 1 and close(out, want[("a", 1)]), "TF gRPC Predict version_label stable: a v1")
    v, out = predict("b")
    check(v == 1 and close(out, want[("b", 0)]), "TF gRPC Predict of the second model b")
    check(status_of(lambda: predict("a", label="nope")) == "NOT_FOUND",
          "TF gRPC Predict with an unknown label: NOT_FOUND")
    sreq = get_model_status_pb2.GetModelStatusRequest()
    sreq.model_spec.name = "a"
    sreq.model_spec.version_label = "canary"
    s = ms.GetModelStatus(sreq, timeout=30)
    check([vs.version for vs in s.model_version_status] == [2],
          "GetModelStatus with version_label canary: version 2")
    # all or nothing: a config with one model that cannot load changes nothing
    os.makedirs(os.path.join(root, "bad", "1"))
    with open(os.path.join(root, "bad", "1", "model.h5"), "w") as f:
        f.write("not a model")
    rc = model_management_pb2.ReloadConfigRequest()
    cfg = rc.config.model_config_list.config.add()
    cfg.name = "a"
    cfg.base_path = os.path.join(root, "a")
    cfg.model_version_policy.specific.versions.append(9)  # a version a does not have
    cfg = rc.config.model_config_list.config.add()
    cfg.name = "bad"
    cfg.base_path = os.path.join(root, "bad")
    try:
        ms.HandleReloadConfigRequest(rc, timeout=60)
        err = None
    except grpc.RpcError as e:
        err = (e.code().name, e.details())
    check(err is not None and err[0] == "INVALID_ARGUMENT" and
          err[1].startswith("no version of a (") and "; bad (" in err[1],
          "HandleReloadConfigRequest with models that cannot load: INVALID_ARGUMENT naming them "
          "(%s)" % (err,))
    v1, out1 = predict("a", label="stable")
    v2, out2 = predict("a", label="canary")
    vb, outb = predict("b")
    check(v1 == 1 and v2 == 2 and vb == 1 and close(out1, want[("a", 1)]) and
          close(out2, want[("a", 2)]) and close(outb, want[("b", 0)]),
          "after the refused reload: a v1, a v2 (labels) and b serve as before")
    check(status_of(lambda: predict("bad")) in ("NOT_FOUND", "UNAVAILABLE"),
          "after the refused reload: the bad model is not served")
    rc = model_management_pb2.ReloadConfigRequest()
    cfg = rc.config.model_config_list.config.add()
    cfg.name = "a"
    cfg.base_path = os.path.join(root, "a")
    check(status_of(lambda: ms.HandleReloadConfigRequest(rc, timeout=60)) == "OK",
          "HandleReloadConfigRequest with a alone")
    v, out = predict("a")
    check(v == 2 and close(out, want[("a", 2)]), "after the reload: a serves its latest, v2")
    gone = status_of(lambda: predict("b"))
    check(gone in ("NOT_FOUND", "UNAVAILABLE"), "after the reload: b is gone (%s)" % gone)
    ch.close()
    c.close()
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=60) == 0, "config-file server: SIGTERM exit 0")


def repository_checks(tmp):
    """Triton's model control over gRPC: --model_repository with
    --model_control_mode explicit, RepositoryModelLoad/Unload."""
    root = os.path.join(tmp, "repo")
    os.makedirs(os.path.join(root, "r", "1"))
    subprocess.check_call([TOOL, "model", "smallcnn", os.path.join(root, "r", "1", "model.h5"),
                           "21", "32"])
    ports = [free_port() for _ in range(3)]
    log = os.path.join(tmp, "serve-repo.log")
    p = subprocess.Popen([SERVE, "--model_repository", root, "--model_control_mode", "explicit",
                          "--bind_address", "127.0.0.1", "--http-port", str(ports[0]),
                          "--port", str(ports[1]), "--grpc-port", str(ports[2])],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    c = wait_ready(p, ports[2], log)
    x = np.random.default_rng(8).random((1, H, W, C), dtype=np.float32)
    check(not c.is_model_ready("r"), "explicit mode: r not loaded at start")
    check(status_of(lambda: c.infer("r", [infer_input(x)])) in ("NOT_FOUND", "UNAVAILABLE"),
          "explicit mode: inference of an unloaded model fails")
    check(status_of(lambda: c.load_model("r")) == "OK", "RepositoryModelLoad r over gRPC")
    check(c.is_model_ready("r"), "after RepositoryModelLoad: r ready")
    out = c.infer("r", [infer_input(x)]).as_numpy("logits")
    check(close(out, http_model_infer(ports[0], "r", 0, x)), "r over gRPC answers as HTTP does")
    check(status_of(lambda: c.load_model("nope")) != "OK", "RepositoryModelLoad of a missing model fails")
    check(status_of(lambda: c.unload_model("r")) == "OK", "RepositoryModelUnload r over gRPC")
    check(not c.is_model_ready("r") and
          status_of(lambda: c.infer("r", [infer_input(x)])) in ("NOT_FOUND", "UNAVAILABLE"),
          "after RepositoryModelUnload: r not ready, inference fails")
    c.close()
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=60) == 0, "repository server: SIGTERM exit 0")


def main():
    tmp = tempfile.mkdtemp(prefix="weft-grpc-")
    os.makedirs(os.path.join(tmp, "m", "1"))
    subprocess.check_call([TOOL, "model", "smallcnn", os.path.join(tmp, "m", "1", "model.h5"), "1", "32"])
    p = None
    try:
        p, ports, c = start(tmp, os.path.join(tmp, "m"))
        before = http_metric(ports[0], "weft_serve_requests_total", 'endpoint="v2_infer"')
        kserve_checks(ports, c, tmp)
        fail_count_checks(ports, c)
        after = http_metric(ports[0], "weft_serve_requests_total", 'endpoint="v2_infer"')
        check(after - before >= 60, "gRPC calls are counted in /metrics (%d)" % (after - before))
        tfs_checks(ports, c, tmp)
        t_open = time.time()
        stalled = hostile_checks(ports, c)
        perf_analyzer_check(ports)
        stalled_closed(stalled, t_open)
        overload_check(tmp, os.path.join(tmp, "m"))
        one_thread_batches_check(tmp, os.path.join(tmp, "m"))
        tfs_workers_grow_check(tmp, os.path.join(tmp, "m"))
        drain_check(tmp, os.path.join(tmp, "m"))
        tls_token_checks(tmp, os.path.join(tmp, "m"))
        config_file_checks(tmp)
        repository_checks(tmp)
        tfs_flags_checks(tmp, os.path.join(tmp, "m"))
        c.close()
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=60) == 0, "SIGTERM: exit 0")
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
    if failures:
        print("log:\n" + open(os.path.join(tmp, "serve.log")).read()[-4000:])
        print("%d check(s) failed" % len(failures))
        return 1
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    print("all gRPC checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
