"""test_abi_errors - every error class of abi/minitorch.h: a status, a message that
names the function and the offending values, *out left NULL, nothing recorded on
the tape, nothing printed, nothing leaked, and the library usable afterwards.

Classes: null handle / null pointer, released handle (in a child process, so that a
crash is a failure and not the end of the run), shape mismatch, dtype mismatch,
device (CUDA without a GPU, or mixed devices), backward on a non-scalar or with
nothing recorded, negative sizes, nbytes that do not match.
"""
import json
import os
import subprocess
import sys
import textwrap
import unittest
from ctypes import byref, c_double, c_int, c_int64, c_void_p

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abi_util as U  # noqa: E402
from abi_util import (LIB, MT_CPU, MT_CUDA, MT_F32, MT_F64, MT_I32, MT_OK, MT_ERR_DEVICE,  # noqa: E402
                      MT_ERR_DTYPE, MT_ERR_INVALID_ARGUMENT, MT_ERR_SHAPE, MT_ERR_STATE)

BAD = (MT_ERR_INVALID_ARGUMENT,)
SHAPE_OR_ARG = (MT_ERR_SHAPE, MT_ERR_INVALID_ARGUMENT)


class ErrorCase(U.ABITestCase):
    def expect_fail(self, fn, args, status, contains=(), out_first=True):
        """Calls fn(&out, *args) (or fn(*args)), checks the status and message, that *out stayed
        NULL and that the tape did not change."""
        t0 = LIB.mt_tape_size()
        n0 = LIB.mt_live_tensors()
        if out_first:
            out = c_void_p()
            st = getattr(LIB, fn)(byref(out), *args)
            if st == MT_OK and out.value:
                self.keep(out.value)
            self.assertIsNone(out.value, "%s: *out must stay NULL on failure" % fn)
        else:
            st = getattr(LIB, fn)(*args)
        self.assertStatus(st, status, fn, contains)
        self.assertEqual(LIB.mt_tape_size(), t0, fn + ": a failed call records nothing")
        self.assertEqual(LIB.mt_live_tensors(), n0, fn + ": a failed call creates no handle")
        return st


class TestNullPointers(ErrorCase):
    def test_ops_with_null_inputs(self):
        for spec in U.OP_SPECS:
            shapes, params = spec.cases[0]
            hs = [self.tensor(self.rand_values(U.numel(s), d), s, requires_grad=True)
                  for s, d in zip(shapes, spec.domains)]
            for i in range(len(hs)):
                if spec.fn == "mt_linear" and i == 2:
                    continue          # bias may be NULL
                args = list(hs)
                args[i] = None
                with self.subTest(op=spec.name, null_input=i):
                    t0 = LIB.mt_tape_size()
                    with self.assertRaises(U.MTError) as cm:
                        self.keep(spec.call(args, params))
                    self.assertEqual(cm.exception.status, MT_ERR_INVALID_ARGUMENT, str(cm.exception))
                    self.assertIn(spec.fn, cm.exception.message)
                    self.assertEqual(LIB.mt_tape_size(), t0)

    def test_null_out_pointer(self):
        a = self.tensor([1.0, 2.0], (2,))
        for fn, args in (("mt_add", (a, a)), ("mt_matmul", (a, a)), ("mt_exp", (a,)), ("mt_sum", (a,)),
                         ("mt_sum_dim", (a, 0, 0)), ("mt_tensor_clone", (a,)), ("mt_tensor_detach", (a,)),
                         ("mt_tensor_zeros", (U.shape_array((2,)), 1, MT_F32, self.DEV)),
                         ("mt_tensor_grad", (a,)), ("mt_malloc", (16, MT_CPU))):
            with self.subTest(fn=fn):
                self.assertStatus(getattr(LIB, fn)(None, *args), BAD, fn)

    def test_queries_with_null_tensor(self):
        v64, vi, vd, vp = c_int64(), c_int(), c_double(), c_void_p()
        buf = U.host_buffer([0.0] * 4, MT_F32)
        calls = [("mt_tensor_ndim", (None, byref(v64))), ("mt_tensor_shape", (None, byref(v64))),
                 ("mt_tensor_numel", (None, byref(v64))), ("mt_tensor_dtype", (None, byref(vi))),
                 ("mt_tensor_device", (None, byref(vi))), ("mt_tensor_data_ptr", (None, byref(vp))),
                 ("mt_tensor_item", (None, byref(vd))),
                 ("mt_tensor_copy_to_host", (None, c_void_p(U.buffer_ptr(buf)), 16)),
                 ("mt_tensor_copy_from_host", (None, c_void_p(U.buffer_ptr(buf)), 16)),
                 ("mt_tensor_retain", (None,)), ("mt_tensor_set_requires_grad", (None, 1)),
                 ("mt_tensor_requires_grad", (None, byref(v64))), ("mt_tensor_zero_grad", (None,)),
                 ("mt_backward", (None,)), ("mt_optim_step", (None,)), ("mt_optim_zero_grad", (None,)),
                 ("mt_optim_set_lr", (None, 0.1)), ("mt_optim_get_lr", (None, byref(vd)))]
        for fn, args in calls:
            with self.subTest(fn=fn):
                self.expect_fail(fn, args, BAD, out_first=False)
        out = c_void_p()
        self.assertStatus(LIB.mt_tensor_grad(byref(out), None), BAD, "mt_tensor_grad")
        self.assertStatus(LIB.mt_tensor_detach(byref(out), None), BAD, "mt_tensor_detach")
        self.assertIsNone(out.value)

    def test_null_result_pointers(self):
        a = self.tensor([1.0], (1,))
        for fn in ("mt_tensor_ndim", "mt_tensor_shape", "mt_tensor_numel", "mt_tensor_dtype", "mt_tensor_device",
                   "mt_tensor_data_ptr", "mt_tensor_item", "mt_tensor_requires_grad"):
            with self.subTest(fn=fn):
                self.expect_fail(fn, (a, None), BAD, out_first=False)
        self.expect_fail("mt_tensor_copy_to_host", (a, None, 4), BAD, out_first=False)
        self.expect_fail("mt_tensor_copy_from_host", (a, None, 4), BAD, out_first=False)

    def test_null_data_and_shape(self):
        shape = U.shape_array((2, 2))
        self.expect_fail("mt_tensor_from_data", (None, shape, 2, MT_F32, self.DEV), BAD)
        self.expect_fail("mt_tensor_from_blob", (None, shape, 2, MT_F32, self.DEV), BAD)
        buf = U.host_buffer([0.0] * 4, MT_F32)
        self.expect_fail("mt_tensor_from_data", (c_void_p(U.buffer_ptr(buf)), None, 2, MT_F32, self.DEV), BAD)
        for fn in ("mt_tensor_zeros", "mt_tensor_ones"):
            self.expect_fail(fn, (None, 2, MT_F32, self.DEV), BAD)
        self.expect_fail("mt_reshape", (self.tensor([1.0] * 4, (4,)), None, 2), BAD)
        self.expect_fail("mt_permute", (self.tensor([1.0] * 4, (2, 2)), None, 2), BAD)

    def test_optimizer_bad_parameters(self):
        p = self.tensor([1.0], (1,), requires_grad=True)
        self.expect_fail("mt_optim_sgd", (None, 2, 0.1, 0.0, 0.0, 0), BAD)
        arr = (c_void_p * 2)(p, None)
        self.expect_fail("mt_optim_sgd", (arr, 2, 0.1, 0.0, 0.0, 0), BAD)
        arr1 = (c_void_p * 1)(p)
        self.expect_fail("mt_optim_sgd", (arr1, -1, 0.1, 0.0, 0.0, 0), BAD, ["-1"])

    def test_memcpy_null(self):
        buf = U.host_buffer([0.0] * 4, MT_F32)
        expected = BAD if U.HAVE_CUDA else (MT_ERR_INVALID_ARGUMENT, MT_ERR_DEVICE)
        for fn in ("mt_memcpy_h2d", "mt_memcpy_d2h", "mt_memcpy_d2d"):
            self.expect_fail(fn, (None, c_void_p(U.buffer_ptr(buf)), 16), expected, out_first=False)
            self.expect_fail(fn, (c_void_p(U.buffer_ptr(buf)), None, 16), expected, out_first=False)


class TestReleasedHandle(U.ABITestCase):
    """Using a handle after its last release is an error, not a crash. Run in a child
    process: if the library does crash, this test fails and the others go on."""

    def test_released_handle(self):
        script = textwrap.dedent("""
            import json, sys
            from ctypes import byref, c_int64, c_void_p
            sys.path.insert(0, %r)
            import abi_util as U
            L = U.LIB
            res = {}
            h = U.from_list([1.0, 2.0, 3.0], (3,))
            other = U.from_list([1.0, 2.0, 3.0], (3,))
            L.mt_tensor_release(h)
            v = c_int64()
            res["numel"] = [L.mt_tensor_numel(h, byref(v)), U.last_error()]
            out = c_void_p()
            res["add"] = [L.mt_add(byref(out), h, other), U.last_error(), out.value]
            res["retain"] = [L.mt_tensor_retain(h), U.last_error()]
            res["release"] = [L.mt_tensor_release(h), U.last_error()]
            res["usable"] = U.to_list(other)
            U.release(other)
            print(json.dumps(res))
        """ % os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, "using a released handle crashed the process (rc %d)\n%s"
                         % (out.returncode, out.stderr[-2000:]))
        res = json.loads(out.stdout.strip().splitlines()[-1])
        for fn, key in (("mt_tensor_numel", "numel"), ("mt_add", "add"), ("mt_tensor_retain", "retain"),
                        ("mt_tensor_release", "release")):
            st, msg = res[key][0], res[key][1]
            self.assertEqual(st, MT_ERR_INVALID_ARGUMENT, "%s on a released handle: %s %r" % (fn, U.status_name(st), msg))
            self.assertIn(fn, msg)
        self.assertIsNone(res["add"][2])
        self.assertEqual(res["usable"], [1.0, 2.0, 3.0])


class TestShapeErrors(ErrorCase):
    def test_matmul_inner_dimensions(self):
        a = self.tensor([0.0] * 12, (3, 4))
        b = self.tensor([0.0] * 30, (5, 6))
        self.expect_fail("mt_matmul", (a, b), MT_ERR_SHAPE, ["[3,4]", "[5,6]"])
        self.assertIn("inner", U.last_error())   # "mt_matmul: inner dimensions differ: a is [3,4], b is [5,6]"

    def test_matmul_batch_and_rank(self):
        a = self.tensor([0.0] * 24, (2, 3, 4))
        b = self.tensor([0.0] * 60, (3, 4, 5))
        self.expect_fail("mt_matmul", (a, b), MT_ERR_SHAPE, ["[2,3,4]", "[3,4,5]"])
        s = self.tensor([1.0], ())
        m = self.tensor([0.0] * 4, (2, 2))
        self.expect_fail("mt_matmul", (s, m), SHAPE_OR_ARG, ["[]", "[2,2]"])

    def test_binary_broadcast_mismatch(self):
        a = self.tensor([0.0] * 6, (2, 3), requires_grad=True)
        b = self.tensor([0.0] * 12, (4, 3))
        c = self.tensor([0.0] * 4, (4,))
        for fn in ("mt_add", "mt_sub", "mt_mul", "mt_div"):
            with self.subTest(fn=fn):
                self.expect_fail(fn, (a, b), MT_ERR_SHAPE, ["[2,3]", "[4,3]"])
                self.expect_fail(fn, (c, a), MT_ERR_SHAPE, ["[4]", "[2,3]"])

    def test_linear_shapes(self):
        x = self.tensor([0.0] * 12, (4, 3))
        w_bad = self.tensor([0.0] * 10, (5, 2))
        w = self.tensor([0.0] * 15, (5, 3))
        bias_bad = self.tensor([0.0] * 4, (4,))
        self.expect_fail("mt_linear", (x, w_bad, None), MT_ERR_SHAPE, ["[4,3]", "[5,2]"])
        self.expect_fail("mt_linear", (x, w, bias_bad), MT_ERR_SHAPE, ["[4]"])
        w3 = self.tensor([0.0] * 30, (2, 5, 3))
        self.expect_fail("mt_linear", (x, w3, None), SHAPE_OR_ARG, ["[2,5,3]"])

    def test_mse_loss_needs_same_shapes(self):
        p = self.tensor([0.0] * 4, (4, 1))
        t = self.tensor([0.0] * 4, (4,))
        self.expect_fail("mt_mse_loss", (p, t), MT_ERR_SHAPE, ["[4,1]", "[4]"])

    def test_dims_out_of_range(self):
        x = self.tensor([0.0] * 6, (2, 3))
        for fn in ("mt_sum_dim", "mt_mean_dim"):
            for dim in (2, -3, 100):
                with self.subTest(fn=fn, dim=dim):
                    self.expect_fail(fn, (x, dim, 0), SHAPE_OR_ARG, [str(dim)])
        for d0, d1 in ((0, 2), (-3, 0)):
            self.expect_fail("mt_transpose", (x, d0, d1), SHAPE_OR_ARG, [str(d0 if d0 in (2, -3) else d1)])

    def test_permute_invalid(self):
        x = self.tensor([0.0] * 24, (2, 3, 4))
        for perm in ((0, 1), (0, 0, 1), (0, 1, 3), (0, 1, 2, 3)):
            with self.subTest(perm=perm):
                self.expect_fail("mt_permute", (x, U.shape_array(perm), len(perm)), SHAPE_OR_ARG)

    def test_reshape_invalid(self):
        x = self.tensor([0.0] * 12, (3, 4))
        self.expect_fail("mt_reshape", (x, U.shape_array((5, 2)), 2), MT_ERR_SHAPE, ["[3,4]", "[5,2]"])
        self.expect_fail("mt_reshape", (x, U.shape_array((-1, -1)), 2), SHAPE_OR_ARG)
        self.expect_fail("mt_reshape", (x, U.shape_array((5, -1)), 2), SHAPE_OR_ARG, ["[5,-1]"])
        self.expect_fail("mt_reshape", (x, U.shape_array((-2, -6)), 2), SHAPE_OR_ARG)

    def test_item_needs_one_element(self):
        x = self.tensor([0.0] * 6, (2, 3))
        self.expect_fail("mt_tensor_item", (x, byref(c_double())), SHAPE_OR_ARG, ["[2,3]"], out_first=False)

    def test_backward_on_non_scalar(self):
        x = self.tensor([1.0, 2.0, 3.0, 4.0], (2, 2), requires_grad=True)
        y = self.op("mt_exp", x)
        t0 = LIB.mt_tape_size()
        self.assertStatus(LIB.mt_backward(y), SHAPE_OR_ARG, "mt_backward", ["[2,2]"])
        self.assertEqual(LIB.mt_tape_size(), t0)
        self.assertIsNone(U.grad_of(x))

    def test_backward_with_nothing_recorded(self):
        x = self.tensor([1.0], ())
        self.assertStatus(LIB.mt_backward(x), MT_ERR_STATE, "mt_backward")


class TestDtypeErrors(ErrorCase):
    def test_mixed_float_dtypes(self):
        a = self.tensor([1.0, 2.0], (2,), MT_F32, requires_grad=True)
        b = self.tensor([1.0, 2.0], (2,), MT_F64)
        for fn in ("mt_add", "mt_sub", "mt_mul", "mt_div", "mt_mse_loss"):
            with self.subTest(fn=fn):
                self.expect_fail(fn, (a, b), MT_ERR_DTYPE, ["float32", "float64"])
        m32 = self.tensor([0.0] * 4, (2, 2), MT_F32)
        m64 = self.tensor([0.0] * 4, (2, 2), MT_F64)
        self.expect_fail("mt_matmul", (m32, m64), MT_ERR_DTYPE, ["float32", "float64"])
        self.expect_fail("mt_linear", (m32, m64, None), MT_ERR_DTYPE, ["float32", "float64"])
        bias64 = self.tensor([0.0] * 2, (2,), MT_F64)
        self.expect_fail("mt_linear", (m32, m32, bias64), MT_ERR_DTYPE, ["float32", "float64"])

    def test_integer_tensors_in_float_ops(self):
        i = self.tensor([1, 2, 3], (3,), MT_I32)
        f = self.tensor([1.0, 2.0, 3.0], (3,), MT_F32)
        for fn in ("mt_exp", "mt_log", "mt_sigmoid", "mt_tanh", "mt_relu"):
            with self.subTest(fn=fn):
                self.expect_fail(fn, (i,), MT_ERR_DTYPE, ["int32"])
        self.expect_fail("mt_add", (i, f), MT_ERR_DTYPE, ["int32", "float32"])

    def test_invalid_dtype_values(self):
        shape = U.shape_array((2,))
        for bad in (7, 42, -1):
            with self.subTest(dtype=bad):
                self.expect_fail("mt_tensor_zeros", (shape, 1, bad, self.DEV), (MT_ERR_DTYPE, MT_ERR_INVALID_ARGUMENT),
                                 [str(bad)])
        x = self.tensor([1.0], (1,))
        self.expect_fail("mt_tensor_cast", (x, 42), (MT_ERR_DTYPE, MT_ERR_INVALID_ARGUMENT), ["42"])

    def test_requires_grad_on_integer_tensor(self):
        i = self.tensor([1, 2], (2,), MT_I32)
        st = LIB.mt_tensor_set_requires_grad(i, 1)
        # PyTorch refuses it; a library that allows it must at least not record integer ops
        if st != MT_OK:
            self.assertStatus(st, (MT_ERR_DTYPE, MT_ERR_INVALID_ARGUMENT), "mt_tensor_set_requires_grad", ["int32"])


class TestDeviceErrors(ErrorCase):
    def test_cuda_without_gpu(self):
        if U.HAVE_CUDA:
            self.skipTest("a GPU is present")
        shape = U.shape_array((2, 2))
        buf = U.host_buffer([0.0] * 4, MT_F32)
        self.expect_fail("mt_tensor_zeros", (shape, 2, MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_tensor_ones", (shape, 2, MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_tensor_full", (shape, 2, c_double(1.0), MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_tensor_rand", (shape, 2, 1, MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_tensor_randn", (shape, 2, 1, MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_tensor_arange", (c_double(0), c_double(3), c_double(1), MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_tensor_from_data", (c_void_p(U.buffer_ptr(buf)), shape, 2, MT_F32, MT_CUDA), MT_ERR_DEVICE)
        self.expect_fail("mt_malloc", (16, MT_CUDA), MT_ERR_DEVICE)
        x = self.tensor([1.0, 2.0], (2,), device=MT_CPU, requires_grad=True)
        self.expect_fail("mt_tensor_to", (x, MT_CUDA), MT_ERR_DEVICE)
        self.assertEqual(LIB.mt_live_bytes(MT_CUDA), 0)
        self.assertStatus(LIB.mt_free(None, MT_CUDA), MT_OK)

    def test_invalid_device_value(self):
        shape = U.shape_array((2,))
        for bad in (2, 7, -1):
            with self.subTest(device=bad):
                self.expect_fail("mt_tensor_zeros", (shape, 1, MT_F32, bad), (MT_ERR_DEVICE, MT_ERR_INVALID_ARGUMENT))
        self.expect_fail("mt_malloc", (16, 9), (MT_ERR_DEVICE, MT_ERR_INVALID_ARGUMENT))

    def test_mixed_devices(self):
        if not U.HAVE_CUDA:
            self.skipTest("needs a GPU")
        a = self.tensor([1.0, 2.0], (2,), device=MT_CPU, requires_grad=True)
        b = self.tensor([1.0, 2.0], (2,), device=MT_CUDA)
        for fn in ("mt_add", "mt_sub", "mt_mul", "mt_div", "mt_mse_loss"):
            with self.subTest(fn=fn):
                self.expect_fail(fn, (a, b), MT_ERR_DEVICE)
        m0 = self.tensor([0.0] * 4, (2, 2), device=MT_CPU)
        m1 = self.tensor([0.0] * 4, (2, 2), device=MT_CUDA)
        self.expect_fail("mt_matmul", (m0, m1), MT_ERR_DEVICE)
        self.expect_fail("mt_linear", (m1, m0, None), MT_ERR_DEVICE)


class TestSizeErrors(ErrorCase):
    def test_negative_sizes(self):
        shape = U.shape_array((2, -3))
        for fn, args in (("mt_tensor_zeros", (shape, 2, MT_F32, self.DEV)),
                         ("mt_tensor_ones", (shape, 2, MT_F32, self.DEV)),
                         ("mt_tensor_full", (shape, 2, c_double(1.0), MT_F32, self.DEV)),
                         ("mt_tensor_rand", (shape, 2, 1, MT_F32, self.DEV)),
                         ("mt_tensor_randn", (shape, 2, 1, MT_F32, self.DEV))):
            with self.subTest(fn=fn):
                self.expect_fail(fn, args, SHAPE_OR_ARG, ["-3"])
        buf = U.host_buffer([0.0] * 6, MT_F32)
        self.expect_fail("mt_tensor_from_data", (c_void_p(U.buffer_ptr(buf)), shape, 2, MT_F32, self.DEV),
                         SHAPE_OR_ARG, ["-3"])
        self.expect_fail("mt_tensor_zeros", (U.shape_array((2,)), -1, MT_F32, self.DEV), SHAPE_OR_ARG, ["-1"])
        self.expect_fail("mt_malloc", (-1, MT_CPU), BAD, ["-1"])

    def test_fill_values_outside_an_integer_dtype(self):
        # An integer dtype takes the value truncated toward zero; outside the type's range (or
        # NaN) the C cast was undefined (uint8 300 gave 44), so mt_tensor_full and, for an integer
        # x, mt_masked_fill refuse it. Floating dtypes take any value (1e300 is inf in float32).
        from abi_util import MT_I64, MT_U8
        ranges = {MT_U8: (0, 255), MT_I32: (-2 ** 31, 2 ** 31 - 1), MT_I64: (-2 ** 63, 2 ** 63 - 1)}
        shape = U.shape_array((2,))
        for dt, (lo, hi) in ranges.items():
            inside = [lo, hi if hi < 2 ** 53 else 2 ** 53, lo - 0.5 if lo else -0.5, self.rng.uniform(lo, min(hi, 2 ** 53))]
            outside = [lo - 1 if lo else -1, hi + 1, self.rng.uniform(hi + 1, 4 * hi + 4), float("nan"),
                       float("inf"), -float("inf")]
            if dt == MT_I64:
                outside = [2.0 ** 63, -2.0 ** 64, self.rng.uniform(2.0 ** 63, 2.0 ** 70), float("nan"), float("inf")]
            for v in inside:
                with self.subTest(dtype=U.DTYPE_NAMES[dt], value=v):
                    f = self.op("mt_tensor_full", shape, 1, c_double(v), dt, self.DEV)
                    self.assertEqual(U.to_list(f), [int(v)] * 2)
            for v in outside:
                with self.subTest(dtype=U.DTYPE_NAMES[dt], value=v):
                    self.expect_fail("mt_tensor_full", (shape, 1, c_double(v), dt, self.DEV), BAD,
                                     ["mt_tensor_full", U.DTYPE_NAMES[dt]])
            x = self.op("mt_tensor_zeros", shape, 1, dt, self.DEV)
            mask = self.op("mt_tensor_ones", shape, 1, MT_U8, self.DEV)
            self.expect_fail("mt_masked_fill", (x, mask, c_double(outside[1])), BAD, ["mt_masked_fill", U.DTYPE_NAMES[dt]])
            filled = self.op("mt_masked_fill", x, mask, c_double(inside[3]))
            self.assertEqual(U.to_list(filled), [int(inside[3])] * 2)
        f = self.op("mt_tensor_full", shape, 1, c_double(1e300), MT_F32, self.DEV)
        self.assertEqual(U.to_list(f), [float("inf")] * 2)

    def test_memcpy_negative_nbytes(self):
        buf = U.host_buffer([0.0] * 4, MT_F32)
        ptr = c_void_p(U.buffer_ptr(buf))
        expected = BAD if U.HAVE_CUDA else (MT_ERR_INVALID_ARGUMENT, MT_ERR_DEVICE)
        for fn in ("mt_memcpy_h2d", "mt_memcpy_d2h", "mt_memcpy_d2d"):
            self.expect_fail(fn, (ptr, ptr, -4), expected, out_first=False)

    def test_arange_invalid(self):
        self.expect_fail("mt_tensor_arange", (c_double(0), c_double(5), c_double(0), MT_F32, self.DEV), BAD)
        for args in ((0, 5, -1), (5, 0, 1)):
            out = c_void_p()
            st = LIB.mt_tensor_arange(byref(out), c_double(args[0]), c_double(args[1]), c_double(args[2]), MT_F32, self.DEV)
            if st == MT_OK:       # an empty range, as numpy gives
                self.keep(out.value)
                self.assertEqual(U.shape_of(out.value), (0,), str(args))
            else:
                self.assertStatus(st, BAD, "mt_tensor_arange")
        # values an integer dtype cannot hold (the conversion was undefined: uint8 -3 gave 253,
        # int64 1e29 gave -2^63), and counts past 2^60 (cast to int64 undefined)
        from abi_util import MT_I64, MT_U8
        for start, end, step, dt in ((-3, 3, 1, MT_U8), (0, 300, 1, MT_U8), (0, 1e30, 1e29, MT_I64),
                                     (2 ** 31 - 2, 2 ** 31 + 2, 1, MT_I32)):
            with self.subTest(start=start, end=end, dtype=U.DTYPE_NAMES[dt]):
                self.expect_fail("mt_tensor_arange", (c_double(start), c_double(end), c_double(step), dt, self.DEV),
                                 BAD, ["mt_tensor_arange", U.DTYPE_NAMES[dt]])
        self.expect_fail("mt_tensor_arange", (c_double(0), c_double(1e300), c_double(1), MT_F32, self.DEV), BAD,
                         ["too many"])
        lo = self.rng.randrange(0, 200)
        f = self.op("mt_tensor_arange", c_double(lo), c_double(256), c_double(5), MT_U8, self.DEV)
        self.assertEqual(U.to_list(f), list(range(lo, 256, 5)))

    def test_nbytes_mismatch(self):
        x = self.tensor([1.0, 2.0, 3.0], (3,), MT_F32)
        buf = U.host_buffer([0.0] * 8, MT_F32)
        ptr = c_void_p(U.buffer_ptr(buf))
        for fn in ("mt_tensor_copy_to_host", "mt_tensor_copy_from_host"):
            for n in (11, 16, 0, -4):
                with self.subTest(fn=fn, nbytes=n):
                    self.expect_fail(fn, (x, ptr, n), SHAPE_OR_ARG, [str(n), "12"], out_first=False)
        self.assertEqual(U.to_list(x), [1.0, 2.0, 3.0], "a refused copy writes nothing")


class TestAfterErrors(U.ABITestCase):
    def test_library_usable_and_silent(self):
        """A burst of failing calls in a child process: nothing printed, exit 0, a good op still works."""
        script = textwrap.dedent("""
            import sys
            from ctypes import byref, c_void_p, c_int64
            sys.path.insert(0, %r)
            import abi_util as U
            L = U.LIB
            a = U.from_list([0.0] * 12, (3, 4)); b = U.from_list([0.0] * 30, (5, 6))
            o = c_void_p()
            L.mt_matmul(byref(o), a, b); L.mt_add(byref(o), a, None); L.mt_backward(a); L.mt_backward(None)
            L.mt_tensor_zeros(byref(o), U.shape_array((-1,)), 1, 0, 0); L.mt_malloc(byref(o), -1, 0)
            L.mt_tensor_zeros(byref(o), U.shape_array((2,)), 1, 0, 7); L.mt_tensor_copy_to_host(a, None, 3)
            L.mt_reshape(byref(o), a, U.shape_array((7,)), 1); L.mt_sum_dim(byref(o), a, 5, 0)
            c = U.call("mt_add", a, a)
            ok = U.to_list(c) == [0.0] * 12
            for h in (a, b, c): U.release(h)
            sys.exit(0 if ok and L.mt_live_tensors() == 0 else 3)
        """ % os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        self.assertEqual(out.stdout, "", "the library printed to stdout")
        self.assertEqual(out.stderr, "", "the library printed to stderr")


if __name__ == "__main__":
    unittest.main()
