"""test_cnn_parity - the convolutional-network family (conv2d, max_pool2d, avg_pool2d,
batch_norm), MT_CUDA against the CPU reference backend and, where torch with CUDA is
importable, against PyTorch: forward values and every gradient, through the Python frontend.

  conv2d      random shapes (strides, paddings, dilations, non-square kernels, 1x1, a batch
              large enough to split the im2col column buffer into chunks), with and without
              bias; each CUDA path forced with mt_set_conv_algo: 1 (im2col + GEMM), 2 (cuDNN;
              skipped when the build has none), 3 (the direct kernels; the 6x6 kernel, more
              taps than they take, runs im2col) and 0 (the timed choice); the roadmap CNN's
              two layers among the cases; cuDNN and algo 0 again with mt_set_deterministic(1):
              the same tolerance, the same bits on three runs, and no timed choice (MT_CONV_LOG
              in a fresh process)
  index64     the im2col path with its plane kernels' 64-bit coordinates forced (the internal
              hook mt_study_conv_index64): the same values as the CPU, the same bits as 32-bit
  col2im      the im2col path's input gradient under each col2im generation (mt_study_col2im,
              an internal hook: 1 gather, 2 shared-memory tiles, 0 production) against the CPU
              in float64, on shapes with strides 1-3, paddings, dilations, odd and non-square
              sizes, kernels 1-7 and 14 (the shared generation's fallback in float64); the two
              generations add the same taps in the same order, so their dx agree bit for bit
  pools       overlapping and disjoint windows
  batch_norm  training (incl. the running-statistic update), eval, [N,C] and [N,C,H,W]

Run by `make test-gpu` (MT_DEVICE=cuda). Without a usable GPU every test is skipped;
MT_PARITY_DEVICE=cpu runs the harness CPU against CPU.

Tolerances, relative error ||gpu - ref|| / ||ref|| against the CPU in float64 on the same
inputs: float32 conv 1e-4 (sums of up to ~600 products, cuDNN's Winograd/FFT transforms;
TF32 off on both sides), float32 pools and batch norm 1e-5, max_pool2d forward exact;
float64 1e-12. Against torch (float32 on the GPU, cudnn.allow_tf32 = False): 1e-4.
"""
import os
import subprocess
import sys
import unittest
from ctypes import byref, c_int64

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_support import GPU, HAVE_TORCH, RUN, SELF_TEST, SKIP_WHY, mt, torch  # noqa: E402,F401

from minitorch._lib import lib  # noqa: E402
from test_frontend_support import PACKAGE_DIR  # noqa: E402

STUDY_COL2IM = getattr(lib._cdll, "mt_study_col2im", None)  # CUDA builds only
STUDY_INDEX64 = getattr(lib._cdll, "mt_study_conv_index64", None)
for _hook in (STUDY_COL2IM, STUDY_INDEX64):
    if _hook is not None:
        _hook.restype = c_int64
        _hook.argtypes = [c_int64]


F = mt.nn.functional
TOL_CONV = {mt.float32: 1e-4, mt.float64: 1e-12}
TOL = {mt.float32: 1e-5, mt.float64: 1e-12}

# (x shape, w shape, stride, padding, dilation, bias)
CONV_CASES = [
    ((8, 3, 32, 32), (16, 3, 3, 3), (1, 1), (1, 1), (1, 1), True),
    ((4, 16, 17, 23), (8, 16, 5, 3), (2, 1), (2, 0), (1, 1), False),
    ((2, 6, 14, 14), (16, 6, 5, 5), (1, 1), (0, 0), (1, 1), True),     # LeNet-5 conv2
    ((3, 8, 20, 19), (4, 8, 3, 3), (1, 2), (2, 3), (2, 3), True),      # dilation
    ((5, 32, 9, 9), (24, 32, 1, 1), (1, 1), (0, 0), (1, 1), True),     # 1x1: no column buffer
    ((2, 4, 11, 7), (3, 4, 1, 1), (2, 2), (1, 0), (1, 1), False),      # strided 1x1 with padding
    ((1, 1, 28, 28), (6, 1, 5, 5), (1, 1), (2, 2), (1, 1), True),      # LeNet-5 conv1
    ((7, 5, 6, 6), (2, 5, 6, 6), (3, 3), (0, 0), (1, 1), True),        # kernel as large as the input
    ((64, 1, 28, 28), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1), True),     # roadmap CNN conv1
    ((64, 8, 14, 14), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), True),    # roadmap CNN conv2
    ((3, 10, 9, 8), (11, 10, 2, 3), (2, 1), (1, 2), (2, 1), True),     # chunks of 8 with a remainder
    ((40, 64, 56, 56), (8, 64, 3, 3), (1, 1), (1, 1), (1, 1), True),   # 289 MB of columns: 2 chunks
]


def rel_err(got, ref, floor=0.0):
    """||got - ref|| / max(||ref||, floor)."""
    g, r = got.cpu().double(), ref.cpu().double()
    assert tuple(g.shape) == tuple(r.shape), (tuple(g.shape), tuple(r.shape))
    den = max((r * r).sum().item() ** 0.5, floor)
    num = ((g - r) * (g - r)).sum().item() ** 0.5
    return num / den if den else num


def set_algo(algo):
    """Forces a conv path; returns False when this build lacks it (cuDNN)."""
    try:
        lib.mt_set_conv_algo(algo, None)
        return True
    except mt.UnsupportedError:
        return False


def algos():
    out = [1, 3, 0]
    if set_algo(2):
        out.append(2)
    set_algo(0)
    return out


def conv_grads(x, w, b, g, stride, pad, dil):
    """y and dx, dw, db of sum(conv2d(x, w, b) * g) on the tensors' device."""
    x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    b = None if b is None else b.detach().requires_grad_(True)
    y = F.conv2d(x, w, b, stride, pad, dil)
    (y * g).sum().backward()
    return y, x.grad, w.grad, None if b is None else b.grad


@unittest.skipUnless(RUN, SKIP_WHY)
class ConvParity(unittest.TestCase):
    def tearDown(self):
        set_algo(0)

    def check_case(self, i, case, dt, algo):
        xs, ws, stride, pad, dil, bias = case
        mt.manual_seed(10 * i)
        x, w = mt.randn(*xs, dtype=dt, device="cpu"), mt.randn(*ws, dtype=dt, device="cpu")
        b = mt.randn(ws[0], dtype=dt, device="cpu") if bias else None
        y_shape = F.conv2d(x[:1], w, None, stride, pad, dil).shape
        g = mt.randn(xs[0], *y_shape[1:], dtype=dt, device="cpu")
        # the reference: the CPU in float64 on the very same values
        ref = conv_grads(x.double(), w.double(), None if b is None else b.double(), g.double(), stride, pad, dil)
        self.assertTrue(set_algo(algo))
        got = conv_grads(x.to(GPU), w.to(GPU), None if b is None else b.to(GPU), g.to(GPU), stride, pad, dil)
        for name, gv, rv in zip(("y", "dx", "dw", "db"), got, ref):
            if rv is None:
                continue
            self.assertLess(rel_err(gv, rv), TOL_CONV[dt], "%s algo %d %s case %d %s" % (name, algo, dt, i, case))
        return x, w, b, g, got

    def test_float32_every_path(self):
        for algo in algos():
            for i, case in enumerate(CONV_CASES):
                x, w, b, g, got = self.check_case(i, case, mt.float32, algo)
                if HAVE_TORCH and algo in (1, 3):
                    self.against_torch(case, x, w, b, g, got, i)

    def test_float64(self):  # algo 2 runs im2col here (cuDNN takes float32)
        for algo in algos():
            for i, case in enumerate(CONV_CASES[:-1]):
                self.check_case(i, case, mt.float64, algo)

    @unittest.skipUnless(STUDY_INDEX64 is not None, "the library has no mt_study_conv_index64")
    def test_index64_planes(self):
        """The im2col path's plane kernels with 64-bit coordinates (mt_study_conv_index64, taken
        otherwise only by geometries too large to test): the CPU reference's values, and the 32-bit
        run's bits (the same values summed in the same order)."""
        self.assertNotEqual(STUDY_INDEX64(2), 0)
        self.assertNotEqual(STUDY_INDEX64(-1), 0)
        try:
            for dt in (mt.float32, mt.float64):
                for i, case in enumerate(CONV_CASES[:-1]):
                    self.assertEqual(STUDY_INDEX64(0), 0)
                    x, w, b, g, narrow = self.check_case(i, case, dt, 1)
                    self.assertEqual(STUDY_INDEX64(1), 0)
                    _, _, _, _, wide = self.check_case(i, case, dt, 1)
                    for name, a, c in zip(("y", "dx", "dw", "db"), narrow, wide):
                        if a is not None:
                            self.assertEqual(rel_err(c, a), 0.0, "%s %s case %d %s" % (name, dt, i, case))
        finally:
            STUDY_INDEX64(0)

    def test_deterministic(self):
        """With mt.set_deterministic(True) nothing is timed: cuDNN takes the first of its
        heuristic's algorithms that it reports as deterministic (a plan per setting), and
        algo 0 a fixed path. Every float32 case, forced to cuDNN and under algo 0, keeps the
        CPU float64 reference's tolerance, and three runs give the same bits."""
        prev = mt.set_deterministic(True)
        try:
            for algo in [a for a in algos() if a in (0, 2)]:
                for i, case in enumerate(CONV_CASES):
                    x, w, b, g, first = self.check_case(i, case, mt.float32, algo)
                    for run in range(2):
                        again = conv_grads(x.to(GPU), w.to(GPU), None if b is None else b.to(GPU), g.to(GPU),
                                           *case[2:5])
                        for name, a, c in zip(("y", "dx", "dw", "db"), first, again):
                            if a is not None:
                                self.assertTrue(a.tolist() == c.tolist(), "%s differs on run %d, algo %d, case %d %s"
                                                % (name, run + 2, algo, i, case))
        finally:
            mt.set_deterministic(prev)

    @unittest.skipIf(SELF_TEST, "times the CUDA paths")
    def test_deterministic_times_nothing(self):
        """MT_CONV_LOG prints a line for every timed choice of algo 0: a fresh process running
        the LeNet-5 conv2 forward and backward prints three with the switch off, none with it on."""
        code = ("import minitorch as mt, sys\n"
                "mt.set_deterministic(sys.argv[1] == '1')\n"
                "F = mt.nn.functional\n"
                "x = mt.randn(2, 6, 14, 14, device='cuda', requires_grad=True)\n"
                "w = mt.randn(16, 6, 5, 5, device='cuda', requires_grad=True)\n"
                "F.conv2d(x, w).sum().backward()\n"
                "print(float(w.grad.sum()))\n")
        env = dict(os.environ, MT_CONV_LOG="1", PYTHONPATH=PACKAGE_DIR)
        lines = {}
        for on in ("0", "1"):
            r = subprocess.run([sys.executable, "-c", code, on], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines[on] = [ln for ln in r.stderr.splitlines() if ln.startswith("minitorch conv2d")]
        self.assertEqual(len(lines["0"]), 3, "timed choices with the switch off:\n" + "\n".join(lines["0"]))
        self.assertEqual(lines["1"], [], "timed choices with the switch on")

    def test_timed_choice_is_stable(self):
        """algo 0 times both paths once per shape; the second call reuses the choice and agrees."""
        set_algo(0)
        mt.manual_seed(3)
        x, w = mt.randn(16, 8, 24, 24, device=GPU), mt.randn(12, 8, 3, 3, device=GPU)
        a = F.conv2d(x, w, padding=1)
        self.assertLess(rel_err(F.conv2d(x, w, padding=1), a), 1e-6)

    def against_torch(self, case, x, w, b, g, got, i):
        xs, ws, stride, pad, dil, bias = case
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        tx = torch.tensor(x.tolist(), device="cuda", requires_grad=True)
        tw = torch.tensor(w.tolist(), device="cuda", requires_grad=True)
        tb = torch.tensor(b.tolist(), device="cuda", requires_grad=True) if bias else None
        ty = torch.nn.functional.conv2d(tx, tw, tb, stride, pad, dil)
        (ty * torch.tensor(g.tolist(), device="cuda")).sum().backward()
        for name, gv, tv in zip(("y", "dx", "dw", "db"), got, (ty, tx.grad, tw.grad, tb.grad if bias else None)):
            if tv is None:
                continue
            ref = mt.tensor(tv.detach().cpu().tolist(), dtype=mt.float32, device="cpu")
            self.assertLess(rel_err(gv, ref), 1e-4, "torch %s case %d" % (name, i))


# (x shape, w shape, stride, padding, dilation) for the col2im generations: none is 1x1 with
# stride 1 and no padding (that takes no col2im)
COL2IM_CASES = [
    ((2, 3, 17, 23), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 4, 19, 13), (3, 4, 3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 5, 31, 29), (2, 5, 5, 5), (3, 3), (2, 2), (1, 1)),
    ((2, 2, 40, 37), (3, 2, 7, 7), (1, 1), (3, 3), (1, 1)),
    ((2, 3, 25, 33), (2, 3, 7, 7), (2, 3), (3, 1), (1, 1)),
    ((1, 3, 27, 21), (2, 3, 3, 5), (1, 2), (0, 2), (2, 1)),      # dilation, non-square kernel
    ((2, 2, 23, 26), (3, 2, 5, 3), (3, 1), (4, 0), (2, 3)),
    ((1, 1, 33, 34), (1, 1, 7, 7), (3, 2), (3, 3), (2, 2)),
    ((3, 4, 9, 11), (5, 4, 1, 1), (2, 3), (1, 0), (1, 1)),       # strided 1x1 with padding
    ((2, 6, 14, 14), (16, 6, 5, 5), (1, 1), (0, 0), (1, 1)),     # LeNet-5 conv2
    ((2, 8, 70, 66), (4, 8, 3, 3), (1, 1), (1, 1), (1, 1)),      # several tiles each way
    ((1, 2, 5, 3), (2, 2, 5, 3), (1, 1), (0, 0), (1, 1)),        # the kernel covers the image
    ((2, 3, 8, 40), (2, 3, 1, 7), (1, 3), (0, 3), (1, 2)),       # 1xK
    ((1, 2, 11, 11), (2, 2, 2, 2), (3, 3), (0, 0), (1, 1)),      # stride > kernel: pixels with no tap
    ((2, 1, 1, 9), (2, 1, 1, 3), (1, 2), (0, 1), (1, 1)),        # one row
    ((1, 2, 20, 20), (2, 2, 14, 14), (1, 1), (3, 3), (1, 1)),    # 196 taps: float64 slab > 48 KB
]


@unittest.skipUnless(RUN and STUDY_COL2IM is not None,
                     SKIP_WHY if not RUN else "the library has no mt_study_col2im (a CPU-only build)")
class Col2imGenerations(unittest.TestCase):
    def tearDown(self):
        STUDY_COL2IM(0)
        set_algo(0)

    def test_hook_refuses_unknown_variants(self):
        for bad in (-1, 3, 100):
            self.assertNotEqual(STUDY_COL2IM(bad), 0, "variant %d" % bad)
        for good in (0, 1, 2):
            self.assertEqual(STUDY_COL2IM(good), 0, "variant %d" % good)

    def test_dx_every_generation(self):
        for dt in (mt.float32, mt.float64):
            for i, (xs, ws, stride, pad, dil) in enumerate(COL2IM_CASES):
                mt.manual_seed(400 + i)
                x, w = mt.randn(*xs, dtype=dt, device="cpu"), mt.randn(*ws, dtype=dt, device="cpu")
                y_shape = F.conv2d(x[:1], w, None, stride, pad, dil).shape
                g = mt.randn(xs[0], *y_shape[1:], dtype=dt, device="cpu")
                ref = conv_grads(x.double(), w.double(), None, g.double(), stride, pad, dil)[1]
                self.assertTrue(set_algo(1))
                got = {}
                for variant in (0, 1, 2):
                    self.assertEqual(STUDY_COL2IM(variant), 0)
                    got[variant] = conv_grads(x.to(GPU), w.to(GPU), None, g.to(GPU), stride, pad, dil)[1]
                    what = "col2im %d %s case %d %s" % (variant, dt, i, (xs, ws, stride, pad, dil))
                    self.assertLess(rel_err(got[variant], ref), TOL_CONV[dt], "dx " + what)
                # the same dcol (the same GEMM) summed in the same order: equal bit for bit
                self.assertEqual(rel_err(got[2], got[1]), 0.0, "gather vs shared %s case %d" % (dt, i))


@unittest.skipUnless(RUN, SKIP_WHY)
class PoolAndNormParity(unittest.TestCase):
    POOLS = [((4, 3, 16, 16), 2, 2), ((2, 5, 13, 11), 3, 1), ((3, 2, 15, 9), 3, 2), ((64, 16, 28, 28), 2, 2),
             ((1, 1, 7, 7), 7, 7)]

    def test_pools(self):
        for dt in (mt.float32, mt.float64):
            for i, (xs, k, st) in enumerate(self.POOLS):
                mt.manual_seed(100 + i)
                x = mt.randn(*xs, dtype=dt, device="cpu")
                g = mt.randn(xs[0], xs[1], (xs[2] - k) // st + 1, (xs[3] - k) // st + 1, dtype=dt, device="cpu")
                for fn in (F.max_pool2d, F.avg_pool2d):
                    res = []
                    for dev in ("cpu", GPU):
                        xd = x.to(dev).detach().requires_grad_(True)
                        y = fn(xd, k, st)
                        (y * g.to(dev)).sum().backward()
                        res.append((y, xd.grad))
                    what = "%s %s %s k%d s%d" % (fn.__name__, dt, xs, k, st)
                    # max_pool2d selects (exact) and its backward adds in the CPU's order
                    tol = 0.0 if fn is F.max_pool2d else TOL[dt]
                    self.assertLessEqual(rel_err(res[1][0], res[0][0]), tol, "y " + what)
                    self.assertLessEqual(rel_err(res[1][1], res[0][1]), tol, "dx " + what)
                    if HAVE_TORCH and dt is mt.float32:
                        tx = torch.tensor(x.tolist(), device="cuda", requires_grad=True)
                        ty = getattr(torch.nn.functional, fn.__name__)(tx, k, st)
                        (ty * torch.tensor(g.tolist(), device="cuda")).sum().backward()
                        for name, a, tv in (("y", res[1][0], ty), ("dx", res[1][1], tx.grad)):
                            ref = mt.tensor(tv.detach().cpu().tolist(), device="cpu")
                            self.assertLess(rel_err(a, ref), 1e-5, "torch %s %s" % (name, what))

    def test_batch_norm(self):
        shapes = [(8, 4, 5, 5), (32, 16), (64, 6, 14, 14), (2, 3, 1, 1)]
        for dt in (mt.float32, mt.float64):
            for i, xs in enumerate(shapes):
                for training in (True, False):
                    mt.manual_seed(200 + i)
                    C = xs[1]
                    x = mt.randn(*xs, dtype=dt, device="cpu") * 2 + 0.5
                    gamma, beta = mt.randn(C, dtype=dt, device="cpu"), mt.randn(C, dtype=dt, device="cpu")
                    rm0, rv0 = mt.randn(C, dtype=dt, device="cpu"), mt.rand(C, dtype=dt, device="cpu") + 0.5
                    g = mt.randn(*xs, dtype=dt, device="cpu")
                    res = []
                    for dev in ("cpu", GPU):
                        xd = x.to(dev).detach().requires_grad_(True)
                        gd = gamma.to(dev).detach().requires_grad_(True)
                        bd = beta.to(dev).detach().requires_grad_(True)
                        rm, rv = rm0.to(dev).clone(), rv0.to(dev).clone()
                        y = F.batch_norm(xd, rm, rv, gd, bd, training, 0.1, 1e-5)
                        (y * g.to(dev)).sum().backward()
                        res.append((y, xd.grad, gd.grad, bd.grad, rm, rv))
                    what = "%s %s training=%s" % (dt, xs, training)
                    # dx is a difference of nearly equal terms (with two values per channel it is
                    # zero up to rounding): its error is measured against the scale of dy
                    dx_floor = 1e-2 * (g.cpu().double() ** 2).sum().item() ** 0.5
                    for name, a, r in zip(("y", "dx", "dgamma", "dbeta", "running_mean", "running_var"),
                                          res[1], res[0]):
                        if name == "dx":
                            self.assertLess(rel_err(a, r, dx_floor), TOL[dt] * 10, name + " " + what)
                        else:
                            self.assertLess(rel_err(a, r), TOL[dt], name + " " + what)
                    if HAVE_TORCH and dt is mt.float32:
                        tx = torch.tensor(x.tolist(), device="cuda", requires_grad=True)
                        tg = torch.tensor(gamma.tolist(), device="cuda", requires_grad=True)
                        tb = torch.tensor(beta.tolist(), device="cuda", requires_grad=True)
                        trm, trv = torch.tensor(rm0.tolist(), device="cuda"), torch.tensor(rv0.tolist(), device="cuda")
                        ty = torch.nn.functional.batch_norm(tx, trm, trv, tg, tb, training, 0.1, 1e-5)
                        (ty * torch.tensor(g.tolist(), device="cuda")).sum().backward()
                        for name, a, tv in (("y", res[1][0], ty), ("dx", res[1][1], tx.grad),
                                            ("dgamma", res[1][2], tg.grad), ("running_var", res[1][5], trv)):
                            ref = mt.tensor(tv.detach().cpu().tolist(), device="cpu")
                            floor = dx_floor if name == "dx" else 0.0
                            self.assertLess(rel_err(a, ref, floor), 1e-4, "torch %s %s" % (name, what))


if __name__ == "__main__":
    unittest.main()
