"""minitorch.nn.functional's fused ops (bias_act, add_layer_norm, dropout_add) on the default
device, in float64: each against its composition of unfused ops on the same fresh random values
(values and gradients: 1e-12 relative, or exactly where the library promises the same bits),
leading and multiple normalized dims, eval mode, and the argument errors. minitorch.gpt uses them;
its parity with an independent reference is tests/python/test_gpt.py.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import TestCase, flat, mt  # noqa: E402

F = mt.nn.functional
F64 = mt.float64


def leaves(*ts):
    return [t.detach().requires_grad_(True) for t in ts]


def rel(a, b):
    a, b = flat(a.tolist()), flat(b.tolist())
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return (num / den) ** 0.5 if den else num ** 0.5


class FusionsTest(TestCase):
    def rand(self, *shape, lo=-2.0, hi=2.0):
        return mt.rand(*shape, dtype=F64) * (hi - lo) + lo

    def outputs_and_grads(self, fn, inputs, weights):
        ins = leaves(*inputs)
        outs = fn(*ins)
        outs = outs if isinstance(outs, tuple) else (outs,)
        sum((o * w).sum() for o, w in zip(outs, weights)).backward()
        return list(outs) + [t.grad for t in ins]

    def check_pair(self, fused, composed, inputs, exact=False):
        """Outputs and input gradients of fused and composed under the same random weights:
        within 1e-12 relative (float64 rounding), or the same bits when exact."""
        probe = fused(*inputs)
        weights = [self.rand(*o.shape) for o in (probe if isinstance(probe, tuple) else (probe,))]
        got = self.outputs_and_grads(fused, inputs, weights)
        want = self.outputs_and_grads(composed, inputs, weights)
        self.assertEqual(len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(tuple(g.shape), tuple(w.shape), k)
            if exact:
                self.assertEqual(g.tolist(), w.tolist(), "value %d" % k)
            else:
                self.assertLess(rel(g, w), 1e-12, "value %d" % k)

    def test_bias_act(self):
        mt.manual_seed(1)
        x, b = self.rand(2, 5, 12, lo=-4, hi=4), self.rand(12)
        comp = {"identity": lambda z: z, "relu": F.relu, "gelu": lambda z: F.gelu(z, approximate="tanh")}
        for act, f in comp.items():
            self.check_pair(lambda x, b: F.bias_act(x, b, act), lambda x, b: f(x + b), [x, b])
        self.check_pair(lambda x, b: F.bias_act(x, b, None), lambda x, b: x + b, [x, b])
        # linear without bias, then bias_act: the Linear + activation
        w = self.rand(7, 12)
        self.check_pair(lambda x, w, b: F.bias_act(F.linear(x, w), b, "gelu"),
                        lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), [x, w, self.rand(7)])

    def test_add_layer_norm(self):
        mt.manual_seed(2)
        x, r = self.rand(3, 4, 10, lo=-3, hi=5), self.rand(3, 4, 10)
        g, b = self.rand(10, lo=0.5, hi=1.5), self.rand(10)

        def composed(x, r, g=None, b=None, ns=10):
            s = x + r
            return s, F.layer_norm(s, ns, g, b, eps=1e-5)
        self.check_pair(lambda x, r, g, b: F.add_layer_norm(x, r, 10, g, b, eps=1e-5), composed, [x, r, g, b])
        self.check_pair(lambda x, r: F.add_layer_norm(x, r, 10), composed, [x, r])
        # two normalized dims: flattened for the library and restored
        g2, b2 = self.rand(4, 10), self.rand(4, 10)
        self.check_pair(lambda x, r, g, b: F.add_layer_norm(x, r, (4, 10), g, b),
                        lambda x, r, g, b: composed(x, r, g, b, (4, 10)), [x, r, g2, b2])

    def test_dropout_add(self):
        mt.manual_seed(3)
        x, r = self.rand(6, 50), self.rand(6, 50)
        for p in (0.0, 0.2, 0.7):
            def fused(x, r):
                mt.manual_seed(40)
                return F.dropout_add(x, r, p)

            def composed(x, r):
                mt.manual_seed(40)
                return r + F.dropout(x, p)
            self.check_pair(fused, composed, [x, r], exact=True)
        self.assertEqual(F.dropout_add(x, r, 0.5, training=False).tolist(), (x + r).tolist())
        self.assertEqual(F.dropout_add(x, r, 1.0).tolist(), (r + x * 0.0).tolist())

    def test_errors(self):
        x, r = self.rand(2, 3), self.rand(3, 2)
        with self.assertRaises(ValueError):
            F.bias_act(x, self.rand(3), "tanh")
        with self.assertRaises(ValueError):
            F.add_layer_norm(x, r, 3)
        with self.assertRaises(ValueError):
            F.add_layer_norm(x, self.rand(2, 3), 4)
        with self.assertRaises(ValueError):
            F.dropout_add(x, x, 1.5)
        with self.assertRaises(mt.ShapeError):
            F.bias_act(x, self.rand(4), "relu")
        with self.assertRaises(mt.ShapeError):
            F.dropout_add(x, r, 0.5)


if __name__ == "__main__":
    unittest.main()
