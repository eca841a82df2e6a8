"""minitorch.data (IDX and TSV files read by the library) and randperm."""

import gzip
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import DEVICE, TestCase, mt  # noqa: E402


def idx_bytes(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">i", d) for d in dims) + payload


class DataFileTest(TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name, data):
        p = os.path.join(self.dir.name, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def test_load_idx(self):
        raw = idx_bytes(0x08, [2, 3], bytes([0, 1, 2, 250, 254, 255]))
        t = mt.data.load_idx(self.path("images.idx", raw))
        self.assertIs(t.dtype, mt.uint8)
        self.assertEqual(t.device, DEVICE)
        self.assertEqual(t.tolist(), [[0, 1, 2], [250, 254, 255]])
        gz = self.path("images.idx.gz", gzip.compress(raw))
        self.assertEqual(mt.data.load_idx(gz, device="cpu").tolist(), [[0, 1, 2], [250, 254, 255]])
        floats = idx_bytes(0x0D, [3], struct.pack(">3f", 1.5, -2.0, 0.25))
        f = mt.data.load_idx(self.path("f.idx", floats))
        self.assertIs(f.dtype, mt.float32)
        self.assertEqual(f.tolist(), [1.5, -2.0, 0.25])

    def test_load_idx_errors_are_io_errors(self):
        with self.assertRaises(mt.InputOutputError) as cm:
            mt.data.load_idx(os.path.join(self.dir.name, "missing.idx"))
        self.assertIsInstance(cm.exception, RuntimeError)
        self.assertIn("missing.idx", str(cm.exception))
        with self.assertRaises(mt.InputOutputError):
            mt.data.load_idx(self.path("bad.idx", b"\x01\x02\x03\x04"))

    def test_load_tsv(self):
        text = "1.5\tred\t2024-01-02\t10\n-2\tblue\t2024-02-01\t20\n0.5\tred\t2024-12-31\t30\n"
        p = self.path("table.tsv", text.encode())
        x, y = mt.data.load_tsv(p, "0:num,1:cat,2:date", 3)
        self.assertIs(x.dtype, mt.float32)
        self.assertEqual(x.shape, (3, 4))          # num + two one-hot columns + day of year
        self.assertEqual(x.tolist(), [[1.5, 1.0, 0.0, 2.0], [-2.0, 0.0, 1.0, 32.0], [0.5, 1.0, 0.0, 366.0]])
        self.assertEqual(y.tolist(), [[10.0], [20.0], [30.0]])
        x2, _ = mt.data.load_tsv(p, ["0:num", "2:date"], 3)
        self.assertEqual(x2.tolist(), [[1.5, 2.0], [-2.0, 32.0], [0.5, 366.0]])
        bad = self.path("bad.tsv", b"1.5\t2\nx\t3\n")
        with self.assertRaises(mt.InputOutputError):
            mt.data.load_tsv(bad, "0:num", 1)
        with self.assertRaises(ValueError):
            mt.data.load_tsv(p, "0:num,3:num", 3)          # the target cannot be a feature


class RandpermTest(TestCase):
    def test_randperm(self):
        mt.manual_seed(7)
        p = mt.randperm(100)
        self.assertIs(p.dtype, mt.int64)
        self.assertEqual(sorted(p.tolist()), list(range(100)))
        self.assertNotEqual(p.tolist(), list(range(100)))
        mt.manual_seed(7)
        self.assertEqual(mt.randperm(100).tolist(), p.tolist())
        self.assertEqual(mt.randperm(0).tolist(), [])


if __name__ == "__main__":
    unittest.main()
