"""Forward values of every Tensor op against pure-Python float64 references:
elementwise ops with broadcasting and Python scalars, type promotion, matmul/linear,
reductions, softmax family, max/argmax, shape ops and indexing."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import (DEVICE, TestCase, flat, mt, rand_list, ref_binary, ref_matmul,  # noqa: E402
                                   ref_permute, ref_reduce, ref_transpose2, ref_unary, sigmoid, unflat)

BROADCAST_CASES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (3, 1)),
    ((4,), (2, 3, 4)),
    ((2, 1, 4), (1, 3, 1)),
    ((), (2, 3)),
    ((5,), ()),
]


class ElementwiseTest(TestCase):
    def test_binary_ops_broadcast(self):
        rng = self.rng(1)
        ops = [
            ("+", lambda a, b: a + b, lambda x, y: x + y),
            ("-", lambda a, b: a - b, lambda x, y: x - y),
            ("*", lambda a, b: a * b, lambda x, y: x * y),
            ("/", lambda a, b: a / b, lambda x, y: x / y),
            ("add", lambda a, b: mt.add(a, b), lambda x, y: x + y),
            ("sub", lambda a, b: a.sub(b), lambda x, y: x - y),
            ("mul", lambda a, b: mt.mul(a, b), lambda x, y: x * y),
            ("div", lambda a, b: a.div(b), lambda x, y: x / y),
            ("add alpha", lambda a, b: a.add(b, alpha=2.5), lambda x, y: x + 2.5 * y),
        ]
        for sa, sb in BROADCAST_CASES:
            a = rand_list(sa, rng) if sa else rng.uniform(-1, 1)
            b = rand_list(sb, rng, 0.5, 2.0) if sb else rng.uniform(0.5, 2.0)
            for name, f, ref in ops:
                for dt, tol in ((mt.float32, 1e-6), (mt.float64, 1e-14)):
                    got = f(mt.tensor(a, dtype=dt), mt.tensor(b, dtype=dt))
                    self.assertIs(got.dtype, dt)
                    self.assertClose(got, ref_binary(ref, a, b), rtol=tol, atol=tol,
                                     msg="%s %s %s %s" % (name, sa, sb, dt))

    def test_python_scalars_both_sides(self):
        a = [[0.5, -1.5, 2.0], [3.0, -0.25, 1.0]]
        t = mt.tensor(a, dtype=mt.float64)
        cases = [
            (t + 2, lambda x: x + 2), (2 + t, lambda x: 2 + x),
            (t - 2, lambda x: x - 2), (2 - t, lambda x: 2 - x),
            (t * 3, lambda x: x * 3), (3 * t, lambda x: 3 * x),
            (t / 3, lambda x: x / 3), (3 / t, lambda x: 3 / x),
            (t ** 2, lambda x: x ** 2), (-t, lambda x: -x), (+t, lambda x: x),
            (t * True, lambda x: x),
        ]
        for got, ref in cases:
            self.assertClose(got, ref_unary(ref, a), rtol=1e-15, atol=0)

    def test_float32_division_rounds_like_ieee(self):
        # x / 3 is a true division, not x * (1/3)
        import struct
        vals = [1.0, 2.0, 5.0, 7.0, 10.0, 11.0]
        got = (mt.tensor(vals) / 3).tolist()
        want = [struct.unpack("f", struct.pack("f", struct.unpack("f", struct.pack("f", v))[0] / 3.0))[0]
                for v in vals]
        # float32 division is correctly rounded; the double quotient rounded to float32 equals it
        self.assertEqual(got, want)

    def test_pow_scalar(self):
        a = [0.5, 1.5, 2.0, 3.0]
        t = mt.tensor(a, dtype=mt.float64)
        for p in (2, 3, 0.5, -1, -2.5, 0):
            self.assertClose(t ** p, [x ** p for x in a], rtol=1e-14, atol=0)
            self.assertClose(mt.pow(t, p), [x ** p for x in a], rtol=1e-14, atol=0)

    def test_unary_ops(self):
        a = [[-2.0, -0.5, 0.0], [0.25, 1.0, 3.0]]
        pos = [[0.1, 0.5, 1.0], [2.0, 10.0, 1e-3]]
        cases = [
            ("relu", a, lambda t: t.relu(), lambda x: max(x, 0.0)),
            ("sigmoid", a, lambda t: t.sigmoid(), sigmoid),
            ("tanh", a, lambda t: t.tanh(), math.tanh),
            ("exp", a, lambda t: t.exp(), math.exp),
            ("log", pos, lambda t: t.log(), math.log),
            ("neg", a, lambda t: t.neg(), lambda x: -x),
            ("mt.relu", a, mt.relu, lambda x: max(x, 0.0)),
            ("mt.sigmoid", a, mt.sigmoid, sigmoid),
            ("mt.tanh", a, mt.tanh, math.tanh),
            ("mt.exp", a, mt.exp, math.exp),
            ("mt.log", pos, mt.log, math.log),
        ]
        for name, data, f, ref in cases:
            for dt, tol in ((mt.float32, 2e-6), (mt.float64, 1e-14)):
                self.assertClose(f(mt.tensor(data, dtype=dt)), ref_unary(ref, data), rtol=tol, atol=tol,
                                 msg="%s %s" % (name, dt))
        self.assertClose(mt.tensor([-1.0, 0.0]).log(), [float("nan"), float("-inf")])

    def test_type_promotion(self):
        f32 = mt.tensor([1.0, 2.0])
        f64 = mt.tensor([0.5, 0.25], dtype=mt.float64)
        i64 = mt.tensor([1, 2])
        self.assertIs((f32 + f64).dtype, mt.float64)
        self.assertClose(f32 + f64, [1.5, 2.25])
        self.assertIs((i64 + f32).dtype, mt.float32)
        self.assertIs((i64 * 0.5).dtype, mt.float32)
        self.assertClose(i64 * 0.5, [0.5, 1.0])
        self.assertIs((i64 / 2).dtype, mt.float32)
        self.assertClose(i64 / 2, [0.5, 1.0])
        self.assertIs((i64 / i64).dtype, mt.float32)
        self.assertIs(i64.exp().dtype, mt.float32)
        # a 0-d tensor does not widen a dimensioned one of the same category
        self.assertIs((f32 + mt.tensor(2.0, dtype=mt.float64)).dtype, mt.float32)
        self.assertIs((i64 + mt.tensor(2.0, dtype=mt.float64)).dtype, mt.float32)
        self.assertIs(mt.promote_types(mt.float16, mt.bfloat16), mt.float32)
        self.assertIs(mt.promote_types(mt.uint8, mt.int32), mt.int32)
        self.assertIs(mt.result_type(f32, f64), mt.float64)
        # integer arithmetic is not in the library: a clear TypeError, not a wrong answer
        with self.assertRaises(TypeError):
            i64 + 1

    def test_membership(self):
        # `x in t` as torch: any element equal (a tensor broadcast against t); it raised
        # "Boolean value of Tensor with more than one values is ambiguous"
        rng = self.rng(5)
        vals = [[float(rng.randrange(-4, 5)) for _ in range(3)] for _ in range(4)]
        t = mt.tensor(vals, device=DEVICE)
        flat_vals = [v for row in vals for v in row]
        for x in range(-6, 7):
            self.assertEqual(x in t, float(x) in flat_vals, str(x))
            self.assertEqual(x + 0.5 in t, False)
        self.assertTrue(mt.tensor(vals[2], device=DEVICE) in t)
        self.assertFalse(mt.tensor([9.0, 9.0, 9.0], device=DEVICE) in t)
        self.assertFalse(float("nan") in mt.tensor([float("nan")], device=DEVICE))
        self.assertFalse(1.0 in mt.zeros(0, device=DEVICE))
        self.assertTrue(3 in mt.arange(5, device=DEVICE))
        with self.assertRaisesRegex(TypeError, "'in' needs a number or a Tensor"):
            "a" in t

    def test_argument_types(self):
        # strings went through float() (clamp("0", 1), fill_("1")), alpha="2" multiplied the
        # tensor into a list, dtype=5 was read as the device cuda:5, and "no" required grad
        t = mt.tensor(rand_list((2, 3), self.rng(6)), device=DEVICE)
        for call, message in ((lambda: t.clamp("0", 1), "clamp\\(\\): min must be a real number"),
                              (lambda: t.clamp(max="1"), "clamp\\(\\): max must be a real number"),
                              (lambda: t.clone().fill_("1"), "fill_\\(\\) expects a number"),
                              (lambda: t.add(t, alpha="2"), "add\\(\\): alpha must be a real number"),
                              (lambda: t.clone().sub_(t, alpha=[2]), "sub\\(\\): alpha must be a real number"),
                              (lambda: t.to(dtype=5), "to\\(\\): dtype must be a minitorch dtype"),
                              (lambda: t.clone().requires_grad_("no"), "argument 'requires_grad' must be bool")):
            with self.subTest(message=message):
                with self.assertRaisesRegex(TypeError, message):
                    call()
        self.assertClose(t.add(t, alpha=2), [[3 * v for v in row] for row in t.tolist()])
        self.assertClose(t.clamp(-0.25, 0.25), [[min(max(v, -0.25), 0.25) for v in row] for row in t.tolist()])

    def test_format(self):
        # a 0-d tensor formats as its number, as torch; other tensors only whole
        v = self.rng(7).uniform(-100, 100)
        x = mt.tensor(v, dtype=mt.float64, device=DEVICE)
        self.assertEqual("{:.3f}".format(x), "{:.3f}".format(v))
        self.assertEqual(f"{x:>12.4e}", f"{v:>12.4e}")
        self.assertEqual("{:d}".format(mt.tensor(42, device=DEVICE)), "42")
        t = mt.ones(2, device=DEVICE)
        self.assertEqual("{}".format(t), str(t))
        with self.assertRaisesRegex(TypeError, "unsupported format string"):
            "{:.2f}".format(t)

    def test_bad_operands(self):
        t = mt.ones(2)
        with self.assertRaises(TypeError):
            t + "a"
        with self.assertRaises(TypeError):
            t.add([1, 2])
        # a list or tuple factor: NotImplemented let Python repeat the list t times (a one-element
        # integer tensor) or fail in __index__
        for other in ([1, 2], (1.0, 2.0)):
            for product in (lambda: t * other, lambda: other * t, lambda: t.mul(other),
                            lambda: mt.tensor(2) * other):
                with self.assertRaisesRegex(TypeError, "can't multiply a Tensor and a %s" % type(other).__name__):
                    product()
        with self.assertRaises(ValueError):
            mt.ones(2, 3) + mt.ones(4)


class MatmulTest(TestCase):
    def test_2d(self):
        rng = self.rng(2)
        for m, k, n in ((1, 1, 1), (2, 3, 4), (5, 7, 3), (16, 32, 8)):
            a, b = rand_list((m, k), rng), rand_list((k, n), rng)
            for dt, tol in ((mt.float32, 1e-5), (mt.float64, 1e-13)):
                got = mt.tensor(a, dtype=dt) @ mt.tensor(b, dtype=dt)
                self.assertClose(got, ref_matmul(a, b), rtol=tol, atol=tol)
                self.assertClose(mt.matmul(mt.tensor(a, dtype=dt), mt.tensor(b, dtype=dt)),
                                 ref_matmul(a, b), rtol=tol, atol=tol)

    def test_batched_and_broadcast_batch(self):
        rng = self.rng(3)
        a = rand_list((3, 2, 4), rng)
        b = rand_list((3, 4, 5), rng)
        w = rand_list((4, 5), rng)
        self.assertClose(mt.tensor(a) @ mt.tensor(b), [ref_matmul(a[i], b[i]) for i in range(3)], rtol=1e-5)
        self.assertClose(mt.tensor(a) @ mt.tensor(w), [ref_matmul(a[i], w) for i in range(3)], rtol=1e-5)

    def test_vectors(self):
        v = [1.0, 2.0, 3.0]
        m = [[1.0, 0.5], [2.0, -1.0], [0.0, 3.0]]
        self.assertClose(mt.tensor(v) @ mt.tensor(v), 14.0)
        self.assertEqual((mt.tensor(v) @ mt.tensor(v)).shape, ())
        self.assertClose(mt.tensor(v) @ mt.tensor(m), [5.0, 7.5])
        self.assertClose(mt.tensor(ref_transpose2(m)) @ mt.tensor(v), [5.0, 7.5])

    def test_shape_error(self):
        with self.assertRaises(ValueError):
            mt.ones(2, 3) @ mt.ones(2, 3)

    def test_linear(self):
        rng = self.rng(4)
        x, w, b = rand_list((5, 3), rng), rand_list((4, 3), rng), rand_list((4,), rng)
        want = ref_binary(lambda p, q: p + q, ref_matmul(x, ref_transpose2(w)), b)
        F = mt.nn.functional
        self.assertClose(F.linear(mt.tensor(x), mt.tensor(w), mt.tensor(b)), want, rtol=1e-5)
        self.assertClose(F.linear(mt.tensor(x), mt.tensor(w)), ref_matmul(x, ref_transpose2(w)), rtol=1e-5)
        x3 = rand_list((2, 5, 3), rng)
        got = F.linear(mt.tensor(x3), mt.tensor(w), mt.tensor(b))
        self.assertEqual(got.shape, (2, 5, 4))
        self.assertClose(got, [ref_binary(lambda p, q: p + q, ref_matmul(x3[i], ref_transpose2(w)), b)
                               for i in range(2)], rtol=1e-5)


class ReductionTest(TestCase):
    def test_sum_mean_all(self):
        rng = self.rng(5)
        a = rand_list((3, 4, 5), rng)
        t = mt.tensor(a, dtype=mt.float64)
        self.assertEqual(t.sum().shape, ())
        self.assertClose(t.sum(), math.fsum(flat(a)), rtol=1e-13)
        self.assertClose(t.mean(), math.fsum(flat(a)) / 60, rtol=1e-13)
        self.assertClose(mt.sum(t), math.fsum(flat(a)), rtol=1e-13)
        self.assertEqual(t.sum(keepdim=True).shape, (1, 1, 1))
        self.assertAlmostEqual(mt.tensor(a).sum().item(), math.fsum(flat(a)), delta=1e-4)

    def test_sum_mean_dims(self):
        rng = self.rng(6)
        shape = (3, 4, 5)
        a = rand_list(shape, rng)
        t = mt.tensor(a, dtype=mt.float64)
        for dim in (0, 1, 2, -1, -3):
            d = dim % 3
            for keepdim in (False, True):
                for mean in (False, True):
                    vals, oshape = ref_reduce(flat(a), shape, d, keepdim, mean)
                    got = t.mean(dim, keepdim=keepdim) if mean else t.sum(dim=dim, keepdim=keepdim)
                    self.assertEqual(tuple(got.shape), oshape)
                    self.assertClose(got, unflat(vals, oshape), rtol=1e-13, atol=1e-15)

    def test_tuple_dims(self):
        rng = self.rng(7)
        shape = (2, 3, 4)
        a = rand_list(shape, rng)
        t = mt.tensor(a, dtype=mt.float64)
        v, s = ref_reduce(flat(a), shape, 2, False)
        v, s = ref_reduce(v, s, 0, False)
        self.assertClose(t.sum((0, 2)), v, rtol=1e-13)
        self.assertClose(t.sum((-1, 0)), v, rtol=1e-13)
        self.assertClose(t.mean((0, 2)), [x / 8 for x in v], rtol=1e-13)
        self.assertEqual(t.sum((0, 2), keepdim=True).shape, (1, 3, 1))
        with self.assertRaises(ValueError):
            t.sum((0, 0))
        with self.assertRaises(IndexError):
            t.sum((0, 5))

    def test_max_min_argmax(self):
        a = [[1.0, 5.0, 5.0, -2.0], [7.0, 0.0, 7.0, 3.0], [-1.0, -3.0, -1.0, -5.0]]
        t = mt.tensor(a)
        self.assertEqual(t.max().item(), 7.0)
        self.assertEqual(t.min().item(), -5.0)
        values, indices = t.max(1)
        self.assertEqual(values.tolist(), [5.0, 7.0, -1.0])
        self.assertEqual(indices.tolist(), [1, 0, 0])        # the first maximum
        self.assertIs(indices.dtype, mt.int64)
        r = t.max(dim=0, keepdim=True)
        self.assertEqual(r.values.tolist(), [[7.0, 5.0, 7.0, 3.0]])
        self.assertEqual(r.indices.tolist(), [[1, 0, 1, 1]])
        values, indices = t.min(1)
        self.assertEqual(values.tolist(), [-2.0, 0.0, -5.0])
        self.assertEqual(indices.tolist(), [3, 1, 3])
        self.assertEqual(t.argmax(1).tolist(), [1, 0, 0])
        self.assertEqual(t.argmax(0, keepdim=True).tolist(), [[1, 0, 1, 1]])
        self.assertEqual(t.argmax().item(), 4)
        self.assertEqual(t.argmin().item(), 11)
        self.assertEqual(mt.argmax(t, dim=-1).tolist(), [1, 0, 0])
        self.assertEqual(t.argmin(1).tolist(), [3, 1, 3])
        self.assertEqual(mt.max(t).item(), 7.0)


class SoftmaxTest(TestCase):
    def ref_softmax(self, row):
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = math.fsum(e)
        return [v / s for v in e]

    def test_softmax_log_softmax(self):
        rng = self.rng(8)
        a = rand_list((4, 6), rng, -5, 5)
        a[0][0] = 1000.0                             # stability: the row max is subtracted
        want = [self.ref_softmax(r) for r in a]
        t = mt.tensor(a, dtype=mt.float64)
        self.assertClose(t.softmax(1), want, rtol=1e-12, atol=1e-15)
        self.assertClose(mt.softmax(t, -1), want, rtol=1e-12, atol=1e-15)
        self.assertClose(mt.nn.functional.softmax(t, dim=1), want, rtol=1e-12, atol=1e-15)
        # log_softmax of row 0 is x - 1000 up to exp(-990): no overflow, no log(0)
        got = t.log_softmax(1).tolist()
        self.assertAlmostEqual(got[0][0], 0.0, places=12)
        for i in range(1, 6):
            self.assertAlmostEqual(got[0][i], a[0][i] - 1000.0, places=9)
        logw = [[math.log(v) for v in r] for r in want[1:]]
        self.assertClose(mt.tensor(a[1:], dtype=mt.float64).log_softmax(1), logw, rtol=1e-12, atol=1e-12)
        cols = [self.ref_softmax(list(c)) for c in zip(*a[1:])]
        self.assertClose(mt.tensor(a[1:], dtype=mt.float64).softmax(0), [list(r) for r in zip(*cols)],
                         rtol=1e-12, atol=1e-15)

    def test_cross_entropy_and_nll(self):
        rng = self.rng(9)
        logits = rand_list((5, 4), rng, -3, 3)
        targets = [0, 3, 1, 1, 2]
        want = math.fsum(-math.log(self.ref_softmax(r)[c]) for r, c in zip(logits, targets)) / 5
        F = mt.nn.functional
        L = mt.tensor(logits, dtype=mt.float64)
        T = mt.tensor(targets)
        self.assertClose(F.cross_entropy(L, T), want, rtol=1e-12)
        self.assertClose(mt.nn.CrossEntropyLoss()(L, T), want, rtol=1e-12)
        self.assertClose(F.nll_loss(L.log_softmax(1), T), want, rtol=1e-12)
        self.assertClose(mt.nn.NLLLoss()(L.log_softmax(1), T), want, rtol=1e-12)
        self.assertClose(F.cross_entropy(mt.tensor(logits), T.int()), want, rtol=1e-5)
        with self.assertRaises(ValueError):
            F.cross_entropy(L, mt.tensor([0, 4, 1, 1, 2]))       # class 4 of 4
        with self.assertRaises(NotImplementedError):
            F.cross_entropy(L, T, reduction="sum")
        with self.assertRaises(TypeError):
            F.cross_entropy(L, mt.tensor([0.0, 1.0, 1.0, 1.0, 2.0]))

    def test_mse_loss(self):
        a, b = [[1.0, 2.0], [3.0, 5.0]], [[0.5, 2.0], [4.0, 1.0]]
        F = mt.nn.functional
        sq = [0.25, 0.0, 1.0, 16.0]
        A, B = mt.tensor(a, dtype=mt.float64), mt.tensor(b, dtype=mt.float64)
        self.assertClose(F.mse_loss(A, B), sum(sq) / 4, rtol=1e-15)
        self.assertClose(F.mse_loss(A, B, reduction="sum"), sum(sq), rtol=1e-15)
        self.assertClose(F.mse_loss(A, B, reduction="none"), [[0.25, 0.0], [1.0, 16.0]], rtol=1e-15)
        self.assertClose(mt.nn.MSELoss(reduction="sum")(A, B), sum(sq), rtol=1e-15)
        with self.assertRaises(ValueError):
            F.mse_loss(A, B, reduction="max")


class ShapeOpsTest(TestCase):
    def test_reshape_view_flatten(self):
        a = [float(i) for i in range(24)]
        t = mt.tensor(a)
        r = t.reshape(2, 3, 4)
        self.assertEqual(r.shape, (2, 3, 4))
        self.assertEqual(flat(r.tolist()), a)
        self.assertEqual(t.view(4, -1).shape, (4, 6))
        self.assertEqual(t.reshape((6, 4)).shape, (6, 4))
        self.assertEqual(mt.reshape(t, [3, 8]).shape, (3, 8))
        self.assertEqual(r.flatten().shape, (24,))
        self.assertEqual(r.flatten(1).shape, (2, 12))
        self.assertEqual(r.flatten(0, 1).shape, (6, 4))
        self.assertEqual(mt.tensor(1.0).flatten().shape, (1,))
        self.assertEqual(r.view_as(mt.zeros(4, 6)).shape, (4, 6))
        self.assertEqual(r.data_ptr(), t.data_ptr())        # a view
        with self.assertRaises(ValueError):
            t.reshape(5, 5)

    def test_squeeze_unsqueeze(self):
        t = mt.zeros(2, 1, 3, 1)
        self.assertEqual(t.squeeze().shape, (2, 3))
        self.assertEqual(t.squeeze(1).shape, (2, 3, 1))
        self.assertEqual(t.squeeze(0).shape, (2, 1, 3, 1))
        self.assertEqual(t.unsqueeze(0).shape, (1, 2, 1, 3, 1))
        self.assertEqual(t.unsqueeze(-1).shape, (2, 1, 3, 1, 1))
        self.assertEqual(mt.unsqueeze(mt.zeros(3), 1).shape, (3, 1))

    def test_transpose_permute(self):
        rng = self.rng(10)
        shape = (2, 3, 4)
        a = rand_list(shape, rng)
        t = mt.tensor(a)
        for perm in ((0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)):
            vals, oshape = ref_permute(flat(a), shape, perm)
            got = t.permute(*perm)
            self.assertEqual(tuple(got.shape), oshape)
            self.assertEqual(flat(got.tolist()), [float(mt.tensor(v).item()) for v in vals])
            self.assertEqual(flat(t.permute(perm).tolist()), flat(got.tolist()))
        vals, oshape = ref_permute(flat(a), shape, (0, 2, 1))
        self.assertEqual(flat(t.transpose(1, 2).tolist()), flat(t.permute(0, 2, 1).tolist()))
        self.assertEqual(tuple(t.transpose(-1, -2).shape), oshape)
        m = mt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        self.assertEqual(m.t().tolist(), [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]])
        self.assertEqual(m.T.tolist(), [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]])
        self.assertEqual(t.T.shape, (4, 3, 2))
        with self.assertRaises(ValueError):
            t.t()


class IndexingTest(TestCase):
    def setUp(self):
        self.a = [[float(4 * i + j) for j in range(4)] for i in range(3)]
        self.t = mt.tensor(self.a)

    def test_basic_indexing(self):
        t, a = self.t, self.a
        self.assertEqual(t[1].tolist(), a[1])
        self.assertEqual(t[-1].tolist(), a[-1])
        self.assertEqual(t[1, 2].item(), a[1][2])
        self.assertEqual(t[1][2].item(), a[1][2])
        self.assertEqual(t[0:2].tolist(), a[0:2])
        self.assertEqual(t[1:].tolist(), a[1:])
        self.assertEqual(t[:, 1].tolist(), [r[1] for r in a])
        self.assertEqual(t[:, 1:3].tolist(), [r[1:3] for r in a])
        self.assertEqual(t[..., -1].tolist(), [r[-1] for r in a])
        self.assertEqual(t[::2].tolist(), a[::2])
        self.assertEqual(t[:, ::3].tolist(), [r[::3] for r in a])
        self.assertEqual(t[5:9].shape, (0, 4))
        self.assertEqual(t[None].shape, (1, 3, 4))
        self.assertEqual(t[:, None, 1].shape, (3, 1))
        self.assertEqual(t[[2, 0]].tolist(), [a[2], a[0]])
        self.assertEqual(t[mt.tensor([1, 1])].tolist(), [a[1], a[1]])
        self.assertEqual(t[:, [3, 0]].tolist(), [[r[3], r[0]] for r in a])
        self.assertEqual(mt.index_select(t, 1, [0, 2]).tolist(), [[r[0], r[2]] for r in a])
        self.assertEqual(t.index_select(-1, mt.tensor([3, 1])).tolist(), [[r[3], r[1]] for r in a])
        self.assertEqual(t.index_select(0, [2]).tolist(), [a[2]])
        for dim in (2, -3, 7):  # an internal IndexError (list assignment index out of range) before
            with self.assertRaisesRegex(IndexError, r"dimension out of range \(expected to be in range of "
                                        r"\[-2, 1\], but got %d\)" % dim):
                t.index_select(dim, [0])
        self.assertEqual([row.tolist() for row in t], a)
        self.assertEqual(t[mt.tensor(2)].tolist(), a[2])

    def test_first_dim_slices_are_views(self):
        # a slice of the first dim shares storage as in torch, also when the later dims are
        # given whole (t[0:2] expanded to t[0:2, :] had become a copy, and writes were lost)
        for index, rows in ((slice(0, 2), [0, 1]), (slice(1, 3), [1, 2]), (slice(None), [0, 1, 2]),
                            (Ellipsis, [0, 1, 2]), ((slice(1, 3), slice(None)), [1, 2]), (1, [1])):
            with self.subTest(index=index):
                t = mt.tensor(self.a)
                v = t[index]
                self.assertEqual(v.data_ptr(), t.data_ptr() + rows[0] * 4 * t.element_size())
                v.fill_(-1.0)
                self.assertEqual(t.tolist(), [[-1.0] * 4 if r in rows else self.a[r] for r in range(3)])
        t = mt.tensor(self.a)
        self.assertNotEqual(t[:, 1:3].data_ptr(), t.data_ptr())  # a part of a later dim is a copy

    def test_index_errors(self):
        t = self.t
        with self.assertRaises(IndexError):
            t[3]
        with self.assertRaises(IndexError):
            t[0, 0, 0]
        with self.assertRaises(ValueError):
            t[::-1]
        with self.assertRaises(IndexError):   # float indices, as torch
            t[mt.tensor([1.0, 0.0, 1.0])]
        with self.assertRaises(NotImplementedError):  # a mask combined with another index
            t[mt.tensor([1, 0, 1], dtype=mt.uint8), 0]
        with self.assertRaises(NotImplementedError):
            t[[0, 1], [1, 2]]
        with self.assertRaises(ValueError):
            t[mt.tensor([5])]

    def test_setitem(self):
        t = mt.tensor(self.a)
        t[0] = 1.0
        t[1:3] = mt.tensor([9.0, 8.0, 7.0, 6.0])
        self.assertEqual(t.tolist(), [[1.0] * 4, [9.0, 8.0, 7.0, 6.0], [9.0, 8.0, 7.0, 6.0]])
        t[-1] = mt.tensor([0.0, 1.0, 2.0, 3.0])
        self.assertEqual(t[2].tolist(), [0.0, 1.0, 2.0, 3.0])
        t[...] = 0
        self.assertEqual(t.tolist(), [[0.0] * 4] * 3)
        with self.assertRaises(NotImplementedError):
            t[:, 1] = 2.0
        with self.assertRaises(IndexError):
            t[3] = 1.0
        w = mt.ones(2, requires_grad=True)
        with self.assertRaises(RuntimeError):
            w[0] = 0.0


if __name__ == "__main__":
    unittest.main()
