"""The `make bench` table's arithmetic (scripts/bench/harness.py): the ratio, the throughput and
the % column, against the copy bandwidth for bytes-moved rows and against a row's own ceiling
(cuBLAS) for the GEMM rows. Values are drawn at random and the expected cells computed here
by hand from the same definitions. And bw_study.py's --shapes argument."""
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench"))
import harness  # noqa: E402


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


class BenchTable(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(os.urandom(8))

    def test_bytes_row_against_copy_bandwidth(self):
        ms, torch_ms = self.rng.uniform(0.05, 2.0), self.rng.uniform(0.05, 2.0)
        nbytes, copy_gbs = self.rng.randint(1 << 20, 1 << 30), self.rng.uniform(1000, 4000)
        row = harness.Row("w", "s", ms, torch_ms, work_bytes=nbytes)
        header, _, line = harness.format_table([row], copy_gbs)
        self.assertIn("% of copy BW or GEMM ceiling", header)
        c = cells(line)
        gbs = nbytes / (ms * 1e-3) / 1e9
        self.assertEqual(c[4], "%.2f×" % (torch_ms / ms))
        self.assertEqual(c[6], "%.0f%%" % (100 * gbs / copy_gbs))

    def test_gemm_row_against_its_ceiling(self):
        ms, ceiling_ms = self.rng.uniform(0.1, 3.0), self.rng.uniform(0.1, 3.0)
        n = self.rng.choice([1024, 2048, 4096])
        row = harness.Row("gemm", "%d³" % n, ms, None, work_flops=2.0 * n ** 3, ceiling_ms=ceiling_ms)
        c = cells(harness.format_table([row], 3000.0)[2])
        self.assertEqual(c[6], "%.0f%%" % (100 * ceiling_ms / ms))
        self.assertEqual(c[4], "—")  # no PyTorch time, no ratio

    def test_no_ceiling_gives_a_dash(self):
        # a flops row without a ceiling, and a bytes row when the copy bandwidth was not measured
        flops = harness.Row("attention", "s", 1.0, 2.0, work_flops=1e12)
        nbytes = harness.Row("add", "s", 1.0, 2.0, work_bytes=1 << 28)
        self.assertEqual(cells(harness.format_table([flops], 3000.0)[2])[6], "—")
        self.assertEqual(cells(harness.format_table([nbytes], None)[2])[6], "—")


class StudyShapes(unittest.TestCase):
    """bw_study.py's --shapes: random ROWSxCOLS lists parse to their pairs; malformed ones are
    refused by argparse (exit status 2) before any GPU work."""

    def test_shapes(self):
        import contextlib
        import io
        import bw_study
        rng = random.Random(os.urandom(8))
        want = [(rng.randint(1, 1 << 20), rng.randint(1, 1 << 16)) for _ in range(rng.randint(1, 5))]
        text = ",".join("%dx%d" % sh for sh in want)
        self.assertEqual(bw_study.parse_args(["--shapes", text]).shapes, want)
        self.assertIsNone(bw_study.parse_args([]).shapes)
        for bad in ("abc", "8x", "0x4", "8x-4", "8x4x2", "", "8x4,", "8*4"):
            with self.subTest(shapes=bad), contextlib.redirect_stderr(io.StringIO()) as err:
                with self.assertRaises(SystemExit) as cm:
                    bw_study.parse_args(["--shapes", bad])
                self.assertEqual(cm.exception.code, 2)
                self.assertIn("--shapes", err.getvalue())


if __name__ == "__main__":
    unittest.main()
