"""minitorch.testing.assert_close: compare tensors (or nested lists) with tolerances."""

import math

from . import _dtype as D
from ._core import real_arg
from ._tensor import Tensor

# (rtol, atol) by dtype, as torch.testing.assert_close.
_TOLERANCES = {
    D.float16: (1e-3, 1e-5),
    D.bfloat16: (1.6e-2, 1e-5),
    D.float32: (1.3e-6, 1e-5),
    D.float64: (1e-7, 1e-7),
}


def _flat_and_shape(x):
    if isinstance(x, Tensor):
        return x._host_flat(), tuple(x.shape), x.dtype
    if isinstance(x, (list, tuple)):
        from . import _convert
        shape, flat = _convert.flatten(x)
        return [float(v) for v in flat], shape, None
    return [float(x)], (), None


def assert_close(actual, expected, rtol=None, atol=None, equal_nan=False, check_shape=True, msg=None):
    """Raises AssertionError unless |actual - expected| <= atol + rtol * |expected| elementwise.

    actual/expected: Tensors, nested lists or numbers. Tolerances default by the dtype of
    actual (float32: rtol 1.3e-6, atol 1e-5), exact for integer tensors."""
    a, a_shape, a_dt = _flat_and_shape(actual)
    e, e_shape, e_dt = _flat_and_shape(expected)
    if check_shape and a_shape != e_shape:
        raise AssertionError("%sshape mismatch: %s vs %s" % (msg + ": " if msg else "", a_shape, e_shape))
    if len(a) != len(e):
        raise AssertionError("number of elements differs: %d vs %d" % (len(a), len(e)))
    dt = a_dt or e_dt
    default = _TOLERANCES.get(dt, (0.0, 0.0) if dt is not None else (1.3e-6, 1e-5))
    rtol = default[0] if rtol is None else real_arg(rtol, "rtol")
    atol = default[1] if atol is None else real_arg(atol, "atol")
    worst = None
    bad = 0
    for i, (x, y) in enumerate(zip(a, e)):
        x, y = float(x), float(y)
        if math.isnan(x) or math.isnan(y):
            if equal_nan and math.isnan(x) and math.isnan(y):
                continue
            ok = False
        elif math.isinf(x) or math.isinf(y):
            ok = x == y
        else:
            ok = abs(x - y) <= atol + rtol * abs(y)
        if not ok:
            bad += 1
            if worst is None or not math.isfinite(abs(x - y)) or abs(x - y) > worst[1]:
                worst = (i, abs(x - y), x, y)
    if bad:
        i, diff, x, y = worst
        raise AssertionError(
            "%sTensor-likes are not close!\nMismatched elements: %d / %d\nGreatest difference: %g at "
            "flat index %d (actual %r, expected %r), rtol=%g atol=%g"
            % (msg + ": " if msg else "", bad, len(a), diff, i, x, y, rtol, atol))
