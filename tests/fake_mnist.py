"""A small fake MNIST for the tests: IDX files of 28x28 uint8 images where class k is a bright
6x6 square at a place of its own plus noise, so that any of the demos learns it in a few epochs.

    from fake_mnist import write_fake_mnist
    write_fake_mnist(folder, n_train=256, n_test=64)          # train raw, t10k gzipped
    write_fake_mnist(folder, 256, 64, gzip_test=False)        # all four files raw

    images, labels = fake_mnist(n, seed)                      # bytes, n*784 and n
    write_split(folder, "t10k", images, labels)               # one split, e.g. train as test

The same n and seed give the same bytes (random.Random(seed)); the training split is seeded
with 1 and the test split with 2. Import it after putting tests/ on sys.path.
"""
import gzip
import os
import random
import struct

SIDE = 28
CLASSES = 10


def idx_bytes(type_code, dims, payload):
    """An IDX file: magic 0 0 type ndim, the dims as big-endian uint32, then the payload."""
    return struct.pack(">BBBB", 0, 0, type_code, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload


def fake_mnist(n, seed):
    """n images [28,28] uint8 and labels: class k is a bright 6x6 square at its own place, plus noise."""
    rng = random.Random(seed)
    images, labels = bytearray(), bytearray()
    for i in range(n):
        k = i % CLASSES
        r0, c0 = 3 + 8 * (k // 4), 3 + 6 * (k % 4)
        img = [rng.randrange(0, 60) for _ in range(SIDE * SIDE)]
        for r in range(r0, r0 + 6):
            for c in range(c0, c0 + 6):
                img[r * SIDE + c] = rng.randrange(180, 256)
        images += bytes(img)
        labels.append(k)
    return bytes(images), bytes(labels)


def write_split(folder, split, images, labels, gz=False):
    """split-images-idx3-ubyte and split-labels-idx1-ubyte in folder (with .gz appended and
    gzip-compressed when gz)."""
    n = len(labels)
    for name, data in (("%s-images-idx3-ubyte" % split, idx_bytes(0x08, [n, SIDE, SIDE], images)),
                       ("%s-labels-idx1-ubyte" % split, idx_bytes(0x08, [n], labels))):
        path = os.path.join(folder, name)
        if gz:
            with gzip.open(path + ".gz", "wb") as f:
                f.write(data)
        else:
            with open(path, "wb") as f:
                f.write(data)


def write_fake_mnist(folder, n_train=256, n_test=64, gzip_test=True):
    """The four MNIST files in folder (created if missing): n_train training images (seed 1,
    raw) and n_test test images (seed 2, gzipped unless gzip_test is False)."""
    os.makedirs(folder, exist_ok=True)
    write_split(folder, "train", *fake_mnist(n_train, 1))
    write_split(folder, "t10k", *fake_mnist(n_test, 2), gz=gzip_test)
