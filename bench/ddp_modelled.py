#!/usr/bin/env python3
"""The PyTorch peer of `weft bench cluster`: one rank of DistributedDataParallel
(gloo) with modelled compute. The parameters are the model's views with
weft's sizes (--layout, written by weft); a step sleeps the forward time,
then the backward releases each layer's gradients at the moment weft's
modelled backward does (autograd functions that sleep until their release
time and return fixed gradients), so DDP's hooks start its buckets as they
would in a real backward. Prints weft's result line:
"weft-cluster-result rank=R median_ms=.. p90_ms=.. steps=S cpu_ms=.."."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


class Release(torch.autograd.Function):
    """Identity forward; backward waits until the release time of this
    group of parameters, then gives each its fixed gradient."""

    @staticmethod
    def forward(ctx, x, clock, at, *params):
        ctx.clock, ctx.at = clock, at
        ctx.shapes = [p.shape for p in params]
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        wait = ctx.clock["backward"] + ctx.at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        grads = [torch.full(s, 1e-4) for s in ctx.shapes]
        return (g, None, None, *grads)


class Modelled(torch.nn.Module):
    def __init__(self, layout, backward_s, clock):
        super().__init__()
        views = layout["views"]
        self.params = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(n)) for n in views)
        # release points: after k, the gradient prefix [0, done) (weft's view
        # order: the last layer first) is final at fraction `at` of the backward
        self.groups = []
        offset, v = 0, 0
        for at, done in layout["release"]:
            first = v
            while v < len(views) and offset + views[v] <= done:
                offset += views[v]
                v += 1
            if v > first:
                self.groups.append((at * backward_s, list(range(first, v))))
        self.clock = clock

    def forward(self, x):
        # forward runs the groups first layer first: the last group released
        for at, idx in reversed(self.groups):
            x = Release.apply(x, self.clock, at, *[self.params[i] for i in idx])
        return x.sum()


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--rank", type=int, required=True)
    a.add_argument("--world", type=int, required=True)
    a.add_argument("--master", required=True)
    a.add_argument("--layout", required=True)
    a.add_argument("--steps", type=int, default=20)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--compute-ms", default="30/60")
    a.add_argument("--bucket-mb", type=float, default=25)
    args = a.parse_args()
    fwd_ms, bwd_ms = (float(x) for x in args.compute_ms.split("/"))
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", args.master)
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
    layout = json.load(open(args.layout))
    clock = {"backward": 0.0}
    model = Modelled(layout, bwd_ms / 1e3, clock)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.zeros(1, requires_grad=True)
    times = []
    dist.barrier()
    cpu0 = 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        time.sleep(fwd_ms / 1e3)
        loss = ddp(x)
        clock["backward"] = time.perf_counter()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if step >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    cpu_ms = (time.process_time() - cpu0) * 1e3 / args.steps
    dist.barrier()
    dist.destroy_process_group()
    times.sort()
    p90 = times[int(0.9 * (len(times) - 1) + 0.5)]
    # one write, newline included: the ranks share one pipe
    sys.stdout.write(f"weft-cluster-result rank={args.rank} median_ms={statistics.median(times):.3f} "
                     f"p90_ms={p90:.3f} steps={len(times)} cpu_ms={cpu_ms:.3f}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
