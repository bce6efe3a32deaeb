#!/usr/bin/env python3
"""Compare two `weft inspect --dump` outputs: same tensors, and every value
equal (tol 0: bitwise, the %.9g text is exact for float32) or within a
relative tolerance (|a-b| <= tol * max(|a|, |b|, 1e-3))."""
import sys


def load(path):
    out = {}
    for line in open(path):
        parts = line.split()
        if parts:
            out[parts[0]] = [float(v) for v in parts[1:]]
    return out


def main():
    a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
    if sorted(a) != sorted(b):
        print("tensor names differ:", sorted(set(a) ^ set(b)))
        return 1
    worst, where, n = 0.0, None, 0
    for name in a:
        if len(a[name]) != len(b[name]):
            print(f"{name}: {len(a[name])} vs {len(b[name])} values")
            return 1
        for i, (x, y) in enumerate(zip(a[name], b[name])):
            n += 1
            d = abs(x - y) / max(abs(x), abs(y), 1e-3)
            if d > worst:
                worst, where = d, f"{name}[{i}]: {x!r} vs {y!r}"
    print(f"{n} values compared, worst relative difference {worst:.3g}" +
          (f" at {where}" if where else ""))
    if tol == 0:
        return 0 if worst == 0 else 1
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
