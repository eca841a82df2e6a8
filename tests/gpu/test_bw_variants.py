"""test_bw_variants - every variant of the bandwidth study hooks (scripts/bench/bw_study.py) on the
GPU against the CPU reference backend in float64 (and against PyTorch where it is importable):

  mt_study_relu         variants 0-6, float32 / float16 / bfloat16, sizes with n % 8 tails and
                        partial last tiles, and a buffer 4 bytes off 16-byte alignment (1-6 must
                        refuse it, 0 must not)
  mt_study_gelu         variants 0-3, forward and backward (dx = gelu'(x) dy for a random dy; the
                        reference is the CPU's d/dx of sum(gelu(x) * dy)), the relu sizes and dtypes
  mt_study_sum          variants 0-4, the same sizes and dtypes (one-pass tails, the last-block finish
                        over a many-block grid), run twice each (the ticket resets; same bits)
  mt_study_softmax,     variants 0-12 on widths on both sides of 1024 (the warp / exact-fit / cluster
  mt_study_log_softmax  boundaries), odd widths (the vector variants must refuse), row counts that
                        leave the last block partly empty
  mt_study_layer_norm   variants 0-11, with gamma and beta and without (NULL), y, mean and rstd;
                        the persistent variants 9-11 also over row counts well beyond the
                        clusters the GPU holds at once

  mt_study_cross_entropy variants 0-6: the mean loss and d/dlogits against the CPU's
                        mt_cross_entropy and its backward, widths with and without 16-byte rows,
                        widths the exact-fit forward takes and not; in float32 also more rows
                        than one wave of the forward's blocks holds (its blocks loop)

A variant either runs and matches, or answers MT_ERR_UNSUPPORTED exactly where its documented
conditions exclude the shape (the `takes` functions below restate them).

Tolerances, relative error ||got - ref|| / ||ref||: float32 1e-5 (1e-4 for rows over 4096
columns and for sums over 4096 elements: longer accumulation chains), float16 / bfloat16 1e-2
(the outputs carry 11 / 8 significant bits; references are computed from the rounded inputs).
"""
import ctypes
import math
import os
import sys
import unittest
from ctypes import c_double, c_int32, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_classify_parity as CP  # noqa: E402
from test_classify_parity import U, LIB, Scope, host  # noqa: E402
from abi_util import MT_BF16, MT_CPU, MT_CUDA, MT_F16, MT_F32, MT_F64, MT_OK  # noqa: E402

UNSUPPORTED = U.MT_ERR_UNSUPPORTED
VP, I64, I32 = c_void_p, c_int64, c_int32
SIGS = {
    "mt_study_relu": [VP, VP, I64, I32, I32],
    "mt_study_sum": [VP, VP, I64, I32, I32],
    "mt_study_gelu": [VP, VP, VP, I64, I32, I32, I32],
    "mt_study_softmax": [VP, VP, I64, I64, I32, I32],
    "mt_study_log_softmax": [VP, VP, I64, I64, I32, I32],
    "mt_study_layer_norm": [VP, VP, VP, VP, VP, VP, I64, I64, c_double, I32, I32],
    "mt_study_cross_entropy": [VP, VP, VP, VP, VP, VP, I64, I64, I32, I32],
}
HOOKS = {}
for _name, _args in SIGS.items():
    _fn = getattr(LIB, _name, None)
    if _fn is not None:
        _fn.restype = ctypes.c_int
        _fn.argtypes = _args
        HOOKS[_name] = _fn
RUN = len(HOOKS) == len(SIGS) and U.HAVE_CUDA and not CP.SELF_TEST
WHY = "the study hooks need a CUDA build and a GPU"

HALF = (MT_F16, MT_BF16)
FLAT_SIZES = [1, 7, 1000, 4099, 6149, 9999, (1 << 20) + 3]
ROW_CASES = [(7, 128), (33, 1024), (300, 32), (5, 512), (9, 256), (3, 4096), (2, 32768), (4, 2048), (3, 100),
             (17, 8), (2, 65536 + 64), (600, 2048), (130, 8192)]


def tol_for(dtype, long_chain):
    if dtype in HALF:
        return CP.HALF_TOL
    return 1e-4 if long_chain else 1e-5


def packs_of(cols, elem):
    return cols * elem // 16


def warp_shape(packs, min_pl):
    """backend/cuda/row_stats.cuh warp_shape: (lanes per row, packs per lane)."""
    if packs <= 32 * min_pl:
        need = 1
        while need < packs:
            need <<= 1
        return max(1, need // min_pl), min(min_pl, need)
    pl = 1
    while pl < (packs + 31) // 32:
        pl <<= 1
    return 32, pl


def fits_exactly(cols, elem):
    """The exact-fit kernels' shapes: warp_shape(packs, 4) covering the row exactly, one of four pairs."""
    g, pl = warp_shape(packs_of(cols, elem), 4)
    return g * pl == packs_of(cols, elem) and (g, pl) in ((8, 4), (16, 4), (32, 4), (32, 8))


def cluster_fits(cols, elem, k):
    """row_stats.cuh cluster_shape with 256 threads and at most 8 packs per thread."""
    return math.ceil(packs_of(cols, elem) / k) <= 256 * 8


def softmax_takes(v, cols, dtype):
    elem = U.DTYPE_SIZES[dtype]
    vec = dtype != MT_F64 and (cols * elem) % 16 == 0
    if v <= 3:
        return True
    if not vec:
        return False
    if v in (4, 5):
        return True
    if v in (6, 7):
        return cols <= 1024
    if v == 8:
        return cols <= 1024 and fits_exactly(cols, elem)
    k = 8 if v in (9, 12) else 4
    if v >= 11:  # one exchange: exact fits of k blocks x 256 threads x 1, 2, 4 or 8 packs
        return cols > 1024 and any(packs_of(cols, elem) == k * 256 * pl for pl in (1, 2, 4, 8))
    return cols > 1024 and cluster_fits(cols, elem, k)


def row_stats(xs, rows, cols, eps):
    """Each row's mean and 1 / sqrt(biased variance + eps) of the flat values xs, in float64 sums."""
    mean, rstd = [], []
    for r in range(rows):
        row = xs[r * cols:(r + 1) * cols]
        m = math.fsum(row) / cols
        mean.append(m)
        rstd.append(1.0 / math.sqrt(math.fsum((a - m) ** 2 for a in row) / cols + eps))
    return mean, rstd


def layer_norm_takes(v, cols, dtype):
    elem = U.DTYPE_SIZES[dtype]
    vec = dtype != MT_F64 and (cols * elem) % 16 == 0
    if v == 0:
        return True
    if not vec:
        return False
    if v in (1, 2):
        return cols <= 1024
    if v == 6:
        return cols <= 1024 and fits_exactly(cols, elem)
    if v == 3:
        return cols > 1024
    k = 8 if v in (4, 8) else 4
    if v >= 7:  # one exchange (9-11: persistent): exact fits of k blocks x 256 threads x 1, 2, 4 or 8 packs
        return cols > 1024 and any(packs_of(cols, elem) == k * 256 * pl for pl in (1, 2, 4, 8))
    return cols > 1024 and cluster_fits(cols, elem, k)


@unittest.skipUnless(RUN, WHY)
class TestBwVariants(CP.ClassifyCase):
    def device_input(self, s, shape, dtype, scale=2.0):
        """(x on the GPU in dtype, the same rounded values as a float64 CPU tensor)."""
        x32 = self.randn(s, shape, MT_F32, scale)
        xd = s(U.call("mt_tensor_cast", s(U.call("mt_tensor_to", x32, MT_CUDA)), dtype))
        xr = s(U.call("mt_tensor_cast", s(U.call("mt_tensor_to", s(U.call("mt_tensor_cast", xd, MT_F32)), MT_CPU)),
                      MT_F64))
        return xd, xr

    def nan_tensor(self, s, shape, dtype):
        return s(U.call("mt_tensor_full", U.shape_array(shape), len(shape), c_double(CP.NAN), dtype, MT_CUDA))

    def ptr(self, h, offset=0):
        return c_void_p(U.data_ptr_of(h) + offset)

    def test_relu(self):
        for dtype in (MT_F32, MT_F16, MT_BF16):
            for n in FLAT_SIZES:
                with Scope() as s:
                    xd, xr = self.device_input(s, (n,), dtype)
                    want = host(s(U.call("mt_relu", xr)))
                    for v in range(7):
                        with self.subTest(dtype=U.DTYPE_NAMES[dtype], n=n, variant=v):
                            y = self.nan_tensor(s, (n,), dtype)
                            self.assertEqual(HOOKS["mt_study_relu"](self.ptr(y), self.ptr(xd), n, dtype, v), MT_OK,
                                             U.last_error())
                            self.assertStatus(LIB.mt_synchronize(), MT_OK)
                            self.assertRel(host(y), want, tol_for(dtype, False), "relu vs cpu")

    def test_relu_misaligned(self):
        with Scope() as s:
            n = 1001
            xd, xr = self.device_input(s, (n + 1,), MT_F32)
            want = host(s(U.call("mt_relu", xr)))[1:]
            y = self.nan_tensor(s, (n + 1,), MT_F32)
            for v in range(1, 7):
                self.assertEqual(HOOKS["mt_study_relu"](self.ptr(y, 4), self.ptr(xd, 4), n, MT_F32, v), UNSUPPORTED)
                self.assertIn("mt_study_relu", U.last_error())
            self.assertEqual(HOOKS["mt_study_relu"](self.ptr(y, 4), self.ptr(xd, 4), n, MT_F32, 0), MT_OK)
            self.assertStatus(LIB.mt_synchronize(), MT_OK)
            self.assertRel(host(y)[1:], want, 1e-5, "relu at an offset vs cpu")

    def test_gelu(self):
        for dtype in (MT_F32, MT_F16, MT_BF16):
            for n in FLAT_SIZES:
                with Scope() as s:
                    xd, xr = self.device_input(s, (n,), dtype)
                    dyd, dyr = self.device_input(s, (n,), dtype, 1.0)
                    want = host(s(U.call("mt_gelu", xr)))
                    U.set_requires_grad(xr, 1)
                    loss = s(U.call("mt_sum", s(U.call("mt_mul", s(U.call("mt_gelu", xr)), dyr))))
                    self.assertStatus(LIB.mt_backward(loss), MT_OK)
                    dwant = host(s(U.grad_of(xr)))
                    for bwd, ref in ((0, want), (1, dwant)):
                        for v in range(4):
                            with self.subTest(dtype=U.DTYPE_NAMES[dtype], n=n, backward=bwd, variant=v):
                                y = self.nan_tensor(s, (n,), dtype)
                                st = HOOKS["mt_study_gelu"](self.ptr(y), self.ptr(xd), self.ptr(dyd) if bwd else None,
                                                            n, dtype, bwd, v)
                                self.assertEqual(st, MT_OK, U.last_error())
                                self.assertStatus(LIB.mt_synchronize(), MT_OK)
                                self.assertRel(host(y), ref, tol_for(dtype, False), "gelu vs cpu")

    def test_sum(self):
        for dtype in (MT_F32, MT_F16, MT_BF16):
            for n in FLAT_SIZES:
                with Scope() as s:
                    xd, xr = self.device_input(s, (n,), dtype)
                    want = host(s(U.call("mt_sum", xr)))
                    # a sum of random-sign terms can cancel far below its terms' size, sum |x| /
                    # sqrt(n), where float32's rounding is still relative to that size: the error is
                    # measured against the larger of the two (an H200 draw gave 2.1e-4 of |want|)
                    size = math.fsum(map(abs, host(xr))) / math.sqrt(n)
                    for v in range(5):
                        with self.subTest(dtype=U.DTYPE_NAMES[dtype], n=n, variant=v):
                            got = []
                            for _ in range(2):  # twice: the one-pass ticket must be back at 0
                                y = self.nan_tensor(s, (1,), dtype)
                                self.assertEqual(HOOKS["mt_study_sum"](self.ptr(y), self.ptr(xd), n, dtype, v), MT_OK,
                                                 U.last_error())
                                self.assertStatus(LIB.mt_synchronize(), MT_OK)
                                got.append(list(host(y)))
                            self.assertEqual(got[0], got[1], "two runs gave different bits")
                            self.assertRelScaled(got[0], want, [size], tol_for(dtype, n > 4096), "sum vs cpu")

    def check_softmax(self, name, log):
        ref_op = "mt_log_softmax" if log else "mt_softmax"
        for dtype in (MT_F32, MT_F16, MT_BF16):
            for rows, cols in ROW_CASES:
                with Scope() as s:
                    xd, xr = self.device_input(s, (rows, cols), dtype)
                    want = host(s(U.call(ref_op, xr, 1)))
                    twant = None
                    if CP.HAVE_TORCH:
                        t = CP.torch_from(host(xr), (rows, cols))
                        twant = CP.torch_host(CP.torch.log_softmax(t, 1) if log else CP.torch.softmax(t, 1))
                    for v in range(13):
                        with self.subTest(op=name, dtype=U.DTYPE_NAMES[dtype], rows=rows, cols=cols, variant=v):
                            y = self.nan_tensor(s, (rows, cols), dtype)
                            st = HOOKS[name](self.ptr(y), self.ptr(xd), rows, cols, dtype, v)
                            if not softmax_takes(v, cols, dtype):
                                self.assertEqual(st, UNSUPPORTED, "variant %d must refuse cols %d" % (v, cols))
                                continue
                            self.assertEqual(st, MT_OK, U.last_error())
                            self.assertStatus(LIB.mt_synchronize(), MT_OK)
                            tol = tol_for(dtype, cols > CP.LONG_ROW)
                            got = host(y)
                            self.assertRel(got, want, tol, "%s vs cpu" % name)
                            if twant is not None:
                                self.assertRel(got, twant, tol, "%s vs torch" % name)

    def test_softmax(self):
        self.check_softmax("mt_study_softmax", False)

    def test_log_softmax(self):
        self.check_softmax("mt_study_log_softmax", True)

    def test_layer_norm(self):
        eps = 1e-5
        for dtype in (MT_F32, MT_F16, MT_BF16):
            for rows, cols in ROW_CASES:
                for affine in (True, False):
                    with Scope() as s:
                        xd, xr = self.device_input(s, (rows, cols), dtype)
                        gd = bd = gr = br = None
                        if affine:
                            gd, gr = self.device_input(s, (cols,), dtype, 0.5)
                            bd, br = self.device_input(s, (cols,), dtype, 0.5)
                        want = host(s(U.call("mt_layer_norm", xr, gr, br, c_double(eps))))
                        mean_want, rstd_want = row_stats(host(xr), rows, cols, eps)
                        for v in range(12):
                            with self.subTest(dtype=U.DTYPE_NAMES[dtype], rows=rows, cols=cols, affine=affine,
                                              variant=v):
                                y = self.nan_tensor(s, (rows, cols), dtype)
                                mean = self.nan_tensor(s, (rows,), MT_F32)
                                rstd = self.nan_tensor(s, (rows,), MT_F32)
                                st = HOOKS["mt_study_layer_norm"](
                                    self.ptr(y), self.ptr(mean), self.ptr(rstd), self.ptr(xd),
                                    self.ptr(gd) if gd else None, self.ptr(bd) if bd else None, rows, cols, eps,
                                    dtype, v)
                                if not layer_norm_takes(v, cols, dtype):
                                    self.assertEqual(st, UNSUPPORTED, "variant %d must refuse cols %d" % (v, cols))
                                    continue
                                self.assertEqual(st, MT_OK, U.last_error())
                                self.assertStatus(LIB.mt_synchronize(), MT_OK)
                                tol = tol_for(dtype, cols > CP.LONG_ROW)
                                self.assertRel(host(y), want, tol, "layer_norm y vs cpu")
                                self.assertRel(host(mean), mean_want, max(tol, 1e-5), "mean vs cpu")
                                self.assertRel(host(rstd), rstd_want, max(tol, 1e-5), "rstd vs cpu")

    def test_layer_norm_persistent_rows(self):
        """Variants 9-11 (11 is production's at 32768 float32 columns on Hopper) walk the rows
        in a grid of resident clusters: row counts several times the clusters an H100 or H200
        holds (132 SMs x 2 to 4 blocks / 4 blocks a cluster), odd so that some cluster's last
        pair of rows is cut short, must give every row's y, mean and rstd."""
        eps = 1e-5
        for dtype, rows, cols in ((MT_F32, 601, 8192), (MT_F32, 267, 32768), (MT_BF16, 601, 8192)):
            with Scope() as s:
                xd, xr = self.device_input(s, (rows, cols), dtype)
                gd, gr = self.device_input(s, (cols,), dtype, 0.5)
                bd, br = self.device_input(s, (cols,), dtype, 0.5)
                want = host(s(U.call("mt_layer_norm", xr, gr, br, c_double(eps))))
                mean_want, rstd_want = row_stats(host(xr), rows, cols, eps)
                for v in (0, 9, 10, 11):
                    with self.subTest(dtype=U.DTYPE_NAMES[dtype], rows=rows, cols=cols, variant=v):
                        y = self.nan_tensor(s, (rows, cols), dtype)
                        mean = self.nan_tensor(s, (rows,), MT_F32)
                        rstd = self.nan_tensor(s, (rows,), MT_F32)
                        st = HOOKS["mt_study_layer_norm"](self.ptr(y), self.ptr(mean), self.ptr(rstd), self.ptr(xd),
                                                          self.ptr(gd), self.ptr(bd), rows, cols, eps, dtype, v)
                        self.assertEqual(st, MT_OK, U.last_error())
                        self.assertStatus(LIB.mt_synchronize(), MT_OK)
                        tol = tol_for(dtype, True)
                        self.assertRel(host(y), want, tol, "layer_norm y vs cpu")
                        self.assertRel(host(mean), mean_want, max(tol, 1e-5), "mean vs cpu")
                        self.assertRel(host(rstd), rstd_want, max(tol, 1e-5), "rstd vs cpu")

    def test_cross_entropy(self):
        for dtype in (MT_F32, MT_F16, MT_BF16):
            shapes = ((64, 1000), (33, 1024), (7, 3), (5, 2049), (3, 32768), (300, 8), (40, 512))
            for rows, cols in shapes + (((20000, 256),) if dtype == MT_F32 else ()):
                with Scope() as s:
                    xd, xr = self.device_input(s, (rows, cols), dtype)
                    tv = [self.rng.randrange(cols) for _ in range(rows)]
                    td = s(U.from_list(tv, (rows,), U.MT_I64, MT_CUDA))
                    U.set_requires_grad(xr, 1)
                    tr = s(U.from_list(tv, (rows,), U.MT_I64, MT_CPU))
                    loss = s(U.call("mt_cross_entropy", xr, tr))
                    want_loss = list(host(loss))
                    self.assertStatus(LIB.mt_backward(loss), MT_OK)
                    want_dx = host(s(U.grad_of(xr)))
                    tol = tol_for(dtype, cols > CP.LONG_ROW)
                    if dtype in HALF:
                        # The device saves lse in the logits' dtype: off by up to half an ulp, at most
                        # u |lse| (u = 2^-8 in bfloat16, 2^-11 in float16), which every exp(x - lse) of
                        # the row takes as a relative error; dx is rounded again (u more).
                        xs = host(xr)
                        lse_max = max(abs(max(xs[r * cols:(r + 1) * cols]) + math.log(cols)) for r in range(rows))
                        half_ulp = 2.0 ** (-8 if dtype == MT_BF16 else -11)
                        tol = max(tol, half_ulp * (lse_max + 1))
                    one = s(U.call("mt_tensor_full", U.shape_array((1,)), 1, c_double(1.0), dtype, MT_CUDA))
                    vec = (cols * U.DTYPE_SIZES[dtype]) % 16 == 0
                    for v in range(7):
                        with self.subTest(dtype=U.DTYPE_NAMES[dtype], rows=rows, cols=cols, variant=v):
                            dx = self.nan_tensor(s, (rows, cols), dtype)
                            lse = self.nan_tensor(s, (rows,), dtype)
                            out = self.nan_tensor(s, (1,), dtype)
                            st = HOOKS["mt_study_cross_entropy"](self.ptr(out), self.ptr(lse), self.ptr(dx),
                                                                 self.ptr(xd), self.ptr(td), self.ptr(one), rows,
                                                                 cols, dtype, v)
                            if v in (1, 2) and not vec:
                                self.assertEqual(st, UNSUPPORTED, "variant %d must refuse cols %d" % (v, cols))
                                continue
                            self.assertEqual(st, MT_OK, U.last_error())
                            self.assertStatus(LIB.mt_synchronize(), MT_OK)
                            self.assertRel(host(out), want_loss, tol, "loss vs cpu")
                            self.assertRel(host(dx), want_dx, tol, "dlogits vs cpu")


if __name__ == "__main__":
    unittest.main()
