"""test_abi_nn - the training-support part of abi/minitorch.h: Adam/AdamW and gradient
clipping against torch's update rules written out in Python, initialisers (bounds,
moments, determinism), randperm, max_dim's indices, index and target errors, and the
IDX / TSV loaders on files written here.
"""
import gzip
import math
import os
import struct
import sys
import tempfile
import unittest
from ctypes import byref, c_double, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abi_util as U  # noqa: E402
from abi_util import (LIB, MT_CPU, MT_F32, MT_F64, MT_I32, MT_I64, MT_U8, MT_OK,  # noqa: E402
                      MT_ERR_INVALID_ARGUMENT, MT_ERR_IO)


class TestAdam(U.ABITestCase):
    def run_adam(self, fn, dtype, lr, b1, b2, eps, wd, steps=4):
        rng = self.rng
        shapes = [(3, 2), (5,)]
        vals = [U.round_to(dtype, [rng.uniform(-1, 1) for _ in range(U.numel(s))]) for s in shapes]
        cs = [U.round_to(dtype, [rng.uniform(-1, 1) for _ in range(U.numel(s))]) for s in shapes]
        params = [self.tensor(v, s, dtype, requires_grad=True) for v, s in zip(vals, shapes)]
        consts = [self.tensor(c, s, dtype) for c, s in zip(cs, shapes)]
        arr = (c_void_p * 2)(*params)
        opt = c_void_p()
        self.assertStatus(getattr(LIB, fn)(byref(opt), arr, 2, lr, b1, b2, eps, wd), MT_OK)
        self.addCleanup(LIB.mt_optim_free, opt)
        ref = [list(v) for v in vals]
        m = [[0.0] * len(v) for v in vals]
        v2 = [[0.0] * len(v) for v in vals]
        for t in range(1, steps + 1):
            LIB.mt_optim_zero_grad(opt)
            terms = [self.op("mt_sum", self.op("mt_mul", self.op("mt_mul", p, p), c)) for p, c in zip(params, consts)]
            self.assertStatus(LIB.mt_backward(self.op("mt_add", terms[0], terms[1])), MT_OK)
            self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
            for i in range(2):
                for j, p in enumerate(ref[i]):
                    g = 2 * p * cs[i][j]
                    if fn == "mt_optim_adamw":
                        p *= 1 - lr * wd
                    else:
                        g += wd * p
                    m[i][j] = b1 * m[i][j] + (1 - b1) * g
                    v2[i][j] = b2 * v2[i][j] + (1 - b2) * g * g
                    mhat = m[i][j] / (1 - b1 ** t)
                    vhat = v2[i][j] / (1 - b2 ** t)
                    ref[i][j] = p - lr * mhat / (math.sqrt(vhat) + eps)
            tol = 1e-5 if dtype == MT_F32 else 1e-12
            for i, p in enumerate(params):
                self.assertAllClose(U.to_list(p), ref[i], tol, tol, "%s param %d step %d" % (fn, i, t))

    def test_adam_and_adamw(self):
        for fn in ("mt_optim_adam", "mt_optim_adamw"):
            for dtype in (MT_F32, MT_F64):
                for wd in (0.0, 0.1):
                    with self.subTest(fn=fn, dtype=dtype, wd=wd):
                        self.run_adam(fn, dtype, 0.01, 0.9, 0.999, 1e-8, wd)

    def test_clip_grad_norm(self):
        for max_norm in (0.5, 1000.0):
            a = self.tensor([3.0, 0.0], (2,), MT_F64, requires_grad=True)
            b = self.tensor([0.0, 4.0, 0.0], (3,), MT_F64, requires_grad=True)
            loss = self.op("mt_add", self.op("mt_sum", self.op("mt_mul", a, self.tensor([3.0, 0.0], (2,), MT_F64))),
                           self.op("mt_sum", self.op("mt_mul", b, self.tensor([0.0, 4.0, 0.0], (3,), MT_F64))))
            self.assertStatus(LIB.mt_backward(loss), MT_OK)       # grads [3,0] and [0,4,0]: norm 5
            arr = (c_void_p * 2)(a, b)
            nrm = c_void_p()
            self.assertStatus(LIB.mt_clip_grad_norm(byref(nrm), arr, 2, max_norm), MT_OK)
            self.keep(nrm.value)
            self.assertEqual(U.shape_of(nrm.value), ())
            self.assertAlmostEqual(U.item_of(nrm.value), 5.0, places=12)
            coef = min(1.0, max_norm / (5.0 + 1e-6))
            self.assertAllClose(U.to_list(self.grad(a)), [3 * coef, 0], 1e-12, 1e-12, "clipped a")
            self.assertAllClose(U.to_list(self.grad(b)), [0, 4 * coef, 0], 1e-12, 1e-12, "clipped b")
        self.assertStatus(LIB.mt_clip_grad_norm(None, arr, 2, 1.0), MT_OK, "out_norm may be NULL")


class TestInitAndRandperm(U.ABITestCase):
    def test_initialisers(self):
        shape = (64, 100)                    # [out, in]: fan_in 100, fan_out 64
        fan_in, fan_out = 100, 64
        n = U.numel(shape)
        for dtype in (MT_F32, MT_F64):
            cases = [
                ("mt_init_uniform", (c_double(-0.5), c_double(2.0)), -0.5, 2.0, None, None),
                ("mt_init_normal", (c_double(1.0), c_double(0.25)), None, None, 1.0, 0.25),
                ("mt_init_xavier_uniform", (c_double(2.0),), None, 2 * math.sqrt(6 / (fan_in + fan_out)), 0.0, None),
                ("mt_init_xavier_normal", (c_double(1.0),), None, None, 0.0, math.sqrt(2 / (fan_in + fan_out))),
                ("mt_init_kaiming_uniform", (c_double(math.sqrt(2)),), None, math.sqrt(2) * math.sqrt(3 / fan_in), 0.0, None),
                ("mt_init_kaiming_normal", (c_double(math.sqrt(2)),), None, None, 0.0, math.sqrt(2) / math.sqrt(fan_in)),
            ]
            for fn, args, low, high, mean, std in cases:
                with self.subTest(fn=fn, dtype=dtype):
                    t = self.op("mt_tensor_zeros", U.shape_array(shape), 2, dtype, self.DEV)
                    t0 = LIB.mt_tape_size()
                    self.assertStatus(getattr(LIB, fn)(t, *args, c_int64(42)), MT_OK)
                    self.assertEqual(LIB.mt_tape_size(), t0, "init is not recorded")
                    v = U.to_list(t)
                    m = math.fsum(v) / n
                    sd = math.sqrt(math.fsum((x - m) ** 2 for x in v) / n)
                    if high is not None:              # uniform on [low or -high, high)
                        lo = low if low is not None else -high
                        self.assertTrue(all(lo <= x <= high for x in v), "%s outside [%g, %g]" % (fn, lo, high))
                        self.assertGreater(max(v), high - 0.01 * (high - lo))
                        self.assertLess(min(v), lo + 0.01 * (high - lo))
                        std = (high - lo) / math.sqrt(12)
                        mean = (high + lo) / 2
                    # 6400 samples: standard error of the mean is std/80, of the std about std/113
                    self.assertLess(abs(m - mean), 5 * std / 80, fn + " mean")
                    self.assertLess(abs(sd - std), 5 * std / 113, fn + " std")
                    again = self.op("mt_tensor_zeros", U.shape_array(shape), 2, dtype, self.DEV)
                    getattr(LIB, fn)(again, *args, c_int64(42))
                    self.assertEqual(U.to_list(again), v, fn + ": same seed, same values")
                    if self.DEV != MT_CPU:
                        cpu = self.op("mt_tensor_zeros", U.shape_array(shape), 2, dtype, MT_CPU)
                        getattr(LIB, fn)(cpu, *args, c_int64(42))
                        self.assertEqual(U.to_list(cpu), v, fn + ": bit-identical on every device")

    def test_randperm(self):
        for n in (0, 1, 10, 1000):
            p = self.op("mt_randperm", n, c_int64(7), self.DEV)
            self.assertEqual(U.dtype_of(p), MT_I64)
            self.assertEqual(U.shape_of(p), (n,))
            v = U.to_list(p)
            self.assertEqual(sorted(v), list(range(n)))
            self.assertEqual(U.to_list(self.op("mt_randperm", n, c_int64(7), self.DEV)), v)
            if n >= 10:
                self.assertNotEqual(U.to_list(self.op("mt_randperm", n, c_int64(8), self.DEV)), v)
                self.assertNotEqual(v, list(range(n)))
        out = c_void_p()
        self.assertStatus(LIB.mt_randperm(byref(out), -1, 1, self.DEV), MT_ERR_INVALID_ARGUMENT, "mt_randperm", ["-1"])
        self.assertIsNone(out.value)


class TestIndicesAndTargets(U.ABITestCase):
    def test_max_dim_indices(self):
        x = self.tensor([1, 5, 5, 2, 7, 0], (2, 3))
        vals, idx = c_void_p(), c_void_p()
        self.assertStatus(LIB.mt_max_dim(byref(vals), byref(idx), x, 1, 0), MT_OK)
        self.keep(vals.value)
        self.keep(idx.value)
        self.assertEqual(U.to_list(vals.value), [5, 7])
        self.assertEqual(U.to_list(idx.value), [1, 1], "the first maximum")
        self.assertEqual(U.dtype_of(idx.value), MT_I64)
        only = c_void_p()
        self.assertStatus(LIB.mt_max_dim(None, byref(only), x, 0, 1), MT_OK)
        self.keep(only.value)
        self.assertEqual((U.shape_of(only.value), U.to_list(only.value)), ((1, 3), [1, 1, 0]))
        xs = self.tensor([1, 3, 3, 2], (4,), requires_grad=True)
        mv = self.op("mt_sum", self.keep(U.SPEC["max_dim"].call([xs], {"dim": 0, "keepdim": 0})))
        self.assertStatus(LIB.mt_backward(mv), MT_OK)
        self.assertEqual(U.to_list(self.grad(xs)), [0, 1, 0, 0], "the gradient goes to the first maximum")

    def test_index_and_target_errors(self):
        x = self.tensor([0.0] * 6, (3, 2))
        bad = self.tensor([0, 3, 1], (3,), MT_I64)
        out = c_void_p()
        self.assertStatus(LIB.mt_index_select(byref(out), x, bad), MT_ERR_INVALID_ARGUMENT, "mt_index_select", ["3"])
        self.assertIsNone(out.value)
        neg = self.tensor([-1], (1,), MT_I64)
        self.assertStatus(LIB.mt_index_select(byref(out), x, neg), MT_ERR_INVALID_ARGUMENT, "mt_index_select", ["-1"])
        f_idx = self.tensor([0.0], (1,), MT_F32)
        self.assertStatus(LIB.mt_index_select(byref(out), x, f_idx), (U.MT_ERR_DTYPE, MT_ERR_INVALID_ARGUMENT),
                          "mt_index_select")
        logits = self.tensor([0.0] * 6, (2, 3), requires_grad=True)
        for fn in ("mt_cross_entropy", "mt_nll_loss"):
            t0 = LIB.mt_tape_size()
            self.assertStatus(getattr(LIB, fn)(byref(out), logits, self.tensor([0, 3], (2,), MT_I64)),
                              MT_ERR_INVALID_ARGUMENT, fn, ["3"])
            self.assertEqual(LIB.mt_tape_size(), t0)
            self.assertStatus(getattr(LIB, fn)(byref(out), logits, self.tensor([0, 1, 2], (3,), MT_I64)),
                              (U.MT_ERR_SHAPE, MT_ERR_INVALID_ARGUMENT), fn)
            self.assertIsNone(out.value)


class TestLoaders(U.ABITestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def write_idx(self, name, code, dims, payload, compress=False):
        data = struct.pack(">BBBB", 0, 0, code, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload
        p = self.path(name)
        with (gzip.open(p, "wb") if compress else open(p, "wb")) as f:
            f.write(data)
        return p

    def load_idx(self, p):
        out = c_void_p()
        st = LIB.mt_load_idx(byref(out), p.encode(), self.DEV)
        if st == MT_OK:
            self.keep(out.value)
        return st, out.value

    def test_idx_types(self):
        vals = [self.rng.randrange(256) for _ in range(24)]
        cases = [(0x08, MT_U8, bytes(vals), vals),
                 (0x09, MT_U8, bytes(vals), vals),                                    # signed bytes, kept as stored
                 (0x0B, MT_I32, struct.pack(">24h", *[v - 128 for v in vals]), [v - 128 for v in vals]),
                 (0x0C, MT_I32, struct.pack(">24i", *[v * 1000 - 5 for v in vals]), [v * 1000 - 5 for v in vals]),
                 (0x0D, MT_F32, struct.pack(">24f", *[v / 8 for v in vals]), [v / 8 for v in vals]),
                 (0x0E, MT_F64, struct.pack(">24d", *[v / 3 for v in vals]), [v / 3 for v in vals])]
        for code, dtype, payload, want in cases:
            for gz in (False, True):
                with self.subTest(code=hex(code), gzip=gz):
                    p = self.write_idx("t%x%d" % (code, gz), code, (2, 3, 4), payload, gz)
                    st, h = self.load_idx(p)
                    self.assertStatus(st, MT_OK)
                    self.assertEqual(U.dtype_of(h), dtype)
                    self.assertEqual(U.shape_of(h), (2, 3, 4))
                    self.assertEqual(U.device_of(h), self.DEV)
                    self.assertEqual(U.to_list(h), want)

    def test_idx_errors(self):
        missing = self.path("nope.idx")
        st, h = self.load_idx(missing)
        self.assertStatus(st, MT_ERR_IO, "mt_load_idx", [missing])
        self.assertIsNone(h)
        p = self.path("badmagic")
        with open(p, "wb") as f:
            f.write(b"\x01\x02\x08\x01\x00\x00\x00\x02ab")
        self.assertStatus(self.load_idx(p)[0], MT_ERR_IO, "mt_load_idx", [p])
        p = self.write_idx("short", 0x08, (10,), b"abc")
        self.assertStatus(self.load_idx(p)[0], MT_ERR_IO, "mt_load_idx", [p])

    def test_tsv(self):
        rows = [("1.5", "red", "2022-01-02", "10"), ("-2", "blue", "2022-02-01", "20.5"),
                ("0.25", "red", "2020-12-31", "-1")]
        p = self.path("t.tsv")
        with open(p, "w") as f:
            for r in rows:
                f.write("\t".join(r) + "\n")
        feats, targs = c_void_p(), c_void_p()
        st = LIB.mt_load_tsv(byref(feats), byref(targs), p.encode(), b"0:num,1:cat,2:date", 3, self.DEV)
        self.assertStatus(st, MT_OK)
        self.keep(feats.value)
        self.keep(targs.value)
        self.assertEqual(U.shape_of(feats.value), (3, 4))      # num, one-hot(red, blue), day of year
        self.assertEqual(U.shape_of(targs.value), (3, 1))
        self.assertEqual(U.dtype_of(feats.value), MT_F32)
        self.assertEqual(U.to_list(feats.value), [1.5, 1, 0, 2, -2, 0, 1, 32, 0.25, 1, 0, 366])
        self.assertEqual(U.to_list(targs.value), [10, 20.5, -1])
        bad = self.path("bad.tsv")
        with open(bad, "w") as f:
            f.write("1\tred\t2022-01-01\t3\nx\tred\t2022-01-01\t3\n")
        st = LIB.mt_load_tsv(byref(feats), byref(targs), bad.encode(), b"0:num,1:cat,2:date", 3, self.DEV)
        self.assertStatus(st, MT_ERR_IO, "mt_load_tsv", [bad, "2"])
        self.assertIsNone(feats.value)
        self.assertIsNone(targs.value)
        st = LIB.mt_load_tsv(byref(feats), byref(targs), self.path("none.tsv").encode(), b"0:num", 3, self.DEV)
        self.assertStatus(st, MT_ERR_IO, "mt_load_tsv")


if __name__ == "__main__":
    unittest.main()
