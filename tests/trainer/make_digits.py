#!/usr/bin/env python3
"""make_digits.py OUT.bin COUNT SEED: a small "real-looking" image set in the
CIFAR-10 binary layout (1 label byte + 3x32x32 planar RGB per record), for
`weft data cifar10`. Ten digit glyphs (5x7 bitmaps) drawn bright on a dark,
noisy background at random scale, position, slant and colour -- high-contrast,
mostly-black images like upscaled sklearn digits or MNIST, which is where a
network's initialisation matters. Standard library only."""
import random
import sys

FONT = {
    0: ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    1: ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    2: ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    3: ["11111", "00010", "00100", "00010", "00001", "10001", "01110"],
    4: ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    5: ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    6: ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    7: ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    8: ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    9: ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
}


def render(digit, r):
    sx, sy = r.uniform(3.0, 4.0), r.uniform(3.0, 4.0)
    ox, oy = r.uniform(0, 32 - 5 * sx), r.uniform(0, 32 - 7 * sy)
    slant = r.uniform(-0.3, 0.3)
    colour = [r.randint(180, 255) for _ in range(3)]
    glyph = FONT[digit]
    img = bytearray(3 * 1024)
    for y in range(32):
        for x in range(32):
            fy, fx = (y - oy) / sy, (x - ox - slant * (y - 16)) / sx
            on = 0 <= fy < 7 and 0 <= fx < 5 and glyph[int(fy)][int(fx)] == "1"
            noise = r.randint(0, 40)
            for c in range(3):
                img[c * 1024 + y * 32 + x] = colour[c] if on else noise
    return img


def main():
    out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    r = random.Random(seed)
    with open(out, "wb") as f:
        for _ in range(count):
            d = r.randrange(10)
            f.write(bytes([d]))
            f.write(render(d, r))


if __name__ == "__main__":
    main()
