"""test_cast - mt_tensor_cast on the GPU against the CPU backend, for every pair of dtypes.

The CUDA cast converts chunks of up to 8 elements a thread where both buffers are aligned to a
chunk, and element by element otherwise; the CPU backend writes the documented rule out
(float -> integer: truncation, NaN 0, beyond int64 its nearest end, then the low bits; doubles and
integers reach float16 / bfloat16 through float). Both must give the same values, bit for bit
but for NaN's payload (any NaN matches any NaN).

Inputs: fresh random values each run, seeded from MT_TEST_SEED (a failure names it): normal
draws at scales from 1 to 1e20, special values, and integers across int64's range; lengths that
leave every chunk tail (1, 7, 8, 9, 33, 4101, 65539), and views 0, 1 and 3 elements into their
storage (mt_slice of a 1-D tensor is a view), which move the chunked path's pointers off their
alignment. The study hook's variants (mt_study_cast: the element-wise kernel and the chunked ones
at 1, 2 and 4 chunks a thread on either grid) must give production's values, and the chunked ones
must refuse misaligned buffers. Live tensors and device bytes are counted after each test
(abi_util.ABITestCase).

Run by `make test-gpu`; alone: MINITORCH_LIB=build/libminitorch.so python3 -m unittest
tests.gpu.test_cast -v. Without a usable GPU it is skipped.
"""
import array
import ctypes
import math
import os
import struct
import sys
import unittest
from ctypes import c_void_p

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import abi_util as U  # noqa: E402
from abi_util import MT_BF16, MT_CPU, MT_CUDA, MT_F16, MT_F32, MT_F64, MT_I32, MT_I64, MT_U8  # noqa: E402

LIB = U.LIB
DTYPES = (MT_F32, MT_F64, MT_F16, MT_BF16, MT_I32, MT_I64, MT_U8)
LENGTHS = (1, 7, 8, 9, 33, 4101, 65539)
OFFSETS = (0, 1, 3)
FLOATS = (MT_F32, MT_F64, MT_F16, MT_BF16)


def raw(h):
    """The tensor's bytes, copied to the host."""
    n = U.numel_of(h) * U.DTYPE_SIZES[U.dtype_of(h)]
    buf = (ctypes.c_char * max(n, 1))()
    U.check(LIB.mt_tensor_copy_to_host(h, buf, n), "mt_tensor_copy_to_host")
    return bytes(buf[:n])


def decode(b, dtype):
    """Bytes of dtype as Python numbers (float16 / bfloat16 widened exactly)."""
    if dtype == MT_F16:
        return list(struct.unpack("<%de" % (len(b) // 2), b))
    if dtype == MT_BF16:
        return [struct.unpack("<f", struct.pack("<I", u << 16))[0] for u in struct.unpack("<%dH" % (len(b) // 2), b)]
    return list(array.array(U.TYPECODE[dtype], b))


def same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@unittest.skipUnless(U.HAVE_CUDA, "needs a CUDA build and a GPU")
class TestCast(U.ABITestCase):
    def setUp(self):
        super().setUp()
        self.held = []
        self.addCleanup(self.release_held)

    def release_held(self):
        for h in self.held:
            U.release(h)
        self.held = []

    def hold(self, h):
        self.held.append(h)
        return h

    def assertSameValues(self, got, want, dtype, sides):
        """got and want (bytes of dtype) hold the same values, any NaN matching any NaN."""
        if got == want:
            return
        g, w = decode(got, dtype), decode(want, dtype)
        self.assertEqual(len(g), len(w))
        bad = [i for i in range(len(w)) if not same(g[i], w[i])]
        self.assertEqual(bad, [], "first differences (index, %s): %s" % (sides, [(i, g[i], w[i]) for i in bad[:5]]))

    def source(self, rng, n, dtype):
        """n values of dtype on the CPU: random floats (with special values) or integers, made in
        float64 / int64 and cast there."""
        if dtype in FLOATS:
            special = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.5, 255.5, 256.0, -0.75, 3e9, -3e9, 1e20, 2.0 ** 63]
            vals = [rng.choice(special) if rng.random() < 0.05 else rng.gauss(0, 1) * 10 ** rng.randint(0, 20)
                    for _ in range(n)]
            wide = U.from_list(vals, (n,), MT_F64, MT_CPU)
        else:
            ends = [-(1 << 63), (1 << 63) - 1, -1, 0, 255, 256, (1 << 31) - 1, -(1 << 31), 1 << 40]
            vals = [rng.choice(ends) if rng.random() < 0.05 else rng.randint(-(1 << 63), (1 << 63) - 1)
                    if rng.random() < 0.5 else rng.randint(-300, 300) for _ in range(n)]
            wide = U.from_list(vals, (n,), MT_I64, MT_CPU)
        try:
            return self.hold(U.call("mt_tensor_cast", wide, dtype))
        finally:
            U.release(wide)

    def test_every_pair_against_the_cpu(self):
        rng = self.rng
        for src in DTYPES:
            for n in LENGTHS:
                for off in OFFSETS:
                    x_cpu = self.source(rng, n + off, src)
                    x_dev = self.hold(U.call("mt_tensor_to", x_cpu, MT_CUDA))
                    v_cpu = self.hold(U.call("mt_slice", x_cpu, 0, off, n + off))
                    v_dev = self.hold(U.call("mt_slice", x_dev, 0, off, n + off))
                    # the view starts off elements into the device buffer
                    self.assertEqual(U.data_ptr_of(v_dev) - U.data_ptr_of(x_dev), off * U.DTYPE_SIZES[src])
                    for dst in DTYPES:
                        with self.subTest(src=U.DTYPE_NAMES[src], dst=U.DTYPE_NAMES[dst], n=n, offset=off):
                            want = raw(self.hold(U.call("mt_tensor_cast", v_cpu, dst)))
                            got_h = self.hold(U.call("mt_tensor_cast", v_dev, dst))
                            self.assertEqual(U.device_of(got_h), MT_CUDA)
                            self.assertSameValues(raw(got_h), want, dst, "cuda, cpu")
                    self.release_held()

    def test_study_variants(self):
        """mt_study_cast's variants (1 one element a thread, 2-7 chunked) give production's values,
        and the chunked ones refuse buffers off a chunk's alignment; bad arguments are statuses."""
        hook = getattr(LIB, "mt_study_cast", None)
        if hook is None:
            self.skipTest("the library has no mt_study_cast")
        hook.restype, hook.argtypes = ctypes.c_int, [c_void_p, c_void_p, ctypes.c_int64] + [ctypes.c_int32] * 3
        rng = self.rng
        for src in DTYPES:
            for dst in DTYPES:
                if src == dst:
                    continue
                n = rng.choice((7, 4101, 65539))
                x = self.hold(U.call("mt_tensor_to", self.source(rng, n + 1, src), MT_CUDA))
                for off in (0, 1):
                    v = self.hold(U.call("mt_slice", x, 0, off, n + off))
                    want = raw(self.hold(U.call("mt_tensor_cast", v, dst)))
                    out = self.hold(U.call("mt_tensor_zeros", U.shape_array((n + 1,)), 1, dst, MT_CUDA))
                    o = self.hold(U.call("mt_slice", out, 0, off, n + off))
                    chunk = 8 if min(U.DTYPE_SIZES[src], U.DTYPE_SIZES[dst]) <= 2 else \
                        16 // min(U.DTYPE_SIZES[src], U.DTYPE_SIZES[dst])
                    for variant in range(8):
                        with self.subTest(src=U.DTYPE_NAMES[src], dst=U.DTYPE_NAMES[dst], n=n, offset=off,
                                          variant=variant):
                            st = hook(c_void_p(U.data_ptr_of(o)), c_void_p(U.data_ptr_of(v)), n, dst, src, variant)
                            aligned = (U.data_ptr_of(o) % (chunk * U.DTYPE_SIZES[dst]) == 0 and
                                       U.data_ptr_of(v) % (chunk * U.DTYPE_SIZES[src]) == 0)
                            if variant >= 2 and not aligned:
                                self.assertEqual(st, U.MT_ERR_UNSUPPORTED, "variant %d must refuse" % variant)
                                continue
                            self.assertEqual(st, U.MT_OK, U.last_error())
                            LIB.mt_synchronize()
                            self.assertSameValues(raw(o), want, dst, "variant, production")
                self.release_held()
        p = c_void_p(1)
        self.assertEqual(hook(p, p, 8, MT_BF16, MT_F32, 8), U.MT_ERR_INVALID_ARGUMENT)
        self.assertEqual(hook(p, p, -1, MT_BF16, MT_F32, 0), U.MT_ERR_INVALID_ARGUMENT)
        self.assertEqual(hook(None, p, 8, MT_BF16, MT_F32, 0), U.MT_ERR_INVALID_ARGUMENT)
        self.assertEqual(hook(p, p, 8, 99, MT_F32, 0), U.MT_ERR_DTYPE)
        self.assertEqual(hook(p, p, 8, MT_F32, MT_F32, 0), U.MT_ERR_UNSUPPORTED)
        self.assertEqual(hook(p, p, 0, MT_BF16, MT_F32, 0), U.MT_OK)


if __name__ == "__main__":
    unittest.main()
