"""test_classify_parity - the classification family and the gathers, MT_CUDA against the CPU
reference backend (and against PyTorch on the same inputs where torch is importable).

  softmax / log_softmax  widths on both sides of every dispatch boundary of backend/cuda/softmax.cu
                         (sub-warp groups, a warp per row up to 1024 columns, register-cached blocks
                         up to 32768 (16384 in the backward), the online fallback beyond), odd widths
                         (the scalar kernels), a non-last dim, logits of +-1000, rows holding
                         -inf / +inf / NaN (the CPU's rules, NaN for NaN)
  the softmax study      variants 0-5 of mt_study_softmax (an internal hook) in float32, float16
                         and bfloat16, against the CPU reference and torch.softmax (6-10, and the
                         log_softmax hook: tests/gpu/test_bw_variants.py); mt_study_softmax_backward
                         (make bench's forward+backward rows) against the tape's backward in
                         float64 on the CPU for a random dy, softmax and log_softmax
  cross_entropy / nll    forward and d/dlogits from 1 to 50257 classes, an upstream gradient != 1,
                         logits of +-1000, out-of-range targets (the CPU's message, first position)
  max_dim / argmax       ties (the first maximum wins) and NaN (the first NaN wins), inner 1 and > 1,
                         long rows; indices, values and gradients exactly equal to the CPU's
  index_select           repeated indices: the backward's sums are bit-identical to the CPU loop's
                         and from run to run; float16 / int64 / uint8 rows of odd widths
  slice                  every dim, odd offsets (1-, 2-, 4-, 8-, 16-byte copy units), float16 / uint8
  Adam / AdamW           five steps over odd shapes, and 70 tensors (two launches of the fused step)

Run by `make test-gpu` (MT_DEVICE=cuda). Without a usable GPU every test is skipped;
MT_PARITY_DEVICE=cpu runs the harness CPU against CPU (the study hook needs a GPU: skipped).
Inputs come from the library's Philox generator on the CPU (seeds from the suite's seed, printed
on failure) or from Python lists, and are copied to the device with mt_tensor_to.

Tolerances, relative error ||got - ref|| / ||ref||:
  float32 1e-5 (each output is a few ulps from the CPU's double-accumulated value; row sums run
          as trees of <= ~40 sequential terms); 1e-4 for rows over 4096 columns and for Adam after
          five steps (the roundings of m, v and p compound)
  float64 1e-12, 1e-10 for the long rows
  float16 / bfloat16 (the study) 1e-2: the outputs themselves carry 11 / 8 significant bits;
          2e-2 for the backward hook, whose y is rounded to them before dx is formed
Copies (slice, index_select, max values and indices, max/slice gradients) must match exactly.
"""
import array
import ctypes
import math
import os
import sys
import unittest
from ctypes import byref, c_double, c_int32, c_int64, c_void_p

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import abi_util as U  # noqa: E402
from abi_util import LIB, MT_BF16, MT_CPU, MT_CUDA, MT_F16, MT_F32, MT_F64, MT_I64, MT_OK, MT_U8  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

SELF_TEST = os.environ.get("MT_PARITY_DEVICE") == "cpu"
GPU = MT_CPU if SELF_TEST else MT_CUDA
RUN = SELF_TEST or U.HAVE_CUDA
SKIP_WHY = "no usable GPU (mt_cuda_device_count() == 0); MT_PARITY_DEVICE=cpu checks the harness on the CPU"

try:
    import torch
    HAVE_TORCH = bool(torch.cuda.is_available()) or SELF_TEST
except ImportError:
    torch = None
    HAVE_TORCH = False
TORCH_DEV = "cuda" if (HAVE_TORCH and not SELF_TEST) else "cpu"
if HAVE_TORCH and TORCH_DEV == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = False

TOL = {MT_F32: 1e-5, MT_F64: 1e-12}
LONG_TOL = {MT_F32: 1e-4, MT_F64: 1e-10}
HALF_TOL = 1e-2
LONG_ROW = 4096

# The study hook: exported by a CUDA build, not declared in abi/minitorch.h.
STUDY = getattr(LIB, "mt_study_softmax", None)
STUDY_LOG = getattr(LIB, "mt_study_log_softmax", None)
for _hook in (STUDY, STUDY_LOG):
    if _hook is not None:
        _hook.restype = ctypes.c_int
        _hook.argtypes = [c_void_p, c_void_p, c_int64, c_int64, c_int32, c_int32]

# The backward's hook (make bench's softmax forward+backward rows): dx from y and dy.
STUDY_BWD = getattr(LIB, "mt_study_softmax_backward", None)
if STUDY_BWD is not None:
    STUDY_BWD.restype = ctypes.c_int
    STUDY_BWD.argtypes = [c_void_p, c_void_p, c_void_p, c_int64, c_int64, c_int32, c_int32, c_int32]

NAN, INF = float("nan"), float("inf")


def special_rows(rng, cols):
    """Rows of cols random values in [-2, 2) with -inf, +inf and NaN placed as commented."""
    rows = []
    base = lambda: [rng.uniform(-2, 2) for _ in range(cols)]  # noqa: E731
    r = base()
    r[0] = -INF
    r[cols // 2] = -INF
    rows.append(r)                           # some -inf: finite softmax, -inf log_softmax there
    rows.append([-INF] * cols)               # all -inf: NaN everywhere (lse = -inf)
    r = base()
    r[cols - 1] = INF
    rows.append(r)                           # one +inf: NaN there, 0 (-inf) elsewhere
    r = base()
    r[cols // 3] = NAN
    rows.append(r)                           # a NaN: the whole row NaN
    r = [-INF] * cols
    r[cols - 1] = 0.5
    rows.append(r)                           # -inf before the max (the online merge's -inf case)
    r = base()
    r[0] = NAN
    r[-1] = -INF
    rows.append(r)
    r = [-INF] * cols
    for c in range(cols // 2, min(cols, cols // 2 + 8)):
        r[c] = 0.25
    rows.append(r)                           # -inf but for one pack: slices of -inf alone
    return [v for row in rows for v in row], (len(rows), cols)


# ------------------------------------------------------------------ host helpers
def host(h):
    """The tensor's elements as an array.array (float16 / bfloat16 through a float32 cast on the device)."""
    dt = U.dtype_of(h)
    if dt in (MT_F16, MT_BF16):
        f = U.call("mt_tensor_cast", h, MT_F32)
        try:
            return host(f)
        finally:
            U.release(f)
    n = U.numel_of(h)
    size = U.DTYPE_SIZES[dt]
    buf = array.array(U.TYPECODE[dt], bytes(n * size))
    if n:
        U.check(LIB.mt_tensor_copy_to_host(h, c_void_p(U.buffer_ptr(buf)), n * size), "mt_tensor_copy_to_host")
    return buf


def raw(h):
    """The tensor's bytes."""
    nbytes = U.numel_of(h) * U.DTYPE_SIZES[U.dtype_of(h)]
    buf = (ctypes.c_char * max(nbytes, 1))()
    if nbytes:
        U.check(LIB.mt_tensor_copy_to_host(h, buf, nbytes), "mt_tensor_copy_to_host")
    return bytes(buf)[:nbytes]


def rel_err(got, want):
    """||got - want|| / ||want|| (||got - want|| when want is 0); NaN anywhere gives NaN."""
    if np is not None:
        g = np.asarray(got, dtype=np.float64).ravel()
        w = np.asarray(want, dtype=np.float64).ravel()
        assert g.shape == w.shape, (g.shape, w.shape)
        d, n = float(np.linalg.norm(g - w)), float(np.linalg.norm(w))
    else:
        assert len(got) == len(want), (len(got), len(want))
        d = math.sqrt(math.fsum((a - b) * (a - b) for a, b in zip(got, want)))
        n = math.sqrt(math.fsum(b * b for b in want))
    return d / n if n > 0 else d


def same_values(a, b):
    """Element-wise equality with NaN equal to NaN."""
    if len(a) != len(b):
        return False
    return all(x == y or (x != x and y != y) for x, y in zip(a, b))


def torch_from(buf, shape, requires_grad=False):
    dt = torch.float64 if buf.typecode == "d" else (torch.int64 if buf.typecode == "q" else torch.float32)
    t = torch.frombuffer(bytearray(buf.tobytes()), dtype=dt).reshape(tuple(shape)).to(TORCH_DEV)
    return t.requires_grad_(requires_grad)


def torch_host(t):
    t = t.detach().to("cpu", torch.float64).reshape(-1)
    return t.numpy() if np is not None else array.array("d", t.tolist())


def raw_torch(t):
    return t.detach().contiguous().cpu().numpy().tobytes() if np is not None else \
        bytes(t.detach().contiguous().cpu().view(torch.uint8).reshape(-1).tolist())


class Scope:
    """Releases the handles handed to it when the block ends (keeps long case tables from piling up)."""

    def __init__(self):
        self.hs = []

    def __call__(self, h):
        self.hs.append(h)
        return h

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        LIB.mt_tape_clear()
        for h in reversed(self.hs):
            U.release(h)
        self.hs = []
        return False


# ------------------------------------------------------------------ base
@unittest.skipUnless(RUN, SKIP_WHY)
class ClassifyCase(U.ABITestCase):
    DEV = GPU

    def setUp(self):
        super().setUp()
        self.f64 = U.device_supports(MT_F64, GPU)

    def dtypes(self):
        return (MT_F32, MT_F64) if self.f64 else (MT_F32,)

    def seed(self):
        return c_int64(self.rng.randrange(1 << 31))

    def randn(self, s, shape, dtype=MT_F32, scale=1.0):
        """A CPU tensor of normal values times scale."""
        z = U.call("mt_tensor_randn", U.shape_array(shape), len(shape), self.seed(), dtype, MT_CPU)
        if scale == 1.0:
            return s(z)
        out = U.call("mt_mul_scalar", z, c_double(scale))
        U.release(z)
        return s(out)

    def copy_to(self, s, h, device):
        """A fresh leaf copy of CPU tensor h on device (no grad)."""
        return s(U.call("mt_tensor_clone", h) if device == MT_CPU else U.call("mt_tensor_to", h, device))

    def backward_weighted(self, s, out, r_seed):
        """loss = sum(out * R), R normal from r_seed on out's device; runs backward, returns R (host)."""
        shape = U.shape_of(out)
        r_cpu = s(U.call("mt_tensor_randn", U.shape_array(shape), len(shape), c_int64(r_seed), U.dtype_of(out),
                         MT_CPU))
        r = s(U.call("mt_tensor_to", r_cpu, U.device_of(out))) if U.device_of(out) != MT_CPU else r_cpu
        loss = s(U.call("mt_sum", s(U.call("mt_mul", out, r))))
        self.assertStatus(LIB.mt_backward(loss), MT_OK)
        return host(r_cpu)

    def assertRel(self, got, want, tol, what):
        e = rel_err(got, want)
        if not e < tol:
            self.fail("%s: relative error %.3g >= %g" % (what, e, tol))

    def assertRelScaled(self, got, want, terms, tol, what):
        """|got - want| / max(|want|, |terms|) < tol, norms over the whole tensor."""
        diff = math.sqrt(sum((g - w) ** 2 for g, w in zip(got, want)))
        scale = max(math.sqrt(sum(w * w for w in want)), math.sqrt(sum(t * t for t in terms)))
        e = diff / scale if scale else diff
        if not e < tol:
            self.fail("%s: relative error %.3g >= %g (against the larger of |want| = %.3g and the terms' %.3g)"
                      % (what, e, tol, math.sqrt(sum(w * w for w in want)), math.sqrt(sum(t * t for t in terms))))

    def assertSpecial(self, got, want, tol, what):
        """NaN and infinities at the same places, finite values within tol relative (or absolute near 0)."""
        self.assertEqual(len(got), len(want), what)
        for i, (g, w) in enumerate(zip(got, want)):
            if w != w:
                ok = g != g
            elif math.isinf(w):
                ok = g == w
            else:
                ok = abs(g - w) <= tol * max(1.0, abs(w))
            if not ok:
                self.fail("%s: element %d is %r, the cpu has %r" % (what, i, g, w))


# ------------------------------------------------------------------ softmax
# (rows, cols): sub-warp groups (cols <= 128 in float32), a warp with 2..8 packs per lane, the
# register-cached block (1024 < cols <= 32768; backward <= 16384), the online block beyond,
# and widths that are not multiples of 4 (the scalar warp / block kernels).
SOFTMAX_CASES = [(257, 1), (257, 3), (257, 4), (130, 8), (129, 31), (129, 32), (129, 33), (65, 100), (65, 127),
                 (65, 128), (65, 129), (33, 256), (33, 511), (33, 512), (17, 1000), (17, 1001), (17, 1024),
                 (9, 1025), (9, 1028), (9, 2048), (9, 4096), (5, 4100), (5, 8192), (3, 16384), (3, 16388),
                 (3, 32768), (2, 32772), (2, 40000), (65536, 16), (2048, 1024)]


class TestSoftmax(ClassifyCase):
    def run_softmax(self, x_cpu, shape, dim, log, device, r_seed, grad=True):
        fn = "mt_log_softmax" if log else "mt_softmax"
        with Scope() as s:
            x = self.copy_to(s, x_cpu, device)
            if grad:
                U.set_requires_grad(x, 1)
            y = s(U.call(fn, x, dim))
            self.assertEqual(U.shape_of(y), tuple(shape))
            res = {"y": host(y)}
            if grad:
                res["r"] = self.backward_weighted(s, y, r_seed)
                res["dx"] = host(s(U.grad_of(x)))
            return res

    def check(self, shape, dim, log, dtype, scale=3.0):
        cols = shape[dim]
        tol = (LONG_TOL if cols > LONG_ROW else TOL)[dtype]
        what = "%s%s dim %d %s" % ("log_softmax" if log else "softmax", shape, dim, U.DTYPE_NAMES[dtype])
        with Scope() as s:
            x = self.randn(s, shape, dtype, scale)
            r_seed = self.rng.randrange(1 << 31)
            ref = self.run_softmax(x, shape, dim, log, MT_CPU, r_seed)
            got = self.run_softmax(x, shape, dim, log, GPU, r_seed)
            self.assertRel(got["y"], ref["y"], tol, what + ": forward vs cpu")
            # dx = y * (r - sum(y * r)) (softmax) or r - exp(y) * sum(r) (log_softmax) cancels
            # where one entry dominates a short row; float32 rounds the terms, so the error is
            # measured against the larger of |dx| and the first term's size (|y * r|, or |r|).
            terms = [abs(a) for a in got["r"]] if log else [abs(a * b) for a, b in zip(got["y"], got["r"])]
            self.assertRelScaled(got["dx"], ref["dx"], terms, tol, what + ": backward vs cpu")
            if HAVE_TORCH:
                t = torch_from(host(x), shape, True)
                ty = torch.log_softmax(t, dim) if log else torch.softmax(t, dim)
                self.assertRel(got["y"], torch_host(ty), tol, what + ": forward vs torch")
                (ty * torch_from(got["r"], shape)).sum().backward()
                self.assertRelScaled(got["dx"], torch_host(t.grad), terms, tol, what + ": backward vs torch")

    def test_widths(self):
        for rows, cols in SOFTMAX_CASES:
            for dtype in self.dtypes():
                for log in (False, True):
                    with self.subTest(rows=rows, cols=cols, log=log, dtype=U.DTYPE_NAMES[dtype]):
                        self.check((rows, cols), 1, log, dtype)

    def test_other_dims(self):
        for shape, dim in (((17, 33, 65), 1), ((17, 33, 65), 0), ((1000, 1001), 0), ((7,), 0), ((5, 4, 3, 2), 2)):
            for log in (False, True):
                with self.subTest(shape=shape, dim=dim, log=log):
                    self.check(shape, dim, log, MT_F32)

    def test_large_logits(self):
        """Logits of +-1000 (and a spread of 2000 within a row) stay finite, on every path."""
        for cols in (8, 7, 1024, 1023, 2000, 40000):
            rows = 6
            vals = []
            for r in range(rows):
                row = [self.rng.uniform(-3, 3) for _ in range(cols)]
                row[self.rng.randrange(cols)] = 1000.0 * (1 if r % 2 else -1)
                row[self.rng.randrange(cols)] = -1000.0
                if r == 0:
                    row = [v + 1000.0 for v in row]
                vals.extend(row)
            for log in (False, True):
                with self.subTest(cols=cols, log=log), Scope() as s:
                    x = s(U.from_list(vals, (rows, cols), MT_F32, MT_CPU))
                    r_seed = self.rng.randrange(1 << 31)
                    ref = self.run_softmax(x, (rows, cols), 1, log, MT_CPU, r_seed)
                    got = self.run_softmax(x, (rows, cols), 1, log, GPU, r_seed)
                    self.assertTrue(all(math.isfinite(v) for v in got["y"]), "non-finite output")
                    tol = LONG_TOL[MT_F32] if cols > LONG_ROW else TOL[MT_F32]
                    self.assertRel(got["y"], ref["y"], tol, "forward")
                    self.assertRel(got["dx"], ref["dx"], tol, "backward")

    def test_special_values(self):
        """-inf entries, all -inf rows, +inf, NaN: the same NaN / inf pattern as the CPU."""
        for cols in (8, 7, 64, 1024, 1025, 2048, 40000):
            vals, shape = special_rows(self.rng, cols)
            for log in (False, True):
                with self.subTest(cols=cols, log=log), Scope() as s:
                    x = s(U.from_list(vals, shape, MT_F32, MT_CPU))
                    ref = self.run_softmax(x, shape, 1, log, MT_CPU, 0, grad=False)
                    got = self.run_softmax(x, shape, 1, log, GPU, 0, grad=False)
                    self.assertSpecial(got["y"], ref["y"], 1e-5, "%s cols %d" % ("log_softmax" if log else "softmax", cols))


# ------------------------------------------------------------------ the study
STUDY_CASES = [(257, 1), (257, 33), (129, 128), (65, 1000), (33, 1024), (9, 1032), (9, 4096), (3, 16384),
               (3, 32768), (3, 32776), (2, 40000), (1000, 64), (64, 8)]


@unittest.skipUnless(STUDY is not None and not SELF_TEST and U.HAVE_CUDA, "the study hook needs a CUDA build and a GPU")
class TestSoftmaxStudy(ClassifyCase):
    def test_every_variant(self):
        for dtype in (MT_F32, MT_F16, MT_BF16):
            elem = U.DTYPE_SIZES[dtype]
            for rows, cols in STUDY_CASES:
                with Scope() as s:
                    x32 = self.randn(s, (rows, cols), MT_F32, 2.0)
                    xd = s(U.call("mt_tensor_cast", s(U.call("mt_tensor_to", x32, MT_CUDA)), dtype))
                    # the reference: the rounded inputs, float64 on the CPU
                    xr = s(U.call("mt_tensor_to", s(U.call("mt_tensor_cast", xd, MT_F32)), MT_CPU))
                    want = host(s(U.call("mt_softmax", s(U.call("mt_tensor_cast", xr, MT_F64)), 1)))
                    twant = None
                    if HAVE_TORCH:
                        twant = torch_host(torch.softmax(torch_from(host(xr), (rows, cols)), 1))
                    for variant in range(6):
                        with self.subTest(dtype=U.DTYPE_NAMES[dtype], rows=rows, cols=cols, variant=variant):
                            y = s(U.call("mt_tensor_full", U.shape_array((rows, cols)), 2, c_double(NAN), dtype, MT_CUDA))
                            st = STUDY(c_void_p(U.data_ptr_of(y)), c_void_p(U.data_ptr_of(xd)), rows, cols, dtype, variant)
                            vec = dtype != MT_F64 and (cols * elem) % 16 == 0
                            if variant in (4, 5) and not vec:
                                self.assertEqual(st, U.MT_ERR_UNSUPPORTED,
                                                 "variant %d must refuse cols %d" % (variant, cols))
                                continue
                            self.assertEqual(st, MT_OK, "mt_study_softmax returned %d" % st)
                            self.assertStatus(LIB.mt_synchronize(), MT_OK)
                            got = host(y)
                            tol = HALF_TOL if dtype != MT_F32 else (LONG_TOL if cols > LONG_ROW else TOL)[MT_F32]
                            self.assertRel(got, want, tol, "study vs cpu")
                            if twant is not None:
                                self.assertRel(got, twant, tol, "study vs torch")

    def test_special_values_wide(self):
        """The cluster variants (9-12) on rows with -inf, +inf and NaN: the CPU's NaN / inf pattern."""
        for cols in (32768, 40000):
            vals, shape = special_rows(self.rng, cols)
            for log, hook in ((False, STUDY), (True, STUDY_LOG)):
                with Scope() as s:
                    x = s(U.from_list(vals, shape, MT_F32, MT_CPU))
                    want = host(s(U.call("mt_log_softmax" if log else "mt_softmax", x, 1)))
                    xd = s(U.call("mt_tensor_to", x, MT_CUDA))
                    for variant in (0, 9, 10, 11, 12):
                        with self.subTest(cols=cols, log=log, variant=variant):
                            y = s(U.call("mt_tensor_full", U.shape_array(shape), 2, c_double(0.0), MT_F32, MT_CUDA))
                            st = hook(c_void_p(U.data_ptr_of(y)), c_void_p(U.data_ptr_of(xd)), shape[0], cols, MT_F32,
                                      variant)
                            # a block holds at most 256 threads x 8 packs of its row's K-th; 11 and 12
                            # (one exchange) take rows of exactly K x 256 threads x 1, 2, 4 or 8 packs
                            k = 8 if variant in (9, 12) else 4
                            if variant >= 11:
                                fits = any(cols // 4 == k * 256 * pl and cols % 4 == 0 for pl in (1, 2, 4, 8))
                            else:
                                fits = variant == 0 or -(-cols // 4 // k) <= 256 * 8
                            if not fits:
                                self.assertEqual(st, U.MT_ERR_UNSUPPORTED, "variant %d must refuse" % variant)
                                continue
                            self.assertEqual(st, MT_OK, U.last_error())
                            self.assertStatus(LIB.mt_synchronize(), MT_OK)
                            self.assertSpecial(host(y), want, 1e-5, "variant %d" % variant)

    def test_bad_arguments(self):
        with Scope() as s:
            x = s(U.call("mt_tensor_zeros", U.shape_array((4, 8)), 2, MT_F32, MT_CUDA))
            p = c_void_p(U.data_ptr_of(x))
            self.assertEqual(STUDY(p, p, 4, 8, MT_F32, 13), U.MT_ERR_INVALID_ARGUMENT)
            self.assertEqual(STUDY(p, p, -1, 8, MT_F32, 0), U.MT_ERR_INVALID_ARGUMENT)
            self.assertEqual(STUDY(p, p, 4, 8, MT_I64, 0), U.MT_ERR_DTYPE)
            self.assertEqual(STUDY(p, p, 0, 8, MT_F32, 0), MT_OK)

    def test_backward_hook(self):
        """mt_study_softmax_backward, which make bench's forward+backward rows time, and its
        variants (0 production, 1 the uncached rows, 2 / 3 clusters of 4 / 8 blocks per row, 4-6 the
        register-cached warp rows in other blocks, 7-9 the cached block per row in small blocks, 10 /
        11 clusters of 4 / 8 blocks with one exchange, 12 the cached block per row of up to 1024
        threads): dx for
        a random dy against the tape's backward of loss = (y * dy).sum() in float64 on the CPU, from
        the same rounded inputs; float32, float16 and bfloat16, softmax and log_softmax, the study's
        shapes (warp rows, block rows, tails, unaligned widths)."""
        if STUDY_BWD is None:
            self.skipTest("the library has no mt_study_softmax_backward")
        for log in (0, 1):
            op = "mt_log_softmax" if log else "mt_softmax"
            for dtype in (MT_F32, MT_F16, MT_BF16):
                elem = U.DTYPE_SIZES[dtype]
                for rows, cols in STUDY_CASES:
                    with Scope() as s:
                        # the device's inputs, then the reference on their rounded values
                        xd, dyd = [s(U.call("mt_tensor_cast", s(U.call("mt_tensor_to", self.randn(s, (rows, cols),
                                                                                         MT_F32, scale), MT_CUDA)),
                                            dtype)) for scale in (2.0, 1.0)]
                        x64, dy64 = [s(U.call("mt_tensor_cast", s(U.call("mt_tensor_to", s(U.call(
                            "mt_tensor_cast", h, MT_F32)), MT_CPU)), MT_F64)) for h in (xd, dyd)]
                        U.set_requires_grad(x64, 1)
                        loss = s(U.call("mt_sum", s(U.call("mt_mul", s(U.call(op, x64, 1)), dy64))))
                        self.assertStatus(LIB.mt_backward(loss), MT_OK)
                        want = host(s(U.call("mt_tensor_grad", x64)))
                        yd = s(U.call(op, xd, 1))
                        # y itself is rounded to the dtype before the backward reads it
                        tol = 2e-2 if dtype != MT_F32 else (LONG_TOL if cols > LONG_ROW else TOL)[MT_F32]
                        for variant in range(13):
                            with self.subTest(log=log, dtype=U.DTYPE_NAMES[dtype], rows=rows, cols=cols,
                                              variant=variant):
                                dx = s(U.call("mt_tensor_full", U.shape_array((rows, cols)), 2, c_double(NAN), dtype,
                                              MT_CUDA))
                                st = STUDY_BWD(c_void_p(U.data_ptr_of(dx)), c_void_p(U.data_ptr_of(yd)),
                                               c_void_p(U.data_ptr_of(dyd)), rows, cols, dtype, log, variant)
                                # the cluster variants (Hopper, as make test-gpu's GPUs): 16-byte rows
                                # wider than 1024 columns whose K-th fits 256 threads x 8 packs; the
                                # cached warp rows: 16-byte rows up to 1024 columns; the small cached
                                # blocks: 16-byte rows of at most 64 / 128 / 256 threads x 16384 / 1024
                                # columns' packs; the one-exchange clusters: exact fits; the
                                # cached block of up to 1024 threads: 16-byte rows up to 16384 columns
                                packs = cols * elem // 16
                                vec = (cols * elem) % 16 == 0
                                if variant in (2, 3):
                                    slice_ = math.ceil(packs / (4 if variant == 2 else 8))
                                    takes = vec and cols > 1024 and slice_ <= 256 * 8
                                elif variant in (4, 5, 6):
                                    takes = vec and cols <= 1024
                                elif variant in (10, 11):  # exact fits: K x 256 threads x 1, 2, 4, 8 packs
                                    per = (4 if variant == 10 else 8) * 256
                                    takes = vec and packs % per == 0 and packs // per in (1, 2, 4, 8)
                                elif variant == 12:
                                    takes = vec and cols <= 16384
                                elif variant >= 7:
                                    takes = vec and packs <= (64 << (variant - 7)) * (16384 // (1024 * (16 // elem)))
                                else:
                                    takes = True
                                if variant >= 2 and not takes:
                                    self.assertEqual(st, U.MT_ERR_UNSUPPORTED,
                                                     "variant %d must refuse %d columns" % (variant, cols))
                                    continue
                                self.assertEqual(st, MT_OK, U.last_error())
                                self.assertStatus(LIB.mt_synchronize(), MT_OK)
                                self.assertRel(host(dx), want, tol, "%s backward variant %d vs cpu float64" %
                                               (op, variant))
        with Scope() as s:
            x = s(U.call("mt_tensor_zeros", U.shape_array((4, 8)), 2, MT_F32, MT_CUDA))
            p = c_void_p(U.data_ptr_of(x))
            self.assertEqual(STUDY_BWD(p, p, p, 4, 8, MT_F32, 2, 0), U.MT_ERR_INVALID_ARGUMENT)
            self.assertEqual(STUDY_BWD(p, p, p, 4, 8, MT_F32, 0, 13), U.MT_ERR_INVALID_ARGUMENT)
            self.assertEqual(STUDY_BWD(p, p, p, -1, 8, MT_F32, 0, 0), U.MT_ERR_INVALID_ARGUMENT)
            self.assertEqual(STUDY_BWD(None, p, p, 4, 8, MT_F32, 0, 0), U.MT_ERR_INVALID_ARGUMENT)
            self.assertEqual(STUDY_BWD(p, p, p, 4, 8, MT_I64, 0, 0), U.MT_ERR_DTYPE)
            self.assertEqual(STUDY_BWD(p, p, p, 0, 8, MT_F32, 0, 0), MT_OK)


# ------------------------------------------------------------------ cross-entropy and nll
CE_CASES = [(4096, 1000), (7, 3), (65536, 10), (64, 10), (33, 65), (8, 50257), (16, 4096), (1, 1), (5, 2049),
            (3, 2048), (300, 1024), (2, 40000), (1001, 128), (77, 256), (129, 512)]


class TestCrossEntropy(ClassifyCase):
    def run_loss(self, fn, x_cpu, t_vals, device, upstream=2.5):
        with Scope() as s:
            x = self.copy_to(s, x_cpu, device)
            U.set_requires_grad(x, 1)
            t = s(U.from_list(t_vals, (len(t_vals),), MT_I64, device))
            loss = s(U.call(fn, x, t))
            value = U.item_of(loss)
            scaled = s(U.call("mt_mul_scalar", loss, c_double(upstream)))  # dloss = 2.5 at the kernel
            self.assertStatus(LIB.mt_backward(scaled), MT_OK)
            return value, host(s(U.grad_of(x)))

    def check(self, fn, rows, cols, dtype, x_cpu, t_vals, what, tol=None):
        tol = tol or (LONG_TOL if cols > LONG_ROW else TOL)[dtype]
        ref_l, ref_g = self.run_loss(fn, x_cpu, t_vals, MT_CPU)
        got_l, got_g = self.run_loss(fn, x_cpu, t_vals, GPU)
        self.assertRel([got_l], [ref_l], tol, what + ": loss vs cpu")
        self.assertRel(got_g, ref_g, tol, what + ": d/dlogits vs cpu")
        if HAVE_TORCH:
            tx = torch_from(host(x_cpu), (rows, cols), True)
            tt = torch.tensor(t_vals, dtype=torch.int64, device=TORCH_DEV)
            f = torch.nn.functional.cross_entropy if fn == "mt_cross_entropy" else torch.nn.functional.nll_loss
            tl = f(tx, tt)
            (tl * 2.5).backward()
            # nll's terms are the inputs themselves, of either sign: against their mean size, since
            # torch sums them in float32 and a mean near 0 makes its relative error large.
            xs = host(x_cpu)
            terms = [abs(xs[r * cols + t]) / rows for r, t in enumerate(t_vals)]
            self.assertRelScaled([got_l], [float(tl)], [sum(terms)], tol, what + ": loss vs torch")
            self.assertRel(got_g, torch_host(tx.grad), tol, what + ": d/dlogits vs torch")

    def test_shapes(self):
        for rows, cols in CE_CASES:
            for dtype in self.dtypes():
                for fn in ("mt_cross_entropy", "mt_nll_loss"):
                    with self.subTest(fn=fn, rows=rows, cols=cols, dtype=U.DTYPE_NAMES[dtype]), Scope() as s:
                        x = self.randn(s, (rows, cols), dtype, 3.0)
                        t = [self.rng.randrange(cols) for _ in range(rows)]
                        self.check(fn, rows, cols, dtype, x, t, "%s(%d, %d)" % (fn, rows, cols))

    def test_large_logits(self):
        for cols in (10, 1024, 5000):
            rows = 8
            vals = []
            for r in range(rows):
                row = [self.rng.uniform(-1, 1) + (1000.0 if r % 2 else -1000.0) for _ in range(cols)]
                row[self.rng.randrange(cols)] += 30.0
                vals.extend(row)
            t = [self.rng.randrange(cols) for _ in range(rows)]
            with self.subTest(cols=cols), Scope() as s:
                x = s(U.from_list(vals, (rows, cols), MT_F32, MT_CPU))
                loss, grad = self.run_loss("mt_cross_entropy", x, t, GPU)
                self.assertTrue(math.isfinite(loss) and all(math.isfinite(g) for g in grad), "non-finite result")
                # The saved float32 lse of a +-1000 row is rounded to ulp(1000) = 6e-5 on both devices
                # (each rounds its own), and exp(x - lse) inherits that: 1e-4 (torch does not round it).
                self.check("mt_cross_entropy", rows, cols, MT_F32, x, t, "cross_entropy +-1000 cols %d" % cols,
                           tol=LONG_TOL[MT_F32])

    def test_out_of_range_targets(self):
        """The first bad position is named, with the CPU's message, for every op that checks indices."""
        cases = [("mt_cross_entropy", (6, 5), [0, 4, 7, 1, -1, 2], 2),
                 ("mt_nll_loss", (6, 5), [0, 1, 2, 3, 4, -3], 5),
                 ("mt_index_select", (100, 3), [(i * 7) % 100 for i in range(100000)], 70000)]
        for fn, shape, idx, first in cases:
            if fn == "mt_index_select":
                idx = list(idx)
                idx[70000] = 100
                idx[99999] = -1
            msgs = {}
            with self.subTest(fn=fn), Scope() as s:
                x_cpu = self.randn(s, shape)
                for device in (MT_CPU, GPU):
                    x = self.copy_to(s, x_cpu, device)
                    t = s(U.from_list(idx, (len(idx),), MT_I64, device))
                    out = c_void_p()
                    st = getattr(LIB, fn)(byref(out), x, t)
                    if st == MT_OK:
                        s(out.value)
                    self.assertStatus(st, U.MT_ERR_INVALID_ARGUMENT, fn, contains=("position %d" % first,))
                    msgs[device] = U.last_error()
                self.assertEqual(msgs[GPU], msgs[MT_CPU])


# ------------------------------------------------------------------ max / argmax
MAX_CASES = [((300, 257), 1), ((300, 257), 0), ((17, 33, 65), 1), ((17, 33, 65), 2), ((17, 33, 65), 0),
             ((3, 5000), 1), ((5000, 3), 0), ((2, 70000), 1), ((1, 1), 0), ((4, 2000), -1), ((70000,), 0),
             ((4096, 10), 1)]


class TestMax(ClassifyCase):
    def values(self, shape, nan_rate):
        """Quantized values (many ties), NaN at a few places."""
        n = U.numel(shape)
        vals = [self.rng.randrange(-6, 7) * 0.5 for _ in range(n)]
        for _ in range(int(n * nan_rate)):
            vals[self.rng.randrange(n)] = NAN
        return vals

    def run_max(self, x_cpu, dim, keepdim, device, r_seed):
        with Scope() as s:
            x = self.copy_to(s, x_cpu, device)
            U.set_requires_grad(x, 1)
            v, i = c_void_p(), c_void_p()
            self.assertStatus(LIB.mt_max_dim(byref(v), byref(i), x, dim, keepdim), MT_OK)
            s(v.value)
            s(i.value)
            am = s(U.call("mt_argmax", x, dim, keepdim))
            res = {"v": host(v.value), "i": host(i.value), "am": host(am), "shape": U.shape_of(v.value)}
            self.backward_weighted(s, v.value, r_seed)
            res["dx"] = host(s(U.grad_of(x)))
            return res

    def test_ties_and_nan(self):
        for shape, dim in MAX_CASES:
            for nan_rate in (0.0, 0.002):
                for dtype in self.dtypes():
                    keepdim = self.rng.randrange(2)
                    with self.subTest(shape=shape, dim=dim, nan=nan_rate, dtype=U.DTYPE_NAMES[dtype]), Scope() as s:
                        x = s(U.from_list(self.values(shape, nan_rate), shape, dtype, MT_CPU))
                        r_seed = self.rng.randrange(1 << 31)
                        ref = self.run_max(x, dim, keepdim, MT_CPU, r_seed)
                        got = self.run_max(x, dim, keepdim, GPU, r_seed)
                        self.assertEqual(got["shape"], ref["shape"])
                        self.assertEqual(list(got["i"]), list(ref["i"]), "indices")
                        self.assertEqual(list(got["am"]), list(ref["i"]), "argmax")
                        self.assertTrue(same_values(got["v"], ref["v"]), "values")
                        self.assertTrue(same_values(got["dx"], ref["dx"]), "gradient")
                        if HAVE_TORCH and nan_rate == 0.0:
                            tv, ti = torch.max(torch_from(host(x), shape), dim, keepdim=bool(keepdim))
                            self.assertEqual(list(got["i"]), [int(k) for k in ti.reshape(-1).tolist()], "indices vs torch")


# ------------------------------------------------------------------ index_select, slice
class TestGathers(ClassifyCase):
    def run_select(self, x_cpu, idx, device, r_seed, grad):
        with Scope() as s:
            x = self.copy_to(s, x_cpu, device)
            if grad:
                U.set_requires_grad(x, 1)
            t = s(U.from_list(idx, (len(idx),), MT_I64, device))
            out = s(U.call("mt_index_select", x, t))
            res = {"out": raw(out), "shape": U.shape_of(out)}
            if grad:
                res["r"] = self.backward_weighted(s, out, r_seed)
                res["dx"] = host(s(U.grad_of(x)))
            return res

    def test_index_select_repeated(self):
        """Repeated indices accumulate in the backward: the same float32 sums as the CPU loop, bit for bit."""
        # (rows_x, cols, n, step): indices are multiples of step, so with step > 1 some rows get none
        # (rows_x <= n takes a block per destination row; those rows' blocks must leave dx alone)
        cases = [(50, 3, 4000, 1), (1000, 1001, 777, 1), (7, 128, 1000, 1), (1, 1, 5, 1), (30, 1, 300, 1),
                 (50000, 3, 65537, 1), (65, 64, 4096, 1), (13, 17, 0, 1), (100, 40, 300, 3), (64, 33, 64, 2)]
        for rows_x, cols, n, step in cases:
            for dtype in self.dtypes():
                with self.subTest(rows_x=rows_x, cols=cols, n=n, step=step, dtype=U.DTYPE_NAMES[dtype]), Scope() as s:
                    x = self.randn(s, (rows_x, cols), dtype)
                    hot = step * self.rng.randrange((rows_x + step - 1) // step)
                    idx = [hot if self.rng.random() < 0.3 else step * self.rng.randrange((rows_x + step - 1) // step)
                           for _ in range(n)]
                    r_seed = self.rng.randrange(1 << 31)
                    ref = self.run_select(x, idx, MT_CPU, r_seed, True)
                    got = self.run_select(x, idx, GPU, r_seed, True)
                    again = self.run_select(x, idx, GPU, r_seed, True)
                    self.assertEqual(got["shape"], ref["shape"])
                    self.assertEqual(got["out"], ref["out"], "forward")
                    self.assertEqual(list(got["dx"]), list(again["dx"]), "backward differs from run to run")
                    self.assertEqual(list(got["dx"]), list(ref["dx"]), "backward differs from the cpu loop's sums")
                    if HAVE_TORCH and n:
                        tx = torch_from(host(x), (rows_x, cols), True)
                        tt = torch.tensor(idx, dtype=torch.int64, device=TORCH_DEV)
                        tout = torch.index_select(tx, 0, tt)
                        self.assertEqual(raw_torch(tout), got["out"], "forward vs torch")
                        (tout * torch_from(got["r"], (n, cols))).sum().backward()
                        # torch's backward adds with atomics in any order: a tolerance, not equality
                        self.assertRel(got["dx"], torch_host(tx.grad), LONG_TOL[dtype], "backward vs torch")

    def test_index_select_dtypes(self):
        for dtype in (MT_F16, MT_I64, MT_U8, MT_F32):
            for rows_x, cols in ((20, 1), (20, 3), (9, 8), (9, 13), (5, 1000)):
                n = 57
                with self.subTest(dtype=U.DTYPE_NAMES[dtype], cols=cols), Scope() as s:
                    x = self.make(s, (rows_x, cols), dtype)
                    idx = [self.rng.randrange(rows_x) for _ in range(n)]
                    ref = self.run_select(x, idx, MT_CPU, 0, False)
                    got = self.run_select(x, idx, GPU, 0, False)
                    self.assertEqual(got["out"], ref["out"])

    def make(self, s, shape, dtype):
        """A CPU tensor of the dtype with varied bytes."""
        n = U.numel(shape)
        if dtype in (MT_I64, MT_U8):
            hi = 256 if dtype == MT_U8 else 1 << 40
            return s(U.from_list([self.rng.randrange(hi) for _ in range(n)], shape, dtype, MT_CPU))
        if dtype in (MT_F16, MT_BF16):
            return s(U.call("mt_tensor_cast", self.randn(s, shape), dtype))
        return self.randn(s, shape, dtype)

    def run_slice(self, x_cpu, dim, start, end, device, r_seed, grad):
        with Scope() as s:
            x = self.copy_to(s, x_cpu, device)
            if grad:
                U.set_requires_grad(x, 1)
            out = s(U.call("mt_slice", x, dim, start, end))
            res = {"out": raw(out), "shape": U.shape_of(out)}
            if grad:
                self.backward_weighted(s, out, r_seed)
                res["dx"] = raw(s(U.grad_of(x)))
            return res

    def test_slice(self):
        cases = [((1000, 1001), 0, 3, -5), ((17, 33, 65), 2, 1, 64), ((17, 33, 65), 1, -40, 100), ((17, 33, 65), 0, 5, 6),
                 ((8, 7, 3), 1, 1, 6), ((64, 128), 1, 4, 68), ((5, 9), 1, 1, 8), ((5, 9), 1, 3, 3), ((3, 4, 5, 6), 3, 2, 5),
                 ((40000,), 0, 1, 39999), ((6, 2), 1, 1, 2)]
        for shape, dim, start, end in cases:
            for dtype in self.dtypes() + (MT_F16, MT_U8, MT_I64):
                grad = dtype in (MT_F32, MT_F64)
                with self.subTest(shape=shape, dim=dim, start=start, end=end, dtype=U.DTYPE_NAMES[dtype]), Scope() as s:
                    x = self.make(s, shape, dtype)
                    r_seed = self.rng.randrange(1 << 31)
                    ref = self.run_slice(x, dim, start, end, MT_CPU, r_seed, grad)
                    got = self.run_slice(x, dim, start, end, GPU, r_seed, grad)
                    self.assertEqual(got["shape"], ref["shape"])
                    self.assertEqual(got["out"], ref["out"], "forward")
                    if grad:
                        self.assertEqual(got["dx"], ref["dx"], "backward")
                    if HAVE_TORCH and dtype in (MT_F32, MT_F64):
                        n = shape[dim]
                        s0, e0, _ = slice(start, end).indices(n)
                        tx = torch_from(host(x), shape)
                        self.assertEqual(raw_torch(torch.narrow(tx, dim, s0, max(0, e0 - s0))), got["out"], "vs torch")


# ------------------------------------------------------------------ Adam
class TestAdam(ClassifyCase):
    def adam_case(self, shapes, dtype, kind, lr, wd, steps=5, betas=(0.9, 0.999), eps=1e-8):
        with Scope() as s:
            inits = [self.randn(s, sh, dtype) for sh in shapes]
            coefs = [self.randn(s, sh, dtype) for sh in shapes]
            finals = {}
            for device in (MT_CPU, GPU):
                params = [self.copy_to(s, t, device) for t in inits]
                cs = [self.copy_to(s, c, device) for c in coefs]
                for p in params:
                    U.set_requires_grad(p, 1)
                arr = (c_void_p * len(params))(*params)
                opt = c_void_p()
                fn = LIB.mt_optim_adamw if kind == "adamw" else LIB.mt_optim_adam
                self.assertStatus(fn(byref(opt), arr, len(params), lr, betas[0], betas[1], eps, wd), MT_OK)
                try:
                    for _ in range(steps):
                        self.assertStatus(LIB.mt_optim_zero_grad(opt), MT_OK)
                        with Scope() as t:                 # loss = sum_i sum(p_i^2 * c_i)
                            terms = [t(U.call("mt_sum", t(U.call("mt_mul", t(U.call("mt_mul", p, p)), c))))
                                     for p, c in zip(params, cs)]
                            loss = terms[0]
                            for term in terms[1:]:
                                loss = t(U.call("mt_add", loss, term))
                            self.assertStatus(LIB.mt_backward(loss), MT_OK)
                        self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
                finally:
                    LIB.mt_optim_free(opt)
                finals[device] = [host(p) for p in params]
            tol = LONG_TOL[dtype]
            for i in range(len(shapes)):
                self.assertRel(finals[GPU][i], finals[MT_CPU][i], tol, "param %d %s vs cpu" % (i, shapes[i]))
            if HAVE_TORCH:
                tp = [torch_from(host(t), sh, True) for t, sh in zip(inits, shapes)]
                tc = [torch_from(host(c), sh) for c, sh in zip(coefs, shapes)]
                cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
                topt = cls(tp, lr=lr, betas=betas, eps=eps, weight_decay=wd)
                for _ in range(steps):
                    topt.zero_grad()
                    sum((p * p * c).sum() for p, c in zip(tp, tc)).backward()
                    topt.step()
                for i, p in enumerate(tp):
                    self.assertRel(finals[GPU][i], torch_host(p), tol, "param %d vs torch.optim.%s" % (i, cls.__name__))

    def test_adam_adamw(self):
        shapes = [(7,), (33, 65), (1000,), (4099,), (64, 1), (1,)]
        for dtype in self.dtypes():
            for kind, wd in (("adam", 0.0), ("adam", 0.05), ("adamw", 0.1)):
                with self.subTest(dtype=U.DTYPE_NAMES[dtype], kind=kind, wd=wd):
                    self.adam_case(shapes, dtype, kind, 0.01, wd)

    def test_many_tensors(self):
        """70 tensors: more than one launch's table (64)."""
        shapes = [(self.rng.randrange(1, 300),) for _ in range(70)] + [(8193,)]
        self.adam_case(shapes, MT_F32, "adamw", 0.003, 0.01, steps=3)


if __name__ == "__main__":
    unittest.main()
