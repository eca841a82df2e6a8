"""Gradients through operator expressions, against hand-derived formulas and float64
central differences; grad mode; accumulation; the tape's bookkeeping."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import TestCase, flat, mt, numeric_grad, rand_list, sigmoid  # noqa: E402


def leaf(data, dtype=mt.float64):
    return mt.tensor(data, dtype=dtype, requires_grad=True)


class HandDerivedTest(TestCase):
    def test_header_example(self):
        # fit y = 2x with one weight: w.grad = mean(2*(pred-y)*x) = -22.5 at w = 0.5
        x = mt.tensor([[1.0], [2.0], [3.0], [4.0]])
        y = mt.tensor([[2.0], [4.0], [6.0], [8.0]])
        w = mt.tensor(0.5, requires_grad=True)
        loss = mt.nn.functional.mse_loss(x * w, y)
        loss.backward()
        self.assertAlmostEqual(w.grad.item(), -22.5, places=5)

    def test_polynomial_expression(self):
        # f = sum(a*a*b + 3*a - b/2 + a**3) ; df/da = 2ab + 3 + 3a^2 ; df/db = a^2 - 1/2
        a_v, b_v = [1.0, -2.0, 0.5], [3.0, 0.25, -1.0]
        a, b = leaf(a_v), leaf(b_v)
        f = (a * a * b + 3 * a - b / 2 + a ** 3).sum()
        f.backward()
        self.assertClose(a.grad, [2 * x * y + 3 + 3 * x * x for x, y in zip(a_v, b_v)], rtol=1e-14)
        self.assertClose(b.grad, [x * x - 0.5 for x in a_v], rtol=1e-14)

    def test_reverse_scalar_ops(self):
        # f = sum(2 - a + 1/a) ; df/da = -1 - 1/a^2
        a_v = [0.5, 2.0, -4.0]
        a = leaf(a_v)
        (2 - a + 1 / a).sum().backward()
        self.assertClose(a.grad, [-1 - 1 / (x * x) for x in a_v], rtol=1e-14)

    def test_broadcast_gradients_reduce(self):
        # c = a[3,1] * b[4] -> [3,4]; d sum(c)/da = sum(b), d/db = sum(a)
        a_v, b_v = [[1.0], [2.0], [3.0]], [0.5, -1.0, 2.0, 4.0]
        a, b = leaf(a_v), leaf(b_v)
        (a * b).sum().backward()
        self.assertEqual(a.grad.shape, (3, 1))
        self.assertEqual(b.grad.shape, (4,))
        self.assertClose(a.grad, [[sum(b_v)]] * 3, rtol=1e-14)
        self.assertClose(b.grad, [6.0] * 4, rtol=1e-14)
        s = leaf(2.0)
        (a + s).mean().backward()
        self.assertClose(s.grad, 1.0, rtol=1e-14)

    def test_activations(self):
        x_v = [-1.5, -0.2, 0.3, 2.0]
        for name, f, d in (
            ("relu", lambda t: t.relu(), lambda x: 1.0 if x > 0 else 0.0),
            ("sigmoid", lambda t: t.sigmoid(), lambda x: sigmoid(x) * (1 - sigmoid(x))),
            ("tanh", lambda t: t.tanh(), lambda x: 1 - math.tanh(x) ** 2),
            ("exp", lambda t: t.exp(), math.exp),
            ("neg", lambda t: -t, lambda x: -1.0),
        ):
            x = leaf(x_v)
            f(x).sum().backward()
            self.assertClose(x.grad, [d(v) for v in x_v], rtol=1e-13, atol=1e-15, msg=name)
        x = leaf([0.5, 2.0])
        x.log().sum().backward()
        self.assertClose(x.grad, [2.0, 0.5], rtol=1e-14)

    def test_matmul_gradients(self):
        a_v = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
        b_v = [[0.5, -1.0, 2.0, 0.0], [1.0, 0.25, -0.5, 3.0]]
        a, b = leaf(a_v), leaf(b_v)
        (a @ b).sum().backward()
        # d sum(AB)/dA[i,k] = sum_j B[k,j]; d/dB[k,j] = sum_i A[i,k]
        self.assertClose(a.grad, [[sum(b_v[0]), sum(b_v[1])]] * 3, rtol=1e-14)
        self.assertClose(b.grad, [[9.0] * 4, [12.0] * 4], rtol=1e-14)

    def test_through_casts_and_copies(self):
        x = leaf([1.0, 2.0])
        ((x.float() * 2).double() + x.clone() * 3).sum().backward()
        self.assertClose(x.grad, [5.0, 5.0], rtol=1e-14)

    def test_backward_with_gradient_argument(self):
        x = leaf([1.0, 2.0, 3.0])
        y = x * x
        y.backward(mt.tensor([1.0, 0.5, 2.0], dtype=mt.float64))
        self.assertClose(x.grad, [2.0, 2.0, 12.0], rtol=1e-14)
        with self.assertRaises(ValueError):
            (leaf([1.0, 2.0]) * 2).backward()       # more than one element, no gradient given
        # the gradient must have the output's shape (it was broadcast: [2, 3] gave x.grad 2x)
        x = leaf([1.0, 2.0, 3.0])
        for g in (mt.ones(2, 3, dtype=mt.float64), mt.tensor(1.0, dtype=mt.float64)):
            with self.assertRaises(RuntimeError) as cm:
                (x * 2).backward(g)
            self.assertIn("mismatch in shape", str(cm.exception))
        with self.assertRaises(TypeError):
            (x * 2).backward([1.0, 1.0, 1.0])
        mt.autograd.clear_tape()
        self.assertIsNone(x.grad)
        g = mt.tensor([1.0, 1.0, 1.0], dtype=mt.float64, requires_grad=True)
        (x * 2).backward(g)
        self.assertClose(x.grad, [2.0, 2.0, 2.0], rtol=1e-14)
        self.assertIsNone(g.grad)                   # a constant of the product, as in torch


class NumericGradTest(TestCase):
    """Central differences in float64 for composite expressions."""

    def check(self, f, shape, seed=0, lo=-1.0, hi=1.0, tol=1e-6):
        rng = self.rng(seed)
        v = rand_list(shape, rng, lo, hi)
        x = leaf(v)
        f(x).backward()
        self.assertClose(x.grad, numeric_grad(f, flat(v), shape), rtol=tol, atol=tol)

    def test_expressions(self):
        w = mt.tensor(rand_list((4, 3), self.rng(11)), dtype=mt.float64)
        cases = [
            (lambda x: (x.sigmoid() * x.tanh() + x.exp() / 3).mean(), (3, 4)),
            (lambda x: ((x @ w) ** 2).sum(), (2, 4)),
            (lambda x: (x.reshape(6, 2).transpose(0, 1) * mt.tensor([1.0, -2.0], dtype=mt.float64)
                        .reshape(2, 1)).sum(), (3, 4)),
            (lambda x: x.permute(2, 0, 1).relu().sum(1).mean(), (2, 3, 4)),
            (lambda x: (x.softmax(1) * mt.arange(4, dtype=mt.float64)).sum(), (3, 4)),
            (lambda x: x.log_softmax(-1).mean(), (3, 4)),
            (lambda x: mt.nn.functional.cross_entropy(x, mt.tensor([1, 0, 3])), (3, 4)),
            (lambda x: x.max(1).values.sum() + x.min(0).values.sum(), (3, 4)),
            (lambda x: (x[1:, ::2] * 3).sum() + x[0, 1] + x[[2, 0]].sum(), (3, 4)),
            (lambda x: x.mean(dim=(0, 2), keepdim=True).exp().sum(), (2, 3, 4)),
            (lambda x: mt.nn.functional.mse_loss(x, mt.zeros(3, 4, dtype=mt.float64)), (3, 4)),
        ]
        for i, (f, shape) in enumerate(cases):
            with self.subTest(case=i):
                self.check(f, shape, seed=i)

    def test_log_and_pow_on_positive_inputs(self):
        self.check(lambda x: (x.log() * x ** 1.5 + (1 / x)).sum(), (5,), lo=0.5, hi=2.0)


class GradModeTest(TestCase):
    def test_no_grad_records_nothing(self):
        x = leaf([1.0, 2.0])
        before = mt.autograd.tape_size()
        with mt.no_grad():
            self.assertFalse(mt.is_grad_enabled())
            y = x * 2
        self.assertTrue(mt.is_grad_enabled())
        self.assertFalse(y.requires_grad)
        self.assertEqual(mt.autograd.tape_size(), before)
        with self.assertRaises(RuntimeError):
            y.sum().backward()

    def test_no_grad_decorator_nesting_and_set_grad_enabled(self):
        @mt.no_grad()
        def f(x):
            self.assertFalse(mt.is_grad_enabled())
            with mt.enable_grad():
                self.assertTrue(mt.is_grad_enabled())
            return x * 2
        self.assertFalse(f(leaf([1.0])).requires_grad)
        self.assertTrue(mt.is_grad_enabled())
        with mt.set_grad_enabled(False):
            self.assertFalse(mt.is_grad_enabled())
        self.assertTrue(mt.is_grad_enabled())
        mt.set_grad_enabled(False)
        self.assertFalse(mt.is_grad_enabled())
        mt.set_grad_enabled(True)
        # switches take bools ("no" is truthy and turned grad mode on); backward a Tensor
        for switch in (mt.set_grad_enabled, mt.set_deterministic, mt.set_allow_tf32):
            with self.assertRaisesRegex(TypeError, "must be a bool, got str"):
                switch("no")
        self.assertTrue(mt.is_grad_enabled())
        with self.assertRaisesRegex(TypeError, "backward\\(\\): argument 'tensor' must be a Tensor, not list"):
            mt.autograd.backward([leaf([1.0]).sum()])
        ctx = mt.no_grad()
        with ctx:
            with ctx:
                pass
            self.assertFalse(mt.is_grad_enabled())
        self.assertTrue(mt.is_grad_enabled())

    def test_gradients_accumulate_and_zero(self):
        x = leaf([1.0, 2.0])
        (x * 3).sum().backward()
        (x * x).sum().backward()
        self.assertClose(x.grad, [5.0, 7.0], rtol=1e-14)
        g = x.grad
        g.zero_()                                     # the tensor shares the gradient's storage
        self.assertClose(x.grad, [0.0, 0.0])
        (x * 2).sum().backward()
        self.assertClose(x.grad, [2.0, 2.0])
        x._zero_grad()
        self.assertClose(x.grad, [0.0, 0.0])
        old = x.grad
        x.grad = None                                 # dropped (mt_tensor_clear_grad)
        self.assertIsNone(x.grad)
        self.assertClose(old, [0.0, 0.0])             # a handle taken before keeps its buffer
        (x * 4).sum().backward()                      # a fresh gradient, not added to the old one
        self.assertClose(x.grad, [4.0, 4.0])
        self.assertClose(old, [0.0, 0.0])
        with self.assertRaises(NotImplementedError):  # a tensor cannot be assigned
            x.grad = mt.tensor([1.0, 1.0])
        self.assertClose(x.grad, [4.0, 4.0])

    def test_detach_stops_gradient(self):
        x = leaf([1.0, 2.0])
        (x * x.detach()).sum().backward()
        self.assertClose(x.grad, [1.0, 2.0], rtol=1e-14)

    def test_backward_clears_the_tape(self):
        x = leaf([1.0, 2.0])
        y = (x.exp() * 2).sum()
        self.assertGreater(mt.autograd.tape_size(), 0)
        y.backward()
        self.assertEqual(mt.autograd.tape_size(), 0)
        z = (x * 2).sum()
        mt.autograd.clear_tape()
        self.assertEqual(mt.autograd.tape_size(), 0)
        with self.assertRaises(RuntimeError):
            z.backward()
        with self.assertRaises(NotImplementedError):
            (x * 2).sum().backward(retain_graph=True)
        mt.autograd.clear_tape()

    def test_requires_grad_propagates(self):
        x = leaf([1.0])
        c = mt.tensor([2.0], dtype=mt.float64)
        self.assertTrue((x * c).requires_grad)
        self.assertFalse((c * c).requires_grad)
        self.assertTrue(x.to(mt.float32).requires_grad)
        self.assertFalse(x.detach().requires_grad)
        mt.autograd.clear_tape()


if __name__ == "__main__":
    unittest.main()
