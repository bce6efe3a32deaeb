"""photos.py: the real-world photo folder of tests/worker/test_images.sh, and
the checks on what `weft data images` made of it (reading the dataset file
with h5py, as a user's own tool would).

  photos.py make DIR        write DIR/cats, DIR/dogs (+ junk and bad files)
  photos.py check FILE DIR  check FILE (converted at --size 32) against DIR
"""
import io
import os
import sys

import numpy as np
from PIL import Image

RED, BLUE = (200, 40, 40), (40, 60, 210)
BAD = {"x_bomb.jpg": "too large", "y_fake.jpg": "not a JPEG or PNG", "z_truncated.jpg": "truncated"}


def jpeg(img, **kw):
    b = io.BytesIO()
    img.save(b, "JPEG", quality=92, **kw)
    return b.getvalue()


def noisy(size, colour, seed):
    rng = np.random.default_rng(seed)
    a = np.clip(np.array(colour, np.int16) + rng.integers(-20, 21, (size[1], size[0], 3)), 0, 255)
    return Image.fromarray(a.astype(np.uint8), "RGB")


def make(root):
    cats, dogs = os.path.join(root, "cats"), os.path.join(root, "dogs")
    os.makedirs(os.path.join(dogs, "more"), exist_ok=True)
    os.makedirs(cats, exist_ok=True)
    w = lambda p, b: open(p, "wb").write(b)
    w(os.path.join(cats, "a_baseline.jpg"), jpeg(noisy((64, 48), RED, 1)))
    w(os.path.join(cats, "b_progressive.jpg"), jpeg(noisy((80, 80), RED, 2), progressive=True))
    w(os.path.join(cats, "c_gray.jpg"), jpeg(noisy((40, 40), RED, 3).convert("L")))
    w(os.path.join(cats, "d_cmyk.jpg"), jpeg(Image.new("RGB", (48, 48), RED).convert("CMYK")))
    # EXIF orientation 6 (display = stored image turned 90 degrees clockwise):
    # stored left half white, so the displayed top half is white.
    a = np.zeros((40, 60, 3), np.uint8)
    a[:, :30] = 255
    exif = Image.Exif()
    exif[0x0112] = 6
    w(os.path.join(cats, "e_rot6.jpg"), jpeg(Image.fromarray(a), exif=exif.tobytes()))
    a16 = np.full((30, 30), 40000, np.uint16)  # 16-bit gray PNG: 40000/65535 -> 156
    Image.fromarray(a16).save(os.path.join(cats, "f_png16.png"))
    noisy((50, 30), RED, 4).convert("P", palette=Image.ADAPTIVE).save(os.path.join(cats, "g_palette.png"))
    rgba = noisy((33, 33), RED, 5).convert("RGBA")
    rgba.putalpha(128)
    rgba.save(os.path.join(cats, "h_rgba.png"))
    w(os.path.join(cats, "i_big.JPG"), jpeg(noisy((1200, 900), RED, 6)))
    # bad files: skipped and reported
    good = jpeg(noisy((96, 96), RED, 7))  # cut inside the scan data
    w(os.path.join(cats, "z_truncated.jpg"), good[: len(good) * 3 // 4])
    w(os.path.join(cats, "y_fake.jpg"), b"this is not a photo\n")
    bomb = bytearray(jpeg(Image.new("L", (8, 8), 0)))
    i = bomb.find(b"\xff\xc0")  # SOF0: height, width at +5 and +7
    bomb[i + 5 : i + 9] = (20000).to_bytes(2, "big") * 2
    w(os.path.join(cats, "x_bomb.jpg"), bytes(bomb))
    # not images: ignored silently
    w(os.path.join(cats, ".DS_Store"), b"\0\0\0\1Bud1")
    w(os.path.join(dogs, "Thumbs.db"), b"\xd0\xcf\x11\xe0")
    w(os.path.join(dogs, "notes.txt"), b"dogs\n")
    w(os.path.join(root, "README.txt"), b"top-level files are not a class\n")
    for k in range(6):
        w(os.path.join(dogs, "d%d.jpg" % k), jpeg(noisy((50 + 7 * k, 40 + 3 * k), BLUE, 10 + k)))
    noisy((45, 45), BLUE, 20).save(os.path.join(dogs, "p.png"))
    w(os.path.join(dogs, "more", "nested.jpeg"), jpeg(noisy((64, 64), BLUE, 21)))


def check(path, root):
    import h5py

    f = h5py.File(path, "r")
    x, y = f["images"][...], f["labels"][...]
    classes = [c.decode() if isinstance(c, bytes) else c for c in f.attrs["classes"]]
    assert classes == ["cats", "dogs"], classes
    assert x.shape == (17, 32, 32, 3) and x.dtype == np.uint8, (x.shape, x.dtype)
    assert list(y) == [0] * 9 + [1] * 8, list(y)
    assert "crc32" in f["images"].attrs and "crc32" in f["labels"].attrs
    names = ["a_baseline", "b_progressive", "c_gray", "d_cmyk", "e_rot6", "f_png16", "g_palette", "h_rgba", "i_big"]
    s = dict(zip(names, x[:9]))
    for n in names:
        if n not in ("c_gray", "e_rot6", "f_png16"):
            m = s[n].reshape(-1, 3).mean(0)
            assert abs(m - RED).max() < 14, (n, m)
    ref = np.asarray(Image.open(os.path.join(root, "cats", "d_cmyk.jpg")).convert("RGB")).reshape(-1, 3).mean(0)
    assert abs(s["d_cmyk"].reshape(-1, 3).mean(0) - ref).max() < 4, ("cmyk", ref)
    g = s["c_gray"]
    assert (g[..., 0] == g[..., 1]).all() and (g[..., 1] == g[..., 2]).all(), "gray not replicated"
    assert abs(int(s["f_png16"].mean()) - 156) <= 1, s["f_png16"].mean()
    r = s["e_rot6"].mean(axis=(1, 2))
    assert r[:14].min() > 240 and r[18:].max() < 15, ("EXIF orientation not applied", r)
    for k in range(9, 17):
        assert abs(x[k].reshape(-1, 3).mean(0) - BLUE).max() < 14, k
    rep = open(path + ".skipped.txt").read().strip().splitlines()
    assert len(rep) == 3, rep
    for line in rep:
        p, why = line.split("\t")
        assert BAD[os.path.basename(p)] in why, line
    print("photos.py: %s: 17 samples, 3 skipped, orientation, CMYK, gray, 16-bit PNG ok" % path)


if __name__ == "__main__":
    {"make": lambda: make(sys.argv[2]), "check": lambda: check(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
