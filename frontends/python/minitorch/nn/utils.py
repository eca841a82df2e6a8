"""minitorch.nn.utils: gradient clipping."""

from ctypes import byref, c_void_p

from .._core import real_arg
from .._lib import lib
from .._tensor import Tensor


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales the gradients so that their global L2 norm is at most max_norm (eps 1e-6);
    returns the norm before clipping as a 0-d tensor (mt_clip_grad_norm, no sync), a float32
    zero on the CPU when no parameter has a gradient (as torch)."""
    if float(real_arg(norm_type, "norm_type")) != 2.0:
        raise NotImplementedError("only norm_type=2 is available (mt_clip_grad_norm)")
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    arr = (c_void_p * len(params))(*[p._as_parameter_ for p in params])
    out = c_void_p()
    lib.mt_clip_grad_norm(byref(out), arr, len(params), float(real_arg(max_norm, "max_norm")))
    if out.value is None:  # no gradients: nothing clipped, a norm of 0
        from .. import zeros
        return zeros(())
    norm = Tensor._from_handle(out.value)
    if error_if_nonfinite:
        v = norm.item()
        if v != v or v in (float("inf"), float("-inf")):
            raise RuntimeError("The total norm of order 2.0 for gradients from `parameters` is non-finite")
    return norm
