#!/usr/bin/env python3
"""The PyTorch peer for bench_zoo: ResNet50, MobileNetV2 and NASNet-A Mobile
written out here (no torchvision, which has no NASNet), the same layers as
Keras's (ResNet v1 with conv biases and the stride on the first 1x1 conv;
MobileNetV2 alpha 1.0 and NASNetMobile with Keras's padding),
timed like bench_zoo: inference images/s at each --infer-batch (eval mode,
no_grad) and training images/s at --train-batch (SGD with momentum), on
random 224x224 inputs, medians over timed repetitions. Prints one JSON line
per measurement: {"model", "mode", "batch", "images_per_sec"}.
Run with Debian's python3 (python3-torch)."""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Bottleneck(nn.Module):
    def __init__(self, cin, filters, stride, shortcut):
        super().__init__()
        self.shortcut = nn.Sequential(nn.Conv2d(cin, 4 * filters, 1, stride),
                                      nn.BatchNorm2d(4 * filters, eps=1.001e-5)) if shortcut else None
        self.c1 = nn.Conv2d(cin, filters, 1, stride)
        self.b1 = nn.BatchNorm2d(filters, eps=1.001e-5)
        self.c2 = nn.Conv2d(filters, filters, 3, 1, padding=1)
        self.b2 = nn.BatchNorm2d(filters, eps=1.001e-5)
        self.c3 = nn.Conv2d(filters, 4 * filters, 1)
        self.b3 = nn.BatchNorm2d(4 * filters, eps=1.001e-5)

    def forward(self, x):
        s = self.shortcut(x) if self.shortcut is not None else x
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return F.relu(y + s)


class ResNet50(nn.Module):
    def __init__(self, classes=1000, blocks=(3, 4, 6, 3)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, padding=3)
        self.bn1 = nn.BatchNorm2d(64, eps=1.001e-5)
        layers, cin = [], 64
        for s, n in enumerate(blocks):
            f = 64 << s
            for i in range(n):
                layers.append(Bottleneck(cin, f, 2 if (i == 0 and s > 0) else 1, i == 0))
                cin = 4 * f
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 2)
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expansion):
        super().__init__()
        mid = cin * expansion
        self.expand = None
        if expansion != 1:
            self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False),
                                        nn.BatchNorm2d(mid, eps=1e-3), nn.ReLU6())
        # Keras: "same" for stride 1, correct_pad (0,1,0,1 on even inputs) + valid for stride 2
        self.pad = (0, 1, 0, 1) if stride == 2 else None
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, padding=0 if stride == 2 else 1,
                                          groups=mid, bias=False),
                                nn.BatchNorm2d(mid, eps=1e-3), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False),
                                     nn.BatchNorm2d(cout, eps=1e-3))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.expand(x) if self.expand is not None else x
        if self.pad:
            y = F.pad(y, self.pad)
        y = self.project(self.dw(y))
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, padding=1, bias=False),
                                  nn.BatchNorm2d(32, eps=1e-3), nn.ReLU6())
        cfg = [(16, 1, 1, 1), (24, 2, 6, 2), (32, 2, 6, 3), (64, 2, 6, 4), (96, 1, 6, 3),
               (160, 2, 6, 3), (320, 1, 6, 1)]
        layers, cin = [], 32
        for f, s, e, r in cfg:
            for i in range(r):
                layers.append(InvertedResidual(cin, f, s if i == 0 else 1, e))
                cin = f
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False),
                                  nn.BatchNorm2d(1280, eps=1e-3), nn.ReLU6())
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- NASNet-A Mobile, as Keras's nasnet.py and weft's zoo (model/zoo_apps.c) build it ----


def _correct_pad(size, k):
    """Keras's correct_pad before a strided valid conv: F.pad's (l, r, t, b)."""
    adj, c = 1 - size % 2, k // 2
    return (c - adj, c, c - adj, c)


def _bn(c):
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.0003)


def _sep(cin, cout, k, stride, pad):
    """SeparableConv2D without bias: depthwise k x k, then pointwise."""
    return nn.Sequential(nn.Conv2d(cin, cin, k, stride, padding=pad, groups=cin, bias=False),
                         nn.Conv2d(cin, cout, 1, bias=False))


class _SepBlock(nn.Module):
    def __init__(self, cin, f, k, stride, size):
        super().__init__()
        self.pad = _correct_pad(size, k) if stride == 2 else None
        self.c1, self.b1 = _sep(cin, f, k, stride, 0 if stride == 2 else k // 2), _bn(f)
        self.c2, self.b2 = _sep(f, f, k, 1, k // 2), _bn(f)

    def forward(self, x):
        x = F.relu(x)
        if self.pad:
            x = F.pad(x, self.pad)
        return self.b2(self.c2(F.relu(self.b1(self.c1(x)))))


class _Adjust(nn.Module):
    """The previous cell's input p to this cell's size and f channels (the
    first cell has none: p is its own input, as it is; .c: p's channels after)."""

    def __init__(self, pc, psize, isize, f, first):
        super().__init__()
        self.mode = None if first else "reduce" if psize != isize else "project" if pc != f else None
        self.c = pc if self.mode is None else f
        if self.mode == "reduce":
            self.c1 = nn.Conv2d(pc, f // 2, 1, bias=False)
            self.c2 = nn.Conv2d(pc, f // 2, 1, bias=False)
            self.bn = _bn(f // 2 * 2)
        elif self.mode == "project":
            self.conv, self.bn = nn.Conv2d(pc, f, 1, bias=False), _bn(f)

    def forward(self, p):
        if self.mode == "reduce":
            p = F.relu(p)
            p1 = self.c1(F.avg_pool2d(p, 1, 2))
            p2 = self.c2(F.avg_pool2d(F.pad(p, (0, 1, 0, 1))[:, :, 1:, 1:], 1, 2))
            return self.bn(torch.cat([p1, p2], 1))
        if self.mode == "project":
            return self.bn(self.conv(F.relu(p)))
        return p


def _avg3(x):
    return F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)


class _Cell(nn.Module):
    """What every cell starts with: the previous input adjusted (adj) and this
    input's stem (relu, 1x1 conv, batch norm)."""

    def __init__(self, ic, isize, pc, psize, f, first):
        super().__init__()
        self.adj = _Adjust(pc, psize, isize, f, first)
        self.stem = nn.Sequential(nn.ReLU(), nn.Conv2d(ic, f, 1, bias=False), _bn(f))


class _Normal(_Cell):
    def __init__(self, ic, isize, pc, psize, f, first=False):
        super().__init__(ic, isize, pc, psize, f, first)
        q = self.adj.c
        self.l1, self.r1 = _SepBlock(f, f, 5, 1, isize), _SepBlock(q, f, 3, 1, isize)
        self.l2, self.r2 = _SepBlock(q, f, 5, 1, isize), _SepBlock(q, f, 3, 1, isize)
        self.l5 = _SepBlock(f, f, 3, 1, isize)
        self.out = (q + 5 * f, isize)

    def forward(self, x, p):
        p = self.adj(p)
        h = self.stem(x)
        return torch.cat([p, self.l1(h) + self.r1(p), self.l2(p) + self.r2(p), _avg3(h) + p,
                          _avg3(p) + _avg3(p), self.l5(h) + h], 1)


class _Reduction(_Cell):
    def __init__(self, ic, isize, pc, psize, f, first=False):
        super().__init__(ic, isize, pc, psize, f, first)
        q = self.adj.c
        self.pad3 = _correct_pad(isize, 3)
        self.l1, self.r1 = _SepBlock(f, f, 5, 2, isize), _SepBlock(q, f, 7, 2, isize)
        self.r2, self.r3 = _SepBlock(q, f, 7, 2, isize), _SepBlock(q, f, 5, 2, isize)
        self.l5 = _SepBlock(f, f, 3, 1, (isize + 1) // 2)
        self.out = (4 * f, (isize + 1) // 2)

    def forward(self, x, p):
        p = self.adj(p)
        h = self.stem(x)
        h3 = F.pad(h, self.pad3)
        x1 = self.l1(h) + self.r1(p)
        x2 = F.max_pool2d(h3, 3, 2) + self.r2(p)
        x3 = F.avg_pool2d(h3, 3, 2) + self.r3(p)
        x4 = _avg3(x1) + x2
        x5 = self.l5(x1) + F.max_pool2d(h3, 3, 2)
        return torch.cat([x2, x3, x4, x5], 1)


class NASNetMobile(nn.Module):
    """NASNet-A Mobile at 224x224 (penultimate 1056 filters, 4 cells a stage)."""

    def __init__(self, classes=1000, size=224):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, bias=False), _bn(32))
        c, sz = 32, (size - 3) // 2 + 1
        p = (c, sz)  # the previous cell's input: channels, size
        cells, filters = [], 1056 // 24
        plan = [("r", filters // 4), ("r", filters // 2)]
        for stage in range(3):
            f = filters * 2 ** stage
            plan += ([("r", f)] if stage > 0 else []) + [("n", f)] * 4
        for kind, f in plan:
            cell = (_Reduction if kind == "r" else _Normal)(c, sz, p[0], p[1], f, not cells)
            cells.append(cell)
            p, (c, sz) = (c, sz), cell.out
        self.cells = nn.ModuleList(cells)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        p = x
        for cell in self.cells:
            x, p = cell(x, p), x
        x = F.relu(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {"resnet50": ResNet50, "mobilenetv2": MobileNetV2, "nasnetmobile": NASNetMobile}


def timed(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    ap.add_argument("--infer-batch", default="1,32")
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    for name in a.models.split(","):
        if name not in MODELS:
            continue
        m = MODELS[name]()
        params = sum(p.numel() for p in m.parameters())
        m.eval()
        for b in [int(v) for v in a.infer_batch.split(",") if v]:
            x = torch.randn(b, 3, a.size, a.size)
            with torch.no_grad():
                sec = timed(lambda: m(x), a.reps, a.warmup)
            print(json.dumps({"model": name, "mode": "infer", "batch": b,
                              "images_per_sec": b / sec, "params": params}), flush=True)
        if a.train_batch > 0:
            m.train()
            opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
            x = torch.randn(a.train_batch, 3, a.size, a.size)
            y = torch.randint(0, 1000, (a.train_batch,))

            def step():
                opt.zero_grad()
                F.cross_entropy(m(x), y).backward()
                opt.step()

            sec = timed(step, max(2, a.reps // 2), a.warmup)
            print(json.dumps({"model": name, "mode": "train", "batch": a.train_batch,
                              "images_per_sec": a.train_batch / sec}), flush=True)


if __name__ == "__main__":
    main()
