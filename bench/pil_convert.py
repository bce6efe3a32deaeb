"""pil_convert.py: the peer of `weft data images` for bench/bench_images.sh:
the same folder (one sub-folder per class) decoded with PIL in a
multiprocessing pool, EXIF orientation applied, converted to RGB, resized
bilinearly to SxS and written to an HDF5 file with h5py.

  pil_convert.py DIR OUT --size S --procs N     prints "images SECONDS"
"""
import argparse
import os
import time
from multiprocessing import Pool

import h5py
import numpy as np
from PIL import Image, ImageOps

SIZE = 224


def load(path):
    try:
        with Image.open(path) as im:
            im = ImageOps.exif_transpose(im).convert("RGB")
            return np.asarray(im.resize((SIZE, SIZE), Image.BILINEAR))
    except Exception:
        return None


def init(size):
    global SIZE
    SIZE = size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--procs", type=int, default=2)
    a = ap.parse_args()
    t0 = time.time()
    classes = sorted(d for d in os.listdir(a.dir) if os.path.isdir(os.path.join(a.dir, d)))
    files, labels = [], []
    for k, c in enumerate(classes):
        for root, _, names in sorted(os.walk(os.path.join(a.dir, c))):
            for n in sorted(names):
                if n.lower().endswith((".jpg", ".jpeg", ".png")):
                    files.append(os.path.join(root, n))
                    labels.append(k)
    with Pool(a.procs, initializer=init, initargs=(a.size,)) as pool:
        imgs = pool.map(load, files, chunksize=8)
    keep = [i for i, x in enumerate(imgs) if x is not None]
    with h5py.File(a.out, "w") as f:
        f.create_dataset("images", data=np.stack([imgs[i] for i in keep]), chunks=True)
        f.create_dataset("labels", data=np.array([labels[i] for i in keep], np.int32))
        f.attrs["classes"] = classes
    print(len(keep), time.time() - t0)


if __name__ == "__main__":
    main()
