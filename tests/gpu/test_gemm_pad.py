"""test_gemm_pad - float16/bfloat16 products whose rows are not whole 16-byte groups
(backend/cuda/matmul.cu's padding()): the operands and output with such rows go through pool
copies of the problem padded to multiples of 8 elements (zeros past the old sizes), so cuBLAS can
take its Hopper kernels.

Cases: mt_linear forward and backward (y = x W^T + b, dx = dy W, dW = dy^T x, db) in bfloat16 and
float16 with an odd number of output features (the output, dy and dy^T have such rows: a
GPT-2-like tied head with 50257 columns is the model case), with an odd number of input features
(x and W have them), and with both; each under every selection of the internal hook
mt_study_gemm_pad: 0 production (padded where the rule finds it pays: at least 2^30
multiply-adds, and each copied matrix's other size at least 128), 1 never, 3 always. Each
case also checks how many products ran through padded copies against the rule (variant 2 reads
the count), so a selection that silently did nothing fails.

Reference: torch in float64 on the same 16-bit values. Tolerance: ||got - ref|| / ||ref|| below 1e-2 (16-bit outputs carry a relative rounding of
2^-9 (bfloat16) or 2^-12 (float16) an element; k up to 2048 terms accumulated in float32). The pool
is filled with NaN before each case, so an element a copy skips shows up.

Run by `make test-gpu`; alone: MINITORCH_LIB=build/libminitorch.so python3 -m unittest
tests.gpu.test_gemm_pad -v. Without a usable GPU or without torch every test is skipped.
"""
import os
import sys
import unittest
from ctypes import c_int64

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import abi_util as U  # noqa: E402
from abi_util import LIB  # noqa: E402

from tests.gpu.test_flash_attention import (RUN, SKIP_WHY, backward_of, first_bad, from_mt,  # noqa: E402
                                          poison_pool, rel, to_mt)

try:
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = None

TOL = 1e-2
SEED = int(os.environ.get("MT_TEST_SEED", "31337"))
MIN_MACS, MIN_OTHER = 1 << 30, 128  # matmul.cu's kPadMinMacs, kPadMinOther

STUDY = getattr(LIB, "mt_study_gemm_pad", None)
if STUDY is not None:
    STUDY.restype, STUDY.argtypes = c_int64, [c_int64]

# (rows, in, out): odd out (the output and dy have odd rows), odd in (x and W), both, and one too
# small for production's rule (padded only under variant 3; large enough to stay off the tiny path)
CASES = [(2048, 768, 1031), (2048, 771, 1024), (1536, 777, 1027), (300, 75, 33)]


def r8(v):
    return (v + 7) // 8 * 8


def padded(m, n, k, ta, tb, variant):
    """Whether selection `variant` runs the product through padded copies (matmul.cu's padding(),
    for aligned fresh tensors)."""
    if variant == 1:
        return False
    pm, pn, pk = r8(m) if ta else m, r8(n), r8(k) if (not ta or tb) else k
    pa, pb, pc = (pm, pk) != (m, k), (pn, pk) != (n, k), (pm, pn) != (m, n)
    if not (pa or pb or pc):
        return False
    if variant == 3:
        return True
    return m * n * k >= MIN_MACS and not (pa and n < MIN_OTHER) and not (pb and m < MIN_OTHER) \
        and not (pc and k < MIN_OTHER)


def padded_products(rows, fin, fout, variant):
    """How many of the linear layer's three products selection `variant` runs through padded copies:
    y = x W^T, dx = dy W, dW = dy^T x as (m, n, k, trans_a, trans_b)."""
    return sum(padded(*p, variant) for p in ((rows, fout, fin, False, True), (rows, fin, fout, False, False),
                                             (fout, fin, rows, True, False)))


@unittest.skipUnless(RUN and torch is not None, SKIP_WHY)
@unittest.skipUnless(STUDY is not None, "the library has no mt_study_gemm_pad")
class GemmPadTest(unittest.TestCase):
    def setUp(self):
        LIB.mt_tape_clear()

    def tearDown(self):
        LIB.mt_tape_clear()
        STUDY(0)

    def test_hook(self):
        for bad in (-1, 4, 100):
            self.assertNotEqual(STUDY(bad), 0, "variant %d" % bad)
        before = STUDY(2)
        for good in (3, 1, 0):
            self.assertEqual(STUDY(good), 0, "variant %d" % good)
        self.assertEqual(STUDY(2), before, "variant 2 only reads the count")

    def run_linear(self, x, w, b, dy):
        """y, dx, dW, db of minitorch's linear (x, w, b, dy of one 16-bit dtype)."""
        hs = [to_mt(x, True), to_mt(w, True), to_mt(b, True)]
        try:
            y = U.call("mt_linear", hs[0], hs[1], hs[2])
            got_y = from_mt(y, x.dtype)
            return [got_y] + backward_of(y, dy, hs, x.dtype, out_dtype=x.dtype)
        finally:
            for h in hs:
                U.release(h)

    def test_linear(self):
        for dtype in (torch.bfloat16, torch.float16):
            for n, (rows, fin, fout) in enumerate(CASES):
                seed = SEED * 7919 + n
                g = torch.Generator().manual_seed(seed)
                x = torch.randn(rows, fin, generator=g).to(dtype)
                w = (torch.randn(fout, fin, generator=g) / fin ** 0.5).to(dtype)
                b = torch.randn(fout, generator=g).to(dtype)
                dy = torch.randn(rows, fout, generator=g).to(dtype)
                xd, wd, bd = (t.double().requires_grad_(True) for t in (x, w, b))
                yd = TF.linear(xd, wd, bd)
                yd.backward(dy.double())
                want = [yd.detach(), xd.grad, wd.grad, bd.grad]
                for variant in (0, 1, 3):
                    with self.subTest(dtype=str(dtype), rows=rows, fin=fin, fout=fout, seed=seed, variant=variant):
                        self.assertEqual(STUDY(variant), 0)
                        poison_pool()
                        before = STUDY(2)
                        got = self.run_linear(x, w, b, dy)
                        self.assertEqual(STUDY(2) - before, padded_products(rows, fin, fout, variant),
                                         "products run through padded copies")
                        for name, gv, wv in zip(("y", "dx", "dW", "db"), got, want):
                            e = rel(gv, wv)
                            self.assertLess(e, TOL, "%s: rel err %.3g; %s" % (name, e, first_bad(gv, wv, TOL)))


if __name__ == "__main__":
    unittest.main()
