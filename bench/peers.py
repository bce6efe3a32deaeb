#!/usr/bin/env python3
"""The peer engines for bench_zoo and bench_train, run with the venv of
bench/peers_venv.sh: PyTorch eager fp32 channels_last and bf16 autocast,
ONNX Runtime fp32 (torch.onnx export of the same network), OpenVINO fp32 and
bf16 (from the same ONNX file) and int8 (NNCF post-training quantisation of
it, calibrated on noise, where nncf is installed). The networks are those of torch_zoo.py
(resnet50, mobilenetv2, nasnetmobile at 224x224) and torch_train.py (resnet20, smallcnn at
32x32). Inference uses random input at each --infer-batch; training (torch
only: SGD with momentum) at --train-batch. Prints one JSON line per
measurement: {"model", "mode", "batch", "engine", "images_per_sec"} (median of
--reps timed runs after warm-up). Engines that fail print nothing."""
import argparse
import json
import warnings
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import build as build_small  # noqa: E402
from torch_zoo import MODELS  # noqa: E402


def build(name, classes):
    if name in MODELS:
        return MODELS[name](classes), 224
    return build_small(name, classes, 32), 32


def timed(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def emit(model, mode, batch, engine, sec):
    print(json.dumps({"model": model, "mode": mode, "batch": batch, "engine": engine,
                      "images_per_sec": round(batch / sec, 2)}), flush=True)


def infer(name, m, size, b, a, tmp):
    x = torch.randn(b, 3, size, size)
    mcl = m.to(memory_format=torch.channels_last)
    xcl = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        emit(name, "infer", b, "torch-fp32-cl", timed(lambda: mcl(xcl), a.reps, a.warmup))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            emit(name, "infer", b, "torch-bf16", timed(lambda: mcl(xcl), a.reps, a.warmup))
    path = os.path.join(tmp, f"{name}_{b}.onnx")
    try:
        with torch.no_grad():
            try:
                torch.onnx.export(m.to(memory_format=torch.contiguous_format), x, path,
                                  dynamo=False, opset_version=17)
            except TypeError:
                torch.onnx.export(m, x, path, opset_version=17)
    except Exception as e:  # noqa: BLE001
        print(f"peers: onnx export of {name} failed: {e}", file=sys.stderr)
        return
    xn = x.numpy()
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        inp = s.get_inputs()[0].name
        emit(name, "infer", b, "onnxruntime-fp32",
             timed(lambda: s.run(None, {inp: xn}), a.reps, a.warmup))
    except Exception as e:  # noqa: BLE001
        print(f"peers: onnxruntime {name}: {e}", file=sys.stderr)
    try:
        import openvino as ov
        core = ov.Core()
        for prec in ("f32", "bf16"):
            cm = core.compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": a.threads,
                                                  "INFERENCE_PRECISION_HINT": prec,
                                                  "PERFORMANCE_HINT": "LATENCY"})
            if prec == "bf16" and "bf" not in str(
                    cm.get_property("INFERENCE_PRECISION_HINT")).lower():
                continue  # no native bf16 here
            req = cm.create_infer_request()
            emit(name, "infer", b, "openvino-" + ("fp32" if prec == "f32" else prec),
                 timed(lambda: req.infer({0: xn}), a.reps, a.warmup))
    except Exception as e:  # noqa: BLE001
        print(f"peers: openvino {name}: {e}", file=sys.stderr)
    try:  # post-training int8 with NNCF, calibrated on noise as bench_zoo calibrates weft
        import nncf
        import numpy as np
        import openvino as ov
        core = ov.Core()
        rng = np.random.default_rng(11)
        calib = [rng.standard_normal(xn.shape, dtype=np.float32) for _ in range(max(1, 8 // b))]
        q = nncf.quantize(core.read_model(path), nncf.Dataset(calib),
                          subset_size=len(calib))
        cm = core.compile_model(q, "CPU", {"INFERENCE_NUM_THREADS": a.threads,
                                           "PERFORMANCE_HINT": "LATENCY"})
        req = cm.create_infer_request()
        emit(name, "infer", b, "openvino-int8", timed(lambda: req.infer({0: xn}), a.reps, a.warmup))
    except Exception as e:  # noqa: BLE001
        print(f"peers: openvino int8 {name}: {e}", file=sys.stderr)


def train(name, m, size, b, a, classes):
    m = m.to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(b, 3, size, size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (b,))

    def step(bf16):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    reps = max(3, a.reps)
    emit(name, "train", b, "torch-fp32-cl", timed(lambda: step(False), reps, a.warmup + 1))
    emit(name, "train", b, "torch-bf16", timed(lambda: step(True), reps, a.warmup + 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    ap.add_argument("--infer-batch", default="1,32")
    ap.add_argument("--train-batch", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            classes = 1000 if name in MODELS else 10
            m, size = build(name, classes)
            m.eval()
            for b in [int(v) for v in a.infer_batch.split(",") if v]:
                infer(name, m, size, b, a, tmp)
            if a.train_batch > 0:
                train(name, m, size, a.train_batch, a, classes)


if __name__ == "__main__":
    main()
