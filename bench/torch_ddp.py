#!/usr/bin/env python3
"""The PyTorch peer for bench_allreduce.sh: trains one of weft's zoo networks
(definitions from torch_train.py) with DistributedDataParallel on the gloo
backend, in --procs processes of --threads threads each, on random 32x32x3
data, SGD with momentum. Prints one JSON line: {"model", "procs",
"images_per_sec"} where images/s is the global rate (procs x batch / the
median step time of rank 0, warm-up excluded). Run with Debian's python3."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_train import build


def worker(rank, a, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.procs)
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(build(a.model, 10, a.size))
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 10, (a.batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(a.procs * a.batch / statistics.median(times))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="per process")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--port", type=int, default=29533)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(worker, args=(a, a.port, out), nprocs=a.procs, join=True)
    print(json.dumps({"model": a.model, "procs": a.procs, "images_per_sec": out.get()}),
          flush=True)


if __name__ == "__main__":
    main()
