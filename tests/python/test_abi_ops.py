"""test_abi_ops - forward values of every op of abi/minitorch.h against pure-Python
references on fresh random inputs, in float32 and float64, on the device under
test (mt_default_device()).

The op table lives in abi_util.OP_SPECS; the references compute in double from the
inputs as the library stores them (float32-rounded for float32).

Tolerances: float64 1e-12 relative (plus 1e-12 * the output's scale), float32 1e-5
relative plus 1e-6 * scale for elementwise ops: a correctly rounded float32 result is
within 6e-8 relative; transcendental functions are allowed a few ulps. Reductions and
matmul in float32 sum up to a few dozen terms here, each rounding adds <= 6e-8 of the
running |sum|, so 1e-5 of the output's scale is generous yet catches wrong indexing.
"""
import math
import os
import sys
import unittest
from ctypes import c_double

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abi_util as U  # noqa: E402
from abi_util import LIB, MT_F32, MT_F64, MT_CPU, MT_OK  # noqa: E402

TOL = {MT_F32: (1e-5, 1e-6), MT_F64: (1e-12, 1e-12)}
LONG_TOL = {MT_F32: (1e-5, 1e-5), MT_F64: (1e-12, 1e-12)}


class TestOpForward(U.ABITestCase):
    def run_case(self, spec, shapes, params, dtype):
        vals = [U.round_to(dtype, self.rand_values(U.numel(s), d)) for s, d in zip(shapes, spec.domains)]
        hs = [self.tensor(v, s, dtype) for v, s in zip(vals, shapes)]
        out = self.keep(spec.call(hs, params))
        want, want_shape = spec.ref(vals, shapes, params)
        what = "%s%s %s %s" % (spec.name, tuple(shapes), params or "", U.DTYPE_NAMES[dtype])
        self.assertEqual(U.shape_of(out), tuple(want_shape), what + ": shape")
        self.assertEqual(U.dtype_of(out), spec.out_dtype if spec.out_dtype is not None else dtype, what + ": dtype")
        self.assertEqual(U.device_of(out), MT_CPU if spec.name == "to_cpu" else self.DEV, what + ": device")
        got = U.to_list(out)
        rtol, atol = (LONG_TOL if spec.long else TOL)[dtype]
        scale = max([1.0] + [abs(w) for w in want])
        self.assertAllClose(got, want, rtol, atol * scale, what)
        return got

    def test_every_op_forward(self):
        for spec in U.OP_SPECS:
            for shapes, params in spec.cases:
                for dtype in (MT_F32, MT_F64):
                    with self.subTest(op=spec.name, shapes=shapes, params=params, dtype=U.DTYPE_NAMES[dtype]):
                        self.run_case(spec, shapes, params, dtype)

    def test_forward_does_not_record_without_grad(self):
        """Ops on tensors that do not require grad leave the tape as it was."""
        for spec in U.OP_SPECS:
            shapes, params = spec.cases[0]
            hs = [self.tensor(self.rand_values(U.numel(s), d), s) for s, d in zip(shapes, spec.domains)]
            t0 = LIB.mt_tape_size()
            self.keep(spec.call(hs, params))
            self.assertEqual(LIB.mt_tape_size(), t0, spec.name)

    def test_forward_records_with_grad(self):
        for spec in U.OP_SPECS:
            if not spec.grad or (spec.name == "to_cpu" and self.DEV == MT_CPU):
                continue      # mt_tensor_to on the same device gives x itself: nothing to record
            shapes, params = spec.cases[0]
            hs = [self.tensor(self.rand_values(U.numel(s), d), s, MT_F64, requires_grad=True)
                  for s, d in zip(shapes, spec.domains)]
            t0 = LIB.mt_tape_size()
            out = self.keep(spec.call(hs, params))
            self.assertGreater(LIB.mt_tape_size(), t0, spec.name + " was not recorded")
            self.assertEqual(U.requires_grad_of(out), 1, spec.name + ": output of a recorded op requires grad")
            LIB.mt_tape_clear()

    def test_hand_computed(self):
        """A few results checked by hand."""
        a = self.tensor([1, 2, 3, 4, 5, 6], (2, 3))
        b = self.tensor([10, 20, 30], (3,))
        self.assertEqual(U.to_list(self.op("mt_add", a, b)), [11, 22, 33, 14, 25, 36])
        self.assertEqual(U.to_list(self.op("mt_sub", b, a)), [9, 18, 27, 6, 15, 24])
        col = self.tensor([2, 3], (2, 1))
        self.assertEqual(U.to_list(self.op("mt_mul", a, col)), [2, 4, 6, 12, 15, 18])
        self.assertAllClose(U.to_list(self.op("mt_div", a, col)), U.f32([0.5, 1, 1.5, 4 / 3, 5 / 3, 2]), 1e-7, 0, "div")
        m = self.tensor([1, 2, 3, 4], (2, 2))
        self.assertEqual(U.to_list(self.op("mt_matmul", m, m)), [7, 10, 15, 22])
        self.assertEqual(U.to_list(self.op("mt_sum_dim", a, 0, 0)), [5, 7, 9])
        s = self.op("mt_sum_dim", a, -1, 1)
        self.assertEqual(U.shape_of(s), (2, 1))
        self.assertEqual(U.to_list(s), [6, 15])
        self.assertEqual(U.to_list(self.op("mt_mean_dim", a, 1, 0)), [2, 5])
        self.assertEqual(U.to_list(self.op("mt_sum", a)), [21])
        self.assertEqual(U.to_list(self.op("mt_mean", a)), [3.5])
        t = self.op("mt_transpose", a, 0, 1)
        self.assertEqual((U.shape_of(t), U.to_list(t)), ((3, 2), [1, 4, 2, 5, 3, 6]))
        w = self.tensor([1, 0, -1, 2, 1, 0], (2, 3))     # Linear(3, 2)
        bias = self.tensor([0.5, -0.5], (2,))
        self.assertEqual(U.to_list(self.op("mt_linear", a, w, bias)), [-1.5, 3.5, -1.5, 12.5])
        r = self.tensor([-1, 0, 2], (3,))
        self.assertEqual(U.to_list(self.op("mt_relu", r)), [0, 0, 2])
        self.assertEqual(U.to_list(self.op("mt_sigmoid", self.tensor([0.0], (1,)))), [0.5])
        self.assertEqual(U.to_list(self.op("mt_pow_scalar", self.tensor([3.0], ()), c_double(2.0))), [9.0])
        p = self.tensor([1, 2, 3], (3,))
        q = self.tensor([2, 2, 2], (3,))
        self.assertEqual(U.to_list(self.op("mt_mse_loss", p, q)), U.f32([2 / 3]))

    def test_matmul_inner_one_and_larger(self):
        """Shapes that do not fit a tile: odd sizes around 32 and 64."""
        for (m, k, n) in ((33, 17, 65), (1, 64, 31), (65, 1, 3)):
            for dtype in (MT_F32, MT_F64):
                with self.subTest(m=m, k=k, n=n, dtype=dtype):
                    self.run_case(U.SPEC["matmul"], ((m, k), (k, n)), {}, dtype)

    def test_broadcast_larger(self):
        for shapes in (((37, 1, 5), (1, 3, 5)), ((129,), (7, 129)), ((6, 1), (6, 70))):
            for name in ("add", "mul", "div"):
                with self.subTest(op=name, shapes=shapes):
                    self.run_case(U.SPEC[name], shapes, {}, MT_F32)

    def test_zero_size_broadcast(self):
        a = self.op("mt_tensor_zeros", U.shape_array((0, 3)), 2, MT_F32, self.DEV)
        b = self.tensor([1, 2, 3], (3,))
        out = self.op("mt_add", a, b)
        self.assertEqual(U.shape_of(out), (0, 3))
        self.assertEqual(U.to_list(out), [])

    def test_reduction_of_many_terms(self):
        """float32 sums of 100k terms against fsum of the stored values."""
        n = 100003
        vals = U.f32([self.rng.uniform(-1, 1) for _ in range(n)])
        x = self.tensor(vals, (n,))
        want = math.fsum(vals)
        scale = math.fsum(abs(v) for v in vals)
        got = U.item_of(self.op("mt_sum", x))
        # a pairwise/blocked float32 sum errs by ~1e-7 * log(n) * sum|x|; 1e-5 * sum|x| is loose
        self.assertLess(abs(got - want), 1e-5 * scale)
        got = U.item_of(self.op("mt_mean", x))
        self.assertLess(abs(got - want / n), 1e-5 * scale / n)
        x2 = self.tensor(vals[:100000], (1000, 100))
        rows = U.to_list(self.op("mt_sum_dim", x2, 1, 0))
        cols = U.to_list(self.op("mt_sum_dim", x2, 0, 0))
        self.assertRelErr(rows, [math.fsum(vals[i * 100:(i + 1) * 100]) for i in range(1000)], 1e-5, "rows")
        self.assertRelErr(cols, [math.fsum(vals[j:100000:100]) for j in range(100)], 1e-5, "cols")

    def test_ops_chain_on_default_device(self):
        """A small network forward equals the same computed in Python."""
        x = U.f32(self.rand_values(8))
        w1 = U.f32(self.rand_values(6))
        b1 = U.f32(self.rand_values(3))
        hx = self.tensor(x, (4, 2))
        h1 = self.op("mt_linear", hx, self.tensor(w1, (3, 2)), self.tensor(b1, (3,)))
        h2 = self.op("mt_tanh", h1)
        h3 = self.op("mt_sum_dim", h2, 1, 0)
        got = U.to_list(h3)
        want = []
        for r in range(4):
            want.append(sum(math.tanh(x[2 * r] * w1[2 * o] + x[2 * r + 1] * w1[2 * o + 1] + b1[o]) for o in range(3)))
        self.assertAllClose(got, want, 1e-5, 1e-5, "linear-tanh-sum")


if __name__ == "__main__":
    unittest.main()
