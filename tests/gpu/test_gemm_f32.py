"""test_gemm_f32 - the float32 GEMM on TF32 tensor cores (3xTF32, backend/cuda/gemm_f32.cu) behind
float32 mt_linear, mt_matmul and the composed attention, forward and backward:

  linear   y = x W^T + b (the product A B^T with the bias in its epilogue), dx = dy W (A B) and
           dW = dy^T x (A^T B; split over k where the output has few tiles, as at the char-GPT
           shapes), db beside it (the kernel sums dy's columns from the fragments it reads); char-GPT
           shapes, tails of the tiles, a weight gradient too short to split, a layer too small
           for the kernel and one whose rows 16-byte copies cannot read (both stay on cuBLAS)
  matmul   batched A B and its gradients (batch strides); 65535 row tiles (the grid's limit) on the
           kernel, one row more on cuBLAS
  sdpa     head dim 64 (the composed path: products scaled by alpha)

Each case runs under every selection of the internal hook mt_study_gemm_f32: 0, production (the
tensor-core kernel where it applies, its tile picked by the output's size and k), 1, cuBLAS's float32
GEMM for everything, and 3 + i, the kernel with tile i (of TILES) forced: the mma.sync tiles,
then the Hopper warpgroup (wgmma) kernel's tiles, which run only on a compute capability 9.0
device (elsewhere the product goes to cuBLAS). All are compared with
torch in float64 on the same values. The hook's variant 2 counts the products the
kernel ran: every case checks that count against the rule the kernel applies by (float32, at
least 2^21 multiply-adds, leading dimensions multiples of 4).

Inputs: fresh torch.randn values per case (seed printed on failure); the device pool is filled
with NaN before each case, so an output element the kernel never writes shows up. Tolerance:
relative error ||got - ref|| / ||ref|| below 2e-6 for every selection (float32 products
accumulated in float32 over k <= 8192 terms: the FMA units' rounding gives a few 1e-7; 3xTF32
keeps about 21 of float32's 24 bits per product). The split-K weight and bias gradients are also
computed twice under each kernel and must agree to the bit (the splits are summed in a fixed
order).

Run by `make test-gpu`; alone: MINITORCH_LIB=build/libminitorch.so python3 -m unittest
tests.gpu.test_gemm_f32 -v. Without a usable GPU or without torch every test is skipped.
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

TOL = 2e-6
WORST = {}  # the largest relative error seen, by selection
SEED = int(os.environ.get("MT_TEST_SEED", "2718"))
MIN_MACS = 1 << 21
MMA_TILES = 5  # the mma.sync kernel's tile shapes (gemm_f32.cu's kMmaTiles)
TILES = MMA_TILES + 7  # and the wgmma kernel's (gemm_f32.h's kWgmmaTiles): gemm_f32.cu's kTiles
SELECTIONS = (0, 1) + tuple(3 + i for i in range(TILES))
HOPPER = torch is not None and torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)

STUDY = getattr(LIB, "mt_study_gemm_f32", None)
if STUDY is not None:
    STUDY.restype, STUDY.argtypes = c_int64, [c_int64]

# (rows, in, out, bias): char-GPT large's qkv and fc2 layers (weight gradients split in k), tails
# (split in 3), a weight gradient too short to split, too small, unaligned rows, and a forward
# split in k (x W^T with k 4096 on 4 tiles) whose 65 x 67 output and bias have odd sizes
LINEAR_CASES = [(8192, 128, 384, True), (8192, 512, 128, True), (999, 132, 260, True), (300, 128, 516, True),
                (1000, 36, 68, False), (64, 128, 128, True), (700, 130, 96, True), (65, 4096, 67, True)]
# (batch, m, k, n)
MATMUL_CASES = [(3, 200, 64, 300), (2, 129, 256, 72)]


def kernel_runs():
    return STUDY(2)


def runs_under(variant, products):
    """How many of `products` (which the kernel's rule admits) selection `variant` runs on the kernel."""
    if variant == 1 or (variant >= 3 + MMA_TILES and not HOPPER):
        return 0
    return products


def applies(m, n, k, lda, ldb, batch=1):
    """The kernel's rule (gemm_f32.cu's applies()) for a product the tests make."""
    return m * n * k * batch >= MIN_MACS and lda % 4 == 0 and ldb % 4 == 0


@unittest.skipUnless(RUN and torch is not None, SKIP_WHY)
@unittest.skipUnless(STUDY is not None, "the library has no mt_study_gemm_f32")
class GemmF32Test(unittest.TestCase):
    def setUp(self):
        LIB.mt_tape_clear()

    def tearDown(self):
        LIB.mt_tape_clear()
        STUDY(0)

    @classmethod
    def tearDownClass(cls):
        for variant, e in sorted(WORST.items()):
            what = {0: "production", 1: "cuBLAS"}.get(variant, "tile %d" % (variant - 3))
            print("\n  test_gemm_f32: worst relative error with selection %d (%s): %.3g (tolerance %.3g)"
                  % (variant, what, e, TOL), file=sys.stderr)

    def check(self, label, got, want, variant):
        e = rel(got, want)
        WORST[variant] = max(WORST.get(variant, 0.0), e)
        self.assertLess(e, TOL, "%s: rel err %.3g; %s" % (label, e, first_bad(got, want, TOL)))

    def test_hook(self):
        for bad in (-1, 3 + TILES, 100):
            self.assertNotEqual(STUDY(bad), 0, "variant %d" % bad)
        before = kernel_runs()
        for good in SELECTIONS[::-1]:
            self.assertEqual(STUDY(good), 0, "variant %d" % good)
        self.assertEqual(kernel_runs(), before, "variant 2 only reads the count")

    def run_linear(self, x, w, b, dy):
        """y, dx, dW, db (db None without a bias) of minitorch's linear on x, w, b."""
        hs = [to_mt(x, True), to_mt(w, True)] + ([to_mt(b, True)] if b is not None else [])
        try:
            y = U.call("mt_linear", hs[0], hs[1], hs[2] if b is not None else None)
            got_y = from_mt(y, torch.float32)
            grads = backward_of(y, dy, hs, torch.float32)
            return [got_y] + grads + ([None] if b is None else [])
        finally:
            for h in hs:
                U.release(h)

    def test_linear(self):
        for n, (rows, fin, fout, has_bias) in enumerate(LINEAR_CASES):
            seed = SEED * 7919 + n
            g = torch.Generator().manual_seed(seed)
            x, w, dy = torch.randn(rows, fin, generator=g), torch.randn(fout, fin, generator=g), \
                torch.randn(rows, fout, generator=g)
            b = torch.randn(fout, generator=g) if has_bias else None
            xd, wd = x.double().requires_grad_(True), w.double().requires_grad_(True)
            bd = b.double().requires_grad_(True) if has_bias else None
            yd = TF.linear(xd, wd, bd)
            yd.backward(dy.double())
            want = [yd.detach(), xd.grad, wd.grad, bd.grad if has_bias else None]
            # forward x W^T, dx = dy W, dW = dy^T x
            expect = sum([applies(rows, fout, fin, fin, fin), applies(rows, fin, fout, fout, fin),
                          applies(fout, fin, rows, fout, fin)])
            for variant in SELECTIONS:
                with self.subTest(rows=rows, fin=fin, fout=fout, bias=has_bias, seed=seed, variant=variant):
                    self.assertEqual(STUDY(variant), 0)
                    poison_pool()
                    before = kernel_runs()
                    got = self.run_linear(x, w, b, dy)
                    self.assertEqual(kernel_runs() - before, runs_under(variant, expect),
                                     "products the tensor-core kernel ran")
                    for name, gv, wv in zip(("y", "dx", "dW", "db"), got, want):
                        if wv is not None:
                            self.check(name, gv, wv, variant)

    def test_weight_gradient_is_deterministic(self):
        g = torch.Generator().manual_seed(SEED)
        x, w, dy = torch.randn(8192, 128, generator=g), torch.randn(384, 128, generator=g), \
            torch.randn(8192, 384, generator=g)
        b = torch.randn(384, generator=g)
        for variant in (0,) + tuple(3 + i for i in range(TILES)):
            with self.subTest(variant=variant):
                self.assertEqual(STUDY(variant), 0)
                first = self.run_linear(x, w, b, dy)
                poison_pool()
                second = self.run_linear(x, w, b, dy)
                for name, one, two in zip(("y", "dx", "dW", "db"), first, second):
                    self.assertTrue(torch.equal(one, two), "%s differs between two runs" % name)

    def test_batched_matmul(self):
        for n, (batch, m, k, nn) in enumerate(MATMUL_CASES):
            seed = SEED * 104729 + n
            g = torch.Generator().manual_seed(seed)
            a, b, dc = torch.randn(batch, m, k, generator=g), torch.randn(batch, k, nn, generator=g), \
                torch.randn(batch, m, nn, generator=g)
            ad, bd = a.double().requires_grad_(True), b.double().requires_grad_(True)
            cd = ad @ bd
            cd.backward(dc.double())
            # forward A B, dA = dC B^T, dB = A^T dC
            expect = sum([applies(m, nn, k, k, nn, batch), applies(m, k, nn, nn, nn, batch),
                          applies(k, nn, m, k, nn, batch)])
            for variant in SELECTIONS:
                with self.subTest(batch=batch, m=m, k=k, n=nn, seed=seed, variant=variant):
                    self.assertEqual(STUDY(variant), 0)
                    poison_pool()
                    hs = [to_mt(a, True), to_mt(b, True)]
                    try:
                        before = kernel_runs()
                        c = U.call("mt_matmul", hs[0], hs[1])
                        self.check("c", from_mt(c, torch.float32), cd.detach(), variant)
                        da, db = backward_of(c, dc, hs, torch.float32)
                        self.assertEqual(kernel_runs() - before, runs_under(variant, expect),
                                         "products the tensor-core kernel ran")
                        self.check("da", da, ad.grad, variant)
                        self.check("db", db, bd.grad, variant)
                    finally:
                        for h in hs:
                            U.release(h)

    def test_rows_at_the_grid_limit(self):
        # 65535 tiles of BM rows fill the grid's y dimension; one row more goes to cuBLAS: the
        # mma.sync kernel's 64 x 64 tile, and the wgmma kernel's 64- and 128-row tiles (forced)
        for variant, bm in ((3 + 1, 64), (3 + MMA_TILES, 64), (3 + MMA_TILES + 5, 128)):
            for rows, expect in ((65535 * bm, runs_under(variant, 1)), (65535 * bm + 1, 0)):
                g = torch.Generator().manual_seed(SEED + rows)
                a, b = torch.randn(rows, 4, generator=g), torch.randn(4, 8, generator=g)
                want = a.double() @ b.double()
                with self.subTest(variant=variant, rows=rows):
                    self.assertEqual(STUDY(variant), 0)
                    hs = [to_mt(a), to_mt(b)]
                    try:
                        before = kernel_runs()
                        hs.append(U.call("mt_matmul", hs[0], hs[1]))
                        self.assertEqual(kernel_runs() - before, expect, "products the tensor-core kernel ran")
                        self.check("c", from_mt(hs[2], torch.float32), want, variant)
                    finally:
                        for h in hs:
                            U.release(h)

    def test_sdpa_head_dim_64(self):
        B, H, T, D = 2, 2, 128, 64
        g = torch.Generator().manual_seed(SEED + 1)
        q, k, v, dout = [torch.randn(B, H, T, D, generator=g) for _ in range(4)]
        qd, kd, vd = [t.double().requires_grad_(True) for t in (q, k, v)]
        mask = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
        want = TF.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)
        want.backward(dout.double())
        for variant in (0, 1):
            with self.subTest(variant=variant):
                self.assertEqual(STUDY(variant), 0)
                poison_pool()
                hs = [to_mt(t, True) for t in (q, k, v)]
                try:
                    before = kernel_runs()
                    out = U.call("mt_scaled_dot_product_attention", hs[0], hs[1], hs[2], c_int64(1))
                    self.check("out", from_mt(out, torch.float32), want.detach(), variant)
                    grads = backward_of(out, dout, hs, torch.float32)
                    ran = kernel_runs() - before
                    if variant == 0:
                        self.assertGreater(ran, 0, "the composed attention's products ran on the kernel")
                    else:
                        self.assertEqual(ran, 0)
                    for name, got, ref in zip(("dq", "dk", "dv"), grads, (qd.grad, kd.grad, vd.grad)):
                        self.check(name, got, ref, variant)
                finally:
                    for h in hs:
                        U.release(h)


if __name__ == "__main__":
    unittest.main()
