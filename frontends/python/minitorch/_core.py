"""Helpers shared by Tensor and the functional ops: calling an mt_ op and wrapping its
result, dtype promotion (torch's rules on minitorch's dtypes), Python scalars, and the
one-line op builders (_unary_op, _dim_op, _reduction)."""

import functools
import inspect
import math
import numbers
import operator
from ctypes import byref, c_int64, c_void_p

from . import _convert
from . import _dtype as D
from ._lib import I64ARG, lib

# The Tensor class; _tensor.py, which defines it on top of these helpers, sets it.
Tensor = None

# ------------------------------------------------------------------ handles


def _new(fn, *args, _object_new=object.__new__):
    """Calls an mt_ function whose first parameter is mt_tensor **out; wraps the result
    (Tensor._from_handle, inlined: this is every op's path)."""
    out = c_void_p()
    fn(byref(out), *args)
    t = _object_new(Tensor)
    t._as_parameter_ = out.value
    return t


def _new_as(fn, dt, x, *rest, _object_new=object.__new__):
    """_new for an op of one tensor x (then rest) whose result has x's dtype dt: x's handle is
    passed as it is (ctypes converts an int faster than an object's _as_parameter_), and the
    new tensor knows its dtype without asking the library."""
    out = c_void_p()
    fn(byref(out), x._as_parameter_, *rest)
    t = _object_new(Tensor)
    t._as_parameter_ = out.value
    t._dtype = dt
    return t


def _int64_array(values):
    n = len(values)
    for v in values:  # c_int64 would keep the low 64 bits of a larger int: the parameters' check
        I64ARG.from_param(v)
    return ((c_int64 * n)(*values) if n else None), n


def _cast(t, dt):
    return t if t.dtype is dt else _new(lib.mt_tensor_cast, t, dt.code)


def _floating(t):
    """Integer tensors entering a floating op become the default float dtype (as torch)."""
    return t if t.dtype.is_floating_point else _cast(t, D.get_default_dtype())


def _full(shape, value, dtype, device):
    """A tensor of shape holding the Python number value, made where it lives. An integer dtype
    takes value truncated toward zero, exactly: an int64 beyond 2^53, which mt_tensor_full's
    double would round, travels as bytes (mt_tensor_from_data). A value outside an integer
    dtype's range is an OverflowError, as minitorch.tensor gives."""
    dims, n = _int64_array(shape)
    if not dtype.is_floating_point:
        try:
            v = int(value)
            raw, _ = _convert.encode([v], dtype)
        except (OverflowError, ValueError):  # out of range; NaN or inf
            raise OverflowError("value %r does not fit %s" % (value, dtype.name)) from None
        if float(v) != v:
            return _new(lib.mt_tensor_from_data, raw * math.prod(shape), dims, n, dtype.code, device.code)
        value = v
    return _new(lib.mt_tensor_full, dims, n, float(value), dtype.code, device.code)


def _scalar_tensor(value, like):
    """A 0-d tensor holding value, with like's dtype and device."""
    return _full((), value, like.dtype, like.device)


def _is_scalar(x):
    return isinstance(x, numbers.Number) and not isinstance(x, complex)


def _is_integral(x):
    return isinstance(x, numbers.Integral)


def _for_scalar(t, s):
    """torch's promotion for tensor (op) Python scalar: an integer tensor meeting a
    non-integral scalar becomes the default float dtype; otherwise the tensor's dtype."""
    if not t.dtype.is_floating_point and not _is_integral(s):
        return _cast(t, D.get_default_dtype())
    return t


_INT_RANK = {D.uint8: 0, D.int32: 1, D.int64: 2}


def promote_types(a, b):
    """The dtype two tensors of dtypes a and b compute in (torch's lattice on our dtypes)."""
    if a is b:
        return a
    if a.is_floating_point and b.is_floating_point:
        return D.float64 if D.float64 in (a, b) else D.float32
    if a.is_floating_point:
        return a
    if b.is_floating_point:
        return b
    return a if _INT_RANK[a] >= _INT_RANK[b] else b


def result_type(a, b):
    """torch.result_type for two tensors: a 0-d tensor does not widen a dimensioned one
    of the same category (float or integer)."""
    da, db = a.dtype, b.dtype
    if da is db:
        return da
    a0, b0 = a.ndim == 0, b.ndim == 0
    if a0 != b0:
        dim_t, zero_t = (b, a) if a0 else (a, b)
        if dim_t.dtype.is_floating_point == zero_t.dtype.is_floating_point:
            return dim_t.dtype
        if dim_t.dtype.is_floating_point:
            return dim_t.dtype
        return D.get_default_dtype()
    return promote_types(da, db)


def _binary(fn, a, b, keeps_dtype=False, _object_new=object.__new__):
    """fn(a, b) on the operands promoted to their result_type (_new, inlined, with the handles
    passed as they are: ctypes converts an int faster than an object's _as_parameter_).
    keeps_dtype: the result has that dtype (the arithmetic ops; comparisons give uint8), which
    the new tensor then knows without asking the library. fn is a checked function of lib or,
    on the operators' hot path, lib.unchecked's, whose failure is raised here as lib's would."""
    dt = a.dtype
    if dt is not b.dtype:
        dt = result_type(a, b)
        a, b = _cast(a, dt), _cast(b, dt)
    out = c_void_p()
    st = fn(byref(out), a._as_parameter_, b._as_parameter_)
    if st:  # fn may be lib.unchecked's: then a failure comes back as a status
        lib.fail(st, fn.__name__, (a, b))
    t = _object_new(Tensor)
    t._as_parameter_ = out.value
    if keeps_dtype:
        t._dtype = dt
    return t


# -------------------------------------------------------- op table helpers
# Adding an op of the C ABI to Tensor is one line in its class body (_tensor.py), e.g.
#   softmax = _dim_op("mt_softmax")


def _unary_op(cname, floating=False):
    fn = getattr(lib, cname)
    if floating:
        def op(self):
            x = _floating(self)
            return _new_as(fn, x.dtype, x)
    else:
        def op(self):
            return _new_as(fn, self.dtype, self)
    op.__name__ = cname[3:]
    op.__doc__ = "Elementwise %s (%s)." % (cname[3:], cname)
    return op


def _dim_op(cname):
    """An op of signature (out, x, int64 dim)."""
    fn = getattr(lib, cname)

    def op(self, dim):
        return _new(fn, _floating(self), operator.index(dim))
    op.__name__ = cname[3:]
    op.__doc__ = "%s along dim (%s)." % (cname[3:], cname)
    return op


def _reduction(cname_all, cname_dim):
    """sum/mean: over all elements, one dim or a tuple of dims, with keepdim."""
    fn_all, fn_dim = getattr(lib, cname_all), getattr(lib, cname_dim)

    def op(self, dim=None, keepdim=False):
        if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
            out = _new(fn_all, self)
            if keepdim and self.ndim:
                out = out.reshape([1] * self.ndim)
            return out
        if isinstance(dim, (tuple, list)):
            nd = self.ndim
            dims = sorted({_wrap_dim(d, nd) for d in dim}, reverse=True)
            if len(dims) != len(dim):
                raise ValueError("dim %r names a dimension more than once" % (tuple(dim),))
            out = self
            for d in dims:      # descending, so the dims still to reduce keep their index
                out = _new(fn_dim, out, d, 1 if keepdim else 0)
            return out
        return _new(fn_dim, self, operator.index(dim), 1 if keepdim else 0)
    op.__name__ = cname_all[3:]
    op.__doc__ = ("%s(dim=None, keepdim=False): over every element (0-d result), one dim or a "
                  "tuple of dims (%s, %s)." % (cname_all[3:], cname_all, cname_dim))
    return op


def _wrap_dim(d, ndim):
    d = operator.index(d)
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError("dimension out of range (expected to be in range of [%d, %d], but got %d)"
                         % (-n, n - 1, d))
    return d + n if d < 0 else d


def _shape_args(args):
    """(2, 3) or ((2, 3),) or ([2, 3],) -> (2, 3)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return tuple(operator.index(s) for s in args)


def real_arg(value, what):
    """value when it is a real number (a bool is not); a TypeError naming `what` otherwise, before
    a comparison (p <= 1) or float() (float("0.5") is 0.5) takes it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a real number, got %s" % (what, type(value).__name__))
    return value


def tensor_args(*names):
    """Decorates a function whose parameters `names` take Tensors (a trailing '?': or None). The
    check runs only when the function raises AttributeError or TypeError, which a list or a
    number where a Tensor belongs gives (it has no .relu or .dtype): then an argument of the
    wrong type becomes torch's TypeError naming it, and the normal path pays one call."""
    def wrap(fn):
        sig = inspect.signature(fn)
        wanted = [(n.rstrip("?"), n.endswith("?")) for n in names]

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (AttributeError, TypeError):
                try:
                    bound = sig.bind(*args, **kwargs)
                except TypeError:
                    raise  # a missing or unknown argument: Python's own message
                bound.apply_defaults()
                for name, optional in wanted:
                    v = bound.arguments[name]
                    if not isinstance(v, Tensor) and not (optional and v is None):
                        raise TypeError("%s(): argument '%s' must be a Tensor, not %s"
                                        % (fn.__name__, name, type(v).__name__)) from None
                raise
        return checked
    return wrap


def _checked(result, name, other):
    if result is NotImplemented:
        raise TypeError("%s(): expected a Tensor or a number, got %s" % (name, type(other).__name__))
    return result


NOT_IN_ABI = ("{what} is not available: the C ABI (abi/minitorch.h) has no {need} yet")
