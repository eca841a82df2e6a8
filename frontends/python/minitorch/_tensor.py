"""Tensor: a Python object that owns one reference to an mt_tensor handle.

Contents
  handles ........ Tensor._from_handle, close/__del__ (release exactly once)
  metadata ....... shape, dtype, device, requires_grad, grad, numel, ...
  host data ...... item, tolist, numpy, __repr__
  conversions .... to, cpu, cuda, float, double, ..., detach, clone
  operators ...... + - * / @ ** unary-, with Python scalars, broadcasting and type promotion
  ops ............ one line each: relu, sigmoid, tanh, exp, log, softmax, sum, mean, ...
  reductions ..... max/min (values, indices), argmax/argmin
  shape ops ...... reshape/view, flatten, squeeze/unsqueeze, transpose, permute, t, T
  autograd ....... backward
In-place ops (copy_, zero_, add_, +=, ...) come from InplaceMixin (_inplace.py), indexing
from IndexingMixin (_indexing.py); the helpers (op calls, dtype promotion, op builders) from _core.py.

Every op result is a fresh Tensor owning a new reference; the C library keeps its own
references for the tape, so Python may drop intermediates at any time.
"""

import ctypes
import operator
from collections import namedtuple
from ctypes import byref, c_double, c_int32, c_int64, c_void_p

from . import _convert, _core, _format
from . import _dtype as D
from ._core import (NOT_IN_ABI, _binary, _cast, _checked, _dim_op, _floating, _for_scalar,
                    _int64_array, _is_integral, _is_scalar, _new, _new_as, _reduction, _scalar_tensor,
                    _shape_args, _unary_op, _wrap_dim, real_arg, result_type)
from ._indexing import IndexingMixin
from ._inplace import InplaceMixin
from ._lib import lib
from .autograd import enable_grad

# The operators' C calls without ctypes' errcheck: _binary tests the status itself (about 0.1 us
# a call on the CPU backend).
_MT_ADD, _MT_SUB, _MT_MUL = (lib.unchecked(n) for n in ("mt_add", "mt_sub", "mt_mul"))

# What max(dim)/min(dim) return, as torch.return_types.max.
MaxResult = namedtuple("max", ["values", "indices"])
MinResult = namedtuple("min", ["values", "indices"])


class Tensor(IndexingMixin, InplaceMixin):
    """An n-dimensional array on a device, recorded for autograd when it requires grad.

    Create tensors with minitorch.tensor(), zeros(), ones(), full(), rand(), randn(),
    arange(); never with Tensor(...) directly. A tensor releases its handle exactly once,
    when it is garbage collected or at an explicit close() (also `with t: ...`).
    """

    _as_parameter_ = None         # the mt_tensor * (None once closed); what ctypes passes
    _shape = None
    _dtype = None
    _device = None
    __array_priority__ = 1000     # numpy defers mixed operators to Tensor
    __array_ufunc__ = None

    def __init__(self, *args, **kwargs):
        raise TypeError("minitorch.Tensor is not constructed directly; use minitorch.tensor(data), "
                        "minitorch.zeros(...) or another factory")

    @classmethod
    def _from_handle(cls, handle):
        """Wraps a handle, taking over the caller's one reference."""
        t = object.__new__(cls)
        t._as_parameter_ = handle
        return t

    # The handle lives in _as_parameter_, the attribute ctypes reads for a Tensor argument (a
    # plain instance attribute: a property there would cost a Python call per argument of every
    # op); NULL once closed, which the library refuses with MT_ERR_INVALID_ARGUMENT.
    @property
    def _h(self):
        return self._as_parameter_

    @_h.setter
    def _h(self, handle):
        self._as_parameter_ = handle

    def close(self):
        """Releases the handle now; the tensor is unusable afterwards. Idempotent."""
        h, self._h = self._h, None
        if h is not None:
            lib.mt_tensor_release(h)

    @property
    def closed(self):
        return self._h is None

    def __del__(self, _release=lib.unchecked("mt_tensor_release")):
        h = self._as_parameter_
        if h is not None:
            self._as_parameter_ = None
            try:
                _release(h)
            except Exception:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # --------------------------------------------------------------- metadata

    @property
    def shape(self):
        s = self._shape
        if s is None:
            n = c_int64()
            lib.mt_tensor_ndim(self, byref(n))
            dims = (c_int64 * max(n.value, 1))()
            lib.mt_tensor_shape(self, dims)
            s = self._shape = D.Size(dims[:n.value])
        return s

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[_wrap_dim(dim, len(s))]

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def numel(self):
        return self.shape.numel()

    nelement = numel

    @property
    def dtype(self):
        d = self._dtype
        if d is None:
            code = c_int32()
            lib.mt_tensor_dtype(self, byref(code))
            d = self._dtype = D.dtype_from_code(code.value)
        return d

    @property
    def device(self):
        d = self._device
        if d is None:
            code = c_int32()
            lib.mt_tensor_device(self, byref(code))
            d = self._device = D.device_from_code(code.value)
        return d

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def element_size(self):
        return self.dtype.itemsize

    def data_ptr(self):
        """Address of the first element (device memory for CUDA tensors)."""
        p = c_void_p()
        lib.mt_tensor_data_ptr(self, byref(p))
        return p.value or 0

    def is_contiguous(self):
        return True          # every minitorch tensor is dense and row-major

    def contiguous(self):
        return self

    @property
    def requires_grad(self):
        v = c_int64()
        lib.mt_tensor_requires_grad(self, byref(v))
        return bool(v.value)

    @requires_grad.setter
    def requires_grad(self, flag):
        lib.mt_tensor_set_requires_grad(self, 1 if flag else 0)

    def requires_grad_(self, requires_grad=True):
        if not isinstance(requires_grad, bool):  # "no" is truthy
            raise TypeError("requires_grad_(): argument 'requires_grad' must be bool, not %s"
                            % type(requires_grad).__name__)
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        """The accumulated gradient (a tensor sharing the gradient's storage), or None."""
        out = c_void_p()
        lib.mt_tensor_grad(byref(out), self)
        return None if out.value is None else Tensor._from_handle(out.value)

    @grad.setter
    def grad(self, value):
        """`t.grad = None` drops the gradient (mt_tensor_clear_grad); assigning a tensor is not
        in the ABI."""
        if value is None:
            lib.mt_tensor_clear_grad(self)
            return
        raise NotImplementedError(NOT_IN_ABI.format(
            what="assigning a tensor to .grad", need="function to set a gradient (mt_tensor_set_grad)")
            + "; `t.grad = None` drops it")

    def _zero_grad(self):
        """Sets every element of the gradient to zero (no-op without one)."""
        lib.mt_tensor_zero_grad(self)

    def _clear_grad(self):
        """Drops the gradient (no-op without one)."""
        lib.mt_tensor_clear_grad(self)

    @property
    def data(self):
        """A tensor on the same storage that does not require grad."""
        return self.detach()

    # -------------------------------------------------------------- host data

    def _host_buffer(self):
        nbytes = self.numel() * self.dtype.itemsize
        buf = (ctypes.c_char * nbytes)()
        if nbytes:
            lib.mt_tensor_copy_to_host(self, buf, nbytes)
        return buf

    def _host_flat(self):
        return _convert.decode(bytes(self._host_buffer()), self.dtype, self.numel())

    def item(self):
        """The value of a one-element tensor as a Python float or int."""
        if self.dtype.is_floating_point:
            v = c_double()
            lib.mt_tensor_item(self, byref(v))
            return v.value
        n = self.numel()
        if n != 1:
            raise ValueError("a Tensor with %d elements cannot be converted to Scalar" % n)
        return self._host_flat()[0]

    def tolist(self):
        """Nested Python lists (a number for a 0-d tensor)."""
        return _convert.nest(self._host_flat(), self.shape)

    def numpy(self):
        """A numpy array holding a copy of the values (CPU tensors, numpy must be importable)."""
        try:
            import numpy as np
        except ImportError:
            raise ImportError("Tensor.numpy() needs numpy, which is not installed; use tolist()") from None
        if self.device.type != "cpu":
            raise TypeError("can't convert %s device type tensor to numpy. Use Tensor.cpu() to copy "
                            "the tensor to host memory first." % self.device)
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        if self.dtype is D.bfloat16:
            raise TypeError("numpy has no bfloat16; convert with .float() first")
        buf = self._host_buffer()
        return np.frombuffer(buf, dtype=np.dtype(self.dtype.format)).reshape(tuple(self.shape))

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        if self._h is None:
            return "tensor(<closed>)"
        return _format.format_tensor(self._host_flat(), self.shape, self.dtype, self.device,
                                     self.requires_grad)

    def __reduce__(self):
        return (_rebuild_tensor, (bytes(self._host_buffer()), tuple(self.shape), self.dtype.name,
                                  str(self.device), self.requires_grad))

    # ------------------------------------------------------------ conversions

    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(device, dtype), to(other_tensor); keywords device=,
        dtype=, copy=. Returns self when nothing changes (unless copy=True)."""
        dev = dt = None
        copy = kwargs.pop("copy", False)
        kwargs.pop("non_blocking", None)
        kw_dtype = kwargs.pop("dtype", None)
        if kw_dtype is not None and not isinstance(kw_dtype, D.dtype):  # dtype=5 read as cuda:5
            raise TypeError("to(): dtype must be a minitorch dtype, got %r" % (kw_dtype,))
        for a in list(args) + [kwargs.pop("device", None), kw_dtype]:
            if a is None:
                continue
            if isinstance(a, D.dtype):
                dt = a
            elif isinstance(a, Tensor):
                dev, dt = a.device, a.dtype
            else:
                dev = D.as_device(a)
        if kwargs:
            raise TypeError("to() got unexpected keyword arguments %s" % ", ".join(sorted(kwargs)))
        out = self
        move = dev is not None and dev != self.device
        if dt is not None and dt is not self.dtype and dt.itemsize <= self.dtype.itemsize:
            out = _new(lib.mt_tensor_cast, out, dt.code)     # shrink before crossing devices
        if move:
            out = _new(lib.mt_tensor_to, out, dev.code)
        if dt is not None and out.dtype is not dt:
            out = _new(lib.mt_tensor_cast, out, dt.code)
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to(D.device("cuda", device))

    def type(self, dtype=None):
        if dtype is None:
            return "minitorch." + self.dtype.name
        return self.to(dtype)

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def half(self):
        return self.to(D.float16)

    def bfloat16(self):
        return self.to(D.bfloat16)

    def int(self):
        return self.to(D.int32)

    def long(self):
        return self.to(D.int64)

    def byte(self):
        return self.to(D.uint8)

    def detach(self):
        """A new tensor on the same storage that does not require grad."""
        return _new(lib.mt_tensor_detach, self)

    def clone(self):
        """A copy with its own storage (differentiable)."""
        return _new(lib.mt_tensor_clone, self)

    # -------------------------------------------------------------- operators

    def _add(self, other):
        if isinstance(other, Tensor):
            return _binary(_MT_ADD, self, other, True)
        if _is_scalar(other):
            x = _for_scalar(self, other)
            return _new_as(lib.mt_add_scalar, x.dtype, x, float(other))
        return NotImplemented

    def _sub(self, other):
        if isinstance(other, Tensor):
            return _binary(_MT_SUB, self, other, True)
        if _is_scalar(other):
            x = _for_scalar(self, other)
            return _new_as(lib.mt_add_scalar, x.dtype, x, -float(other))
        return NotImplemented

    def _mul(self, other):
        if isinstance(other, Tensor):
            return _binary(_MT_MUL, self, other, True)
        if _is_scalar(other):
            x = _for_scalar(self, other)
            return _new_as(lib.mt_mul_scalar, x.dtype, x, float(other))
        if isinstance(other, (list, tuple)):  # NotImplemented would let a list repeat itself t times
            raise TypeError("can't multiply a Tensor and a %s (make it a tensor with minitorch.tensor)"
                            % type(other).__name__)
        return NotImplemented

    def _div(self, other):
        # Division by a 0-d tensor of the value, not a multiply by its reciprocal, so
        # x / 3 rounds as torch does.
        if _is_scalar(other):
            x = _floating(self)
            return _new(lib.mt_div, x, _scalar_tensor(other, x))
        if isinstance(other, Tensor):
            dt = result_type(self, other)
            if not dt.is_floating_point:
                dt = D.get_default_dtype()       # true division of integers
            return _new(lib.mt_div, _cast(self, dt), _cast(other, dt))
        return NotImplemented

    def _pow(self, exponent):
        if _is_scalar(exponent):
            return _new(lib.mt_pow_scalar, _for_scalar(self, exponent), float(exponent))
        if isinstance(exponent, Tensor):
            return _binary(lib.mt_pow, self, exponent, True)
        return NotImplemented

    def __rpow__(self, base):
        if _is_scalar(base):
            x = _for_scalar(self, base)
            return _new(lib.mt_pow, _scalar_tensor(base, x), x)
        return NotImplemented

    def _matmul(self, other):
        if not isinstance(other, Tensor):
            return NotImplemented
        dt = result_type(self, other)
        a, b = _cast(self, dt), _cast(other, dt)
        if a.ndim == 1 and b.ndim == 1:
            return _new(lib.mt_matmul, a.reshape(1, -1), b.reshape(-1, 1)).reshape(())
        if a.ndim == 1:
            out = _new(lib.mt_matmul, a.reshape(1, -1), b)
            return out.reshape(out.shape[:-2] + out.shape[-1:])
        if b.ndim == 1:
            out = _new(lib.mt_matmul, a, b.reshape(-1, 1))
            return out.reshape(out.shape[:-1])
        return _new(lib.mt_matmul, a, b)

    __add__ = __radd__ = _add
    __sub__ = _sub
    __mul__ = __rmul__ = _mul
    __truediv__ = _div
    __pow__ = _pow
    __matmul__ = _matmul

    def add(self, other, alpha=1):
        """self + alpha * other (other a tensor or a number, broadcast)."""
        real_arg(alpha, "add(): alpha")
        return _checked(self._add(other if alpha == 1 else other * alpha), "add", other)

    def sub(self, other, alpha=1):
        """self - alpha * other."""
        real_arg(alpha, "sub(): alpha")
        return _checked(self._sub(other if alpha == 1 else other * alpha), "sub", other)

    subtract = sub

    def mul(self, other):
        return _checked(self._mul(other), "mul", other)

    multiply = mul

    def div(self, other):
        """True division (integer inputs give the default float dtype)."""
        return _checked(self._div(other), "div", other)

    divide = true_divide = div

    def pow(self, exponent):
        """self ** exponent: a number (mt_pow_scalar) or a tensor, broadcast (mt_pow)."""
        return _checked(self._pow(exponent), "pow", exponent)

    def matmul(self, other):
        """[m,k]@[k,n], [b,m,k]@[b,k,n], [b,m,k]@[k,n]; 1-D operands as torch (a vector
        is a row on the left, a column on the right, dropped from the result)."""
        return _checked(self._matmul(other), "matmul", other)

    def __rsub__(self, other):
        if _is_scalar(other):
            return _new(lib.mt_add_scalar, _new(lib.mt_neg, _for_scalar(self, other)), float(other))
        return NotImplemented

    def __rtruediv__(self, other):
        if _is_scalar(other):
            x = _floating(self)
            return _new(lib.mt_div, _scalar_tensor(other, x), x)
        return NotImplemented

    def __rmatmul__(self, other):
        return NotImplemented

    def __neg__(self):
        return _new(lib.mt_neg, self)

    def __pos__(self):
        return self

    # ---------------------------------------------------------- comparisons
    # Results are uint8 masks of 0/1 (minitorch has no bool dtype), usable by where(),
    # mask indexing and arithmetic after .float(). `t == None` stays False.

    def _compare(self, other, fn):
        if _is_scalar(other):
            x = _for_scalar(self, other)
            if not x.dtype.is_floating_point:
                if not _fits(other, x.dtype):
                    x = _cast(x, D.int64)      # e.g. uint8 == -1: compare exactly, as numbers
                if _fits(other, x.dtype):      # integers cross exactly (not through a double)
                    from ._factory import tensor
                    return _new(fn, x, tensor(other, dtype=x.dtype, device=x.device))
            return _new(fn, x, _scalar_tensor(other, x))
        if isinstance(other, Tensor):
            return _binary(fn, self, other)
        return NotImplemented

    def __eq__(self, other):
        return self._compare(other, lib.mt_eq)

    def __ne__(self, other):
        return self._compare(other, lib.mt_ne)

    def __lt__(self, other):
        return self._compare(other, lib.mt_lt)

    def __le__(self, other):
        return self._compare(other, lib.mt_le)

    def __gt__(self, other):
        return self._compare(other, lib.mt_gt)

    def __ge__(self, other):
        return self._compare(other, lib.mt_ge)

    __hash__ = object.__hash__

    def eq(self, other):
        """self == other elementwise (uint8 0/1, broadcast; mt_eq)."""
        return _checked(self._compare(other, lib.mt_eq), "eq", other)

    def ne(self, other):
        return _checked(self._compare(other, lib.mt_ne), "ne", other)

    def lt(self, other):
        return _checked(self._compare(other, lib.mt_lt), "lt", other)

    def le(self, other):
        return _checked(self._compare(other, lib.mt_le), "le", other)

    def gt(self, other):
        return _checked(self._compare(other, lib.mt_gt), "gt", other)

    def ge(self, other):
        return _checked(self._compare(other, lib.mt_ge), "ge", other)

    not_equal, less, less_equal, greater, greater_equal = ne, lt, le, gt, ge

    def equal(self, other):
        """True when other has the same shape and equal elements (torch.equal)."""
        if not isinstance(other, Tensor) or tuple(self.shape) != tuple(other.shape):
            return False
        return all(v == 1 for v in (self == other).reshape(-1).tolist())

    def where(self, condition, other):
        """self where condition, else other (torch's Tensor.where)."""
        return where(condition, self, other)

    def maximum(self, other):
        """Elementwise max (broadcast; NaN propagates; a tie splits the gradient; mt_maximum)."""
        return _binary(lib.mt_maximum, self, _as_tensor_like(other, self), True)

    def minimum(self, other):
        return _binary(lib.mt_minimum, self, _as_tensor_like(other, self), True)

    def clamp(self, min=None, max=None):
        """min(max(self, min), max); bounds are numbers (mt_clamp) or tensors (mt_maximum,
        mt_minimum). The gradient passes where min <= self <= max."""
        if min is None and max is None:
            raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            out = self
            if min is not None:
                out = out.maximum(min)
            if max is not None:
                out = out.minimum(max)
            return out
        lo = float("-inf") if min is None else float(real_arg(min, "clamp(): min"))
        hi = float("inf") if max is None else float(real_arg(max, "clamp(): max"))
        x = self
        if not x.dtype.is_floating_point and not all(b is None or _is_integral(b) for b in (min, max)):
            x = _cast(x, D.get_default_dtype())
        return _new(lib.mt_clamp, x, lo, hi)

    clip = clamp

    def clamp_min(self, min):
        return self.clamp(min=min)

    def clamp_max(self, max):
        return self.clamp(max=max)

    def masked_fill(self, mask, value):
        """value where mask is set, self elsewhere; mask is a uint8 0/1 tensor (what the
        comparisons return; minitorch has no bool dtype) broadcast to self's shape, value a
        number or a one-element tensor. Differentiable in self (mt_masked_fill)."""
        return _new(lib.mt_masked_fill, self, _check_fill_mask(mask, self), _fill_value(value))

    def masked_fill_(self, mask, value):
        """In-place masked_fill (not recorded: see the in-place rules)."""
        m, v = _check_fill_mask(mask, self), _fill_value(value)
        return self._inplace(lambda: _new(lib.mt_masked_fill, self, m, v))

    # ------------------------------------------------------------------ DLPack

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A "dltensor" PyCapsule sharing this tensor's memory (DLPack v0.8; a CUDA tensor's
        queued work is finished first, so any consumer stream may read it)."""
        from ._dlpack import to_capsule
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("__dlpack__: cannot export to device %r (the tensor is on %s)"
                              % (tuple(dl_device), self.device))
        return to_capsule(self.clone() if copy else self)

    def __dlpack_device__(self):
        """(kDLCPU=1 or kDLCUDA=2, device id)."""
        return (2, 0) if self.device.type == "cuda" else (1, 0)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __format__(self, spec):
        """A 0-d tensor formats as its number ("{:.2f}"), as torch; others only with an empty spec
        (their str)."""
        if self.numel() == 1 and self.ndim == 0:
            return format(self.item(), spec)
        if spec:
            raise TypeError("unsupported format string passed to Tensor.__format__ (a %d-d tensor "
                            "formats only as a whole, with {})" % self.ndim)
        return str(self)

    def __contains__(self, element):
        """element in t: whether any element equals it (a number or a tensor broadcast to t), as
        torch."""
        if not (_is_scalar(element) or isinstance(element, Tensor)):
            raise TypeError("'in' needs a number or a Tensor on the left, got %s" % type(element).__name__)
        return bool((self == element).float().max().item()) if self.numel() else False

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with %s values is ambiguous"
                               % ("no" if self.numel() == 0 else "more than one"))
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    # -------------------------------------------------------------------- ops
    # One line per op of the C ABI.

    neg = negative = _unary_op("mt_neg")
    relu = _unary_op("mt_relu")
    sigmoid = _unary_op("mt_sigmoid", floating=True)
    tanh = _unary_op("mt_tanh", floating=True)
    exp = _unary_op("mt_exp", floating=True)
    log = _unary_op("mt_log", floating=True)
    softmax = _dim_op("mt_softmax")
    log_softmax = _dim_op("mt_log_softmax")
    sum = _reduction("mt_sum", "mt_sum_dim")
    mean = _reduction("mt_mean", "mt_mean_dim")
    sqrt = _unary_op("mt_sqrt", floating=True)
    abs = absolute = _unary_op("mt_abs")
    __abs__ = abs

    # ------------------------------------------------------------- reductions

    def max(self, dim=None, keepdim=False):
        """max() -> 0-d maximum; max(dim, keepdim=False) -> (values, indices) of the first
        maximum along dim (mt_max_dim; the gradient goes to that element)."""
        if dim is None:
            if keepdim:
                raise TypeError("max() without dim does not take keepdim")
            values = c_void_p()
            lib.mt_max_dim(byref(values), None, self.reshape(-1), 0, 0)
            return Tensor._from_handle(values.value)
        values, indices = c_void_p(), c_void_p()
        lib.mt_max_dim(byref(values), byref(indices), self, operator.index(dim), 1 if keepdim else 0)
        return MaxResult(Tensor._from_handle(values.value), Tensor._from_handle(indices.value))

    def min(self, dim=None, keepdim=False):
        """As max(), of -self: min(x) = -max(-x), and the first maximum of -x is the first
        minimum of x (negation is exact, so the values are too)."""
        if dim is None:
            return (-self).max().neg()
        values, indices = (-self).max(dim, keepdim)
        return MinResult(values.neg(), indices)

    def argmax(self, dim=None, keepdim=False):
        """Index of the first maximum along dim (int64); over the flattened tensor when dim
        is None."""
        if dim is None:
            out = _new(lib.mt_argmax, self.reshape(-1), 0, 0)
            return out.reshape([1] * self.ndim) if keepdim else out
        return _new(lib.mt_argmax, self, operator.index(dim), 1 if keepdim else 0)

    def argmin(self, dim=None, keepdim=False):
        return (-self).argmax(dim, keepdim)

    # ------------------------------------------------------------- shape ops

    def reshape(self, *shape):
        """A view with the given shape (one dim may be -1); shares storage (mt_reshape)."""
        arr, n = _int64_array(_shape_args(shape))
        return _new(lib.mt_reshape, self, arr, n)

    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim=0, end_dim=-1):
        s = self.shape
        if not s:
            return self.reshape(1)
        a, b = _wrap_dim(start_dim, len(s)), _wrap_dim(end_dim, len(s))
        if a > b:
            raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
        n = 1
        for d in s[a:b + 1]:
            n *= d
        return self.reshape(tuple(s[:a]) + (n,) + tuple(s[b + 1:]))

    def unsqueeze(self, dim):
        s = list(self.shape)
        d = _wrap_dim(dim, len(s) + 1)
        s.insert(d, 1)
        return self.reshape(s)

    def squeeze(self, dim=None):
        s = list(self.shape)
        if dim is None:
            return self.reshape([d for d in s if d != 1])
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        drop = {_wrap_dim(d, len(s)) for d in dims} if s else set()
        return self.reshape([n for i, n in enumerate(s) if not (i in drop and n == 1)])

    def index_select(self, dim, index):
        """The entries at index (integers, 1-D) along dim, in index's order (mt_index_select;
        differentiable)."""
        from ._indexing import _as_index_tensor, _select
        return _select(self, _wrap_dim(dim, self.ndim), _as_index_tensor(index, self.device))

    def transpose(self, dim0, dim1):
        """Swaps two dims (a copy, mt_transpose)."""
        return _new(lib.mt_transpose, self, operator.index(dim0), operator.index(dim1))

    swapaxes = transpose

    def permute(self, *dims):
        """Reorders dims: out.shape[i] = self.shape[dims[i]] (a copy, mt_permute)."""
        arr, n = _int64_array(_shape_args(dims))
        return _new(lib.mt_permute, self, arr, n)

    def t(self):
        if self.ndim > 2:
            raise ValueError("t() expects a tensor with <= 2 dimensions, but self is %dD" % self.ndim)
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def T(self):
        n = self.ndim
        if n < 2:
            return self
        return self.permute(list(range(n - 1, -1, -1)))

    # --------------------------------------------------------------- autograd

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        """Accumulates d(self)/d(leaf) into .grad of every leaf that requires grad, then
        clears the tape. self must have one element unless gradient (same shape) is given."""
        if create_graph:
            raise NotImplementedError(NOT_IN_ABI.format(what="create_graph=True",
                                                         need="higher-order gradients"))
        if retain_graph:
            raise NotImplementedError("retain_graph=True is not available: mt_backward clears the "
                                      "tape; run the forward pass again instead")
        if gradient is None:
            lib.mt_backward(self)
            return
        if not isinstance(gradient, Tensor):
            raise TypeError("backward: gradient must be a Tensor, got %s" % type(gradient).__name__)
        if tuple(gradient.shape) != tuple(self.shape):  # as torch: no broadcasting of the gradient
            raise RuntimeError("backward: mismatch in shape: gradient has shape %s and the output %s"
                               % (list(gradient.shape), list(self.shape)))
        with enable_grad():
            # d/dx sum(self * gradient) is the vector-Jacobian product with gradient; the
            # gradient is a constant of it (detached: it gets no .grad of its own)
            lib.mt_backward((self * gradient.detach()).sum())


_INT_RANGE = {"uint8": (0, 255), "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}


def _fits(value, dt):
    """True when an integral Python number is exactly representable in integer dtype dt."""
    lo, hi = _INT_RANGE[dt.name]
    return _is_integral(value) and lo <= value <= hi


def _as_tensor_like(value, like):
    """A Tensor as is; a Python number as a 0-d tensor of like's dtype (the default float
    dtype for a non-integral number and an integer tensor) on like's device."""
    if isinstance(value, Tensor):
        return value
    if _is_scalar(value):
        return _scalar_tensor(value, _for_scalar(like, value))
    raise TypeError("expected a Tensor or a number, got %s" % type(value).__name__)


def _check_fill_mask(mask, like):
    if not isinstance(mask, Tensor):
        raise TypeError("masked_fill(): mask must be a Tensor, got %s" % type(mask).__name__)
    if mask.dtype is not D.uint8:
        raise TypeError("masked_fill only supports boolean-like uint8 masks (what comparisons such as "
                        "t > 0 return; minitorch has no bool dtype), but got mask with dtype %s; "
                        "pass mask != 0" % mask.dtype.name)
    return mask if mask.device == like.device else mask.to(like.device)


def _fill_value(value):
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise RuntimeError("masked_fill only supports a 0-dimensional value tensor, but got tensor "
                               "with %d dimension(s)." % value.ndim)
        value = value.item()
    if not _is_scalar(value):
        raise TypeError("masked_fill(): value must be a number, got %s" % type(value).__name__)
    return float(value)


def cat(tensors, dim=0):
    """Concatenates tensors along dim (torch.cat): every other dim must agree; dtypes are
    promoted as torch does; 1-D empty tensors are skipped, as torch allows. Differentiable
    in every input (mt_cat)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError("cat(): argument 'tensors' must be a tuple or list of Tensors, got %s"
                        % type(tensors).__name__)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError("cat(): expected Tensor as element %d in argument 0, but got %s"
                            % (i, type(t).__name__))
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = _core.promote_types(dt, t.dtype)
    kept = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]
    if not kept:
        return _cast(tensors[0], dt)
    for t in kept:
        if t.ndim == 0:
            raise ValueError("zero-dimensional tensor cannot be concatenated")
    kept = [_cast(t, dt) for t in kept]
    arr = (c_void_p * len(kept))(*[t._as_parameter_ for t in kept])
    return _new(lib.mt_cat, arr, len(kept), operator.index(dim))


def stack(tensors, dim=0):
    """Joins same-shaped tensors along a new dim (torch.stack: unsqueeze, then cat)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError("stack(): expects a non-empty tuple or list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError("stack(): expected Tensor as element %d in argument 0, but got %s"
                            % (i, type(t).__name__))
    shape = tuple(tensors[0].shape)
    for t in tensors:
        if tuple(t.shape) != shape:
            raise ValueError("stack expects each tensor to be equal size, but got %s and %s"
                             % (list(shape), list(t.shape)))
    d = _wrap_dim(dim, len(shape) + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def where(condition, input, other):
    """input where condition (nonzero) else other, the three broadcast together (mt_where);
    input and other may be numbers. Differentiable in input and other."""
    if not isinstance(condition, Tensor):
        raise TypeError("where(): condition must be a Tensor, got %s" % type(condition).__name__)
    if condition.dtype is not D.uint8:
        condition = condition != 0
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        if not (_is_scalar(input) and _is_scalar(other)):
            raise TypeError("where(): input and other must be Tensors or numbers")
        floating = not (_is_integral(input) and _is_integral(other))
        dt = D.get_default_dtype() if floating else D.int64
        like = _new(lib.mt_tensor_full, None, 0, 0.0, dt.code, condition.device.code)
        input, other = _scalar_tensor(input, like), _scalar_tensor(other, like)
    elif not isinstance(input, Tensor):
        input = _as_tensor_like(input, other)
    elif not isinstance(other, Tensor):
        other = _as_tensor_like(other, input)
    dt = result_type(input, other)
    return _new(lib.mt_where, condition, _cast(input, dt), _cast(other, dt))


def _rebuild_tensor(raw, shape, dtype_name, device_str, requires_grad):
    from ._factory import _from_bytes
    t = _from_bytes(raw, shape, D._dtype_by_name(dtype_name), D.device(device_str))
    if requires_grad:
        t.requires_grad_(True)
    return t


_core.Tensor = Tensor
