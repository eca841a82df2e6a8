"""Factories: tensor(), zeros/ones/full, rand/randn, arange, the *_like forms, and the
random seed generator behind rand/randn."""

import math
import numbers
import operator
import os

from . import _convert
from . import _dtype as D
from ._lib import lib
from ._core import _full, _int64_array, _new, _shape_args, real_arg
from ._tensor import Tensor
from .autograd import no_grad

# ----------------------------------------------------------------- random

_MASK64 = (1 << 64) - 1
DEFAULT_SEED = 67280421310721


class Generator:
    """Hands out one seed per random tensor. mt_tensor_rand/randn are counter-based
    (Philox keyed by the seed), so seeds derived from (initial seed, call number)
    reproduce the same values on every device."""

    def __init__(self, seed=DEFAULT_SEED):
        self.manual_seed(seed)

    def manual_seed(self, seed):
        """seed: an integer in [-2^63, 2^64) (a negative one taken modulo 2^64, as torch)."""
        seed = int(seed)
        if not -(1 << 63) <= seed <= _MASK64:
            raise ValueError("manual_seed: seed must be within [-2^63, 2^64 - 1], got %d" % seed)
        self._seed = seed & _MASK64
        self._calls = 0
        return self

    def initial_seed(self):
        return self._seed

    def seed(self):
        """Re-seeds from the operating system's entropy; returns the new seed."""
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def next_seed(self):
        """splitmix64 of (initial seed, call number), kept within int64."""
        self._calls += 1
        z = (self._seed + self._calls * 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return (z ^ (z >> 31)) >> 1


default_generator = Generator()


def manual_seed(seed):
    """Seeds the default generator; rand/randn and layer initialisation become reproducible."""
    return default_generator.manual_seed(seed)


def seed():
    return default_generator.seed()


def initial_seed():
    return default_generator.initial_seed()


# -------------------------------------------------------------- factories


def _checked_dtype(dtype):
    """dtype itself when it is None or a minitorch dtype; TypeError otherwise ('float32', float)."""
    if dtype is not None and not isinstance(dtype, D.dtype):
        raise TypeError("dtype must be a minitorch dtype such as minitorch.float32, got %r" % (dtype,))
    return dtype


def _float_dtype(dtype):
    return D.get_default_dtype() if _checked_dtype(dtype) is None else dtype


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def _from_bytes(raw, shape, dtype, device):
    numel = math.prod(shape)
    nbytes = memoryview(raw).nbytes
    if nbytes != numel * dtype.itemsize:  # the library reads numel x itemsize bytes from raw
        raise ValueError("%d bytes cannot hold a %s tensor of shape %s (%d bytes)"
                         % (nbytes, dtype.name, list(shape), numel * dtype.itemsize))
    dims, n = _int64_array(tuple(shape))
    return _new(lib.mt_tensor_from_data, raw, dims, n, dtype.code, device.code)


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of data: a number, nested lists/tuples of numbers,
    anything with the buffer protocol (array.array, numpy arrays, memoryview), or a Tensor.

    dtype defaults as torch: any float -> the default float dtype (float32), integers ->
    int64, only bools -> uint8 (minitorch has no bool dtype); buffers keep their type."""
    dev = D.as_device(device)
    _checked_dtype(dtype)
    if isinstance(data, Tensor):
        with no_grad():
            t = data.detach().to(dev, dtype).clone()
        return _finish(t, requires_grad)
    if isinstance(data, (list, tuple)) or isinstance(data, numbers.Number):
        shape, flat = _convert.flatten(data)
        flat = _convert.scalarize(flat)
        dt = _convert.infer_dtype(flat) if dtype is None else dtype
        raw, raw_dt = _convert.encode(flat, dt)
    else:
        try:
            memoryview(data)
        except TypeError:
            if isinstance(data, (str, bytes, dict, set, frozenset)) or not hasattr(data, "__iter__"):
                raise TypeError("can't build a tensor from %s" % type(data).__name__) from None
            return tensor(list(data), dtype=dtype, device=dev, requires_grad=requires_grad)
        shape, raw, raw_dt, flat = _convert.from_buffer(data)
        if raw is None:
            raw, raw_dt = _convert.encode(flat, raw_dt)
        dt = raw_dt if dtype is None else dtype
        if not dt.is_floating_point and raw_dt.is_floating_point:
            # float buffer into an integer dtype: truncate on the host, as torch does
            raw, raw_dt = _convert.encode(_convert.decode(raw, raw_dt, len(raw) // raw_dt.itemsize), dt)
    t = _from_bytes(raw, shape, raw_dt, dev)
    if dt is not raw_dt:
        t = _new(lib.mt_tensor_cast, t, dt.code)
    return _finish(t, requires_grad)


def _filled(fn, size, dtype, device, requires_grad):
    dims, n = _int64_array(_shape_args(size))
    t = _new(fn, dims, n, _float_dtype(dtype).code, D.as_device(device).code)
    return _finish(t, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return _filled(lib.mt_tensor_zeros, size, dtype, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return _filled(lib.mt_tensor_ones, size, dtype, device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """dtype follows fill_value when not given: bool -> uint8, int -> int64, float -> default."""
    if _checked_dtype(dtype) is None:
        if isinstance(fill_value, bool):
            dtype = D.uint8
        elif isinstance(fill_value, numbers.Integral):
            dtype = D.int64
        else:
            dtype = D.get_default_dtype()
    t = _full(_shape_args((size,) if isinstance(size, int) else size), fill_value, dtype, D.as_device(device))
    return _finish(t, requires_grad)


def _random(fn, size, generator, dtype, device, requires_grad):
    gen = default_generator if generator is None else generator
    dims, n = _int64_array(_shape_args(size))
    t = _new(fn, dims, n, gen.next_seed(), _float_dtype(dtype).code, D.as_device(device).code)
    return _finish(t, requires_grad)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform on [0, 1)."""
    return _random(lib.mt_tensor_rand, size, generator, dtype, device, requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal."""
    return _random(lib.mt_tensor_randn, size, generator, dtype, device, requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """[start, start+step, ...) short of end; int64 when every argument is an integer."""
    if end is None:
        start, end = 0, start
    for name, v in (("start", start), ("end", end), ("step", step)):
        real_arg(v, "arange(): " + name)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if _checked_dtype(dtype) is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = D.int64 if ints else D.get_default_dtype()
    for v in (start, end, step):
        if not math.isfinite(float(v)):
            raise ValueError("arange: unsupported range: %s -> %s step %s" % (start, end, step))
    t = _new(lib.mt_tensor_arange, float(start), float(end), float(step), dtype.code,
             D.as_device(device).code)
    return _finish(t, requires_grad)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0..n-1 (int64; mt_randperm)."""
    gen = default_generator if generator is None else generator
    t = _new(lib.mt_randperm, operator.index(n), gen.next_seed(), D.as_device(device).code)
    if _checked_dtype(dtype) is not None and dtype is not t.dtype:
        t = _new(lib.mt_tensor_cast, t, dtype.code)
    return _finish(t, requires_grad)


def _like(t, dtype, device):
    return (t.dtype if dtype is None else dtype), (t.device if device is None else device)


def zeros_like(input, dtype=None, device=None, requires_grad=False):
    dt, dev = _like(input, dtype, device)
    return zeros(input.shape, dtype=dt, device=dev, requires_grad=requires_grad)


def ones_like(input, dtype=None, device=None, requires_grad=False):
    dt, dev = _like(input, dtype, device)
    return ones(input.shape, dtype=dt, device=dev, requires_grad=requires_grad)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):
    dt, dev = _like(input, dtype, device)
    return full(input.shape, fill_value, dtype=dt, device=dev, requires_grad=requires_grad)


def rand_like(input, dtype=None, device=None, requires_grad=False):
    dt, dev = _like(input, dtype, device)
    return rand(input.shape, dtype=dt, device=dev, requires_grad=requires_grad)


def randn_like(input, dtype=None, device=None, requires_grad=False):
    dt, dev = _like(input, dtype, device)
    return randn(input.shape, dtype=dt, device=dev, requires_grad=requires_grad)


def is_tensor(obj):
    return isinstance(obj, Tensor)
