"""minitorch.optim against step-by-step pure-Python references of torch's update rules."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import TestCase, mt  # noqa: E402

X = [0.5, -1.0, 2.0]          # loss(w) = sum(w * X) + sum(w^2) / 2, so grad = X + w
W0 = [1.0, -0.5, 0.25]


def loss_of(w):
    x = mt.tensor(X, dtype=mt.float64)
    return (w * x).sum() + (w * w).sum() / 2


def run(make_opt, steps, zero_grad=True):
    w = mt.nn.Parameter(mt.tensor(W0, dtype=mt.float64))
    opt = make_opt([w])
    for _ in range(steps):
        if zero_grad:
            opt.zero_grad()
        loss_of(w).backward()
        opt.step()
    return w.tolist(), opt


def ref_sgd(steps, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    w = list(W0)
    v = None
    for _ in range(steps):
        g = [x + p + weight_decay * p for x, p in zip(X, w)]
        if momentum:
            v = list(g) if v is None else [momentum * a + b for a, b in zip(v, g)]
            g = [a + momentum * b for a, b in zip(g, v)] if nesterov else v
        w = [p - lr * a for p, a in zip(w, g)]
    return w


def ref_adam(steps, lr, b1, b2, eps, weight_decay, decoupled):
    w = list(W0)
    m = [0.0] * 3
    v = [0.0] * 3
    for t in range(1, steps + 1):
        g = [x + p for x, p in zip(X, w)]
        if decoupled:
            w = [p * (1 - lr * weight_decay) for p in w]
        else:
            g = [a + weight_decay * p for a, p in zip(g, w)]
        m = [b1 * a + (1 - b1) * b for a, b in zip(m, g)]
        v = [b2 * a + (1 - b2) * b * b for a, b in zip(v, g)]
        mh = [a / (1 - b1 ** t) for a in m]
        vh = [a / (1 - b2 ** t) for a in v]
        w = [p - lr * a / (math.sqrt(b) + eps) for p, a, b in zip(w, mh, vh)]
    return w


class SGDTest(TestCase):
    def test_variants_match_the_reference(self):
        for kw in ({}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True}, {"weight_decay": 0.1},
                   {"momentum": 0.5, "weight_decay": 0.01, "nesterov": True}):
            with self.subTest(**kw):
                got, _ = run(lambda p: mt.optim.SGD(p, lr=0.1, **kw), 7)
                self.assertClose(got, ref_sgd(7, 0.1, **kw), rtol=1e-12, atol=1e-14)

    def test_lr_changes_through_param_groups(self):
        w = mt.nn.Parameter(mt.tensor(W0, dtype=mt.float64))
        opt = mt.optim.SGD([w], lr=0.1)
        self.assertEqual(opt.get_lr(), [0.1])
        opt.zero_grad()
        loss_of(w).backward()
        opt.step()
        opt.param_groups[0]["lr"] = 0.01
        opt.zero_grad()
        loss_of(w).backward()
        opt.step()
        self.assertEqual(opt.get_lr(), [0.01])
        w1 = [p - 0.1 * (x + p) for x, p in zip(X, W0)]
        w2 = [p - 0.01 * (x + p) for x, p in zip(X, w1)]
        self.assertClose(w, w2, rtol=1e-13)
        opt.param_groups[0]["momentum"] = 0.9
        with self.assertRaises(ValueError):
            opt.step()

    def test_param_groups_and_zero_grad(self):
        a = mt.nn.Parameter(mt.tensor([1.0], dtype=mt.float64))
        b = mt.nn.Parameter(mt.tensor([1.0], dtype=mt.float64))
        opt = mt.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
        ((a + b) * 2).sum().backward()
        opt.step()
        self.assertClose(a, [0.8], rtol=1e-14)
        self.assertClose(b, [0.0], rtol=0, atol=1e-15)
        opt.zero_grad(set_to_none=False)
        self.assertEqual(a.grad.tolist(), [0.0])
        self.assertEqual(b.grad.tolist(), [0.0])
        opt.zero_grad()  # set_to_none=True, as torch
        self.assertIsNone(a.grad)
        self.assertIsNone(b.grad)
        self.assertIn("Parameter Group 1", repr(opt))

    def test_gradients_accumulate_without_zero_grad(self):
        got, _ = run(lambda p: mt.optim.SGD(p, lr=0.1), 2, zero_grad=False)
        w1 = [p - 0.1 * (x + p) for x, p in zip(X, W0)]
        g = [(x + p0) + (x + p1) for x, p0, p1 in zip(X, W0, w1)]
        self.assertClose(got, [p - 0.1 * a for p, a in zip(w1, g)], rtol=1e-13)

    def test_closure(self):
        w = mt.nn.Parameter(mt.tensor(W0, dtype=mt.float64))
        opt = mt.optim.SGD([w], lr=0.1)

        def closure():
            opt.zero_grad()
            loss = loss_of(w)
            loss.backward()
            return loss
        loss = opt.step(closure)
        self.assertAlmostEqual(loss.item(), sum(a * b for a, b in zip(W0, X)) + sum(p * p for p in W0) / 2)
        self.assertClose(w, ref_sgd(1, 0.1), rtol=1e-13)

    def test_argument_checks(self):
        w = mt.nn.Parameter(mt.zeros(2))
        with self.assertRaises(ValueError):
            mt.optim.SGD([w], lr=-1)
        with self.assertRaises(ValueError):
            mt.optim.SGD([w], lr=0.1, nesterov=True)
        with self.assertRaises(NotImplementedError):
            mt.optim.SGD([w], lr=0.1, momentum=0.9, dampening=0.1)
        with self.assertRaises(ValueError):
            mt.optim.SGD([], lr=0.1)
        with self.assertRaises(TypeError):
            mt.optim.SGD(w, lr=0.1)
        with self.assertRaises(ValueError):
            mt.optim.SGD([w, w], lr=0.1)
        with self.assertRaises(TypeError):
            mt.optim.SGD([mt.zeros(2, dtype=mt.int64)], lr=0.1)     # the library refuses ints
        # options of the wrong type: a TypeError naming the option (a comparison with 0 failed,
        # or an IndexError for a one-element betas)
        for make, what in ((lambda: mt.optim.SGD([w], lr="0.1"), "lr"),
                           (lambda: mt.optim.SGD([w], lr=0.1, momentum=None), "momentum"),
                           (lambda: mt.optim.SGD([{"params": [w], "lr": "1"}], lr=0.1), "lr"),
                           (lambda: mt.optim.Adam([w], lr=[0.1]), "lr"),
                           (lambda: mt.optim.Adam([w], eps="1e-8"), "eps"),
                           (lambda: mt.optim.AdamW([w], weight_decay=True), "weight_decay"),
                           (lambda: mt.optim.Adam([w], betas=(0.9,)), "betas"),
                           (lambda: mt.optim.Adam([w], betas=(0.9, "0.99")), "betas"),
                           (lambda: mt.optim.Adam([{"params": [w], "betas": 0.9}]), "betas")):
            with self.subTest(option=what):
                with self.assertRaisesRegex(TypeError, "^%s" % what):
                    make()
        opt = mt.optim.Adam([w], lr=0.01, betas=[0.8, 0.9])
        self.assertEqual(opt.param_groups[0]["betas"], (0.8, 0.9))
        opt.param_groups[0]["lr"] = "0.02"  # as a scheduler might: refused at the next step
        with self.assertRaisesRegex(TypeError, "^lr must be a real number, got str"):
            opt.step()
        opt.param_groups[0]["lr"] = 0.02
        opt.step()
        self.assertEqual(opt.get_lr(), [0.02])

    def test_close_releases_references(self):
        w = mt.nn.Parameter(mt.zeros(2))
        base = mt.live_tensors()
        opt = mt.optim.SGD([w], lr=0.1, momentum=0.9)
        opt.close()
        opt.close()
        self.assertEqual(mt.live_tensors(), base)
        with self.assertRaises(ValueError):
            opt.step()


class AdamTest(TestCase):
    def test_adam_and_adamw_match_the_reference(self):
        for cls, decoupled, wd in ((mt.optim.Adam, False, 0.0), (mt.optim.Adam, False, 0.1),
                                   (mt.optim.AdamW, True, 0.1)):
            with self.subTest(cls=cls.__name__, wd=wd):
                got, _ = run(lambda p: cls(p, lr=0.05, betas=(0.8, 0.99), eps=1e-8, weight_decay=wd), 6)
                self.assertClose(got, ref_adam(6, 0.05, 0.8, 0.99, 1e-8, wd, decoupled), rtol=1e-10, atol=1e-12)

    def test_defaults_and_checks(self):
        w = mt.nn.Parameter(mt.zeros(2))
        self.assertEqual(mt.optim.Adam([w]).defaults["lr"], 1e-3)
        self.assertEqual(mt.optim.AdamW([w]).defaults["weight_decay"], 1e-2)
        with self.assertRaises(ValueError):
            mt.optim.Adam([w], betas=(1.0, 0.9))
        with self.assertRaises(NotImplementedError):
            mt.optim.Adam([w], amsgrad=True)


if __name__ == "__main__":
    unittest.main()
