#!/usr/bin/python3
"""Writes tests/data/datasets/blobs: a small, learnable image dataset in the
IDX format Fashion-MNIST uses (gzip'd, unsigned bytes), for runner tests that
must train to a target in seconds. Ten classes of 8x8 images: each class is a
fixed random pattern; every example is its class's pattern plus noise.
Deterministic (fixed seed, gzip mtime 0), so the committed files and their
digest never change. Run from the repository root."""
import gzip
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datasets", "blobs")
H = W = 8
CLASSES = 10


def write_idx(name, dims, data):
    header = struct.pack(">BBBB", 0, 0, 0x08, len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
    with open(os.path.join(OUT, name), "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(header + bytes(data))


def make(n, rng, protos):
    images, labels = [], []
    for _ in range(n):
        c = rng.randrange(CLASSES)
        labels.append(c)
        for p in protos[c]:
            images.append(max(0, min(255, int(p + rng.gauss(0, 70)))))
    return images, labels


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(20261130)
    protos = [[rng.choice((30, 225)) for _ in range(H * W)] for _ in range(CLASSES)]
    train_x, train_y = make(3000, rng, protos)
    test_x, test_y = make(600, rng, protos)
    write_idx("train-images-idx3-ubyte.gz", (3000, H, W), train_x)
    write_idx("train-labels-idx1-ubyte.gz", (3000,), train_y)
    write_idx("t10k-images-idx3-ubyte.gz", (600, H, W), test_x)
    write_idx("t10k-labels-idx1-ubyte.gz", (600,), test_y)


if __name__ == "__main__":
    main()
