"""test_study_hooks - the kernel-study hooks of the bandwidth study (mt_study_relu, mt_study_gelu,
mt_study_sum, mt_study_softmax, mt_study_log_softmax, mt_study_layer_norm, mt_study_cross_entropy,
mt_study_cast, mt_study_stream; internal, exported
by a CUDA build only, not in abi/minitorch.h) reject bad arguments before they touch the device, so
this runs without a GPU: a variant id outside the documented range, an invalid dtype, a negative
size, null buffers each give their status and an mt_last_error() message naming the hook and the
value. Skipped on a CPU-only build (no hooks). Their results are checked on a GPU by
tests/gpu/test_bw_variants.py (mt_study_cast's by tests/gpu/test_cast.py).
"""
import ctypes
import os
import sys
import unittest
from ctypes import byref, c_double, c_int32, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abi_util as U  # noqa: E402
from abi_util import LIB, MT_ERR_DTYPE, MT_ERR_INVALID_ARGUMENT, MT_F32, MT_OK  # noqa: E402

VP, I64, I32 = c_void_p, c_int64, c_int32
# hook: (argtypes, last variant id, call(fn, variant, dtype, size, ptr))
ROWS = lambda fn, v, dt, n, p: fn(p, p, n, 8, dt, v)  # noqa: E731
FLAT = lambda fn, v, dt, n, p: fn(p, p, n, dt, v)  # noqa: E731
LN = lambda fn, v, dt, n, p: fn(p, p, p, p, None, None, n, 8, c_double(1e-5), dt, v)  # noqa: E731
GELU = lambda fn, v, dt, n, p: fn(p, p, p, n, dt, 1, v)  # noqa: E731
CE = lambda fn, v, dt, n, p: fn(p, p, p, p, p, p, n, 8, dt, v)  # noqa: E731
CAST = lambda fn, v, dt, n, p: fn(p, p, n, dt, U.MT_BF16, v)  # noqa: E731  (bfloat16 to dt)
HOOKS = {
    "mt_study_relu": ([VP, VP, I64, I32, I32], 6, FLAT),
    "mt_study_sum": ([VP, VP, I64, I32, I32], 4, FLAT),
    "mt_study_gelu": ([VP, VP, VP, I64, I32, I32, I32], 3, GELU),
    "mt_study_softmax": ([VP, VP, I64, I64, I32, I32], 12, ROWS),
    "mt_study_log_softmax": ([VP, VP, I64, I64, I32, I32], 12, ROWS),
    "mt_study_layer_norm": ([VP, VP, VP, VP, VP, VP, I64, I64, c_double, I32, I32], 11, LN),
    "mt_study_cross_entropy": ([VP, VP, VP, VP, VP, VP, I64, I64, I32, I32], 6, CE),
    "mt_study_cast": ([VP, VP, I64, I32, I32, I32], 7, CAST),
}
HAVE = all(getattr(LIB, name, None) is not None for name in list(HOOKS) + ["mt_study_stream"])


@unittest.skipUnless(HAVE, "a CPU-only build exports no study hooks")
class TestStudyHooks(U.ABITestCase):
    def hook(self, name):
        fn = getattr(LIB, name)
        fn.restype = ctypes.c_int
        fn.argtypes = HOOKS[name][0]
        return fn

    def expect(self, st, status, name, *contains):
        self.assertEqual(st, status, "%s returned %d (%s)" % (name, st, U.last_error()))
        msg = U.last_error()
        self.assertTrue(msg.startswith(name + ": "), "message %r must start with the hook's name" % msg)
        for c in contains:
            self.assertIn(c, msg)

    def test_bad_variant_ids(self):
        p = c_void_p(16)  # never dereferenced: the variant is checked first
        for name, (_, last, call) in HOOKS.items():
            fn = self.hook(name)
            for v in (-1, last + 1, 1 << 30):
                with self.subTest(hook=name, variant=v):
                    self.expect(call(fn, v, MT_F32, 4, p), MT_ERR_INVALID_ARGUMENT, name,
                                "variant %d is not 0..%d" % (v, last))

    def test_bad_dtype_size_and_buffers(self):
        p = c_void_p(16)
        for name, (_, last, call) in HOOKS.items():
            fn = self.hook(name)
            with self.subTest(hook=name, what="dtype"):
                self.expect(call(fn, 0, 99, 4, p), MT_ERR_DTYPE, name, "invalid dtype 99")
            with self.subTest(hook=name, what="size"):
                self.expect(call(fn, last, MT_F32, -3, p), MT_ERR_INVALID_ARGUMENT, name, "-3")
            if name == "mt_study_gelu":
                with self.subTest(hook=name, what="direction"):
                    self.expect(fn(p, p, p, 4, MT_F32, 2, 0), MT_ERR_INVALID_ARGUMENT, name, "backward 2")
            with self.subTest(hook=name, what="null"):
                self.expect(call(fn, last, MT_F32, 4, None), MT_ERR_INVALID_ARGUMENT, name, "null buffer")

    def test_empty_work_is_ok(self):
        # nothing to do is not an error (and needs no device) where the op allows an empty size
        for name in ("mt_study_relu", "mt_study_gelu", "mt_study_softmax", "mt_study_log_softmax",
                     "mt_study_layer_norm", "mt_study_cast"):
            _, last, call = HOOKS[name]
            with self.subTest(hook=name):
                self.assertEqual(call(self.hook(name), last, MT_F32, 0, None), MT_OK)

    def test_stream_needs_an_out_pointer(self):
        fn = LIB.mt_study_stream
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(c_void_p)]
        self.expect(fn(None), MT_ERR_INVALID_ARGUMENT, "mt_study_stream", "stream is NULL")
        if U.HAVE_CUDA:
            s = c_void_p()
            self.assertEqual(fn(byref(s)), MT_OK, U.last_error())


if __name__ == "__main__":
    unittest.main()
