"""Indexing of Tensor: t[i], t[a:b], t[a:b:k], t[..., i], t[None], t[[0, 2]], t[idx_tensor],
built on mt_slice, mt_index_select and reshape, so every result is differentiable; and
t[i] = v / t[a:b] = v along the first dim (a contiguous block written in place).

A uint8 mask (from a comparison) as the only index selects as torch does: t[mask] with
mask.shape == t.shape[:mask.ndim] gives the selected rows flattened into one dim (the mask is
read back to the host to count them, as torch does on CUDA; the rows come from
mt_index_select, so the result is differentiable); t[mask] = v writes v (a number or a
one-element tensor) where the mask is set, through mt_where.

Not available: masks combined with other indices, several index tensors at once (advanced
indexing), negative steps (torch refuses those too)."""

import numbers
import operator

from . import _core
from ._core import _new
from ._lib import lib
from .autograd import no_grad


def _as_index_tensor(idx, device):
    from ._factory import tensor
    from . import _dtype as D
    if isinstance(idx, _core.Tensor):
        if idx.dtype.is_floating_point:
            raise IndexError("tensors used as indices must be long, int or uint8 (a mask) tensors")
        if idx.dtype is D.uint8:
            raise NotImplementedError("a uint8 mask is supported as the only index (t[mask]), not "
                                      "combined with other indices")
        t = idx if idx.dtype is D.int64 else idx.long()
        return t if t.device == device else t.to(device)
    return tensor(list(idx), dtype=D.int64, device=device)


def _select(x, d, indices):
    """index_select along dim d (mt_index_select works on dim 0; other dims are permuted
    to the front and back)."""
    if indices.ndim != 1:
        raise NotImplementedError("only 1-D index tensors are supported")
    if d == 0:
        return _new(lib.mt_index_select, x, indices)
    perm = [d] + [i for i in range(x.ndim) if i != d]
    inv = [0] * x.ndim
    for i, p in enumerate(perm):
        inv[p] = i
    return _new(lib.mt_index_select, x.permute(perm), indices).permute(inv)


def _expand_index(index, ndim):
    if not isinstance(index, tuple):
        index = (index,)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > ndim:
        raise IndexError("too many indices for tensor of dimension %d" % ndim)
    out = []
    for i in index:
        if i is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(i)
    if Ellipsis not in index:
        out.extend([slice(None)] * (ndim - used))
    return out


def _single(index):
    return index[0] if isinstance(index, tuple) and len(index) == 1 else index


def _is_mask(idx):
    from . import _dtype as D
    return isinstance(idx, _core.Tensor) and idx.dtype is D.uint8


def _check_mask(x, mask):
    if mask.ndim == 0 or tuple(mask.shape) != tuple(x.shape[:mask.ndim]):
        raise IndexError("The shape of the mask %s does not match the shape of the indexed tensor %s "
                         "(a mask covers the leading dims of the tensor)" % (list(mask.shape), list(x.shape)))


def _mask_select(x, mask):
    from ._factory import tensor
    from . import _dtype as D
    _check_mask(x, mask)
    picked = [i for i, m in enumerate(mask.reshape(-1).tolist()) if m]
    rows = x.reshape((mask.numel(),) + tuple(x.shape[mask.ndim:]))
    return _new(lib.mt_index_select, rows, tensor(picked, dtype=D.int64, device=x.device))


def _is_int(i):
    return isinstance(i, numbers.Integral) and not isinstance(i, bool)


class IndexingMixin:
    def __getitem__(self, index):
        if _is_mask(_single(index)):
            return _mask_select(self, _single(index))
        out = self
        d = 0
        tensors = 0
        for idx in _expand_index(index, self.ndim):
            if idx is None:
                out = out.unsqueeze(d)
                d += 1
            elif _is_int(idx) or (isinstance(idx, _core.Tensor) and idx.ndim == 0
                                  and not idx.dtype.is_floating_point):
                size = out.shape[d]
                i = operator.index(idx)
                j = i + size if i < 0 else i
                if not 0 <= j < size:
                    raise IndexError("index %d is out of bounds for dimension %d with size %d" % (i, d, size))
                s = list(out.shape)
                del s[d]
                out = _new(lib.mt_slice, out, d, j, j + 1).reshape(s)
            elif isinstance(idx, slice):
                start, stop, step = idx.indices(out.shape[d])
                if step <= 0:
                    raise ValueError("step must be greater than zero")
                if step == 1 and d > 0 and start == 0 and stop >= out.shape[d]:
                    pass  # the whole of a later dim: nothing to do (slicing it would copy, and
                    # t[0:2] or t[...] would stop being a view of t)
                elif step == 1:
                    out = _new(lib.mt_slice, out, d, start, max(start, stop))
                else:
                    out = _select(out, d, _as_index_tensor(range(start, stop, step), out.device))
                d += 1
            elif isinstance(idx, (_core.Tensor, list, range)):
                tensors += 1
                if tensors > 1:
                    raise NotImplementedError("indexing with several index tensors (advanced indexing) "
                                              "is not available")
                if isinstance(idx, list) and any(isinstance(v, bool) for v in idx):
                    raise NotImplementedError("boolean-mask indices are not available")
                out = _select(out, d, _as_index_tensor(idx, out.device))
                d += 1
            else:
                raise TypeError("unsupported index type %s" % type(idx).__name__)
        return out

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    def __setitem__(self, index, value):
        """t[i] = v, t[a:b] = v (first dim, step 1), t[...] = v, t[:] = v: value (a number or
        a tensor, broadcast) is written into the rows in place."""
        from ._core import _is_scalar
        idx = _single(index)
        if _is_mask(idx):
            return self._mask_fill(idx, value)
        if idx is Ellipsis or (isinstance(idx, slice) and idx == slice(None)):
            start, stop, region = 0, None, None
        elif _is_int(idx) and self.ndim > 0:
            size = self.shape[0]
            start = idx + size if idx < 0 else idx
            if not 0 <= start < size:
                raise IndexError("index %d is out of bounds for dimension 0 with size %d" % (idx, size))
            stop, region = start + 1, tuple(self.shape[1:])
        elif isinstance(idx, slice) and self.ndim > 0:
            start, stop, step = idx.indices(self.shape[0])
            if step != 1:
                raise NotImplementedError("assignment to a strided slice is not available")
            stop = max(start, stop)
            region = (stop - start,) + tuple(self.shape[1:])
        else:
            raise NotImplementedError("indexed assignment supports t[i], t[a:b], t[:] and t[...] "
                                      "(first dim); other forms need a scatter op in the C ABI")
        if _is_scalar(value):
            self._check_inplace()
            src = value  # _write makes it at the region's shape
        elif isinstance(value, _core.Tensor):
            self._check_inplace(value)
            src = value
        else:
            raise TypeError("can't assign a %s to a Tensor" % type(value).__name__)
        row_bytes = self.dtype.itemsize
        for s in self.shape[1:]:
            row_bytes *= s
        with no_grad():
            self._write(src, byte_offset=start * row_bytes, region=region)

    def _mask_fill(self, mask, value):
        """t[mask] = value: value (a number or a one-element tensor) where mask is set."""
        from ._core import _is_scalar, _scalar_tensor
        from ._tensor import where
        _check_mask(self, mask)
        if _is_scalar(value):
            self._check_inplace()
        elif isinstance(value, _core.Tensor) and value.numel() == 1:
            self._check_inplace(value)
        else:
            raise NotImplementedError("t[mask] = v takes a number or a one-element tensor (a tensor of "
                                      "the selected rows needs a scatter op in the C ABI)")
        with no_grad():
            src = _scalar_tensor(value, self) if _is_scalar(value) else value.reshape(()).to(self.device)
            m = mask.to(self.device).reshape(tuple(mask.shape) + (1,) * (self.ndim - mask.ndim))
            self._write(where(m, src, self))
