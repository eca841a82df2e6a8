"""test_abi_cnn - the convolutional-networks section of abi/minitorch.h through raw ctypes:
mt_conv2d / mt_conv2d_ex values and gradients against pure-Python loops, mt_max_pool2d /
mt_avg_pool2d (overlapping windows, argmax routing), mt_batch_norm (training, running
statistics, eval), mt_set_conv_algo, and the status and message of every bad input.

Tolerances: float64 results 1e-12 relative (the same sums in another order); float32 1e-5.
"""
import math
import os
import sys
import unittest
from ctypes import byref, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abi_util as U  # noqa: E402
from abi_util import (LIB, MT_F32, MT_F64, MT_OK, MT_ERR_INVALID_ARGUMENT, MT_ERR_SHAPE,  # noqa: E402
                      MT_ERR_DTYPE, MT_ERR_UNSUPPORTED)


def out_size(n, k, stride, pad, dil):
    return (n + 2 * pad - dil * (k - 1) - 1) // stride + 1


def ref_conv(x, xs, w, ws, b, stride, pad, dil):
    """y[n,k,oh,ow] = b[k] + sum w[k,c,r,s] x[n,c,oh*sh-ph+r*dh, ow*sw-pw+s*dw] over taps inside x."""
    N, C, H, W = xs
    K, _, R, S = ws
    Ho, Wo = out_size(H, R, stride[0], pad[0], dil[0]), out_size(W, S, stride[1], pad[1], dil[1])
    y = []
    for n in range(N):
        for k in range(K):
            for oh in range(Ho):
                for ow in range(Wo):
                    acc = b[k] if b else 0.0
                    for c in range(C):
                        for r in range(R):
                            for s in range(S):
                                ih, iw = oh * stride[0] - pad[0] + r * dil[0], ow * stride[1] - pad[1] + s * dil[1]
                                if 0 <= ih < H and 0 <= iw < W:
                                    acc += w[((k * C + c) * R + r) * S + s] * x[((n * C + c) * H + ih) * W + iw]
                    y.append(acc)
    return y, (N, K, Ho, Wo)


def ref_pool(x, xs, k, st, mode):
    N, C, H, W = xs
    Ho, Wo = (H - k) // st + 1, (W - k) // st + 1
    y = []
    for p in range(N * C):
        for oh in range(Ho):
            for ow in range(Wo):
                win = [x[(p * H + oh * st + i) * W + ow * st + j] for i in range(k) for j in range(k)]
                y.append(max(win) if mode == "max" else sum(win) / (k * k))
    return y, (N, C, Ho, Wo)


class TestConv(U.ABITestCase):
    CASES = [((2, 3, 5, 6), (4, 3, 3, 2), (1, 1), (0, 0), (1, 1), True),
             ((1, 2, 7, 7), (3, 2, 3, 3), (2, 1), (1, 2), (1, 2), False),
             ((2, 1, 6, 5), (2, 1, 2, 2), (3, 2), (2, 0), (2, 1), True)]

    def conv(self, x, w, b, stride, pad, dil):
        return self.op("mt_conv2d_ex", x, w, b, stride[0], stride[1], pad[0], pad[1], dil[0], dil[1])

    def test_values_against_loops(self):
        for xs, ws, stride, pad, dil, bias in self.CASES:
            for dt, tol in ((MT_F64, 1e-12), (MT_F32, 1e-5)):
                xv, wv = self.rand_values(U.numel(xs)), self.rand_values(U.numel(ws))
                bv = self.rand_values(ws[0]) if bias else None
                y = self.conv(self.tensor(xv, xs, dt), self.tensor(wv, ws, dt),
                              self.tensor(bv, (ws[0],), dt) if bias else None, stride, pad, dil)
                want, shape = ref_conv(U.round_to(dt, xv), xs, U.round_to(dt, wv), ws,
                                       U.round_to(dt, bv) if bias else None, stride, pad, dil)
                self.assertEqual(U.shape_of(y), shape)
                self.assertRelErr(U.to_list(y), want, tol, "conv2d %s %s" % (xs, U.DTYPE_NAMES[dt]))

    def test_conv2d_is_the_symmetric_ex(self):
        xv, wv = self.rand_values(2 * 2 * 5 * 5), self.rand_values(3 * 2 * 3 * 3)
        x, w = self.tensor(xv, (2, 2, 5, 5), MT_F64), self.tensor(wv, (3, 2, 3, 3), MT_F64)
        y = self.op("mt_conv2d", x, w, None, 2, 1)
        want, shape = ref_conv(xv, (2, 2, 5, 5), wv, (3, 2, 3, 3), None, (2, 2), (1, 1), (1, 1))
        self.assertEqual(U.shape_of(y), shape)
        self.assertRelErr(U.to_list(y), want, 1e-12)

    def test_gradients_against_central_differences(self):
        xs, ws, stride, pad, dil, _ = self.CASES[1]
        xv, wv, bv = self.rand_values(U.numel(xs)), self.rand_values(U.numel(ws)), self.rand_values(ws[0])
        gv = self.rand_values(U.numel((1, 3) + tuple(ref_conv(xv, xs, wv, ws, None, stride, pad, dil)[1][2:])))

        def loss(xv_, wv_, bv_):  # sum(g * conv(x, w) + b)
            y, _ = ref_conv(xv_, xs, wv_, ws, bv_, stride, pad, dil)
            return sum(a * b for a, b in zip(y, gv))

        x, w, b = (self.tensor(v, s, MT_F64, requires_grad=True) for v, s in ((xv, xs), (wv, ws), (bv, (ws[0],))))
        y = self.conv(x, w, b, stride, pad, dil)
        g = self.tensor(gv, U.shape_of(y), MT_F64)
        U.check(LIB.mt_backward(self.op("mt_sum", self.op("mt_mul", y, g))))
        eps = 1e-6
        for h, vals, which in ((x, xv, 0), (w, wv, 1), (b, bv, 2)):
            num = []
            for i in range(len(vals)):
                args = [list(xv), list(wv), list(bv)]
                args[which][i] += eps
                up = loss(*args)
                args[which][i] -= 2 * eps
                num.append((up - loss(*args)) / (2 * eps))
            self.assertRelErr(U.to_list(self.grad(h)), num, 1e-7, "d%s" % "xwb"[which])

    def test_bad_inputs(self):
        x = self.tensor([0.0] * 75, (1, 3, 5, 5), MT_F64)
        w = self.tensor([0.0] * 36, (4, 3, 3, 1), MT_F64)
        out = c_void_p()
        cases = [
            (("mt_conv2d", self.tensor([0.0] * 25, (1, 5, 5), MT_F64), w, None, 1, 0), MT_ERR_SHAPE, ("[1,5,5]",)),
            (("mt_conv2d", x, self.tensor([0.0] * 8, (4, 2, 1, 1), MT_F64), None, 1, 0), MT_ERR_SHAPE,
             ("channels differ",)),
            (("mt_conv2d", x, w, self.tensor([0.0] * 3, (3,), MT_F64), 1, 0), MT_ERR_SHAPE, ("bias must be [4]",)),
            (("mt_conv2d", x, self.tensor([0.0] * 108, (4, 3, 9, 1), MT_F64), None, 1, 1), MT_ERR_SHAPE,
             ("padded input",)),
            (("mt_conv2d", x, w, None, -1, 0), MT_ERR_INVALID_ARGUMENT, ("stride", "-1")),
            (("mt_conv2d", x, w, None, 1, -2), MT_ERR_INVALID_ARGUMENT, ("padding", "-2")),
            (("mt_conv2d_ex", x, w, None, 1, 1, 0, 0, 0, 1), MT_ERR_INVALID_ARGUMENT, ("dilation",)),
            (("mt_conv2d", self.tensor([0.0] * 75, (1, 3, 5, 5), MT_F32), w, None, 1, 0), MT_ERR_DTYPE,
             ("float32", "float64")),
            (("mt_max_pool2d", x, 2, 0), MT_ERR_INVALID_ARGUMENT, ("stride 0",)),
            (("mt_avg_pool2d", x, 6, 1), MT_ERR_SHAPE, ("kernel 6",)),
            (("mt_batch_norm", x, None, None, None, None, 0, 0.1, 1e-5), MT_ERR_INVALID_ARGUMENT,
             ("running_mean",)),
            (("mt_batch_norm", x, self.tensor([1.0] * 4, (4,), MT_F64), None, None, None, 1, 0.1, 1e-5),
             MT_ERR_SHAPE, ("gamma must be [3]",)),
        ]
        for (fn, *args), status, needles in cases:
            self.assertStatus(getattr(LIB, fn)(byref(out), *args), status, fn, needles)
            self.assertIsNone(out.value, fn)
        self.assertEqual(LIB.mt_tape_size(), 0)


class TestPools(U.ABITestCase):
    def test_values_and_gradients(self):
        for xs, k, st in (((2, 2, 6, 6), 2, 2), ((1, 2, 7, 5), 3, 1), ((1, 1, 9, 8), 3, 2)):
            xv = self.rand_values(U.numel(xs))
            for mode in ("max", "avg"):
                x = self.tensor(xv, xs, MT_F64, requires_grad=True)
                y = self.op("mt_%s_pool2d" % mode, x, k, st)
                want, shape = ref_pool(xv, xs, k, st, mode)
                self.assertEqual(U.shape_of(y), shape)
                self.assertRelErr(U.to_list(y), want, 1e-14, "%s_pool2d" % mode)
                U.check(LIB.mt_backward(self.op("mt_sum", y)))
                # d sum / dx: how many windows pick (max) or hold (avg, / k^2) each pixel
                N, C, H, W = xs
                Ho, Wo = shape[2], shape[3]
                count = [0.0] * len(xv)
                for p in range(N * C):
                    for oh in range(Ho):
                        for ow in range(Wo):
                            at = [(p * H + oh * st + i) * W + ow * st + j for i in range(k) for j in range(k)]
                            if mode == "max":
                                count[max(at, key=lambda a: xv[a])] += 1
                            else:
                                for a in at:
                                    count[a] += 1.0 / (k * k)
                self.assertRelErr(U.to_list(self.grad(x)), count, 1e-14, "%s_pool2d gradient" % mode)


class TestBatchNorm(U.ABITestCase):
    def test_training_eval_and_running_stats(self):
        xs, C = (4, 3, 2, 3), 3
        xv = [v * 2 + 1 for v in self.rand_values(U.numel(xs))]
        gv, bv = self.rand_values(C), self.rand_values(C)
        rm0, rv0 = self.rand_values(C), [abs(v) + 0.5 for v in self.rand_values(C)]
        x, g, b = self.tensor(xv, xs, MT_F64), self.tensor(gv, (C,), MT_F64), self.tensor(bv, (C,), MT_F64)
        rm, rv = self.tensor(rm0, (C,), MT_F64), self.tensor(rv0, (C,), MT_F64)
        mom, eps = 0.25, 1e-4
        y = self.op("mt_batch_norm", x, g, b, rm, rv, 1, mom, eps)
        hw, m = xs[2] * xs[3], xs[0] * xs[2] * xs[3]
        chan = lambda i: (i // hw) % C  # noqa: E731
        mean = [sum(v for i, v in enumerate(xv) if chan(i) == c) / m for c in range(C)]
        var = [sum((v - mean[c]) ** 2 for i, v in enumerate(xv) if chan(i) == c) / m for c in range(C)]
        want = [(v - mean[chan(i)]) / math.sqrt(var[chan(i)] + eps) * gv[chan(i)] + bv[chan(i)]
                for i, v in enumerate(xv)]
        self.assertRelErr(U.to_list(y), want, 1e-12, "training output")
        self.assertRelErr(U.to_list(rm), [(1 - mom) * r + mom * mu for r, mu in zip(rm0, mean)], 1e-12)
        self.assertRelErr(U.to_list(rv), [(1 - mom) * r + mom * s * m / (m - 1) for r, s in zip(rv0, var)], 1e-12)
        rm1, rv1 = U.to_list(rm), U.to_list(rv)
        y = self.op("mt_batch_norm", x, g, b, rm, rv, 0, mom, eps)
        want = [(v - rm1[chan(i)]) / math.sqrt(rv1[chan(i)] + eps) * gv[chan(i)] + bv[chan(i)]
                for i, v in enumerate(xv)]
        self.assertRelErr(U.to_list(y), want, 1e-12, "eval output")
        self.assertEqual(U.to_list(rm), rm1, "eval leaves the running mean")


class TestConvAlgo(U.ABITestCase):
    def test_switch(self):
        prev = c_int64(-7)
        self.assertStatus(LIB.mt_set_conv_algo(5, byref(prev)), MT_ERR_INVALID_ARGUMENT, "mt_set_conv_algo", ("5",))
        self.assertEqual(prev.value, -7, "a failed call leaves *previous")
        self.assertStatus(LIB.mt_set_conv_algo(1, byref(prev)), MT_OK)
        start = prev.value
        self.assertEqual(start, 0)
        self.assertStatus(LIB.mt_set_conv_algo(2, None), (MT_OK, MT_ERR_UNSUPPORTED), "mt_set_conv_algo",)
        self.assertStatus(LIB.mt_set_conv_algo(start, byref(prev)), MT_OK)
        self.assertIn(prev.value, (1, 2))


if __name__ == "__main__":
    unittest.main()
