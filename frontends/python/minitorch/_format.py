"""repr() of tensors in PyTorch's layout: 4 decimals, '1.' for whole floats, scientific
notation for wide ranges, lines wrapped at 80 columns, '...' beyond 1000 elements."""

import math

from . import _dtype as D

LINEWIDTH = 80
THRESHOLD = 1000   # more elements than this are summarized
EDGEITEMS = 3      # elements kept at each end of a summarized dim


class _Formatter:
    def __init__(self, values, floating):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        if floating:
            finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
            if finite:
                self.int_mode = all(v == math.ceil(v) for v in finite)
                hi, lo = max(finite), min(finite)
                if self.int_mode:
                    self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
                else:
                    self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        self.width = max((len(self.plain(v)) for v in values), default=1)

    def plain(self, v):
        if not self.floating:
            return str(v)
        if self.sci_mode:
            return "{:.4e}".format(v)
        if self.int_mode:
            s = "{:.0f}".format(v)
            return s + "." if math.isfinite(v) else s
        return "{:.4f}".format(v)

    def __call__(self, v):
        return self.plain(v).rjust(self.width)


def _strides(shape):
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def _indices(n, summarize):
    if summarize and n > 2 * EDGEITEMS:
        return list(range(EDGEITEMS)) + [None] + list(range(n - EDGEITEMS, n))
    return list(range(n))


def _shown(flat, shape, strides, summarize):
    """The elements that will be printed (the formatter's width depends only on them)."""
    out = []

    def rec(offset, d):
        for i in _indices(shape[d], summarize):
            if i is None:
                continue
            if d == len(shape) - 1:
                out.append(flat[offset + i])
            else:
                rec(offset + i * strides[d], d + 1)
    rec(0, 0)
    return out


def _body(flat, shape, fmt, summarize, indent):
    strides = _strides(shape)
    ndim = len(shape)

    def rec(offset, d, indent):
        idx = _indices(shape[d], summarize)
        if d == ndim - 1:
            items = [" ..." if i is None else fmt(flat[offset + i]) for i in idx]
            per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
            lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
            return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
        parts = ["..." if i is None else rec(offset + i * strides[d], d + 1, indent + 1) for i in idx]
        sep = "," + "\n" * (ndim - d - 1) + " " * (indent + 1)
        return "[" + sep.join(parts) + "]"
    return rec(0, 0, indent)


def format_tensor(flat, shape, dtype, device, requires_grad, prefix="tensor("):
    numel = len(flat)
    shape = tuple(shape)
    indent = len(prefix)
    if numel == 0:
        body = "[]"
    elif not shape:
        body = _Formatter(flat, dtype.is_floating_point).plain(flat[0])
    else:
        summarize = numel > THRESHOLD
        shown = _shown(flat, shape, _strides(shape), summarize) if summarize else flat
        fmt = _Formatter(shown, dtype.is_floating_point)
        body = _body(flat, shape, fmt, summarize, indent)
    suffixes = []
    if device.type != "cpu":
        suffixes.append("device='%s'" % device)
    if numel == 0 and shape != (0,):
        suffixes.append("size=%s" % (shape,))
    if dtype is not D.get_default_dtype() and dtype is not D.int64:
        suffixes.append("dtype=%r" % dtype)
    if requires_grad:
        suffixes.append("requires_grad=True")
    return prefix + body + "".join(", " + s for s in suffixes) + ")"
