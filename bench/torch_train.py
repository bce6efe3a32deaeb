#!/usr/bin/env python3
"""The PyTorch peer for bench_train: trains the same networks as weft's zoo
(smallcnn, resnet20) with the same batch, threads and optimizer (SGD with
momentum) on random 32x32x3 data, and prints one JSON line per model:
{"model": ..., "images_per_sec": ...} (median over timed steps, warm-up
excluded). Run with Debian's python3 (python3-torch).

--device cuda (used by bench_gpu) trains on the GPU instead, with
--amp bf16|fp16 for autocast mixed precision, tf32 for TF32 tensor cores (cuda); --size 224 with resnet50
needs torchvision. Timings then synchronise the device around each step."""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, classes, size):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.d1 = nn.Linear(64 * (size // 4) * (size // 4), 128)
        self.d2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.d2(F.relu(self.d1(x)))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.short(x) if self.short is not None else x))


class ResNetCifar(nn.Module):
    def __init__(self, n, classes):
        super().__init__()
        self.c = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.b = nn.BatchNorm2d(16, eps=1e-3, momentum=0.01)
        layers, cin = [], 16
        for i, cout in enumerate((16, 32, 64)):
            for j in range(n):
                layers.append(Block(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.b(self.c(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build(name, classes, size):
    if name == "smallcnn":
        return SmallCNN(classes, size)
    if name == "resnet20":
        return ResNetCifar(3, classes)
    if name == "resnet56":
        return ResNetCifar(9, classes)
    if name == "resnet50":
        import torchvision  # the ImageNet ResNet-50, as weft's zoo builds it
        return torchvision.models.resnet50(num_classes=classes)
    if name == "mobilenetv2":
        import torchvision  # Keras's MobileNetV2 (alpha 1), as weft's zoo builds it
        return torchvision.models.mobilenet_v2(num_classes=classes)
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="smallcnn,resnet20")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--amp", default="none", choices=("none", "tf32", "bf16", "fp16"))
    ap.add_argument("--classes", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        # float32 means float32, as weft's default precision (no TF32)
        # (tf32: float32 tensors on TF32 tensor cores, as weft's tf32)
        torch.backends.cuda.matmul.allow_tf32 = a.amp == "tf32"
        torch.backends.cudnn.allow_tf32 = a.amp == "tf32"
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    for name in a.models.split(","):
        model = build(name, a.classes, a.size).to(dev)
        x = torch.randn(a.batch, 3, a.size, a.size, device=dev)
        y = torch.randint(0, a.classes, (a.batch,), device=dev)
        if a.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        scaling = cuda and a.amp == "fp16"
        scaler = (torch.amp.GradScaler(a.device, enabled=scaling)  # torch >= 2.3
                  if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler(enabled=scaling))
        times = []
        for i in range(a.warmup + a.steps):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            with torch.autocast(a.device, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if cuda:
                torch.cuda.synchronize()
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
        print(json.dumps({"model": name, "images_per_sec": a.batch / statistics.median(times)}),
              flush=True)


if __name__ == "__main__":
    main()
