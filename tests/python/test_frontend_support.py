"""Shared by the test_frontend_* suites: puts frontends/python on sys.path and offers
pure-Python float64 references over nested lists (numpy broadcasting included), so no
expected value is computed by minitorch itself.

Tests create tensors on the default device (MT_DEVICE=cpu|cuda chooses it)."""

import math
import os
import random
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.join(ROOT, "frontends", "python")
HEADER = os.path.join(ROOT, "abi", "minitorch.h")
if PACKAGE_DIR not in sys.path:
    sys.path.insert(0, PACKAGE_DIR)

import minitorch as mt  # noqa: E402

DEVICE = mt.get_default_device()
ON_CUDA = DEVICE.type == "cuda"


# ------------------------------------------------------------- nested lists

def shape_of(x):
    s = []
    while isinstance(x, list):
        s.append(len(x))
        if not x:
            break
        x = x[0]
    return tuple(s)


def flat(x):
    if not isinstance(x, list):
        return [x]
    out = []
    for y in x:
        out.extend(flat(y))
    return out


def unflat(values, shape):
    if not shape:
        return values[0]
    out = list(values)
    for d in reversed(shape[1:]):
        out = [out[i:i + d] for i in range(0, len(out), d)]
    return out


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def rand_list(shape, rng, lo=-1.0, hi=1.0):
    return unflat([rng.uniform(lo, hi) for _ in range(numel(shape))], tuple(shape))


def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError("shapes do not broadcast")
        out.append(max(x, y) if min(x, y) != 0 else 0)
    return tuple(out)


def _index(values, shape, idx):
    """Element of a row-major array of shape at broadcast index idx (aligned right)."""
    idx = idx[len(idx) - len(shape):]
    off = 0
    for i, s in zip(idx, shape):
        off = off * s + (i if s != 1 else 0)
    return values[off]


def _all_indices(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _all_indices(shape[1:]):
            yield (i,) + rest


def ref_binary(f, a, b):
    """f applied elementwise under numpy broadcasting; a, b nested lists or numbers."""
    sa, sb = shape_of(a), shape_of(b)
    fa, fb = flat(a), flat(b)
    out = broadcast_shape(sa, sb)
    return unflat([f(_index(fa, sa, i), _index(fb, sb, i)) for i in _all_indices(out)], out)


def ref_unary(f, a):
    return unflat([f(v) for v in flat(a)], shape_of(a))


def ref_matmul(a, b):
    """2-D a [m,k] @ b [k,n]."""
    return [[math.fsum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def ref_transpose2(a):
    return [list(r) for r in zip(*a)]


def ref_reduce(values, shape, dim, keepdim, mean=False):
    """Sum (or mean) of a row-major array over one dim."""
    outer = numel(shape[:dim])
    n = shape[dim]
    inner = numel(shape[dim + 1:])
    out = []
    for o in range(outer):
        for i in range(inner):
            s = math.fsum(values[(o * n + r) * inner + i] for r in range(n))
            out.append(s / n if mean else s)
    oshape = shape[:dim] + ((1,) if keepdim else ()) + shape[dim + 1:]
    return out, oshape


def ref_permute(values, shape, perm):
    oshape = tuple(shape[p] for p in perm)
    strides = [numel(shape[d + 1:]) for d in range(len(shape))]
    out = []
    for idx in _all_indices(oshape):
        off = 0
        for k, p in enumerate(perm):
            off += idx[k] * strides[p]
        out.append(values[off])
    return out, oshape


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# ---------------------------------------------------------------- asserts

class TestCase(unittest.TestCase):
    """unittest.TestCase with a float comparison against nested-list references."""

    def assertClose(self, actual, expected, rtol=1e-5, atol=1e-6, msg=None):
        if isinstance(actual, mt.Tensor):
            a_shape, a = tuple(actual.shape), flat(actual.tolist())
        else:
            a_shape, a = shape_of(actual), flat(actual)
        e_shape, e = shape_of(expected), flat(expected)
        self.assertEqual(a_shape, e_shape, "shape differs%s" % (": " + msg if msg else ""))
        for i, (x, y) in enumerate(zip(a, e)):
            if isinstance(y, float) and math.isnan(y):
                self.assertTrue(math.isnan(x), "element %d: got %r, expected nan %s" % (i, x, msg or ""))
                continue
            if isinstance(y, float) and math.isinf(y):
                self.assertEqual(x, y, "element %d %s" % (i, msg or ""))
                continue
            self.assertLessEqual(abs(x - y), atol + rtol * abs(y),
                                 "element %d: got %r, expected %r %s" % (i, x, y, msg or ""))

    def rng(self, seed=0):
        return random.Random(seed)


def numeric_grad(f, values, shape, eps=1e-6):
    """Central differences of a scalar function of one float64 tensor, in float64."""
    grads = []
    for i in range(len(values)):
        up = list(values)
        dn = list(values)
        up[i] += eps
        dn[i] -= eps
        with mt.no_grad():
            fu = f(mt.tensor(unflat(up, shape), dtype=mt.float64)).item()
            fd = f(mt.tensor(unflat(dn, shape), dtype=mt.float64)).item()
        grads.append((fu - fd) / (2 * eps))
    return unflat(grads, shape)
