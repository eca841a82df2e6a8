"""What the frontend-level parity suites of tests/gpu share: the minitorch package, which
device plays the GPU, whether to run, and torch when it sees a GPU.

MT_PARITY_DEVICE=cpu runs a suite CPU-against-CPU (torch is then left out), which checks the
harness itself on a machine without a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import math  # noqa: E402

from test_frontend_support import flat, mt  # noqa: E402,F401

SELF_TEST = os.environ.get("MT_PARITY_DEVICE") == "cpu"
GPU = "cpu" if SELF_TEST else "cuda"
RUN = SELF_TEST or mt.cuda.is_available()
SKIP_WHY = "no usable GPU; MT_PARITY_DEVICE=cpu checks the harness on the CPU"
try:
    import torch
    HAVE_TORCH = not SELF_TEST and torch.cuda.is_available()
except ImportError:
    torch = None
    HAVE_TORCH = False


def rel_err(got, ref):
    """||got - ref|| / ||ref|| of two tensors, the norm floored at an RMS of 1e-6 per element (a
    gradient of relu can be all zeros, GELU of a large negative input is zero up to rounding: such
    cases are compared by their absolute error); inf when NaNs do not match.

    The sums run in float64 on the CPU backend (a Python loop over millions of elements would
    dominate the suites); only when they are not finite does the element-wise loop decide."""
    g, r = got.detach().cpu().double().reshape(-1), ref.detach().cpu().double().reshape(-1)
    assert g.numel() == r.numel(), (tuple(got.shape), tuple(ref.shape))
    if not r.numel():
        return 0.0
    d = g - r
    num, den = (d * d).sum().item(), (r * r).sum().item()
    if math.isfinite(num) and math.isfinite(den):
        return math.sqrt(num / max(den, 1e-12 * r.numel()))
    return _rel_err_loop(flat(g.tolist()), flat(r.tolist()))


def _rel_err_loop(g, r):
    num = den = 0.0
    for x, y in zip(g, r):
        if math.isnan(x) != math.isnan(y):
            return math.inf
        num += (x - y) ** 2
        den += y * y
    return math.sqrt(num / max(den, 1e-12 * len(r)))


def draw(shape, seed, dtype, lo, hi):
    """Uniform values in [lo, hi), drawn on the CPU in float64 and cast."""
    mt.manual_seed(seed)
    return (mt.rand(*shape, dtype=mt.float64, device="cpu") * (hi - lo) + lo).to(dtype)
