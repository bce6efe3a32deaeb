#!/usr/bin/env python3
"""make_pngs.py DIR: a small photo folder in Keras's layout (DIR/CLASS/NAME.png)
made with the standard library only: 2 classes of 12 flat-coloured PNGs each,
one in a nested folder, plus a PNG whose header claims 3000x3000 pixels (a
--max-pixels case) and a non-image that must be ignored."""
import os
import struct
import sys
import zlib


def png(w, h, rgb):
    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\0" + bytes(rgb) * w for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def main(root):
    for k, (cls, base) in enumerate((("dishes", (200, 40, 40)), ("rooms", (40, 40, 200)))):
        for i in range(12):
            sub = os.path.join(root, cls, "more" if i == 11 else "")
            os.makedirs(sub, exist_ok=True)
            rgb = [min(255, c + 5 * i) for c in base]
            with open(os.path.join(sub, "%03d.png" % (100 * k + i)), "wb") as f:
                f.write(png(40 + i, 30, rgb))
    with open(os.path.join(root, "rooms", "big.png"), "wb") as f:
        f.write(png(3000, 3000, (1, 2, 3)))
    with open(os.path.join(root, "dishes", ".DS_Store"), "wb") as f:
        f.write(b"\0\1junk")


main(sys.argv[1])
