"""DLPack: Tensor.__dlpack__ / __dlpack_device__ and minitorch.from_dlpack (mt_tensor_to_dlpack,
mt_tensor_from_dlpack): zero-copy round trips within minitorch, with numpy (CPU, when
importable) and with torch (on the default device, when importable), capsule ownership and
leak checks."""

import gc
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import DEVICE, ON_CUDA, TestCase, mt  # noqa: E402

try:
    import numpy
except ImportError:
    numpy = None
try:
    import torch
    HAVE_TORCH = not ON_CUDA or torch.cuda.is_available()
except ImportError:
    torch = None
    HAVE_TORCH = False


class LeakCheck(TestCase):
    def setUp(self):
        gc.collect()
        self.live = mt.live_tensors()

    def tearDown(self):
        gc.collect()
        self.assertEqual(mt.live_tensors(), self.live, "a DLPack test leaked tensor handles")


class MinitorchRoundTrip(LeakCheck):
    def test_shares_memory(self):
        t = mt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        u = mt.from_dlpack(t)
        self.assertEqual(u.data_ptr(), t.data_ptr())
        self.assertEqual(u.tolist(), t.tolist())
        self.assertIs(u.dtype, t.dtype)
        self.assertEqual(u.device, t.device)
        t.add_(1.0)
        self.assertEqual(u[0, 0].item(), 2.0)
        del t
        gc.collect()
        self.assertEqual(u.sum().item(), 27.0)      # the import keeps the memory alive

    def test_every_dtype(self):
        for dt in (mt.float32, mt.float64, mt.int32, mt.int64, mt.uint8, mt.float16, mt.bfloat16):
            t = mt.tensor([1, 2, 3], dtype=dt)
            u = mt.from_dlpack(t)
            self.assertIs(u.dtype, dt)
            self.assertEqual(u.tolist(), t.tolist())

    def test_capsules(self):
        t = mt.ones(4)
        self.assertEqual(t.__dlpack_device__(), (2, 0) if t.is_cuda else (1, 0))
        c = t.__dlpack__()
        self.assertEqual(mt.live_tensors(), self.live + 2)   # t and the export's reference
        del c                                                # never consumed: the capsule frees it
        gc.collect()
        self.assertEqual(mt.live_tensors(), self.live + 1)
        c = t.__dlpack__(stream=None)
        u = mt.from_dlpack(c)                                # a bare capsule works too
        with self.assertRaises(TypeError):
            mt.from_dlpack(c)                                # consumed already
        self.assertEqual(u.tolist(), [1.0] * 4)
        with self.assertRaises(TypeError):
            mt.from_dlpack([1, 2])

    def test_requires_grad_and_copy(self):
        w = mt.ones(2, requires_grad=True)
        with self.assertRaises(RuntimeError):
            w.__dlpack__()
        t = mt.zeros(3)
        u = mt.from_dlpack(t.__dlpack__(copy=True))
        self.assertNotEqual(u.data_ptr(), t.data_ptr())


@unittest.skipIf(numpy is None, "numpy is not installed")
class NumpyRoundTrip(LeakCheck):
    def test_numpy_to_minitorch(self):
        a = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
        t = mt.from_dlpack(a)
        self.assertEqual(t.shape, (2, 3))
        self.assertEqual(t.tolist(), a.tolist())
        self.assertEqual(t.data_ptr(), a.__array_interface__["data"][0])   # no copy
        a[0, 0] = 10
        self.assertEqual(t[0, 0].item(), 10.0)
        del a
        gc.collect()
        self.assertEqual(t.sum().item(), 25.0)      # numpy's memory lives while t does
        for dt, mdt in ((numpy.float64, mt.float64), (numpy.int64, mt.int64), (numpy.int32, mt.int32),
                        (numpy.uint8, mt.uint8), (numpy.float16, mt.float16)):
            self.assertIs(mt.from_dlpack(numpy.ones(3, dtype=dt)).dtype, mdt)

    def test_non_contiguous_is_refused(self):
        a = numpy.arange(6, dtype=numpy.float32).reshape(2, 3)
        with self.assertRaises(NotImplementedError) as cm:
            mt.from_dlpack(a.T)
        self.assertIn("row-major", str(cm.exception))

    def test_minitorch_to_numpy(self):
        t = mt.tensor([[1.5, 2.5], [3.5, 4.5]], device="cpu")
        a = numpy.from_dlpack(t)
        self.assertEqual(a.tolist(), [[1.5, 2.5], [3.5, 4.5]])
        self.assertEqual(a.__array_interface__["data"][0], t.data_ptr())
        del t
        gc.collect()
        self.assertEqual(a.sum(), 12.0)             # the export keeps the storage alive
        del a


@unittest.skipIf(not HAVE_TORCH, "torch is not installed (or has no CUDA for MT_DEVICE=cuda)")
class TorchRoundTrip(LeakCheck):
    def test_minitorch_to_torch_and_back(self):
        t = mt.randn(33, 65, device=DEVICE)
        tt = torch.from_dlpack(t)
        self.assertEqual(tuple(tt.shape), (33, 65))
        self.assertEqual(tt.device.type, DEVICE.type)
        self.assertEqual(tt.data_ptr(), t.data_ptr())
        self.assertEqual(tt.cpu().tolist(), t.tolist())
        back = mt.from_dlpack(tt * 2)               # torch memory, freed when back goes
        self.assertEqual(back.tolist(), (t * 2).tolist())
        with self.assertRaises(NotImplementedError):
            mt.from_dlpack(tt.t())                  # a transposed view is not row-major
        del tt, back
        gc.collect()

    def test_dtypes(self):
        for tdt, mdt in ((torch.float32, mt.float32), (torch.float64, mt.float64), (torch.bfloat16, mt.bfloat16),
                         (torch.float16, mt.float16), (torch.int64, mt.int64), (torch.int32, mt.int32),
                         (torch.uint8, mt.uint8), (torch.bool, mt.uint8)):
            x = torch.ones(5, dtype=tdt, device=DEVICE.type)
            self.assertIs(mt.from_dlpack(x).dtype, mdt)


if __name__ == "__main__":
    unittest.main()
