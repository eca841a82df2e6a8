"""test_compare_parity - the comparisons and selection family (mt_eq ... mt_ge, mt_where,
mt_maximum, mt_minimum, mt_sqrt, mt_abs, mt_pow, mt_clamp) and DLPack, MT_CUDA against the
CPU reference backend, forward and backward, through the Python frontend.

  shapes     flat (every operand of the output's shape), broadcasts of 2 and 3 operands
             (the FastDivmod path), a 0-d operand, an empty tensor, ~1M elements
  values     integer-valued floats (many ties: the tie rule of maximum/minimum, EQ), NaN
             rows (NaN propagates through maximum/minimum/clamp; compares false but NE),
             int64 beyond 2^53, uint8
  dtypes     float32 and float64 everywhere; float16/bfloat16 forward (compare, where, pow,
             maximum), checked against the CPU on the same rounded values; where and compare
             on int64 / uint8
  DLPack     a CUDA export re-imported (no copy), torch.from_dlpack both ways when torch with
             CUDA is importable

Run by `make test-gpu` (MT_DEVICE=cuda). Without a usable GPU every test is skipped;
MT_PARITY_DEVICE=cpu runs the harness CPU against CPU.

Tolerances, relative error ||gpu - cpu|| / ||cpu||: masks, where, maximum/minimum, clamp, abs
and their gradients are selections or copies and must match exactly; sqrt and pow float32
1e-5 (libdevice powf/sqrtf are within 2 ulps), float64 1e-12; float16/bfloat16 pow 1e-2.
"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_support import GPU, HAVE_TORCH, RUN, SELF_TEST, SKIP_WHY, mt, torch  # noqa: E402,F401


M = 1 << 20
SHAPES = [((1000, 1001), (1000, 1001)), ((37, 1, 129), (1, 65, 1)), ((33,), ()), ((513, 257), (513, 1)),
          ((M + 3,), (1,)), ((0, 3), (1, 3)), ((7, 3, 5), (3, 1))]
TOL = {mt.float32: 1e-5, mt.float64: 1e-12}


def flat(x):
    if not isinstance(x, list):
        return [x]
    out = []
    for y in x:
        out.extend(flat(y))
    return out


def rel_err(got, ref):
    """||got - ref|| / ||ref|| (||got - ref|| when ref is 0); NaNs must sit at the same places and
    are left out. The sums run in float64 on the CPU backend; only when they are not finite does
    the element-wise loop decide (and, exact, for integer and bool tensors)."""
    assert got.numel() == ref.numel()
    g, r = got.detach().cpu().reshape(-1), ref.detach().cpu().reshape(-1)
    if g.numel() and g.is_floating_point() and r.is_floating_point():
        g, r = g.double(), r.double()
        d = g - r
        num, den = (d * d).sum().item(), (r * r).sum().item()
        if math.isfinite(num) and math.isfinite(den):
            return math.sqrt(num / den) if den else math.sqrt(num)
    g, r = flat(g.tolist()), flat(r.tolist())
    num = den = 0.0
    for x, y in zip(g, r):
        if math.isnan(x) or math.isnan(y):
            if math.isnan(x) != math.isnan(y):
                return math.inf
            continue
        num += (x - y) ** 2
        den += y * y
    return math.sqrt(num / den) if den else math.sqrt(num)


def ints_like(shape, seed, dtype):
    """Integer-valued floats in [-3, 3] (ties everywhere), drawn on the CPU."""
    mt.manual_seed(seed)
    return (mt.randn(*shape, dtype=mt.float64, device="cpu") * 2).int().to(dtype)


@unittest.skipUnless(RUN, SKIP_WHY)
class CompareParity(unittest.TestCase):
    def assertExact(self, got, ref, what):
        self.assertEqual(tuple(got.shape), tuple(ref.shape), what)
        self.assertEqual(rel_err(got, ref), 0.0, what)

    def test_compare_where_maximum_minimum_clamp_exact(self):
        for dt in (mt.float32, mt.float64):
            for i, (sa, sb) in enumerate(SHAPES):
                a, b = ints_like(sa, 2 * i, dt), ints_like(sb, 2 * i + 1, dt)
                ga, gb = a.to(GPU), b.to(GPU)
                what = "%s %s %s" % (dt, sa, sb)
                for name in ("eq", "ne", "lt", "le", "gt", "ge"):
                    self.assertExact(getattr(ga, name)(gb), getattr(a, name)(b), name + " " + what)
                self.assertExact(mt.where(ga > 0, ga, gb), mt.where(a > 0, a, b), "where " + what)
                self.assertExact(mt.maximum(ga, gb), mt.maximum(a, b), "maximum " + what)
                self.assertExact(mt.minimum(ga, gb), mt.minimum(a, b), "minimum " + what)
                self.assertExact(ga.clamp(-1, 2), a.clamp(-1, 2), "clamp " + what)
                self.assertExact(ga.abs(), a.abs(), "abs " + what)

    def test_where_three_way_broadcast_and_int_dtypes(self):
        cond = ints_like((5, 1, 7), 9, mt.float32) > 0
        for dt in (mt.float32, mt.int64, mt.uint8):
            a, b = ints_like((1, 6, 7), 10, mt.float64).abs().to(dt), ints_like((6, 1), 11, mt.float64).abs().to(dt)
            self.assertExact(mt.where(cond.to(GPU), a.to(GPU), b.to(GPU)), mt.where(cond, a, b), "where %s" % dt)
        big = 2 ** 53 + 1
        x = mt.tensor([big, big - 1, -big], device="cpu")
        self.assertExact(x.to(GPU) == mt.tensor([big], device=GPU), x == mt.tensor([big], device="cpu"), "int64 eq")

    def test_nan(self):
        nan = float("nan")
        a = mt.tensor([nan, 1.0, nan, -2.0, 3.0], device="cpu")
        b = mt.tensor([0.0, nan, nan, -2.0, 1.0], device="cpu")
        for name in ("eq", "ne", "lt", "le", "gt", "ge"):
            self.assertExact(getattr(a.to(GPU), name)(b.to(GPU)), getattr(a, name)(b), name)
        for f in (mt.maximum, mt.minimum):
            self.assertExact(f(a.to(GPU), b.to(GPU)), f(a, b), f.__name__)
        self.assertExact(a.to(GPU).clamp(0, 2), a.clamp(0, 2), "clamp")

    def test_sqrt_pow(self):
        for dt in (mt.float32, mt.float64):
            for i, (sa, sb) in enumerate(SHAPES):
                mt.manual_seed(100 + i)
                a = mt.rand(*sa, dtype=dt, device="cpu") * 3 + 0.25
                b = mt.randn(*sb, dtype=dt, device="cpu") * 2
                ga, gb = a.to(GPU), b.to(GPU)
                self.assertLess(rel_err(ga.sqrt(), a.sqrt()), TOL[dt], "sqrt %s %s" % (dt, sa))
                self.assertLess(rel_err(ga ** gb, a ** b), TOL[dt], "pow %s %s %s" % (dt, sa, sb))

    def test_half_types_forward(self):
        if SELF_TEST:
            self.skipTest("the CPU backend has no float16/bfloat16 arithmetic")
        for dt in (mt.float16, mt.bfloat16):
            a, b = ints_like((257, 129), 20, dt), ints_like((129,), 21, dt)
            af, bf = a.float(), b.float()                       # the same values, in float32
            ga, gb = a.to(GPU), b.to(GPU)
            for name in ("eq", "ne", "lt", "le", "gt", "ge"):
                self.assertExact(getattr(ga, name)(gb), getattr(af, name)(bf), "%s %s" % (name, dt))
            self.assertExact(mt.where(ga > 0, ga, gb).float(), mt.where(af > 0, af, bf), "where %s" % dt)
            self.assertExact(mt.maximum(ga, gb).float(), mt.maximum(af, bf), "maximum %s" % dt)
            pa = ga.abs() + 0.5
            self.assertLess(rel_err((pa ** gb).float(), (pa.float().cpu() ** bf).to(dt).float()), 1e-2,
                            "pow %s" % dt)

    def test_gradients(self):
        cases = {
            "maximum": lambda x, y: mt.maximum(x, y),
            "minimum": lambda x, y: mt.minimum(x, y),
            "where": lambda x, y: mt.where(x > y, x * 2, y),
            "clamp": lambda x, y: x.clamp(-1, 1) + y,
            "abs": lambda x, y: x.abs() * y,
            "sqrt": lambda x, y: (x.abs() + 1).sqrt() * y,
            "pow": lambda x, y: (x.abs() + 0.5) ** y,
        }
        for dt in (mt.float32, mt.float64):
            for i, (sa, sb) in enumerate(SHAPES[:4] + SHAPES[6:]):
                a, b = ints_like(sa, 40 + i, dt), ints_like(sb, 50 + i, dt)
                for name, f in cases.items():
                    grads = []
                    for dev in ("cpu", GPU):
                        x = a.to(dev).detach().requires_grad_(True)
                        y = b.to(dev).detach().requires_grad_(True)
                        out = f(x, y)
                        mt.manual_seed(7)
                        r = mt.randn(*out.shape, dtype=dt, device="cpu").to(dev)
                        (out * r).sum().backward()
                        grads.append((x.grad, y.grad))
                    # Selections without broadcasting are exact; a broadcast input's gradient is a
                    # sum (tree order on the GPU), and sqrt/pow carry their kernels' ulps.
                    exact = name in ("maximum", "minimum", "where", "clamp", "abs") and tuple(sa) == tuple(sb)
                    for k in range(2):
                        err = rel_err(grads[1][k], grads[0][k])
                        tol = 0.0 if exact else 1e-4 if dt is mt.float32 else 1e-10
                        self.assertLessEqual(err, tol, "d%s %s %s %s %s" % ("xy"[k], name, dt, sa, sb))


@unittest.skipUnless(RUN, SKIP_WHY)
class DlpackParity(unittest.TestCase):
    def test_reimport_shares_device_memory(self):
        t = mt.randn(129, 257, device=GPU)
        u = mt.from_dlpack(t)
        self.assertEqual(u.data_ptr(), t.data_ptr())
        self.assertEqual(u.device, t.device)
        self.assertEqual(rel_err(u, t), 0.0)

    @unittest.skipUnless(HAVE_TORCH, "torch with CUDA is not importable")
    def test_torch_round_trip(self):
        t = mt.randn(33, 65, device=GPU)
        tt = torch.from_dlpack(t)
        self.assertTrue(tt.is_cuda)
        self.assertEqual(tt.data_ptr(), t.data_ptr())
        x = torch.randn(17, 31, device="cuda") * 3          # queued on torch's stream
        m = mt.from_dlpack(x)
        self.assertEqual(m.data_ptr(), x.data_ptr())
        self.assertEqual(m.cpu().tolist(), x.cpu().tolist())
        ref = torch.maximum(x, torch.zeros_like(x))
        self.assertEqual(mt.maximum(m, mt.zeros(17, 31, device=GPU)).cpu().tolist(), ref.cpu().tolist())
        eq = (tt == torch.from_dlpack(t)).all().item()
        self.assertTrue(eq)


if __name__ == "__main__":
    unittest.main()
