#!/usr/bin/env python3
"""The PyTorch peer for bench_serve.sh: in-process batched inference of the
same network as weft's zoo (the definitions in torch_train.py), in eval mode
under torch.inference_mode, on random 32x32x3 input, with the given threads.
Prints one JSON line: {"model", "variant", "batch", "threads",
"images_per_sec", "ms_per_batch"} (median batch time over --seconds, after
warm-up). --freeze runs torch.jit.freeze(torch.jit.script(model)), which folds
batch norm into the convolutions as `weft export` does. Run with Debian's
python3 (python3-torch)."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import build  # noqa: E402  the same network definitions


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--freeze", action="store_true")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = build(a.model, a.classes, a.size).eval()
    x = torch.randn(a.batch, 3, a.size, a.size)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    variant = "eager"
    with torch.inference_mode():
        if a.freeze:
            model = torch.jit.freeze(torch.jit.script(model))
            variant = "jit.freeze"
        for _ in range(5):  # warm-up: allocator, oneDNN/MKL plans, JIT profiling
            torch.softmax(model(x), 1)
        times = []
        t_end = time.perf_counter() + a.seconds
        while time.perf_counter() < t_end or len(times) < 5:
            t0 = time.perf_counter()
            torch.softmax(model(x), 1)
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"model": a.model, "variant": variant + ("+channels_last" if a.channels_last else ""),
                      "batch": a.batch, "threads": a.threads,
                      "images_per_sec": round(a.batch / med, 2), "ms_per_batch": round(1e3 * med, 3)}),
          flush=True)


if __name__ == "__main__":
    main()
