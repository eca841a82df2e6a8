"""test_fusions_parity - the fused ops of transformer and MLP blocks (mt_bias_act,
mt_add_layer_norm, mt_dropout_add), MT_CUDA against the CPU reference backend and, where torch
with CUDA is importable, against PyTorch's eager compositions, forward and backward, through the
Python frontend (minitorch.nn.functional.bias_act, add_layer_norm, dropout_add).

  bias_act        identity, relu, gelu at shapes that reach every CUDA path (16-byte column packs
                  with fewer than 32 and with 32 column lanes, several tiles, scalar columns when
                  n % 4 != 0, one row, rows not a multiple of the row lanes); dbias bit-identical
                  run to run; float16/bfloat16 against the CPU on the same rounded values; the
                  benchmark shapes against F.gelu(x + b, approximate='tanh') / F.relu(x + b)
  add_layer_norm  the sum and the normalization with gradients through both, gamma/beta present
                  and absent, shapes that reach the warp, block and uncached kernels; half types;
                  the benchmark shapes against (x + r, F.layer_norm(x + r, ...))
  dropout_add     the same bits as r + dropout(x) for one seed on the GPU (float32, float64,
                  float16, bfloat16) and as the CPU (float32, float64), forward and backward; the
                  kept fraction; against torch's r + x * mask / (1 - p) with the mask read back

Run by `make test-gpu` (MT_DEVICE=cuda). Without a usable GPU every test is skipped;
MT_PARITY_DEVICE=cpu runs the harness CPU against CPU.

Inputs are fresh random values: uniform draws from a per-test seed. Tolerances, relative error
||gpu - ref|| / ||ref||: float64 1e-12; float32 1e-5 (float sums of a row, rsqrtf and expf
within 2 ulp), 1e-4 for the bias gradient and dgamma/dbeta summed over thousands of rows and for
the comparisons with torch (which sums in another order); float16/bfloat16 1e-2; dropout_add 0
(bit for bit).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_support  # noqa: E402
from parity_support import GPU, HAVE_TORCH, RUN, SELF_TEST, SKIP_WHY, flat, mt, rel_err, torch  # noqa: E402,F401

F = mt.nn.functional
TOL = {mt.float32: 1e-5, mt.float64: 1e-12}
ACTS = ("identity", "relu", "gelu")
# (rows, n): see the module docstring and backend/cuda/fusions.cu
SHAPES = [(1, 7), (3, 8), (5, 33), (1000, 128), (257, 1024), (3, 1028), (7, 2050), (4, 20000), (4096, 96),
          (1, 4096), (300, 12), (33, 260), (999, 768), (513, 3072), (64, 8192)]
BENCH_SHAPES = [(65536, 1024), (8192, 4096)]


def draw(shape, seed, dtype, lo=-3.0, hi=3.0):
    return parity_support.draw(shape, seed, dtype, lo, hi)


def leaf(t, dev):
    return t.to(dev).detach().requires_grad_(True)


def bias_act_run(x, b, dy, act, dev):
    """y, dx, dbias of bias_act on dev."""
    xs, bs = leaf(x, dev), leaf(b, dev)
    y = F.bias_act(xs, bs, act)
    (y * dy.to(dev)).sum().backward()
    return [y, xs.grad, bs.grad]


def add_ln_run(x, r, g, b, ds, dy, dev):
    """s, y and the gradients of x, r, gamma, beta (None where absent) of add_layer_norm on dev,
    the loss sum(s * ds) + sum(y * dy) reaching both outputs."""
    xs, rs = leaf(x, dev), leaf(r, dev)
    gs = None if g is None else leaf(g, dev)
    bs = None if b is None else leaf(b, dev)
    s, y = F.add_layer_norm(xs, rs, x.shape[-1], gs, bs, eps=1e-5)
    ((s * ds.to(dev)).sum() + (y * dy.to(dev)).sum()).backward()
    return [s, y, xs.grad, rs.grad] + [None if p is None else p.grad for p in (gs, bs)]


def to_torch(t):
    return torch.from_dlpack(t.detach()).clone()


def torch_err(ours, theirs):
    o, t = torch.from_dlpack(ours.detach()).double(), theirs.detach().double()
    return ((o - t).norm() / t.norm()).item()


@unittest.skipUnless(RUN, SKIP_WHY)
class BiasActParity(unittest.TestCase):
    def test_against_cpu(self):
        for dt in (mt.float32, mt.float64):
            for i, (rows, n) in enumerate(SHAPES):
                for act in ACTS:
                    x, b, dy = draw((rows, n), 10 + i, dt, -4, 4), draw((n,), 40 + i, dt), draw((rows, n), 70 + i, dt)
                    want, got = bias_act_run(x, b, dy, act, "cpu"), bias_act_run(x, b, dy, act, GPU)
                    for k, name in enumerate(("y", "dx", "dbias")):
                        tol = 1e-4 if k == 2 and dt is mt.float32 and rows >= 1000 else TOL[dt]
                        self.assertLess(rel_err(got[k], want[k]), tol, "%s %s %s %s" % (name, act, dt, (rows, n)))

    def test_leading_dims_and_bias_gradient_bit_identical(self):
        x, b, dy = draw((8, 512, 384), 1, mt.float32), draw((384,), 2, mt.float32), draw((8, 512, 384), 3, mt.float32)
        first, again = bias_act_run(x, b, dy, "gelu", GPU), bias_act_run(x, b, dy, "gelu", GPU)
        self.assertEqual(tuple(first[0].shape), (8, 512, 384))
        self.assertEqual(rel_err(again[2], first[2]), 0.0)

    def test_half_types(self):
        if SELF_TEST:
            self.skipTest("the CPU backend has no float16/bfloat16 arithmetic")
        for dt in (mt.float16, mt.bfloat16):
            for rows, n in ((64, 1024), (33, 40), (3, 100)):
                for act in ACTS:
                    x, b, dy = draw((rows, n), 5, dt), draw((n,), 6, dt), draw((rows, n), 7, dt, -1, 1)
                    got = bias_act_run(x, b, dy, act, GPU)
                    want = bias_act_run(x.float(), b.float(), dy.float(), act, "cpu")  # same rounded values
                    for k in range(3):
                        self.assertLess(rel_err(got[k].float(), want[k]), 1e-2, "%d %s %s %s" % (k, act, dt, (rows, n)))

    @unittest.skipUnless(HAVE_TORCH, "torch with CUDA is not importable")
    def test_against_torch_at_the_benchmark_shapes(self):
        for rows, n in BENCH_SHAPES:
            for act in ("relu", "gelu"):
                x, b, dy = mt.randn(rows, n, device=GPU), mt.randn(n, device=GPU), mt.randn(rows, n, device=GPU)
                ours = bias_act_run(x, b, dy, act, GPU)
                tx, tb = to_torch(x).requires_grad_(True), to_torch(b).requires_grad_(True)
                z = tx + tb
                ty = torch.nn.functional.relu(z) if act == "relu" else torch.nn.functional.gelu(z, approximate="tanh")
                (ty * to_torch(dy)).sum().backward()
                for name, o, t in (("y", ours[0], ty), ("dx", ours[1], tx.grad), ("dbias", ours[2], tb.grad)):
                    self.assertLess(torch_err(o, t), 1e-4, "%s %s %s" % (name, act, (rows, n)))


@unittest.skipUnless(RUN, SKIP_WHY)
class AddLayerNormParity(unittest.TestCase):
    def test_against_cpu(self):
        for dt in (mt.float32, mt.float64):
            for i, (rows, d) in enumerate(SHAPES):
                for with_g, with_b in ((True, True), (False, False), (True, False)):
                    x, r = draw((rows, d), 10 + i, dt, -3, 5), draw((rows, d), 20 + i, dt)
                    ds, dy = draw((rows, d), 30 + i, dt, -1, 1), draw((rows, d), 40 + i, dt, -1, 1)
                    g = draw((d,), 70 + i, dt, 0.5, 1.5) if with_g else None
                    b = draw((d,), 90 + i, dt, -1, 1) if with_b else None
                    want, got = add_ln_run(x, r, g, b, ds, dy, "cpu"), add_ln_run(x, r, g, b, ds, dy, GPU)
                    for k, name in enumerate(("s", "y", "dx", "dresidual", "dgamma", "dbeta")):
                        if want[k] is None:
                            continue
                        tol = TOL[dt] if k < 4 or dt is mt.float64 or rows < 1000 else 1e-4
                        self.assertLess(rel_err(got[k], want[k]), tol, "%s %s %s g=%s b=%s" % (
                            name, dt, (rows, d), with_g, with_b))

    def test_half_types(self):
        if SELF_TEST:
            self.skipTest("the CPU backend has no float16/bfloat16 arithmetic")
        for dt in (mt.float16, mt.bfloat16):
            for rows, d in ((64, 1024), (33, 40), (4, 8192), (3, 100)):
                x, r, g, b = draw((rows, d), 5, dt), draw((rows, d), 6, dt), draw((d,), 7, dt, 0.5, 1.5), \
                    draw((d,), 8, dt, -1, 1)
                ds, dy = draw((rows, d), 9, dt, -1, 1), draw((rows, d), 10, dt, -1, 1)
                got = add_ln_run(x, r, g, b, ds, dy, GPU)
                want = add_ln_run(*(t.float() for t in (x, r, g, b, ds, dy)), "cpu")
                for k in range(6):
                    self.assertLess(rel_err(got[k].float(), want[k]), 1e-2, "%d %s %s" % (k, dt, (rows, d)))

    @unittest.skipUnless(HAVE_TORCH, "torch with CUDA is not importable")
    def test_against_torch_at_the_benchmark_shapes(self):
        for rows, d in BENCH_SHAPES:
            x, r = mt.randn(rows, d, device=GPU), mt.randn(rows, d, device=GPU)
            g, b = mt.randn(d, device=GPU), mt.randn(d, device=GPU)
            ds, dy = mt.randn(rows, d, device=GPU), mt.randn(rows, d, device=GPU)
            ours = add_ln_run(x, r, g, b, ds, dy, GPU)
            tx, tr, tg, tb = (to_torch(t).requires_grad_(True) for t in (x, r, g, b))
            ts = tx + tr
            ty = torch.nn.functional.layer_norm(ts, (d,), tg, tb, eps=1e-5)
            ((ts * to_torch(ds)).sum() + (ty * to_torch(dy)).sum()).backward()
            for name, o, t in (("s", ours[0], ts), ("y", ours[1], ty), ("dx", ours[2], tx.grad),
                               ("dresidual", ours[3], tr.grad), ("dgamma", ours[4], tg.grad),
                               ("dbeta", ours[5], tb.grad)):
                self.assertLess(torch_err(o, t), 1e-4, "%s %s" % (name, (rows, d)))


def dropout_add_run(x, r, dy, p, seed, dev, fused):
    """out and the gradients of x and r of r + dropout(x, p) on dev, the mask from seed."""
    xs, rs = leaf(x, dev), leaf(r, dev)
    mt.manual_seed(seed)
    out = F.dropout_add(xs, rs, p) if fused else rs + F.dropout(xs, p)
    (out * dy.to(dev)).sum().backward()
    return [out, xs.grad, rs.grad]


@unittest.skipUnless(RUN, SKIP_WHY)
class DropoutAddParity(unittest.TestCase):
    def test_bits_of_the_composition_on_the_gpu(self):
        dts = (mt.float32, mt.float64) if SELF_TEST else (mt.float32, mt.float64, mt.float16, mt.bfloat16)
        for dt in dts:
            for n in (1, 7, 1027, (1 << 20) + 3):
                for p in (0.1, 0.5, 0.9):
                    x, r, dy = draw((n,), 1, dt), draw((n,), 2, dt), draw((n,), 3, dt, -1, 1)
                    got = dropout_add_run(x, r, dy, p, 77, GPU, True)
                    want = dropout_add_run(x, r, dy, p, 77, GPU, False)
                    for k in range(3):
                        self.assertEqual(rel_err(got[k].float(), want[k].float()), 0.0, "%d %s %s %s" % (k, dt, n, p))

    def test_bits_of_the_cpu(self):
        for dt in (mt.float32, mt.float64):
            x, r, dy = draw((4099,), 4, dt), draw((4099,), 5, dt), draw((4099,), 6, dt, -1, 1)
            got = dropout_add_run(x, r, dy, 0.3, 78, GPU, True)
            want = dropout_add_run(x, r, dy, 0.3, 78, "cpu", True)
            for k in range(3):
                self.assertEqual(rel_err(got[k], want[k]), 0.0, "%d %s" % (k, dt))

    @unittest.skipUnless(HAVE_TORCH, "torch with CUDA is not importable")
    def test_against_torch_with_the_mask_read_back(self):
        n, p = 1 << 24, 0.25
        x, r = mt.randn(n, device=GPU), mt.randn(n, device=GPU)
        mt.manual_seed(5)
        out = F.dropout_add(x, r, p)
        tx, tr, to = to_torch(x), to_torch(r), to_torch(out)
        kept = (to != tr) | (tx == 0)       # where x survived (x == 0 cannot tell: counted kept)
        frac = kept.double().mean().item()
        self.assertLess(abs(frac - (1 - p)), 1e-3, "kept fraction %g" % frac)  # ~8 sigma at 2^24 draws
        want = tr + tx * kept.float() / (1 - p)
        self.assertLess(torch_err(out, want), 1e-6)


if __name__ == "__main__":
    unittest.main()
