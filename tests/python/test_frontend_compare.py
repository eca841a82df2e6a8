"""Comparisons, where, maximum/minimum, clamp, sqrt, abs, tensor ** tensor and mask indexing:
values against pure-Python references, broadcasting, dtype promotion, and gradients against
hand-derived values and float64 central differences."""

import math
import operator
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import (TestCase, flat, mt, numeric_grad, rand_list, ref_binary, ref_unary,  # noqa: E402
                                   shape_of)

NAN = float("nan")


class ComparisonTest(TestCase):
    OPS = ((operator.eq, "eq"), (operator.ne, "ne"), (operator.lt, "lt"), (operator.le, "le"),
           (operator.gt, "gt"), (operator.ge, "ge"))

    def test_operators_broadcast_against_python(self):
        rng = self.rng(1)
        a = [[round(v, 1) for v in row] for row in rand_list((3, 4), rng)]
        b = [round(v, 1) for v in rand_list((4,), rng)]
        a[1][2] = b[2]                       # a tie
        ta, tb = mt.tensor(a), mt.tensor(b)
        for op, name in self.OPS:
            out = op(ta, tb)
            self.assertIs(out.dtype, mt.uint8)
            self.assertEqual(out.tolist(), ref_binary(lambda x, y: int(op(x, y)), a, b), name)
            self.assertEqual(getattr(ta, name)(tb).tolist(), out.tolist())
            self.assertEqual(getattr(mt, name)(ta, tb).tolist(), out.tolist())

    def test_scalars_reflected_and_promotion(self):
        t = mt.tensor([1.0, 2.0, 3.0])
        self.assertEqual((t > 2).tolist(), [0, 0, 1])
        self.assertEqual((2 < t).tolist(), [0, 0, 1])     # reflected: t.__gt__(2)
        self.assertEqual((t == 2.0).tolist(), [0, 1, 0])
        i = mt.arange(4)                                  # int64
        self.assertEqual((i == 2).tolist(), [0, 0, 1, 0])
        self.assertEqual((i < 1.5).tolist(), [1, 1, 0, 0])   # promoted to float
        self.assertEqual((i >= mt.tensor([1.5])).tolist(), [0, 0, 1, 1])
        u = mt.tensor([0, 255], dtype=mt.uint8)
        self.assertEqual((u == -1).tolist(), [0, 0])      # compared as numbers, no wraparound
        self.assertEqual((u == 255).tolist(), [0, 1])
        big = 2 ** 53 + 1
        self.assertEqual((mt.tensor([big, big - 1]) == big).tolist(), [1, 0])

    def test_nan_and_integers(self):
        t = mt.tensor([NAN, 1.0])
        self.assertEqual((t == t).tolist(), [0, 1])
        self.assertEqual((t != t).tolist(), [1, 0])
        self.assertEqual((t < 2).tolist(), [0, 1])
        labels = mt.tensor([3, 1, 2])
        pred = mt.tensor([[0.1, 0.2, 0.1, 0.9], [0.0, 0.5, 0.2, 0.1], [0.3, 0.2, 0.1, 0.0]]).argmax(1)
        self.assertEqual((pred == labels).float().sum().item(), 2.0)

    def test_masks_are_not_recorded(self):
        x = mt.tensor([1.0, -1.0], requires_grad=True)
        m = x > 0
        self.assertFalse(m.requires_grad)
        self.assertTrue(mt.equal(x.detach(), mt.tensor([1.0, -1.0])))
        self.assertFalse(mt.equal(x.detach(), mt.tensor([1.0, 1.0])))
        self.assertFalse(mt.equal(x.detach(), mt.tensor([1.0])))

    def test_errors(self):
        with self.assertRaises(ValueError):   # shapes that do not broadcast
            mt.ones(2, 3) == mt.ones(4)
        with self.assertRaises(TypeError):
            mt.ones(2).lt("a")


class WhereTest(TestCase):
    def test_values_and_forms(self):
        c = mt.tensor([[1], [0]], dtype=mt.uint8)
        a = mt.tensor([1.0, 2.0, 3.0])
        self.assertEqual(mt.where(c, a, -1.0).tolist(), [[1, 2, 3], [-1, -1, -1]])
        self.assertEqual(mt.where(a > 1.5, a, mt.zeros(3)).tolist(), [0, 2, 3])
        self.assertEqual(mt.where(a > 1.5, 1.0, 0.0).tolist(), [0, 1, 1])
        self.assertEqual(mt.where(a > 1.5, 1, 0).dtype, mt.int64)
        self.assertEqual(a.where(a < 3, 10.0).tolist(), [1, 2, 10])
        # a non-uint8 condition counts nonzero as true
        self.assertEqual(mt.where(mt.tensor([0.0, 2.0, -1.0]), a, 0.0).tolist(), [0, 2, 3])
        # integer tensors select too; mixed dtypes promote
        self.assertEqual(mt.where(a > 2, mt.arange(3), mt.tensor([7])).tolist(), [7, 7, 2])
        self.assertIs(mt.where(a > 2, mt.arange(3), a).dtype, mt.float32)

    def test_gradient(self):
        a = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
        b = mt.tensor(5.0, requires_grad=True)
        mt.where(a > 1.5, a * a, b).sum().backward()
        self.assertEqual(a.grad.tolist(), [0.0, 4.0, 6.0])
        self.assertEqual(b.grad.item(), 1.0)


class ElementwiseTest(TestCase):
    def test_maximum_minimum_values(self):
        rng = self.rng(2)
        a, b = rand_list((2, 3), rng), rand_list((3,), rng)
        self.assertClose(mt.maximum(mt.tensor(a), mt.tensor(b)), ref_binary(max, a, b))
        self.assertClose(mt.minimum(mt.tensor(a), mt.tensor(b)), ref_binary(min, a, b))
        self.assertClose(mt.tensor(a).maximum(0.25), ref_binary(max, a, 0.25))
        out = mt.maximum(mt.tensor([NAN, 1.0]), mt.tensor([0.0, NAN])).tolist()
        self.assertTrue(all(math.isnan(v) for v in out))   # NaN propagates, as torch

    def test_maximum_ties_split_the_gradient(self):
        a = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
        b = mt.tensor([1.0, 5.0, 0.0], requires_grad=True)
        mt.maximum(a, b).sum().backward()
        self.assertEqual(a.grad.tolist(), [0.5, 0.0, 1.0])
        self.assertEqual(b.grad.tolist(), [0.5, 1.0, 0.0])
        c = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
        d = mt.tensor(2.0, requires_grad=True)
        mt.minimum(c, d).sum().backward()
        self.assertEqual(c.grad.tolist(), [1.0, 0.5, 0.0])
        self.assertEqual(d.grad.item(), 1.5)

    def test_clamp(self):
        x = mt.tensor([-2.0, -1.0, 0.0, 1.0, 2.0, NAN], requires_grad=True)
        y = x.clamp(-1, 1)
        self.assertClose(y, [-1.0, -1.0, 0.0, 1.0, 1.0, NAN])
        y.sum().backward()
        self.assertEqual(x.grad.tolist(), [0.0, 1.0, 1.0, 1.0, 0.0, 0.0])   # bounds included; NaN gets 0
        t = mt.tensor([-2.0, 0.5, 3.0])
        self.assertEqual(t.clamp(min=0).tolist(), [0.0, 0.5, 3.0])
        self.assertEqual(mt.clamp(t, max=1).tolist(), [-2.0, 0.5, 1.0])
        self.assertEqual(t.clip(2, 1).tolist(), [1.0, 1.0, 1.0])          # min > max gives max
        self.assertEqual(t.clamp(mt.tensor([0.0, 1.0, 0.0]), mt.tensor(2.0)).tolist(), [0.0, 1.0, 2.0])
        with self.assertRaises(RuntimeError):
            t.clamp()

    def test_sqrt_abs(self):
        vals = [0.25, 1.0, 4.0, 9.0]
        self.assertClose(mt.tensor(vals).sqrt(), ref_unary(math.sqrt, vals))
        self.assertClose(mt.sqrt(mt.arange(4)), [0.0, 1.0, math.sqrt(2), math.sqrt(3)])   # ints -> float
        self.assertEqual(abs(mt.tensor([-1.5, 0.0, 2.0])).tolist(), [1.5, 0.0, 2.0])
        x = mt.tensor([-2.0, 0.0, 3.0], requires_grad=True)
        x.abs().sum().backward()
        self.assertEqual(x.grad.tolist(), [-1.0, 0.0, 1.0])
        s = mt.tensor([4.0], requires_grad=True)
        s.sqrt().sum().backward()
        self.assertEqual(s.grad.tolist(), [0.25])

    def test_pow_of_tensors(self):
        a = mt.tensor([[1.0, 2.0], [3.0, 0.5]])
        b = mt.tensor([2.0, -1.0])
        self.assertClose(a ** b, ref_binary(lambda x, y: x ** y, a.tolist(), b.tolist()))
        self.assertClose(2 ** mt.tensor([0.0, 1.0, 3.0]), [1.0, 2.0, 8.0])
        self.assertClose(mt.tensor([2.0]).pow(mt.tensor([10.0])), [1024.0])

    def test_gradients_against_central_differences(self):
        rng = self.rng(3)
        shape = (2, 3)
        x0 = [[0.3 + abs(v) for v in row] for row in rand_list(shape, rng)]
        e = mt.tensor(rand_list((3,), rng, -1.5, 2.0), dtype=mt.float64)
        other = mt.tensor(rand_list(shape, rng), dtype=mt.float64)
        cases = {
            "pow base": lambda x: (x ** e).sum(),
            "pow exponent": lambda x: (mt.tensor([[1.5, 0.7, 2.0]], dtype=mt.float64) ** x).sum(),
            "sqrt": lambda x: (x.sqrt() * other).sum(),
            "maximum": lambda x: (mt.maximum(x, other) * other).sum(),
            "clamp": lambda x: (x.clamp(0.4, 1.2) * other).sum(),
            "where": lambda x: mt.where(other > 0, x * x, -x).sum(),
        }
        for name, f in cases.items():
            x = mt.tensor(x0, dtype=mt.float64, requires_grad=True)
            f(x).backward()
            self.assertClose(x.grad, numeric_grad(f, flat(x0), shape), rtol=1e-6, atol=1e-8, msg=name)


class MaskIndexingTest(TestCase):
    def test_select(self):
        a = mt.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
        self.assertEqual(a[a > 0].tolist(), [1.0, 3.0, 5.0])
        rows = mt.tensor([0, 1], dtype=mt.uint8)
        self.assertEqual(a[rows].tolist(), [[-4.0, 5.0, -6.0]])          # a mask over the first dim
        self.assertEqual(a[a > 10].shape, (0,))
        with self.assertRaises(IndexError):
            a[mt.tensor([1, 0, 1], dtype=mt.uint8)]                       # shape mismatch

    def test_gradient_flows_to_selected_elements(self):
        a = mt.tensor([[1.0, -2.0], [3.0, -4.0]], requires_grad=True)
        (a[a.detach() > 0] * 3).sum().backward()
        self.assertEqual(a.grad.tolist(), [[3.0, 0.0], [3.0, 0.0]])

    def test_assignment(self):
        a = mt.tensor([[1.0, -2.0], [3.0, -4.0]])
        a[a < 0] = 0
        self.assertEqual(a.tolist(), [[1.0, 0.0], [3.0, 0.0]])
        a[mt.tensor([1, 0], dtype=mt.uint8)] = mt.tensor(9.0)
        self.assertEqual(a.tolist(), [[9.0, 9.0], [3.0, 0.0]])
        with self.assertRaises(NotImplementedError):
            a[a > 0] = mt.tensor([1.0, 2.0, 3.0])
        w = mt.ones(2, requires_grad=True)
        with self.assertRaises(RuntimeError):
            w[w > 0] = 0.0


if __name__ == "__main__":
    unittest.main()
