"""test_abi_grad - gradients and the tape: central-difference gradchecks in float64
for every differentiable op of abi/minitorch.h, tape semantics (accumulation, reuse,
no-grad mode, backward clears the tape, a failed backward leaves it, per-thread
tapes), and the SGD optimizer against torch.optim.SGD's update rule in Python.

Gradcheck: loss = sum(op(inputs) * R) with R random, so every output element's
gradient is exercised with a different weight. Analytic gradients come from
mt_backward; numeric ones from central differences of the same forward with grad
off, eps = 1e-6 in float64: truncation error ~eps^2 and rounding ~1e-16/eps, both far
under the tolerance |analytic - numeric| <= 1e-6 + 1e-5 |numeric|.
"""
import math
import os
import sys
import threading
import unittest
from ctypes import byref, c_double, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abi_util as U  # noqa: E402
from abi_util import LIB, MT_CPU, MT_CUDA, MT_F32, MT_F64, MT_OK, MT_ERR_STATE  # noqa: E402

EPS = 1e-6
ATOL, RTOL = 1e-6, 1e-5


def f64_device(dev):
    """Gradchecks run in float64 on the device under test when it has float64, else on the CPU."""
    return dev if U.device_supports(MT_F64, dev) else MT_CPU


class TestGradcheck(U.ABITestCase):
    def forward_value(self, spec, vals, shapes, params, R, device):
        hs = [U.from_list(v, s, MT_F64, device) for v, s in zip(vals, shapes)]
        try:
            out = spec.call(hs, params)
            try:
                o = U.to_list(out)
            finally:
                U.release(out)
        finally:
            for h in hs:
                U.release(h)
        return math.fsum(a * b for a, b in zip(o, R))

    def gradcheck(self, spec, shapes, params, device):
        what = "%s%s %s" % (spec.name, tuple(shapes), params or "")
        vals = [self.rand_values(U.numel(s), d) for s, d in zip(shapes, spec.domains)]
        leaves = [self.tensor(v, s, MT_F64, device, requires_grad=True) for v, s in zip(vals, shapes)]
        out = self.keep(spec.call(leaves, params))
        oshape = U.shape_of(out)
        R = [self.rng.uniform(-1, 1) for _ in range(U.numel(oshape))]
        r = self.tensor(R, oshape, MT_F64, U.device_of(out))
        loss = self.op("mt_sum", self.op("mt_mul", out, r))
        st = LIB.mt_backward(loss)
        self.assertStatus(st, MT_OK)
        self.assertEqual(LIB.mt_tape_size(), 0, what + ": backward must clear the tape")
        analytic = []
        for leaf, s in zip(leaves, shapes):
            g = self.grad(leaf)
            self.assertIsNotNone(g, what + ": no gradient")
            self.assertEqual(U.shape_of(g), tuple(s), what + ": gradient shape")
            self.assertEqual(U.dtype_of(g), MT_F64, what + ": gradient dtype")
            self.assertEqual(U.device_of(g), device, what + ": gradient device")
            analytic.append(U.to_list(g))
        prev = LIB.mt_set_grad_enabled(0)
        try:
            for i, v in enumerate(vals):
                numeric = []
                for j in range(len(v)):
                    x0 = v[j]
                    v[j] = x0 + EPS
                    fp = self.forward_value(spec, vals, shapes, params, R, device)
                    v[j] = x0 - EPS
                    fm = self.forward_value(spec, vals, shapes, params, R, device)
                    v[j] = x0
                    numeric.append((fp - fm) / (2 * EPS))
                self.assertAllClose(analytic[i], numeric, RTOL, ATOL, "%s: d/d input %d" % (what, i))
        finally:
            LIB.mt_set_grad_enabled(prev)

    def test_every_differentiable_op(self):
        device = f64_device(self.DEV)
        for spec in U.OP_SPECS:
            if not spec.grad:
                continue
            for shapes, params in spec.cases:
                with self.subTest(op=spec.name, shapes=shapes, params=params):
                    self.gradcheck(spec, shapes, params, device)

    def test_gradcheck_on_cpu_too(self):
        if self.DEV == MT_CPU:
            self.skipTest("device under test is the CPU")
        for spec in U.OP_SPECS:
            if spec.grad:
                shapes, params = spec.cases[0]
                with self.subTest(op=spec.name):
                    self.gradcheck(spec, shapes, params, MT_CPU)

    def test_matmul_grad_larger(self):
        device = f64_device(self.DEV)
        for shapes in (((5, 7), (7, 3)), ((2, 3, 6), (6, 5)), ((3, 4, 2), (3, 2, 5))):
            self.gradcheck(U.SPEC["matmul"], shapes, {}, device)

    def test_cast_gradient(self):
        """d/dx of cast(x, f32) is the incoming gradient cast back to x's dtype."""
        x = self.tensor([0.5, -1.25, 3.0], (3,), MT_F64, requires_grad=True)
        y = self.op("mt_tensor_cast", x, MT_F32)
        R = [0.1, -2.0, 3.5]
        loss = self.op("mt_sum", self.op("mt_mul", y, self.tensor(R, (3,), MT_F32)))
        self.assertStatus(LIB.mt_backward(loss), MT_OK)
        g = self.grad(x)
        self.assertEqual(U.dtype_of(g), MT_F64)
        self.assertEqual(U.to_list(g), U.f32(R))

    def test_to_gradient_across_devices(self):
        if self.DEV == MT_CPU:
            self.skipTest("one device only")
        x = self.tensor([1.0, 2.0, -3.0], (3,), MT_F32, requires_grad=True)
        c = self.op("mt_tensor_to", x, MT_CPU)
        loss = self.op("mt_sum", self.op("mt_mul", c, c))
        self.assertStatus(LIB.mt_backward(loss), MT_OK)
        g = self.grad(x)
        self.assertEqual(U.device_of(g), self.DEV)
        self.assertEqual(U.to_list(g), [2.0, 4.0, -6.0])


class TestTape(U.ABITestCase):
    def leaf(self, vals, shape, dtype=MT_F64):
        return self.tensor(vals, shape, dtype, requires_grad=True)

    def backward(self, loss):
        self.assertStatus(LIB.mt_backward(loss), MT_OK)

    def test_accumulates_until_zeroed(self):
        xv = self.rand_values(5)
        x = self.leaf(xv, (5,))
        for k in (1, 2, 3):
            loss = self.op("mt_sum", self.op("mt_mul", x, x))
            self.backward(loss)
            self.assertAllClose(U.to_list(self.grad(x)), [2 * k * v for v in xv], 1e-12, 0, "after %d backward" % k)
        self.assertStatus(LIB.mt_tensor_zero_grad(x), MT_OK)
        self.assertEqual(U.to_list(self.grad(x)), [0.0] * 5)
        self.backward(self.op("mt_sum", self.op("mt_mul_scalar", x, c_double(3.0))))
        self.assertEqual(U.to_list(self.grad(x)), [3.0] * 5)

    def test_zero_grad_without_grad_is_noop(self):
        x = self.leaf([1.0], (1,))
        self.assertStatus(LIB.mt_tensor_zero_grad(x), MT_OK)
        self.assertIsNone(U.grad_of(x))

    def test_tensor_used_twice(self):
        xv = self.rand_values(4, "pos")
        x = self.leaf(xv, (2, 2))
        self.backward(self.op("mt_sum", self.op("mt_add", x, x)))
        self.assertEqual(U.to_list(self.grad(x)), [2.0] * 4)
        LIB.mt_tensor_zero_grad(x)
        # f = sum((x + 1) * x): df/dx = 2x + 1
        self.backward(self.op("mt_sum", self.op("mt_mul", self.op("mt_add_scalar", x, c_double(1.0)), x)))
        self.assertAllClose(U.to_list(self.grad(x)), [2 * v + 1 for v in xv], 1e-12, 1e-12, "(x+1)*x")
        LIB.mt_tensor_zero_grad(x)
        # diamond: a = exp(x); f = sum(a*a + a): df/dx = (2a + 1) a
        a = self.op("mt_exp", x)
        f = self.op("mt_sum", self.op("mt_add", self.op("mt_mul", a, a), a))
        self.backward(f)
        want = [(2 * math.exp(v) + 1) * math.exp(v) for v in xv]
        self.assertAllClose(U.to_list(self.grad(x)), want, 1e-12, 1e-12, "diamond")

    def test_two_leaves_and_constants(self):
        av, bv, cv = self.rand_values(3), self.rand_values(3), self.rand_values(3)
        a, b = self.leaf(av, (3,)), self.leaf(bv, (3,))
        c = self.tensor(cv, (3,), MT_F64)                # does not require grad
        ab = self.op("mt_mul", a, b)
        loss = self.op("mt_sum", self.op("mt_mul", ab, c))
        self.backward(loss)
        self.assertAllClose(U.to_list(self.grad(a)), [y * z for y, z in zip(bv, cv)], 1e-12, 1e-12, "da")
        self.assertAllClose(U.to_list(self.grad(b)), [y * z for y, z in zip(av, cv)], 1e-12, 1e-12, "db")
        self.assertIsNone(U.grad_of(c), "a tensor that does not require grad gets no gradient")
        self.assertIsNone(U.grad_of(ab), "only leaves accumulate .grad")

    def test_detach_stops_gradient(self):
        xv = self.rand_values(3)
        x = self.leaf(xv, (3,))
        d = self.op("mt_tensor_detach", x)
        self.backward(self.op("mt_sum", self.op("mt_mul", d, x)))
        self.assertAllClose(U.to_list(self.grad(x)), xv, 1e-12, 0, "d(detach(x)*x)/dx = x")

    def test_no_grad_mode(self):
        x = self.leaf([1.0, 2.0], (2,))
        self.assertEqual(LIB.mt_is_grad_enabled(), 1)
        self.assertEqual(LIB.mt_set_grad_enabled(0), 1, "returns the previous mode")
        try:
            self.assertEqual(LIB.mt_is_grad_enabled(), 0)
            t0 = LIB.mt_tape_size()
            y = self.op("mt_sum", self.op("mt_mul", x, x))
            self.assertEqual(LIB.mt_tape_size(), t0, "nothing is recorded with grad off")
            self.assertEqual(U.requires_grad_of(y), 0)
            self.assertEqual(U.to_list(y), [5.0])
            self.assertStatus(LIB.mt_backward(y), MT_ERR_STATE, "mt_backward")
        finally:
            self.assertEqual(LIB.mt_set_grad_enabled(1), 0)
        self.assertEqual(LIB.mt_is_grad_enabled(), 1)
        self.assertIsNone(U.grad_of(x))

    def test_backward_clears_whole_tape(self):
        x = self.leaf([1.0, 2.0], (2,))
        z = self.leaf([3.0], (1,))
        other = self.op("mt_sum", self.op("mt_exp", z))          # does not reach the loss
        loss = self.op("mt_sum", self.op("mt_mul", x, x))
        self.assertGreater(LIB.mt_tape_size(), 0)
        self.backward(loss)
        self.assertEqual(LIB.mt_tape_size(), 0)
        self.assertIsNone(U.grad_of(z), "entries that do not reach the loss are dropped")
        self.assertStatus(LIB.mt_backward(other), MT_ERR_STATE, "mt_backward")
        self.assertStatus(LIB.mt_backward(loss), MT_ERR_STATE, "mt_backward")
        self.assertEqual(U.to_list(self.grad(x)), [2.0, 4.0], "a refused backward changes no gradient")

    def test_failed_backward_leaves_tape(self):
        x = self.leaf([1.0, 2.0, 3.0], (3,))
        y = self.op("mt_mul", x, x)                  # 3 elements: not a loss
        n = LIB.mt_tape_size()
        self.assertGreater(n, 0)
        st = LIB.mt_backward(y)
        self.assertStatus(st, (U.MT_ERR_SHAPE, U.MT_ERR_INVALID_ARGUMENT), "mt_backward", ["[3]"])
        self.assertEqual(LIB.mt_tape_size(), n, "a failed backward leaves the tape untouched")
        self.assertIsNone(U.grad_of(x))
        self.backward(self.op("mt_sum", y))          # the recorded graph still works
        self.assertEqual(U.to_list(self.grad(x)), [2.0, 4.0, 6.0])

    def test_one_element_loss_of_any_rank(self):
        x = self.leaf([2.0], (1, 1))
        y = self.op("mt_mul", x, x)
        self.backward(y)
        self.assertEqual(U.to_list(self.grad(x)), [4.0])

    def test_tape_clear(self):
        x = self.leaf([1.0, 2.0], (2,))
        y = self.op("mt_sum", self.op("mt_exp", x))
        self.assertGreater(LIB.mt_tape_size(), 0)
        self.assertStatus(LIB.mt_tape_clear(), MT_OK)
        self.assertEqual(LIB.mt_tape_size(), 0)
        self.assertStatus(LIB.mt_backward(y), MT_ERR_STATE, "mt_backward")
        self.assertIsNone(U.grad_of(x))
        self.assertStatus(LIB.mt_tape_clear(), MT_OK, "clearing an empty tape is fine")

    def test_tape_holds_no_references_after_backward(self):
        n0 = LIB.mt_live_tensors()
        x = U.from_list([1.0, 2.0], (2,), MT_F64)
        U.set_requires_grad(x)
        h = [U.call("mt_exp", x)]
        h.append(U.call("mt_sum", h[0]))
        self.backward(h[1])
        for t in h:
            U.release(t)
        g = U.grad_of(x)
        U.release(g)
        U.release(x)
        self.assertEqual(LIB.mt_live_tensors(), n0, "backward freed what the tape held, x freed its grad")

    def test_tape_and_grad_mode_are_per_thread(self):
        x = self.leaf([1.0, 2.0], (2,))
        main_size = LIB.mt_tape_size()
        res = {}

        def worker():
            res["size0"] = LIB.mt_tape_size()
            res["mode0"] = LIB.mt_is_grad_enabled()
            y = U.call("mt_mul", x, x)
            res["size1"] = LIB.mt_tape_size()
            LIB.mt_set_grad_enabled(0)
            LIB.mt_tape_clear()
            U.release(y)
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        self.assertEqual(res["size0"], 0, "a new thread starts with an empty tape")
        self.assertEqual(res["mode0"], 1, "a new thread starts with grad on")
        self.assertGreater(res["size1"], 0)
        self.assertEqual(LIB.mt_tape_size(), main_size, "another thread's ops are not on this tape")
        self.assertEqual(LIB.mt_is_grad_enabled(), 1, "another thread's grad mode does not leak here")

    def test_grad_is_a_new_reference(self):
        x = self.leaf([1.0, 2.0], (2,))
        self.backward(self.op("mt_sum", self.op("mt_mul_scalar", x, c_double(2.0))))
        n0 = LIB.mt_live_tensors()
        g1 = U.grad_of(x)
        g2 = U.grad_of(x)
        U.release(g1)
        U.release(g2)
        self.assertEqual(LIB.mt_live_tensors(), n0)
        self.assertEqual(U.to_list(self.grad(x)), [2.0, 2.0])

    def test_float32_training_step_matches_python(self):
        """One step of a 2-3-1 sigmoid MLP with MSE: every gradient against a hand-derived backward."""
        rng = self.rng
        X = U.f32([rng.uniform(-1, 1) for _ in range(8)])           # [4,2]
        Y = U.f32([rng.uniform(0, 1) for _ in range(4)])            # [4,1]
        W1, b1 = U.f32([rng.uniform(-1, 1) for _ in range(6)]), U.f32([rng.uniform(-1, 1) for _ in range(3)])
        W2, b2 = U.f32([rng.uniform(-1, 1) for _ in range(3)]), U.f32([rng.uniform(-1, 1)])
        P = [self.leaf(v, s, MT_F32) for v, s in ((W1, (3, 2)), (b1, (3,)), (W2, (1, 3)), (b2, (1,)))]
        x, y = self.tensor(X, (4, 2)), self.tensor(Y, (4, 1))
        h = self.op("mt_sigmoid", self.op("mt_linear", x, P[0], P[1]))
        p = self.op("mt_linear", h, P[2], P[3])
        loss = self.op("mt_mse_loss", p, y)
        # python forward and backward
        H = [[U.sigmoid(sum(X[2 * r + i] * W1[2 * o + i] for i in range(2)) + b1[o]) for o in range(3)] for r in range(4)]
        Pr = [sum(H[r][o] * W2[o] for o in range(3)) + b2[0] for r in range(4)]
        L = sum((Pr[r] - Y[r]) ** 2 for r in range(4)) / 4
        dP = [2 * (Pr[r] - Y[r]) / 4 for r in range(4)]
        dW2 = [sum(dP[r] * H[r][o] for r in range(4)) for o in range(3)]
        db2 = [sum(dP)]
        dZ = [[dP[r] * W2[o] * H[r][o] * (1 - H[r][o]) for o in range(3)] for r in range(4)]
        dW1 = [sum(dZ[r][o] * X[2 * r + i] for r in range(4)) for o in range(3) for i in range(2)]
        db1 = [sum(dZ[r][o] for r in range(4)) for o in range(3)]
        self.assertAlmostEqual(U.item_of(loss), L, delta=1e-6 * max(1, L))
        self.backward(loss)
        for leaf, want, name in zip(P, (dW1, db1, dW2, db2), ("dW1", "db1", "dW2", "db2")):
            self.assertAllClose(U.to_list(self.grad(leaf)), want, 1e-4, 1e-6, name)


class TestSGD(U.ABITestCase):
    def make_opt(self, params, lr, momentum=0.0, wd=0.0, nesterov=0):
        arr = (c_void_p * len(params))(*params)
        opt = c_void_p()
        self.assertStatus(LIB.mt_optim_sgd(byref(opt), arr, len(params), lr, momentum, wd, nesterov), MT_OK)
        self.assertTrue(opt.value)
        self.addCleanup(LIB.mt_optim_free, opt)
        return opt

    def run_sgd(self, dtype, lr, momentum, wd, nesterov, steps=3):
        rng = self.rng
        shapes = [(3, 2), (4,), (1,)]
        vals = [U.round_to(dtype, [rng.uniform(-1, 1) for _ in range(U.numel(s))]) for s in shapes]
        cs = [U.round_to(dtype, [rng.uniform(-1, 1) for _ in range(U.numel(s))]) for s in shapes]
        params = [self.tensor(v, s, dtype, requires_grad=True) for v, s in zip(vals, shapes)]
        consts = [self.tensor(c, s, dtype) for c, s in zip(cs, shapes)]
        opt = self.make_opt(params, lr, momentum, wd, nesterov)
        ref = [list(v) for v in vals]
        vel = [None] * len(shapes)
        for step in range(steps):
            self.assertStatus(LIB.mt_optim_zero_grad(opt), MT_OK)
            # loss = sum_i sum(p_i * p_i * c_i) over the first two params only: the third has no grad
            terms = [self.op("mt_sum", self.op("mt_mul", self.op("mt_mul", p, p), c))
                     for p, c in zip(params[:2], consts[:2])]
            loss = self.op("mt_add", terms[0], terms[1])
            self.assertStatus(LIB.mt_backward(loss), MT_OK)
            t0 = LIB.mt_tape_size()
            self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
            self.assertEqual(LIB.mt_tape_size(), t0, "the optimizer step is not recorded")
            for i in range(2):
                g = [2 * p * c + wd * p for p, c in zip(ref[i], cs[i])]
                if momentum:
                    vel[i] = list(g) if vel[i] is None else [momentum * v + gg for v, gg in zip(vel[i], g)]
                    g = [gg + momentum * v for gg, v in zip(g, vel[i])] if nesterov else vel[i]
                ref[i] = [p - lr * gg for p, gg in zip(ref[i], g)]
            tol = 1e-5 if dtype == MT_F32 else 1e-12
            for i, p in enumerate(params):
                self.assertAllClose(U.to_list(p), ref[i], tol, tol,
                                    "param %d after step %d (lr %g momentum %g wd %g nesterov %d)"
                                    % (i, step + 1, lr, momentum, wd, nesterov))
        self.assertEqual(U.to_list(params[2]), vals[2], "a parameter without gradient is not updated")

    def test_plain(self):
        for dtype in (MT_F32, MT_F64):
            self.run_sgd(dtype, 0.1, 0.0, 0.0, 0)

    def test_momentum_weight_decay_nesterov(self):
        for dtype in (MT_F32, MT_F64):
            for momentum, wd, nesterov in ((0.9, 0.0, 0), (0.9, 0.01, 0), (0.5, 0.1, 1), (0.0, 0.05, 0)):
                with self.subTest(dtype=dtype, momentum=momentum, wd=wd, nesterov=nesterov):
                    self.run_sgd(dtype, 0.05, momentum, wd, nesterov)

    def test_lr_and_zero_grad(self):
        p = self.tensor([1.0, 2.0], (2,), MT_F32, requires_grad=True)
        opt = self.make_opt([p], 0.5)
        lr = c_double()
        self.assertStatus(LIB.mt_optim_get_lr(opt, byref(lr)), MT_OK)
        self.assertEqual(lr.value, 0.5)
        self.assertStatus(LIB.mt_optim_set_lr(opt, 0.25), MT_OK)
        LIB.mt_optim_get_lr(opt, byref(lr))
        self.assertEqual(lr.value, 0.25)
        self.assertStatus(LIB.mt_backward(self.op("mt_sum", self.op("mt_mul_scalar", p, c_double(4.0)))), MT_OK)
        self.assertEqual(U.to_list(self.grad(p)), [4.0, 4.0])
        self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
        self.assertEqual(U.to_list(p), [0.0, 1.0])
        self.assertStatus(LIB.mt_optim_zero_grad(opt), MT_OK)
        g = U.grad_of(p)
        if g is not None:
            self.keep(g)
            self.assertEqual(U.to_list(g), [0.0, 0.0])
        self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
        self.assertEqual(U.to_list(p), [0.0, 1.0], "a zero gradient moves nothing")

    def test_optimizer_holds_references(self):
        n0 = LIB.mt_live_tensors()
        p = U.from_list([1.0, 2.0, 3.0], (3,))
        U.set_requires_grad(p)
        arr = (c_void_p * 1)(p)
        opt = c_void_p()
        self.assertStatus(LIB.mt_optim_sgd(byref(opt), arr, 1, 0.1, 0.9, 0.0, 0), MT_OK)
        loss = U.call("mt_sum", p)
        self.assertStatus(LIB.mt_backward(loss), MT_OK)
        U.release(loss)
        U.release(p)                         # the optimizer keeps p alive
        self.assertGreater(LIB.mt_live_tensors(), n0)
        self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
        self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
        self.assertStatus(LIB.mt_optim_free(opt), MT_OK)
        self.assertEqual(LIB.mt_live_tensors(), n0, "mt_optim_free releases parameters and state")

    def test_empty_parameter_list(self):
        opt = c_void_p()
        st = LIB.mt_optim_sgd(byref(opt), None, 0, 0.1, 0.0, 0.0, 0)
        if st == MT_OK:
            self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
            LIB.mt_optim_free(opt)
        else:
            self.assertStatus(st, U.MT_ERR_INVALID_ARGUMENT, "mt_optim_sgd")


if __name__ == "__main__":
    unittest.main()
