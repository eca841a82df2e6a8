"""test_abi - the C ABI of libminitorch.so: exports, versions, names, raw memory,
tensor creation and queries, reference counting, views and copies.

Companion suites: test_abi_ops (forward values of every op), test_abi_grad
(gradchecks, tape semantics, optimizer), test_abi_errors (every error class).
The device under test is mt_default_device() (MT_DEVICE=cpu|cuda); the CPU is the
reference where one is needed. Run: python3 -m unittest tests/python/test_abi*.py
"""
import ctypes
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import unittest
from ctypes import byref, c_double, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from abi_util import *  # noqa: E402,F401,F403
import abi_util as U  # noqa: E402


class TestExports(U.ABITestCase):
    def test_every_header_function_is_exported(self):
        missing = [n for n in U.parse_header() if not hasattr(LIB, n)]
        self.assertEqual(missing, [], "functions of abi/minitorch.h missing from %s" % U.lib_path())

    def test_bindings_match_header(self):
        """The ctypes table of abi_util says what the header says (catches header drift); header
        functions newer than the table are declared from the header by abi_util.load()."""
        header = U.parse_header()
        self.assertEqual(sorted(set(U.SIGNATURES) - set(header)), [], "bindings not in the header")
        for name, (ret, params) in header.items():
            if name not in U.SIGNATURES:
                continue
            restype, argtypes = U.SIGNATURES[name]
            self.assertEqual(U.ctype_of_c(ret), restype, "%s returns %s" % (name, ret))
            self.assertEqual([U.ctype_of_c(p) for p in params], argtypes, "%s(%s)" % (name, ", ".join(params)))

    @unittest.skipUnless(shutil.which("nm"), "nm not found")
    def test_only_mt_symbols_exported(self):
        out = subprocess.run(["nm", "-D", "--defined-only", U.lib_path()], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        names = set()
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3:
                names.add(parts[2].split("@")[0])
        allowed_extra = {"_init", "_fini", "_edata", "_end", "__bss_start"}
        stray = sorted(n for n in names if not n.startswith("mt_") and n not in allowed_extra)
        self.assertEqual(stray, [], "symbols exported besides mt_*")
        # every exported mt_ symbol is a function of the header: nothing internal leaks out,
        # except the kernel-study hooks (mt_study_*), which the benchmarks drive by ctypes and
        # which carry no stability promise (backend/cuda/softmax.cu documents them)
        header = set(U.parse_header())
        self.assertEqual(sorted(n for n in names if n.startswith("mt_") and n not in header
                                and not n.startswith("mt_study_")), [],
                         "mt_ symbols exported that abi/minitorch.h does not declare")
        self.assertEqual(sorted(header - names), [], "header functions not exported")


class TestBasics(U.ABITestCase):
    def test_versions(self):
        self.assertEqual(LIB.mt_abi_version(), 1)
        with open(U.HEADER) as f:
            header = f.read()
        major, minor, patch = (re.search(r"#define MT_VERSION_%s (\d+)" % k, header).group(1)
                               for k in ("MAJOR", "MINOR", "PATCH"))
        self.assertEqual(LIB.mt_version().decode(), "%s.%s.%s" % (major, minor, patch))
        self.assertEqual(int(re.search(r"#define MT_ABI_VERSION (\d+)", header).group(1)), LIB.mt_abi_version())

    def test_status_strings(self):
        for i, name in enumerate(U.STATUS_NAMES):
            self.assertEqual(LIB.mt_status_string(i).decode(), name)
        for bad in (11, 99, -1):
            self.assertEqual(LIB.mt_status_string(bad).decode(), "MT_ERR_UNKNOWN")

    def test_dtype_names_and_sizes(self):
        for d, name in U.DTYPE_NAMES.items():
            self.assertEqual(LIB.mt_dtype_name(d).decode(), name)
            self.assertEqual(LIB.mt_dtype_size(d), U.DTYPE_SIZES[d])
        for bad in (7, 100, -1):
            self.assertIsNone(LIB.mt_dtype_name(bad))
            self.assertEqual(LIB.mt_dtype_size(bad), 0)

    def test_devices(self):
        n = LIB.mt_cuda_device_count()
        self.assertGreaterEqual(n, 0)
        dev = LIB.mt_default_device()
        self.assertIn(dev, (MT_CPU, MT_CUDA))
        if n == 0:
            self.assertEqual(dev, MT_CPU, "no usable GPU: the default device must be the CPU")
        want = os.environ.get("MT_DEVICE")
        if want == "cpu":
            self.assertEqual(dev, MT_CPU)
        elif want == "cuda":
            self.assertEqual(dev, MT_CUDA if n > 0 else MT_CPU)
        self.assertEqual(LIB.mt_device_name(MT_CPU).decode(), "cpu")
        if n > 0:
            name = LIB.mt_device_name(MT_CUDA)
            self.assertTrue(name and len(name) > 0)

    def test_default_device_follows_environment(self):
        """MT_DEVICE=cpu and MT_DEVICE=cuda, checked in fresh processes."""
        code = "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); print(l.mt_default_device(), l.mt_cuda_device_count())"
        for env_value in ("cpu", "cuda"):
            env = dict(os.environ, MT_DEVICE=env_value)
            out = subprocess.run([sys.executable, "-c", code, U.lib_path()], env=env, capture_output=True,
                                 text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            dev, n = map(int, out.stdout.split())
            self.assertEqual(dev, MT_CPU if env_value == "cpu" or n == 0 else MT_CUDA, "MT_DEVICE=%s" % env_value)

    def test_last_error_never_null_and_per_thread(self):
        self.assertIsNotNone(LIB.mt_last_error())
        st = LIB.mt_tensor_numel(None, byref(c_int64()))
        self.assertNotEqual(st, MT_OK)
        main_msg = U.last_error()
        self.assertIn("mt_tensor_numel", main_msg)
        seen = {}

        def worker():
            seen["initial"] = LIB.mt_last_error()
            LIB.mt_malloc(byref(c_void_p()), -5, MT_CPU)
            seen["after"] = U.last_error()
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        self.assertIsNotNone(seen["initial"], "mt_last_error() returned NULL on a fresh thread")
        self.assertEqual(seen["initial"], b"", "a fresh thread has no last error")
        self.assertIn("mt_malloc", seen["after"])
        self.assertEqual(U.last_error(), main_msg, "another thread's failure changed this thread's last error")


class TestRawMemory(U.ABITestCase):
    def malloc(self, nbytes, dev):
        p = c_void_p()
        self.assertStatus(LIB.mt_malloc(byref(p), nbytes, dev), MT_OK)
        self.assertTrue(p.value)
        self.addCleanup(LIB.mt_free, p, dev)
        return p

    def test_malloc_copy_free_roundtrip(self):
        dev = self.DEV
        n = 1000 + self.rng.randrange(100)
        src = U.host_buffer([self.rng.uniform(-1, 1) for _ in range(n)], MT_F64)
        b0 = LIB.mt_live_bytes(dev)
        p, q = c_void_p(), c_void_p()
        self.assertStatus(LIB.mt_malloc(byref(p), n * 8, dev), MT_OK)
        self.assertStatus(LIB.mt_malloc(byref(q), n * 8, dev), MT_OK)
        self.assertTrue(p.value and q.value)
        self.assertGreaterEqual(LIB.mt_live_bytes(dev), b0 + 2 * n * 8)
        try:
            U.write_device(p.value, src, n * 8, dev)
            back = U.host_buffer([0.0] * n, MT_F64)
            if dev == MT_CUDA:
                self.assertStatus(LIB.mt_memcpy_d2d(q, p, n * 8), MT_OK)
                U.read_device(back, q.value, n * 8, dev)
            else:
                U.read_device(back, p.value, n * 8, dev)
            self.assertStatus(LIB.mt_synchronize(), MT_OK)
            self.assertEqual(list(back), list(src))
        finally:
            self.assertStatus(LIB.mt_free(p, dev), MT_OK)
            self.assertStatus(LIB.mt_free(q, dev), MT_OK)
        self.assertEqual(LIB.mt_live_bytes(dev), b0)

    def test_memcpy_on_cpu_memory(self):
        """h2d, d2h and d2d given CPU memory from mt_malloc(MT_CPU): a plain copy, or (where the
        build has no CUDA device to copy to) MT_ERR_DEVICE naming the function; never a crash.
        With a GPU, host pointers where device pointers belong are outside the contract."""
        if U.HAVE_CUDA:
            self.skipTest("the copies take device pointers when a GPU is present")
        n = 64
        src = U.host_buffer(list(range(n)), MT_F32)
        p = self.malloc(n * 4, MT_CPU)
        q = self.malloc(n * 4, MT_CPU)
        back = U.host_buffer([0.0] * n, MT_F32)
        for name, dst, s in (("mt_memcpy_h2d", p, c_void_p(U.buffer_ptr(src))), ("mt_memcpy_d2d", q, p),
                             ("mt_memcpy_d2h", c_void_p(U.buffer_ptr(back)), q)):
            st = getattr(LIB, name)(dst, s, n * 4)
            if st != MT_OK:
                self.assertStatus(st, U.MT_ERR_DEVICE, name)
                return
        self.assertEqual(list(back), list(src))

    def test_memcpy_zero_bytes(self):
        if not U.HAVE_CUDA:
            self.skipTest("no GPU")
        p = self.malloc(16, MT_CUDA)
        buf = U.host_buffer([0.0] * 4, MT_F32)
        self.assertStatus(LIB.mt_memcpy_h2d(p, c_void_p(U.buffer_ptr(buf)), 0), MT_OK)
        self.assertStatus(LIB.mt_memcpy_d2h(c_void_p(U.buffer_ptr(buf)), p, 0), MT_OK)

    def test_malloc_zero_bytes(self):
        for dev in self._devices:
            p = c_void_p()
            self.assertStatus(LIB.mt_malloc(byref(p), 0, dev), MT_OK)
            self.assertTrue(p.value, "mt_malloc(0) must give a valid pointer")
            self.assertStatus(LIB.mt_free(p, dev), MT_OK)

    def test_free_null_is_noop(self):
        for dev in self._devices:
            self.assertStatus(LIB.mt_free(None, dev), MT_OK)
        self.assertStatus(LIB.mt_tensor_release(None), MT_OK)
        self.assertStatus(LIB.mt_optim_free(None), MT_OK)

    def test_synchronize(self):
        self.assertStatus(LIB.mt_synchronize(), MT_OK)


class TestCreation(U.ABITestCase):
    def check_tensor(self, h, shape, dtype, device, values=None):
        self.assertEqual(U.shape_of(h), tuple(shape))
        self.assertEqual(U.ndim_of(h), len(shape))
        self.assertEqual(U.numel_of(h), U.numel(shape))
        self.assertEqual(U.dtype_of(h), dtype)
        self.assertEqual(U.device_of(h), device)
        if values is not None:
            self.assertEqual(U.to_list(h), list(values))

    def test_from_data_roundtrip_every_dtype(self):
        for dtype in (MT_F32, MT_F64, MT_I32, MT_I64, MT_U8):
            for shape in ((), (1,), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 1, 2)):
                n = U.numel(shape)
                if dtype in (MT_F32, MT_F64):
                    vals = U.round_to(dtype, [self.rng.uniform(-100, 100) for _ in range(n)])
                elif dtype == MT_U8:
                    vals = [self.rng.randrange(256) for _ in range(n)]
                else:
                    vals = [self.rng.randrange(-10 ** 6, 10 ** 6) for _ in range(n)]
                h = self.tensor(vals, shape, dtype)
                self.check_tensor(h, shape, dtype, self.DEV, vals)

    def test_scalar_with_null_shape(self):
        v = c_double(2.5)
        out = c_void_p()
        self.assertStatus(LIB.mt_tensor_from_data(byref(out), byref(v), None, 0, MT_F64, self.DEV), MT_OK)
        self.keep(out.value)
        self.check_tensor(out.value, (), MT_F64, self.DEV, [2.5])
        self.assertEqual(U.item_of(out.value), 2.5)

    def test_data_is_copied(self):
        buf = U.host_buffer([1, 2, 3], MT_F32)
        h = self.keep(U.call("mt_tensor_from_data", c_void_p(U.buffer_ptr(buf)), U.shape_array((3,)), 1,
                             MT_F32, self.DEV))
        buf[0] = 99.0
        self.assertEqual(U.to_list(h), [1.0, 2.0, 3.0])

    def test_zeros_ones_full(self):
        for dtype in (MT_F32, MT_F64, MT_I32, MT_I64, MT_U8):
            shape = (self.rng.randrange(1, 5), self.rng.randrange(1, 7))
            n = U.numel(shape)
            z = self.op("mt_tensor_zeros", U.shape_array(shape), 2, dtype, self.DEV)
            self.check_tensor(z, shape, dtype, self.DEV, [0] * n)
            o = self.op("mt_tensor_ones", U.shape_array(shape), 2, dtype, self.DEV)
            self.check_tensor(o, shape, dtype, self.DEV, [1] * n)
            f = self.op("mt_tensor_full", U.shape_array(shape), 2, c_double(3.0), dtype, self.DEV)
            self.check_tensor(f, shape, dtype, self.DEV, [3] * n)
        f = self.op("mt_tensor_full", U.shape_array((2, 2)), 2, c_double(3.14), MT_F32, self.DEV)
        self.assertEqual(U.to_list(f), U.f32([3.14] * 4))
        f = self.op("mt_tensor_full", None, 0, c_double(-1.25), MT_F64, self.DEV)
        self.check_tensor(f, (), MT_F64, self.DEV, [-1.25])

    def test_zero_element_tensors(self):
        for shape in ((0,), (3, 0), (0, 4, 2)):
            z = self.op("mt_tensor_zeros", U.shape_array(shape), len(shape), MT_F32, self.DEV)
            self.check_tensor(z, shape, MT_F32, self.DEV, [])
            s = self.op("mt_sum", z)
            self.assertEqual(U.to_list(s), [0.0])

    def test_arange(self):
        cases = [((0, 5, 1), [0, 1, 2, 3, 4]), ((1, 2, 0.25), [1, 1.25, 1.5, 1.75]),
                 ((5, 0, -2), [5, 3, 1]), ((0, 1, 0.3), [0, 0.3, 0.6, 0.9]), ((2, 2, 1), []),
                 ((-3, 3, 2.5), [-3, -0.5, 2])]
        for (start, end, step), want in cases:
            for dtype in (MT_F32, MT_F64):
                h = self.op("mt_tensor_arange", c_double(start), c_double(end), c_double(step), dtype, self.DEV)
                self.assertEqual(U.shape_of(h), (math.ceil((end - start) / step),), (start, end, step))
                self.assertAllClose(U.to_list(h), U.round_to(dtype, want), 1e-6, 1e-6, "arange%r" % ((start, end, step),))
        h = self.op("mt_tensor_arange", c_double(0), c_double(4), c_double(1), MT_I64, self.DEV)
        self.assertEqual(U.to_list(h), [0, 1, 2, 3])

    def test_rand_and_randn(self):
        shape = (100, 100)
        for dtype in (MT_F32, MT_F64):
            u = self.op("mt_tensor_rand", U.shape_array(shape), 2, c_int64(1234), dtype, self.DEV)
            self.check_tensor(u, shape, dtype, self.DEV)
            v = U.to_list(u)
            self.assertTrue(all(0.0 <= x < 1.0 for x in v), "rand outside [0,1)")
            mean = sum(v) / len(v)
            var = sum((x - mean) ** 2 for x in v) / len(v)
            # 10000 samples: the mean's standard error is 0.0029 (uniform) and 0.01 (normal)
            self.assertLess(abs(mean - 0.5), 0.02)
            self.assertLess(abs(var - 1 / 12), 0.01)
            self.assertGreater(len(set(v)), 9900, "rand repeats values")
            n = self.op("mt_tensor_randn", U.shape_array(shape), 2, c_int64(1234), dtype, self.DEV)
            w = U.to_list(n)
            mean = sum(w) / len(w)
            var = sum((x - mean) ** 2 for x in w) / len(w)
            self.assertLess(abs(mean), 0.05)
            self.assertLess(abs(var - 1.0), 0.06)
            self.assertTrue(all(math.isfinite(x) for x in w))
            # within 4 sigma about 99.99%
            self.assertGreater(sum(1 for x in w if abs(x) < 4), 9990)

    def test_rand_is_deterministic_per_seed(self):
        shape = U.shape_array((37,))
        a = U.to_list(self.op("mt_tensor_rand", shape, 1, c_int64(7), MT_F32, self.DEV))
        b = U.to_list(self.op("mt_tensor_rand", shape, 1, c_int64(7), MT_F32, self.DEV))
        c = U.to_list(self.op("mt_tensor_rand", shape, 1, c_int64(8), MT_F32, self.DEV))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        a = U.to_list(self.op("mt_tensor_randn", shape, 1, c_int64(7), MT_F64, self.DEV))
        b = U.to_list(self.op("mt_tensor_randn", shape, 1, c_int64(7), MT_F64, self.DEV))
        self.assertEqual(a, b)

    def test_rand_stream_layout(self):
        """Element i of rand takes word i % 4 of Philox block i / 4: checked against the Random123
        known-answer vector (counter 0, key 0) with seed 0; a float32 draw is the float64 draw cut
        to 24 bits; every length, the tails of 1-3 elements included, is a prefix of a longer one."""
        kat = (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)  # Salmon et al. 2011, kat_vectors

        def draws(n, dtype, seed):
            return U.to_list(self.op("mt_tensor_rand", U.shape_array((n,)), 1, c_int64(seed), dtype, self.DEV))

        self.assertEqual(draws(4, MT_F32, 0), [(w >> 8) / 2.0 ** 24 for w in kat])
        # the float64 draw's top 32 bits are the same words
        self.assertEqual([math.floor(u * 2.0 ** 32) for u in draws(4, MT_F64, 0)], list(kat))
        seed = 20260 + self.DEV
        f32, f64 = draws(1027, MT_F32, seed), draws(1027, MT_F64, seed)
        self.assertEqual(f32, [math.floor(u * 2.0 ** 24) / 2.0 ** 24 for u in f64])
        self.assertGreater(len(set(f64)), 1020, "draws repeat")
        for n in (1, 2, 3, 5, 6, 7, 9):
            self.assertEqual(draws(n, MT_F32, seed), f32[:n], "float32 prefix of %d" % n)
            self.assertEqual(draws(n, MT_F64, seed), f64[:n], "float64 prefix of %d" % n)

    def test_randn_stream_layout(self):
        """Element i of randn is Box-Muller over Philox block i under the key seed ^ 0x5DEECE66D
        (u1 from words 0-1, u2 from words 2-3; one word each for float32), whatever the length and
        however many host threads draw it: elements across the thread ranges of a 300007-element
        draw against a Python Philox-4x32-10 (float64 1e-13 relative, float32 one rounding of that);
        shorter draws are prefixes; float16 uniforms of that length against float32 ones rounded, and
        float32 uniforms against float64 ones cut to 24 bits."""
        M = 0xFFFFFFFF

        def philox(counter, key):
            c0, c1, c2, c3 = counter & M, (counter >> 32) & M, 0, 0
            k0, k1 = key & M, (key >> 32) & M
            for _ in range(10):
                p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
                c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M, (p0 >> 32) ^ c3 ^ k1, p0 & M
                k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
            return c0, c1, c2, c3

        def normal(seed, i, f64):
            w = philox(i, seed ^ 0x5DEECE66D)
            if f64:
                u1, u2 = (((w[0] << 32) | w[1]) >> 11) / 2.0 ** 53, (((w[2] << 32) | w[3]) >> 11) / 2.0 ** 53
            else:
                u1, u2 = (w[0] >> 8) / 2.0 ** 24, (w[2] >> 8) / 2.0 ** 24
            return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(6.283185307179586 * u2)

        seed, n = self.rng.randrange(1 << 40), 300007
        picks = sorted(set([0, 1, 2, 3, 4, n - 1, n - 2] + [self.rng.randrange(n) for _ in range(60)]))
        for dtype, f64 in ((MT_F64, True), (MT_F32, False)):
            got = U.to_list(self.op("mt_tensor_randn", U.shape_array((n,)), 1, c_int64(seed), dtype, self.DEV))
            for i in picks:
                want = normal(seed, i, f64)
                if not f64:
                    want = struct.unpack("f", struct.pack("f", want))[0]
                self.assertLessEqual(abs(got[i] - want), 1e-13 * max(1.0, abs(want)) if f64 else 1e-6 * abs(want) + 1e-7,
                                     "randn %s element %d of %d (seed %d)" % ("f64" if f64 else "f32", i, n, seed))
            for m in (1, 5, 70001):
                short = U.to_list(self.op("mt_tensor_randn", U.shape_array((m,)), 1, c_int64(seed), dtype, self.DEV))
                self.assertEqual(short, got[:m], "randn prefix of %d" % m)
        raw = ctypes.create_string_buffer(2 * n)
        U.check(LIB.mt_tensor_copy_to_host(
            self.op("mt_tensor_rand", U.shape_array((n,)), 1, c_int64(seed), MT_F16, self.DEV), raw, 2 * n),
            "mt_tensor_copy_to_host")
        h = struct.unpack("<%de" % n, raw.raw)
        f = U.to_list(self.op("mt_tensor_rand", U.shape_array((n,)), 1, c_int64(seed), MT_F32, self.DEV))
        for i in picks:
            self.assertLessEqual(abs(h[i] - f[i]), 2.0 ** -11 * abs(f[i]) + 2.0 ** -25, "float16 rand element %d" % i)
        # the uniform fill over the same thread ranges: float32 is float64 cut to 24 bits, and a short
        # draw is a prefix of the long one
        d = U.to_list(self.op("mt_tensor_rand", U.shape_array((n,)), 1, c_int64(seed), MT_F64, self.DEV))
        for i in picks:
            self.assertEqual(f[i], math.floor(d[i] * 2.0 ** 24) / 2.0 ** 24, "rand element %d" % i)
        short = U.to_list(self.op("mt_tensor_rand", U.shape_array((70001,)), 1, c_int64(seed), MT_F64, self.DEV))
        self.assertEqual(short, d[:70001], "rand prefix of 70001")

    def test_rand_same_on_every_device(self):
        if self.DEV == MT_CPU:
            self.skipTest("device under test is the CPU")
        shape = U.shape_array((1001,))
        for fn, tol in (("mt_tensor_rand", 1e-7), ("mt_tensor_randn", 1e-5)):
            a = U.to_list(self.op(fn, shape, 1, c_int64(99), MT_F32, self.DEV))
            b = U.to_list(self.op(fn, shape, 1, c_int64(99), MT_F32, MT_CPU))
            self.assertAllClose(a, b, tol, tol, fn + " device vs cpu")

    def test_rand_rejects_integer_dtypes(self):
        out = c_void_p()
        st = LIB.mt_tensor_rand(byref(out), U.shape_array((3,)), 1, 1, MT_I32, self.DEV)
        self.assertStatus(st, MT_ERR_DTYPE, "mt_tensor_rand")
        self.assertIsNone(out.value)

    def test_from_blob_wraps_memory(self):
        n = 6
        dev = self.DEV
        p = c_void_p()
        self.assertStatus(LIB.mt_malloc(byref(p), n * 4, dev), MT_OK)
        self.addCleanup(LIB.mt_free, p, dev)
        U.write_device(p.value, U.host_buffer([1, 2, 3, 4, 5, 6], MT_F32), n * 4, dev)
        b0 = LIB.mt_live_bytes(dev)
        h = U.call("mt_tensor_from_blob", p, U.shape_array((2, 3)), 2, MT_F32, dev)
        try:
            self.assertEqual(LIB.mt_live_bytes(dev), b0, "a blob tensor allocates nothing")
            self.assertEqual(U.data_ptr_of(h), p.value, "from_blob must not copy")
            self.assertEqual(U.to_list(h), [1, 2, 3, 4, 5, 6])
            # writes through the tensor land in the caller's memory
            new = U.host_buffer([6, 5, 4, 3, 2, 1], MT_F32)
            self.assertStatus(LIB.mt_tensor_copy_from_host(h, c_void_p(U.buffer_ptr(new)), n * 4), MT_OK)
            back = U.host_buffer([0] * n, MT_F32)
            U.read_device(back, p.value, n * 4, dev)
            self.assertEqual(list(back), [6, 5, 4, 3, 2, 1])
            # an op on a blob tensor works like on any other
            s = U.call("mt_sum", h)
            self.assertEqual(U.item_of(s), 21.0)
            U.release(s)
        finally:
            U.release(h)
        self.assertEqual(LIB.mt_live_bytes(dev), b0, "releasing a blob tensor must not free the caller's memory")
        back = U.host_buffer([0] * n, MT_F32)
        U.read_device(back, p.value, n * 4, dev)
        self.assertEqual(list(back), [6, 5, 4, 3, 2, 1], "the caller's memory outlives the tensor")


class TestTensorQueries(U.ABITestCase):
    def test_copy_from_host(self):
        for dtype in (MT_F32, MT_F64):
            h = self.op("mt_tensor_zeros", U.shape_array((2, 3)), 2, dtype, self.DEV)
            vals = U.round_to(dtype, self.rand_values(6))
            buf = U.host_buffer(vals, dtype)
            self.assertStatus(LIB.mt_tensor_copy_from_host(h, c_void_p(U.buffer_ptr(buf)), 6 * U.DTYPE_SIZES[dtype]), MT_OK)
            self.assertEqual(U.to_list(h), vals)

    def test_item(self):
        for dtype in (MT_F32, MT_F64, MT_I32, MT_I64):
            h = self.tensor([7], (1, 1, 1), dtype)
            self.assertEqual(U.item_of(h), 7.0)
        h = self.tensor([0.1], (), MT_F64)
        self.assertEqual(U.item_of(h), 0.1)

    def test_data_ptr(self):
        h = self.tensor([1.5, 2.5, 3.5], (3,), MT_F64)
        p = U.data_ptr_of(h)
        self.assertTrue(p)
        self.assertEqual(U.data_ptr_of(h), p, "data pointer is stable")
        if U.device_of(h) == MT_CPU:
            self.assertEqual(list((ctypes.c_double * 3).from_address(p)), [1.5, 2.5, 3.5])

    def test_requires_grad_flag(self):
        h = self.tensor([1.0], (1,))
        self.assertEqual(U.requires_grad_of(h), 0)
        U.set_requires_grad(h, 1)
        self.assertEqual(U.requires_grad_of(h), 1)
        self.assertIsNone(U.grad_of(h), "no gradient before any backward")
        U.set_requires_grad(h, 0)
        self.assertEqual(U.requires_grad_of(h), 0)


class TestRefcount(U.ABITestCase):
    def test_live_tensors_counts_handles(self):
        n0 = LIB.mt_live_tensors()
        h = U.from_list([1, 2], (2,))
        self.assertEqual(LIB.mt_live_tensors(), n0 + 1)
        self.assertStatus(LIB.mt_tensor_retain(h), MT_OK)
        self.assertEqual(LIB.mt_live_tensors(), n0 + 1, "retain adds a reference, not a handle")
        U.release(h)
        self.assertEqual(LIB.mt_live_tensors(), n0 + 1, "one reference left")
        self.assertEqual(U.to_list(h), [1.0, 2.0])
        U.release(h)
        self.assertEqual(LIB.mt_live_tensors(), n0)

    def test_live_bytes_follow_tensors(self):
        dev = self.DEV
        b0 = LIB.mt_live_bytes(dev)
        h = U.call("mt_tensor_zeros", U.shape_array((1000,)), 1, MT_F64, dev)
        self.assertGreaterEqual(LIB.mt_live_bytes(dev), b0 + 8000)
        U.release(h)
        self.assertEqual(LIB.mt_live_bytes(dev), b0)

    def test_op_output_outlives_inputs(self):
        a = U.from_list([1, 2, 3], (3,))
        b = U.from_list([10, 20, 30], (3,))
        c = U.call("mt_add", a, b)
        U.release(a)
        U.release(b)
        self.keep(c)
        self.assertEqual(U.to_list(c), [11, 22, 33])

    def test_tape_keeps_inputs_alive(self):
        x = U.from_list([1, 2, 3], (3,))
        U.set_requires_grad(x)
        y = U.call("mt_mul_scalar", x, c_double(2.0))
        s = U.call("mt_sum", y)
        U.release(y)     # the tape still holds what backward needs
        self.assertStatus(LIB.mt_backward(s), MT_OK)
        g = U.grad_of(x)
        self.assertEqual(U.to_list(g), [2.0, 2.0, 2.0])
        for h in (g, s, x):
            U.release(h)


class TestViewsAndCopies(U.ABITestCase):
    def test_reshape_is_a_view(self):
        vals = [float(i) for i in range(12)]
        x = self.tensor(vals, (3, 4), MT_F32)
        for shape, want in (((4, 3), (4, 3)), ((2, -1), (2, 6)), ((-1,), (12,)), ((2, 3, 2), (2, 3, 2)),
                            ((1, 12, 1), (1, 12, 1))):
            r = self.op("mt_reshape", x, U.shape_array(shape), len(shape))
            self.assertEqual(U.shape_of(r), want)
            self.assertEqual(U.to_list(r), vals)
            self.assertEqual(U.data_ptr_of(r), U.data_ptr_of(x), "reshape must share storage")
        r = self.op("mt_reshape", x, U.shape_array((6, 2)), 2)
        new = U.host_buffer([-float(i) for i in range(12)], MT_F32)
        LIB.mt_tensor_copy_from_host(x, c_void_p(U.buffer_ptr(new)), 48)
        self.assertEqual(U.to_list(r), list(new), "a write to the base shows through the view")
        one = self.tensor([5.0], (1, 1))
        r = self.op("mt_reshape", one, None, 0)
        self.assertEqual(U.shape_of(r), ())

    def test_detach_shares_storage(self):
        x = self.tensor([1, 2, 3], (3,), requires_grad=True)
        d = self.op("mt_tensor_detach", x)
        self.assertEqual(U.requires_grad_of(d), 0)
        self.assertEqual(U.data_ptr_of(d), U.data_ptr_of(x))
        self.assertEqual(U.to_list(d), [1, 2, 3])
        t0 = LIB.mt_tape_size()
        y = self.op("mt_mul", d, d)
        self.assertEqual(LIB.mt_tape_size(), t0, "ops on a detached tensor are not recorded")
        self.assertEqual(U.requires_grad_of(x), 1)

    def test_clone_has_own_storage(self):
        x = self.tensor([1, 2, 3], (3,))
        c = self.op("mt_tensor_clone", x)
        self.assertNotEqual(U.data_ptr_of(c), U.data_ptr_of(x))
        self.assertEqual(U.to_list(c), [1, 2, 3])
        new = U.host_buffer([7, 8, 9], MT_F32)
        LIB.mt_tensor_copy_from_host(x, c_void_p(U.buffer_ptr(new)), 12)
        self.assertEqual(U.to_list(c), [1, 2, 3])

    def test_to_same_device_is_same_handle(self):
        x = self.tensor([1, 2], (2,))
        n0 = LIB.mt_live_tensors()
        y = self.op("mt_tensor_to", x, self.DEV)
        self.assertEqual(y, x, "mt_tensor_to on the same device gives x itself")
        self.assertEqual(LIB.mt_live_tensors(), n0)

    def test_to_cpu_and_back(self):
        vals = self.rand_values(10)
        x = self.tensor(vals, (2, 5), MT_F64)
        c = self.op("mt_tensor_to", x, MT_CPU)
        self.assertEqual(U.device_of(c), MT_CPU)
        self.assertEqual(U.to_list(c), vals)
        d = self.op("mt_tensor_to", c, self.DEV)
        self.assertEqual(U.device_of(d), self.DEV)
        self.assertEqual(U.shape_of(d), (2, 5))
        self.assertEqual(U.to_list(d), vals)

    def test_cast(self):
        vals = [1.7, -1.7, 0.5, -0.5, 3.0, 100.25]
        x = self.tensor(vals, (2, 3), MT_F64)
        same = self.op("mt_tensor_cast", x, MT_F64)
        self.assertEqual(same, x, "mt_tensor_cast to the same dtype gives x itself")
        f = self.op("mt_tensor_cast", x, MT_F32)
        self.assertEqual(U.dtype_of(f), MT_F32)
        self.assertEqual(U.shape_of(f), (2, 3))
        self.assertEqual(U.to_list(f), U.f32(vals))
        back = self.op("mt_tensor_cast", f, MT_F64)
        self.assertEqual(U.to_list(back), U.f32(vals))
        for dtype in (MT_I32, MT_I64):
            i = self.op("mt_tensor_cast", x, dtype)
            self.assertEqual(U.dtype_of(i), dtype)
            self.assertEqual(U.to_list(i), [1, -1, 0, 0, 3, 100], "floats to ints truncate toward zero")
        ints = self.tensor([3, -4, 5], (3,), MT_I32)
        fl = self.op("mt_tensor_cast", ints, MT_F32)
        self.assertEqual(U.to_list(fl), [3.0, -4.0, 5.0])


class TestHeaderCompiles(U.ABITestCase):
    """The header is C99 and C++ clean, its enums are int-sized, and its worked example runs."""

    CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

    def _build_and_run(self, compiler, flags, source, suffix):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "t" + suffix)
            exe = os.path.join(d, "t")
            with open(src, "w") as f:
                f.write(source)
            libdir = os.path.dirname(os.path.abspath(U.lib_path()))
            cmd = [compiler] + flags + ["-I", os.path.dirname(U.HEADER), src, "-o", exe,
                                        os.path.abspath(U.lib_path()), "-Wl,-rpath," + libdir, "-lm"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, "compile failed: %s\n%s" % (" ".join(cmd), out.stderr))
            run = subprocess.run([exe], capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            return run.stdout

    @unittest.skipUnless(CC, "no C compiler")
    def test_c99_worked_example(self):
        src = r"""
#include "minitorch.h"
#include <stdio.h>
typedef char status_is_int[sizeof(mt_status) == 4 ? 1 : -1];
typedef char dtype_is_int[sizeof(mt_dtype) == 4 ? 1 : -1];
typedef char device_is_int[sizeof(mt_device) == 4 ? 1 : -1];
int main(void) {
  int64_t shape[2] = {4, 1};
  float xs[4] = {1, 2, 3, 4}, ys[4] = {2, 4, 6, 8}, w0 = 0.5f;
  mt_tensor *x = NULL, *y = NULL, *w = NULL, *pred = NULL, *loss = NULL, *g = NULL;
  double gv = 0, lv = 0;
  mt_device dev = mt_default_device();
  if (mt_tensor_from_data(&x, xs, shape, 2, MT_F32, dev) != MT_OK) return 1;
  if (mt_tensor_from_data(&y, ys, shape, 2, MT_F32, dev) != MT_OK) return 2;
  if (mt_tensor_from_data(&w, &w0, NULL, 0, MT_F32, dev) != MT_OK) return 3;
  if (mt_tensor_set_requires_grad(w, 1) != MT_OK) return 4;
  if (mt_mul(&pred, x, w) != MT_OK) return 5;
  if (mt_mse_loss(&loss, pred, y) != MT_OK) return 6;
  if (mt_tensor_item(loss, &lv) != MT_OK) return 7;
  if (mt_backward(loss) != MT_OK) return 8;
  if (mt_tensor_grad(&g, w) != MT_OK || g == NULL) return 9;
  if (mt_tensor_item(g, &gv) != MT_OK) return 10;
  printf("%.6f %.6f %lld\n", lv, gv, (long long)mt_live_tensors());
  mt_tensor_release(x); mt_tensor_release(y); mt_tensor_release(w);
  mt_tensor_release(pred); mt_tensor_release(loss); mt_tensor_release(g);
  printf("%lld\n", (long long)mt_live_tensors());
  return 0;
}
"""
        out = self._build_and_run(self.CC, ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"], src, ".c")
        first, second = out.splitlines()
        loss, grad, _ = first.split()
        # loss = mean((0.5x - 2x)^2) = 2.25 * mean(x^2) = 16.875; grad = -3 * mean(x^2) = -22.5
        self.assertAlmostEqual(float(loss), 16.875, places=4)
        self.assertAlmostEqual(float(grad), -22.5, places=4)
        self.assertEqual(int(second), 0, "the worked example leaks handles")

    @unittest.skipUnless(CXX, "no C++ compiler")
    def test_cxx_includes_header(self):
        src = r"""
#include "minitorch.h"
#include <cstdio>
int main() { std::printf("%lld\n", (long long)mt_abi_version()); return mt_abi_version() == MT_ABI_VERSION ? 0 : 1; }
"""
        out = self._build_and_run(self.CXX, ["-std=c++11", "-Wall", "-Wextra", "-Werror"], src, ".cpp")
        self.assertEqual(out.strip(), "1")


if __name__ == "__main__":
    unittest.main()
