"""test_parity - every op of abi/minitorch.h, forward and backward, on MT_CUDA against
the CPU reference backend (and against PyTorch on the same inputs where torch is
importable), in float32 and float64, on random shapes: odd sizes, non-multiples of
32, broadcasting, batched matmul and ~1M-element tensors.

Run by `make test-gpu` (MT_DEVICE=cuda). Without a usable GPU every test is skipped;
MT_PARITY_DEVICE=cpu runs the whole harness CPU-against-CPU, which checks the harness
itself on a machine without a GPU.

Inputs are drawn on the CPU with the library's Philox generator (fresh seeds from the
suite's seed, printed on failure), copied to the GPU with mt_tensor_to. Backward uses
loss = sum(op(inputs) * R) with R random, so every output element carries its own weight.

Tolerances, relative error ||gpu - cpu|| / ||cpu||:
  float32 elementwise 1e-5: each element is within a few ulps (6e-8 each) of the CPU's
  float32 long reductions, matmul, linear, mse and the backward of broadcasts (which
          sum over the broadcast dims) 1e-4: summation order differs (tree vs loop), error
          grows like sqrt(n) * 6e-8 relative to the sum of |terms|; TF32 is off by default
  float64 1e-12 elementwise, 1e-10 for the long ones.
  Full reductions (sum, mean) relative to at least sum |x| / sqrt(n) (sum_scale): a sum of
  random-sign terms that cancels to a small value is compared at the size such a sum has.
  The gradient of a broadcast input likewise, relative to at least the norm of its terms before
  the sum over the broadcast dims (broadcast_floors, where torch is importable); the gradient
  of a unary op relative to at least a tenth of R's norm (UNARY_GRAD_FLOOR).
"""
import array
import math
import os
import sys
import unittest
from ctypes import byref, c_double, c_int64, c_void_p

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import abi_util as U  # noqa: E402
from abi_util import LIB, MT_CPU, MT_CUDA, MT_F32, MT_F64, MT_OK  # noqa: E402

try:
    import numpy as np
except ImportError:          # the harness works without numpy, only slower
    np = None

SELF_TEST = os.environ.get("MT_PARITY_DEVICE") == "cpu"

try:
    import torch
    HAVE_TORCH = bool(torch.cuda.is_available()) or SELF_TEST     # the self-test compares with CPU torch
except ImportError:
    torch = None
    HAVE_TORCH = False

GPU = MT_CPU if SELF_TEST else MT_CUDA
RUN = SELF_TEST or U.HAVE_CUDA
SKIP_WHY = "no usable GPU (mt_cuda_device_count() == 0); MT_PARITY_DEVICE=cpu checks the harness on the CPU"

if HAVE_TORCH and not SELF_TEST:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    TORCH_DEV = "cuda"
else:
    TORCH_DEV = "cpu"

TOL = {MT_F32: 1e-5, MT_F64: 1e-12}
LONG_TOL = {MT_F32: 1e-4, MT_F64: 1e-10}

M = 1 << 20
# Shapes per kind of op: (input shapes, params). params None: the op's own params from its spec.
PARITY_CASES = {
    "binary": [((1000, 1001), (1000, 1001)), ((1024, 1025), (1025,)), ((37, 1, 129), (1, 65, 1)),
               ((33,), ()), ((513, 257), (513, 1)), ((7, 3, 5), (7, 3, 5)), ((3, 1), (1, 2)), ((M + 3,), (1,))],
    "unary": [((1000, 1001),), ((33, 65),), ((7,),), ((),), ((M + 3,),)],
    "reduce": [((M + 7,),), ((1000, 1001),), ((33,),), ((),), ((2048, 2049),)],
    "matmul": [((513, 777), (777, 259)), ((7, 65, 33), (7, 33, 97)), ((5, 31, 17), (17, 45)), ((1, 1), (1, 1)),
               ((1024, 1024), (1024, 1024)), ((129, 1), (1, 129)), ((3, 1000, 3), (3, 3, 1000)), ((4, 2), (2, 4))],
    "linear": [((64, 784), (128, 784), (128,)), ((4, 2), (4, 2), (4,)), ((3, 17, 33), (65, 33), (65,)),
               ((1000, 33), (1, 33), (1,))],
    "mse": [((1000, 1001), (1000, 1001)), ((4, 1), (4, 1)), ((33,), (33,)), ((M + 3,), (M + 3,))],
}
DIM_CASES = [((1000, 1001), 0, 0), ((1000, 1001), 1, 1), ((17, 33, 65), 1, 0), ((17, 33, 65), -1, 1),
             ((17, 33, 65), 0, 1), ((1, 5), 0, 0), ((65537, 3), 0, 0), ((3, 65537), 1, 0),
             ((8192, 384), 0, 0), ((3, 1000, 64), 1, 1), ((2, 50, 8), 1, 0), ((4099, 260), 0, 0),
             ((64, 128), 0, 1)]
SHAPE_CASES = {
    "reshape": [(((1000, 1001),), {"shape": (1001, -1)}), (((17, 33, 65),), {"shape": (33, -1)})],
    "transpose": [(((1000, 1001),), {"d0": 0, "d1": 1}), (((17, 33, 65),), {"d0": 0, "d1": 2}),
                  (((17, 33, 65),), {"d0": -1, "d1": -2}), (((2, 3, 4, 5),), {"d0": 1, "d1": 3})],
    "permute": [(((17, 33, 65),), {"perm": (2, 0, 1)}), (((8, 16, 32, 3),), {"perm": (3, 1, 0, 2)}),
                (((1000, 1001),), {"perm": (1, 0)}),
                # contiguous runs moved as wider words: a head split (runs of 16 elements), runs of 2,
                # and runs of one 16-byte word in float32 (the dim drops: a transpose of words)
                (((2, 5, 3, 4, 16),), {"perm": (2, 0, 3, 1, 4)}), (((6, 7, 2),), {"perm": (1, 0, 2)}),
                (((9, 10, 4),), {"perm": (1, 0, 2)}), (((3, 40, 36, 4),), {"perm": (0, 2, 1, 3)})],
    "identity": [(((1000, 1001),), {}), (((7,),), {}), (((),), {})],
    "softmax": [(((1000, 1001),), {"dim": -1}), (((1000, 1001),), {"dim": 0}), (((17, 33, 65),), {"dim": 1}),
                (((65536, 16),), {"dim": -1}), (((7,),), {"dim": 0})],
    "slice": [(((1000, 1001),), {"dim": 0, "start": 3, "end": -5}), (((17, 33, 65),), {"dim": 2, "start": 1, "end": 64}),
              (((17, 33, 65),), {"dim": 1, "start": -40, "end": 100})],
    "index_select": [(((1000, 1001),), {"idx": [(i * 7919) % 1000 for i in range(777)]}),
                     (((50000, 3),), {"idx": [(i * 37) % 50000 for i in range(65537)]})],   # repeats accumulate
    "ce": [(((4096, 1000),), {"t": [(i * 31) % 1000 for i in range(4096)]}), (((7, 3),), {"t": [0, 1, 2, 0, 1, 2, 0]}),
           (((65536, 10),), {"t": [i % 10 for i in range(65536)]})],
    "max_dim": [(((1000, 1001),), {"dim": 1, "keepdim": 0}), (((17, 33, 65),), {"dim": 0, "keepdim": 1}),
                (((1000, 1001),), {"dim": 0, "keepdim": 0})],
}


def parity_cases(spec):
    """[(shapes, params)] to run for an op."""
    if spec.kind == "reduce_dim":
        return [((s,), {"dim": d, "keepdim": k}) for s, d, k in DIM_CASES]
    if spec.kind in SHAPE_CASES:
        return SHAPE_CASES[spec.kind]
    shapes = PARITY_CASES[spec.kind]
    if spec.name == "linear_nobias":
        shapes = [s[:2] for s in shapes]
    variants = []
    for _, p in spec.cases:
        if p not in variants:
            variants.append(p)
    # every shape for the first variant (e.g. pow 0.5); the small shapes for the others
    return [(s, variants[0]) for s in shapes] + \
        [(s, p) for p in variants[1:] for s in shapes if max(U.numel(x) for x in s) < 100000]


def host_array(h):
    """The tensor's elements as an array.array (copied to the host)."""
    n, dt = U.numel_of(h), U.dtype_of(h)
    buf = array.array(U.TYPECODE[dt], bytes(n * U.DTYPE_SIZES[dt]))
    U.check(LIB.mt_tensor_copy_to_host(h, c_void_p(U.buffer_ptr(buf)), n * U.DTYPE_SIZES[dt]),
            "mt_tensor_copy_to_host")
    return buf


def _as_f64(v):
    if isinstance(v, array.array):
        return v if v.typecode == "d" else array.array("d", v)
    if np is not None and isinstance(v, np.ndarray):
        return array.array("d", v.astype(np.float64).tobytes())
    return array.array("d", v)


def rel_err(got, want, floor=0.0):
    """||got - want|| / max(||want||, floor) over two sequences; NaN anywhere gives NaN (a failure).

    numpy when present, else torch on the CPU, else the library's float64 CPU reference
    ops (a Python loop over millions of elements would dominate the run)."""
    if np is not None:
        g = np.asarray(got, dtype=np.float64).ravel()
        w = np.asarray(want, dtype=np.float64).ravel()
        assert g.shape == w.shape, (g.shape, w.shape)
        d, n = float(np.linalg.norm(g - w)), float(np.linalg.norm(w))
    elif torch is not None:
        g = torch.as_tensor(_as_f64(got), dtype=torch.float64) if not torch.is_tensor(got) else got.double()
        w = torch.as_tensor(_as_f64(want), dtype=torch.float64) if not torch.is_tensor(want) else want.double()
        assert g.shape == w.shape, (g.shape, w.shape)
        d, n = float(torch.linalg.vector_norm(g - w)), float(torch.linalg.vector_norm(w))
    else:
        g, w = _as_f64(got), _as_f64(want)
        assert len(g) == len(w), (len(g), len(w))
        if not len(w):
            return 0.0
        hg = U.from_list_buffer(g, (len(g),), MT_F64, MT_CPU)
        hw = U.from_list_buffer(w, (len(w),), MT_F64, MT_CPU)
        prev = LIB.mt_set_grad_enabled(0)
        try:
            hs = [U.call("mt_sub", hg, hw)]
            hs.append(U.call("mt_mul", hs[0], hs[0]))
            hs.append(U.call("mt_sum", hs[1]))
            hs.append(U.call("mt_mul", hw, hw))
            hs.append(U.call("mt_sum", hs[3]))
            d, n = math.sqrt(U.item_of(hs[2])), math.sqrt(U.item_of(hs[4]))
        finally:
            LIB.mt_set_grad_enabled(prev)
            for h in [hg, hw] + hs:
                U.release(h)
    n = max(n, floor)
    return d / n if n > 0 else d


def sum_scale(values, mean):
    """The size of a sum of len(values) terms of random sign: sum |x| / sqrt(n) (over n again for a
    mean). A full reduction's error is measured against at least this: when a draw's sum cancels
    to a small value, the CPU reference's own rounding (one long loop) is no longer below 1e-10 of
    it, though far below 1e-10 of the terms. So is nll_loss's, a mean of the picked inputs: torch's
    float32 reduction of 65536 of them differed from it by 3e-4 of a draw that cancelled."""
    n = len(values)
    if not n:
        return 0.0
    total = float(np.abs(np.asarray(values, dtype=np.float64)).sum()) if np is not None else math.fsum(map(abs, values))
    return total / math.sqrt(n) / (n if mean else 1)


# The gradient of a unary op is measured against at least this fraction of the upstream gradient's
# norm. tanh' = 1 - y^2 and sigmoid' = y (1 - y) are computed from the output y, so where y is
# near 1 one ulp of y between the devices' tanh is 2 eps y^2 / (1 - y^2) of the derivative: at
# x = 3 (a scalar draw of randn, 0.3% of them) that is 1.2e-5, above float32's 1e-5. Measured
# against |R| instead, the same ulp is 1.2e-6, and 1e-5 allows about eight of them. Over a whole
# tensor of randn inputs the derivative's norm is above this floor (sigmoid' averages about 0.2
# of |R|), so it only acts where the draw makes the derivative itself small.
UNARY_GRAD_FLOOR = 0.1


def norm(values):
    if np is not None:
        return float(np.linalg.norm(np.asarray(values, dtype=np.float64)))
    return math.sqrt(math.fsum(x * x for x in values))


def broadcast_floors(spec, shapes, params, cpu_inputs, ref):
    """Per input of a broadcasting binary op, the size its gradient has before the sum over the
    broadcast dims: ||dL/d(input expanded to the output's shape)||, from torch in float64 on the
    CPU (0 without torch, or for an input of the output's shape). Like sum_scale for the full
    reductions: the gradient of a broadcast input is a sum of random-sign terms, and where a draw's
    sum cancels to a small value (d/db of a / b with b a scalar, say) its rounding is compared at
    the size of the terms, not of what is left of them."""
    if torch is None or not spec.grad:
        return [0.0] * len(shapes)
    out_shape = tuple(ref["shape"])
    def f64(values, shape):
        return torch.frombuffer(bytearray(_as_f64(values).tobytes()), dtype=torch.float64).reshape(tuple(shape))
    full = [f64(host_array(h), s).expand(out_shape).clone().requires_grad_(True) for h, s in zip(cpu_inputs, shapes)]
    r = f64(ref["r"], out_shape)
    (spec.torch(torch, full, params) * r).sum().backward()
    return [float(torch.linalg.vector_norm(t.grad)) if tuple(s) != out_shape else 0.0
            for t, s in zip(full, shapes)]


def torch_values(t):
    """A torch tensor's values as float64 on the host, in the form rel_err reads fastest."""
    t = t.detach().to("cpu", torch.float64).reshape(-1)
    return t.numpy() if np is not None else t


def torch_tensor(host, shape, dtype, requires_grad):
    tdt = torch.float32 if dtype == MT_F32 else torch.float64
    t = torch.frombuffer(bytearray(host.tobytes()), dtype=tdt).reshape(tuple(shape)).to(TORCH_DEV)
    return t.requires_grad_(requires_grad)


@unittest.skipUnless(RUN, SKIP_WHY)
class ParityCase(U.ABITestCase):
    DEV = GPU

    def setUp(self):
        super().setUp()
        self.f64_on_gpu = U.device_supports(MT_F64, GPU)

    def dtypes(self):
        return (MT_F32, MT_F64) if self.f64_on_gpu else (MT_F32,)

    def random_cpu(self, shape, domain, dtype):
        """A CPU tensor of random values in the domain (owned by the caller)."""
        seed = c_int64(self.rng.randrange(1 << 31))
        sa, nd = U.shape_array(shape), len(shape)
        if domain in ("pos", "nonzero"):           # uniform [0.5, 2)
            u = U.call("mt_tensor_rand", sa, nd, seed, dtype, MT_CPU)
            v = U.call("mt_mul_scalar", u, c_double(1.5))
            w = U.call("mt_add_scalar", v, c_double(0.5))
            U.release(u)
            U.release(v)
            return w
        return U.call("mt_tensor_randn", sa, nd, seed, dtype, MT_CPU)

    def assertRel(self, got, want, tol, what, floor=0.0):
        e = rel_err(got, want, floor)
        if not e < tol:
            self.fail("%s: relative error %.3g >= %g" % (what, e, tol))


class TestOpParity(ParityCase):
    def run_device(self, spec, cpu_inputs, params, device, r_seed):
        """Forward and (for differentiable ops) backward on one device; returns host arrays.
        Releases everything it made, so that a long table of cases does not pile up memory."""
        leaves, made = [], []
        try:
            for t in cpu_inputs:
                leaf = U.call("mt_tensor_clone", t) if device == MT_CPU else U.call("mt_tensor_to", t, device)
                leaves.append(leaf)
                if spec.grad:
                    U.set_requires_grad(leaf, 1)
            out = spec.call(leaves, params)
            made.append(out)
            res = {"out": host_array(out), "shape": U.shape_of(out), "grads": []}
            if spec.grad:
                oshape = U.shape_of(out)
                r_cpu = U.call("mt_tensor_randn", U.shape_array(oshape), len(oshape), c_int64(r_seed),
                               U.dtype_of(out), MT_CPU)
                made.append(r_cpu)
                r = U.call("mt_tensor_to", r_cpu, U.device_of(out))
                made.append(r)
                prod = U.call("mt_mul", out, r)
                made.append(prod)
                loss = U.call("mt_sum", prod)
                made.append(loss)
                self.assertStatus(LIB.mt_backward(loss), MT_OK)
                for leaf in leaves:
                    g = U.grad_of(leaf)
                    self.assertIsNotNone(g, "%s: no gradient on device %d" % (spec.name, device))
                    made.append(g)
                    res["grads"].append(host_array(g))
                    self.assertEqual(U.device_of(g), device)
                res["r"] = host_array(r)
            return res
        finally:
            LIB.mt_tape_clear()
            for h in made + leaves:
                U.release(h)

    def check(self, spec, shapes, params, dtype):
        what = "%s%s %s %s" % (spec.name, tuple(shapes), params or "", U.DTYPE_NAMES[dtype])
        cpu_inputs = [self.random_cpu(s, d, dtype) for s, d in zip(shapes, spec.domains)]
        try:
            self.check_inputs(spec, shapes, params, dtype, cpu_inputs, what)
        finally:
            for h in cpu_inputs:
                U.release(h)

    def check_inputs(self, spec, shapes, params, dtype, cpu_inputs, what):
        r_seed = self.rng.randrange(1 << 31)
        ref = self.run_device(spec, cpu_inputs, params, MT_CPU, r_seed)
        gpu = self.run_device(spec, cpu_inputs, params, GPU, r_seed)
        broadcast = spec.kind == "binary" and tuple(shapes[0]) != tuple(shapes[1])
        ftol = (LONG_TOL if spec.long else TOL)[dtype]
        # gradients that sum many contributions: broadcasts, repeated indices
        btol = (LONG_TOL if spec.long or broadcast or spec.kind == "index_select" else TOL)[dtype]
        self.assertEqual(gpu["shape"], ref["shape"], what + ": output shape")
        if spec.kind == "reduce":
            floor = sum_scale(host_array(cpu_inputs[0]), spec.name == "mean")
        elif spec.name == "nll_loss":    # the mean of the picked inputs, of random sign here
            x, c = host_array(cpu_inputs[0]), shapes[0][-1]
            floor = sum_scale([x[i * c + t] for i, t in enumerate(params["t"]) if t >= 0], True)
        else:
            floor = 0.0
        self.assertRel(gpu["out"], ref["out"], ftol, what + ": forward, device vs cpu", floor)
        if broadcast:
            gfloors = broadcast_floors(spec, shapes, params, cpu_inputs, ref)
        elif spec.kind == "unary" and ref["grads"]:
            gfloors = [UNARY_GRAD_FLOOR * norm(ref["r"])]
        else:
            gfloors = [0.0] * len(ref["grads"])
        for i, (g, c) in enumerate(zip(gpu["grads"], ref["grads"])):
            self.assertRel(g, c, btol, "%s: d/d input %d, device vs cpu" % (what, i), gfloors[i])
        if HAVE_TORCH:
            self.check_torch(spec, shapes, params, dtype, cpu_inputs, gpu, ftol, btol, what, floor, gfloors)

    def check_torch(self, spec, shapes, params, dtype, cpu_inputs, gpu, ftol, btol, what, floor=0.0, gfloors=None):
        ts = [torch_tensor(host_array(t), s, dtype, spec.grad) for t, s in zip(cpu_inputs, shapes)]
        out = spec.torch(torch, ts, params)
        self.assertEqual(tuple(out.shape), tuple(gpu["shape"]), what + ": shape vs torch")
        self.assertRel(gpu["out"], torch_values(out), ftol, what + ": forward vs torch", floor)
        if spec.grad:
            r = torch_tensor(gpu["r"], gpu["shape"], dtype, False).to(out.device)
            (out * r).sum().backward()
            for i, (g, t) in enumerate(zip(gpu["grads"], ts)):
                self.assertRel(g, torch_values(t.grad), btol, "%s: d/d input %d vs torch" % (what, i),
                               gfloors[i] if gfloors else 0.0)

    def test_every_op(self):
        for spec in U.OP_SPECS:
            for shapes, params in parity_cases(spec):
                for dtype in self.dtypes():
                    with self.subTest(op=spec.name, shapes=shapes, params=params, dtype=U.DTYPE_NAMES[dtype]):
                        self.check(spec, shapes, params, dtype)


class TestDeviceParity(ParityCase):
    def test_rand_same_on_every_device(self):
        for fn, tol in (("mt_tensor_rand", 1e-7), ("mt_tensor_randn", 1e-6)):
            for dtype in self.dtypes():
                shape = U.shape_array((M + 5,))
                a = self.keep(U.call(fn, shape, 1, c_int64(1234), dtype, GPU))
                b = self.keep(U.call(fn, shape, 1, c_int64(1234), dtype, MT_CPU))
                self.assertRel(host_array(a), host_array(b), tol, "%s %s" % (fn, U.DTYPE_NAMES[dtype]))

    def test_copies(self):
        n = M + 11
        src = self.keep(U.call("mt_tensor_randn", U.shape_array((n,)), 1, c_int64(5), MT_F32, MT_CPU))
        want = host_array(src)
        g = self.keep(U.call("mt_tensor_to", src, GPU))
        self.assertEqual(host_array(g), want)
        back = self.keep(U.call("mt_tensor_to", g, MT_CPU))
        self.assertEqual(host_array(back), want)
        c = self.keep(U.call("mt_tensor_clone", g))
        self.assertEqual(host_array(c), want)
        for dt in (MT_F64, MT_F32):
            cast = self.keep(U.call("mt_tensor_cast", g, dt))
            self.assertEqual(list(host_array(cast)), list(want))
        fill = self.keep(U.call("mt_tensor_full", U.shape_array((1000, 1001)), 2, c_double(3.14), MT_F32, GPU))
        self.assertEqual(set(host_array(fill)), {array.array("f", [3.14])[0]})
        if GPU == MT_CUDA:
            p, q = c_void_p(), c_void_p()
            self.assertStatus(LIB.mt_malloc(byref(p), n * 4, GPU), MT_OK)
            self.addCleanup(LIB.mt_free, p, GPU)
            self.assertStatus(LIB.mt_malloc(byref(q), n * 4, GPU), MT_OK)
            self.addCleanup(LIB.mt_free, q, GPU)
            self.assertStatus(LIB.mt_memcpy_h2d(p, c_void_p(U.buffer_ptr(want)), n * 4), MT_OK)
            self.assertStatus(LIB.mt_memcpy_d2d(q, p, n * 4), MT_OK)
            out = array.array("f", bytes(n * 4))
            self.assertStatus(LIB.mt_memcpy_d2h(c_void_p(U.buffer_ptr(out)), q, n * 4), MT_OK)
            self.assertEqual(out, want)
            blob = self.keep(U.call("mt_tensor_from_blob", q, U.shape_array((n,)), 1, MT_F32, GPU))
            s = self.keep(U.call("mt_sum", blob))
            self.assertRel([U.item_of(s)], [math.fsum(want)], 1e-4, "sum of a blob tensor")

    def test_sum_gradient_spread_over_any_size(self):
        """The gradient of a sum is its scalar spread over the input (a broadcast of one element,
        16-byte stores with a tail): sizes below, at and past a pack and a tile, 2-D, both dtypes.
        d sum(x * w) / dx = w everywhere; the weight w is drawn, so a stale or zero element fails."""
        for dtype in self.dtypes():
            for shape in ((1,), (3,), (4,), (5,), (7,), (9,), (1023,), (1025,), (3, 5), (257, 2049)):
                x = self.keep(U.call("mt_tensor_randn", U.shape_array(shape), len(shape), c_int64(9), dtype, GPU))
                U.set_requires_grad(x, 1)
                w = self.keep(U.call("mt_tensor_randn", U.shape_array(()), 0, c_int64(10), dtype, GPU))
                s = self.keep(U.call("mt_sum", x))
                loss = self.keep(U.call("mt_mul", s, w))
                self.assertStatus(LIB.mt_backward(loss), MT_OK)
                g = self.keep(U.call("mt_tensor_grad", x))
                want = host_array(w)[0]
                got = host_array(g)
                self.assertEqual(len(got), math.prod(shape))
                self.assertEqual(set(got), {want}, "%s %s" % (U.DTYPE_NAMES[dtype], shape))

    def test_sgd_parity(self):
        """The fused SGD step on the device against the CPU (and torch.optim.SGD)."""
        shapes = [(1000, 1001), (33,), (7, 5), (1,)]
        for dtype in self.dtypes():
            for momentum, wd, nesterov in ((0.0, 0.0, 0), (0.9, 0.01, 0), (0.9, 0.0, 1)):
                with self.subTest(dtype=dtype, momentum=momentum, wd=wd, nesterov=nesterov):
                    self.sgd_case(shapes, dtype, 0.05, momentum, wd, nesterov)

    def sgd_case(self, shapes, dtype, lr, momentum, wd, nesterov, steps=3):
        inits = [self.keep(self.random_cpu(s, "any", dtype)) for s in shapes]
        coefs = [self.keep(self.random_cpu(s, "any", dtype)) for s in shapes]
        finals = {}
        for device in (MT_CPU, GPU):
            params = [self.keep(U.call("mt_tensor_clone", t) if device == MT_CPU else U.call("mt_tensor_to", t, device))
                      for t in inits]
            cs = [self.keep(U.call("mt_tensor_to", c, device)) for c in coefs]
            for p in params:
                U.set_requires_grad(p, 1)
            arr = (c_void_p * len(params))(*params)
            opt = c_void_p()
            self.assertStatus(LIB.mt_optim_sgd(byref(opt), arr, len(params), lr, momentum, wd, nesterov), MT_OK)
            try:
                for _ in range(steps):
                    LIB.mt_optim_zero_grad(opt)
                    loss = None
                    for p, c in zip(params, cs):     # loss = sum_i sum(p_i^2 * c_i)
                        sq = U.call("mt_mul", p, p)
                        term = U.call("mt_mul", sq, c)
                        s = U.call("mt_sum", term)
                        for h in (sq, term):
                            U.release(h)
                        if loss is None:
                            loss = s
                        else:
                            nl = U.call("mt_add", loss, s)
                            U.release(loss)
                            U.release(s)
                            loss = nl
                    self.assertStatus(LIB.mt_backward(loss), MT_OK)
                    U.release(loss)
                    self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
            finally:
                LIB.mt_optim_free(opt)
            finals[device] = [host_array(p) for p in params]
        tol = TOL[dtype] * 10     # three steps of a few roundings each
        for i in range(len(shapes)):
            self.assertRel(finals[GPU][i], finals[MT_CPU][i], tol, "param %d, device vs cpu" % i)
        if HAVE_TORCH:
            tp = [torch_tensor(host_array(t), s, dtype, True) for t, s in zip(inits, shapes)]
            tc = [torch_tensor(host_array(c), s, dtype, False) for c, s in zip(coefs, shapes)]
            opt = torch.optim.SGD(tp, lr=lr, momentum=momentum, weight_decay=wd, nesterov=bool(nesterov))
            for _ in range(steps):
                opt.zero_grad()
                sum((p * p * c).sum() for p, c in zip(tp, tc)).backward()
                opt.step()
            for i, p in enumerate(tp):
                self.assertRel(finals[GPU][i], torch_values(p), tol, "param %d vs torch.optim.SGD" % i)

    def test_xor_training_matches_cpu(self):
        """Linear(2,4) -> Sigmoid -> Linear(4,1), MSE, SGD lr 0.5, 500 steps: device losses follow the CPU's."""
        X = [0, 0, 0, 1, 1, 0, 1, 1]
        Y = [0, 1, 1, 0]
        init = [(0.5, -0.4, 0.3, 0.8, -0.7, 0.2, 0.1, -0.6), (0.1, -0.1, 0.2, -0.2), (0.3, -0.5, 0.7, -0.9), (0.05,)]
        shapes = [(4, 2), (4,), (1, 4), (1,)]
        losses = {}
        for device in (MT_CPU, GPU):
            x = self.tensor(X, (4, 2), MT_F32, device)
            y = self.tensor(Y, (4, 1), MT_F32, device)
            params = [self.tensor(v, s, MT_F32, device, requires_grad=True) for v, s in zip(init, shapes)]
            arr = (c_void_p * 4)(*params)
            opt = c_void_p()
            self.assertStatus(LIB.mt_optim_sgd(byref(opt), arr, 4, 0.5, 0.0, 0.0, 0), MT_OK)
            self.addCleanup(LIB.mt_optim_free, opt)
            trace = []
            for epoch in range(500):
                LIB.mt_optim_zero_grad(opt)
                h = U.call("mt_linear", x, params[0], params[1])
                a = U.call("mt_sigmoid", h)
                p = U.call("mt_linear", a, params[2], params[3])
                loss = U.call("mt_mse_loss", p, y)
                self.assertStatus(LIB.mt_backward(loss), MT_OK)
                self.assertStatus(LIB.mt_optim_step(opt), MT_OK)
                if epoch % 50 == 49:
                    trace.append(U.item_of(loss))
                for t in (h, a, p, loss):
                    U.release(t)
            losses[device] = trace
        self.assertRel(losses[GPU], losses[MT_CPU], 1e-4, "XOR loss trace, device vs cpu")

    def test_no_device_memory_leaks(self):
        """After a burst of ops, forward and backward, mt_live_bytes of the device is back at its start."""
        b0 = LIB.mt_live_bytes(GPU)
        x = U.call("mt_tensor_randn", U.shape_array((513, 257)), 2, c_int64(3), MT_F32, GPU)
        U.set_requires_grad(x, 1)
        hs = [U.call("mt_relu", x)]
        hs.append(U.call("mt_tanh", hs[-1]))
        hs.append(U.call("mt_sum_dim", hs[-1], 0, 0))
        hs.append(U.call("mt_mean", hs[-1]))
        self.assertStatus(LIB.mt_backward(hs[-1]), MT_OK)
        for h in hs:
            U.release(h)
        U.release(x)
        LIB.mt_synchronize()
        self.assertEqual(LIB.mt_live_bytes(GPU), b0)


if __name__ == "__main__":
    unittest.main()
