#!/usr/bin/env python3
"""test_op_overhead.py [BUILD_DIR] - runs the host-path micro-benchmark frontends/c/op_overhead.c
briefly (a few hundred calls per run) and checks that it runs and prints a sane table; the timings
themselves are `make bench`'s business (no threshold here: CI machines differ too much).

The program checks each op's result against a double-precision value of its own before timing
(the "checked" column); this test checks the table: the twelve rows (add, mul, relu, matmul, sum
with and without recording, the MLP forward and training step), finite positive microseconds
with min <= median <= max, the host's part (time until the last call returned) positive and no
more than the median (each run's host part is within its total, so the medians are ordered too),
"live tensors: 0", --only, and the refusal of bad flags.
BUILD_DIR defaults to build/; the device is MT_DEVICE's (cpu when unset).
"""
import math
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("MINITORCH_BUILD", os.path.join(ROOT, "build")))
DEVICE = os.environ.get("MT_DEVICE", "cpu")
TIMEOUT_S = 300
ROW = re.compile(r"(?m)^(\w+)\s+(\S+)\s+(no|yes)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+checked$")
EXPECTED = [(op, shape, grad) for op, shape in (("add", "[4]"), ("mul", "[4]"), ("relu", "[4]"),
                                                 ("matmul", "[4,4]"), ("sum", "[4]"))
            for grad in ("no", "yes")] + [("mlp_forward", "4-8-1", "no"), ("mlp_train_step", "4-8-1", "yes")]


def run(*args, expect_rc=0):
    exe = os.path.join(BUILD, "op_overhead")
    assert os.access(exe, os.X_OK), "%s not built (frontends/c/op_overhead.c; run make)" % exe
    p = subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode == expect_rc, "op_overhead %s exited %d\n--- stdout\n%s--- stderr\n%s" % (
        " ".join(args), p.returncode, p.stdout, p.stderr)
    return p


class OpOverhead(unittest.TestCase):
    def rows(self, out):
        found = []
        for op, shape, grad, med, lo, hi, host in ROW.findall(out):
            med, lo, hi, host = float(med), float(lo), float(hi), float(host)
            for v in (med, lo, hi, host):
                # 0.01 us is ~30 instructions, less than a call can cost; 1e5 us would be a hang
                self.assertTrue(math.isfinite(v) and 0.01 <= v < 1e5, "%s %s: %g us per call\n%s" % (op, grad, v, out))
            self.assertTrue(lo <= med <= hi, "%s %s: min %g, median %g, max %g" % (op, grad, lo, med, hi))
            self.assertLessEqual(host, med, "%s %s: host part %g us is more than the total's median %g" % (
                op, grad, host, med))
            found.append((op, shape, grad, med))
        return found

    def test_table(self):
        p = run("--device", DEVICE, "--calls", "400", "--runs", "3")
        self.assertRegex(p.stdout, r"^op_overhead: device \S.*, 400 calls per run \(40 for the mlp rows\), median of 3 runs")
        rows = self.rows(p.stdout)
        self.assertEqual([r[:3] for r in rows], EXPECTED, p.stdout)
        self.assertRegex(p.stdout, r"(?m)^live tensors: 0$")
        by = {(r[0], r[2]): r[3] for r in rows}
        # a training step makes many calls of the single ops' kind: it cannot be cheaper than one
        self.assertGreater(by[("mlp_train_step", "yes")], by[("add", "no")], p.stdout)

    def test_only_one_op(self):
        p = run("--device", DEVICE, "--calls", "200", "--runs", "1", "--only", "matmul")
        self.assertEqual([r[:3] for r in self.rows(p.stdout)], [("matmul", "[4,4]", "no"), ("matmul", "[4,4]", "yes")])
        self.assertRegex(p.stdout, r"(?m)^live tensors: 0$")

    def test_bad_flags(self):
        self.assertIn("op_overhead: --device must be cpu or cuda, got tpu", run("--device", "tpu", expect_rc=1).stderr)
        self.assertIn("op_overhead: --calls must be >= 10, got 3", run("--calls", "3", expect_rc=1).stderr)
        self.assertIn("op_overhead: --runs must be 1..64, got 0", run("--runs", "0", expect_rc=1).stderr)
        self.assertIn("op_overhead: --only names no row: conv", run("--device", "cpu", "--calls", "10", "--runs", "1",
                                                                   "--only", "conv", expect_rc=1).stderr)
        self.assertIn("usage: op_overhead", run("--bogus", "1", expect_rc=2).stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        BUILD = os.path.abspath(sys.argv.pop(1))
    print("op_overhead in %s (device %s)" % (BUILD, DEVICE))
    unittest.main(verbosity=2)
