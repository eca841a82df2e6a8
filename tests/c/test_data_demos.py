#!/usr/bin/env python3
"""test_data_demos.py [BUILD_DIR] - runs the data demos of frontends/c on small fixtures made here.

  mnist_mlp, softmax_regression  a fake MNIST: 256 training and 64 test images of 28x28 in IDX
                                 files (the training set raw, the test set gzipped), where class k
                                 is a bright 6x6 square at a place of its own plus noise
  sales                          2000 rows from scripts/gen_sales.py

Each demo must exit 0, print its per-epoch lines, end with "live tensors: 0" and write a metrics
CSV with one row per epoch of finite numbers. A missing data set must fail with the loader's
message, and a numeric flag whose value is not wholly a number ("3x", "abc", "inf", "") or
is out of its range (a negative count or rate) with one naming the flag and the value; sales
opens its metrics file before training. The real-data targets (MNIST >= 97.5%, ...) are checked by running the demos on the
real sets, not here. BUILD_DIR defaults to build/; the device is the demos' default
(MT_DEVICE=cpu|cuda is passed through).
"""
import csv
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from fake_mnist import write_fake_mnist  # noqa: E402

BUILD = os.path.abspath(os.environ.get("MINITORCH_BUILD", os.path.join(ROOT, "build")))
TIMEOUT_S = 300


def read_metrics(path, columns, rows):
    with open(path, newline="") as f:
        data = list(csv.reader(f))
    assert data, "%s is empty" % path
    assert data[0] == columns, "%s: header %s, expected %s" % (path, data[0], columns)
    assert len(data) - 1 == rows, "%s: %d rows, expected %d" % (path, len(data) - 1, rows)
    values = [[float(v) for v in r] for r in data[1:]]
    for r in values:
        assert all(math.isfinite(v) for v in r), "%s: non-finite value in %s" % (path, r)
    assert [r[0] for r in values] == list(range(1, rows + 1)), "%s: epochs are %s" % (path, [r[0] for r in values])
    return values


def assert_printed_percent(test, printed, fraction):
    """A percentage the demo printed with two decimals against the CSV's fraction: within half of
    the printed 0.01% (a tie such as 46.875% prints as 46.88)."""
    test.assertLessEqual(abs(float(printed) - 100 * fraction), 0.005 + 1e-9, (printed, fraction))


def run_demo(test, build, cwd, name, *args, expect_rc=0, device=None):
    """Runs build/name with args in cwd (with MT_DEVICE=device when given); test asserts the exit
    status and, on success, that the program ended with no live tensors. Returns the
    CompletedProcess."""
    exe = os.path.join(build, name)
    test.assertTrue(os.access(exe, os.X_OK), "%s not built (frontends/c/%s.c; run make)" % (exe, name))
    env = dict(os.environ, MT_DEVICE=device) if device else None
    p = subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd, env=env)
    test.assertEqual(p.returncode, expect_rc, "%s %s exited %d\n--- stdout\n%s--- stderr\n%s"
                     % (name, " ".join(args), p.returncode, p.stdout, p.stderr))
    if expect_rc == 0:
        test.assertRegex(p.stdout, r"(?m)^live tensors: 0$")
    return p


class DataDemos(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mt_data_demos_")
        cls.mnist = os.path.join(cls.tmp, "mnist")
        write_fake_mnist(cls.mnist, 256, 64)  # the test set gzipped: both loader paths
        cls.sales = os.path.join(cls.tmp, "sales.tsv")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_sales.py"), "--rows", "2000",
                        "--out", cls.sales], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_demo(self, name, *args, expect_rc=0, device=None):
        return run_demo(self, BUILD, self.tmp, name, *args, expect_rc=expect_rc, device=device)

    def graph_and_eager(self, device, name, args, csv_columns, epochs):
        """Runs name with args twice on device, recording the step by default and with --no-graph;
        checks the "training step:" lines and returns both metrics tables (the seconds column dropped)."""
        runs = []
        for flags in ([], ["--no-graph"]):
            out = os.path.join(self.tmp, "%s%s.csv" % (name, "".join(flags)))
            p = self.run_demo(name, *(args + flags + ["--csv", out]), device=device)
            recorded = device == "cuda" and not flags
            self.assertIn("training step: %s\n" % ("recorded once, replayed (CUDA graph)" if recorded else "eager"),
                          p.stdout)
            rows = read_metrics(out, csv_columns, epochs)
            runs.append([r[:-1] if csv_columns[-1] == "seconds" else r for r in rows])
        return runs

    # The fixtures leave a partial last batch (256 = 5 x 48 + 16 images, 1600 = 16 x 96 + 64 rows),
    # which runs eagerly between the replays of the full-size step.
    def softmax_regression_runs(self, device, *flags):
        return self.graph_and_eager(device, "softmax_regression",
                                    ["--data", self.mnist, "--epochs", "3", "--batch", "48"] + list(flags),
                                    ["epoch", "train_loss", "test_loss", "test_acc", "seconds"], 3)

    def sales_runs(self, device):
        return self.graph_and_eager(device, "sales", ["--data", self.sales, "--epochs", "3", "--batch", "96"],
                                    ["epoch", "sgd_train_loss", "sgd_test_mae", "adam_train_loss", "adam_test_mae",
                                     "baseline_mae"], 3)

    def test_cpu_runs_eagerly_with_and_without_no_graph(self):
        # recording is CUDA only: on the CPU the flag changes nothing, to the last digit
        for runs in (self.softmax_regression_runs("cpu"), self.softmax_regression_runs("cpu", "--autograd"),
                     self.sales_runs("cpu")):
            self.assertEqual(runs[0], runs[1])

    @unittest.skipUnless(os.environ.get("MT_DEVICE") == "cuda", "the step is recorded on CUDA only (MT_DEVICE=cuda)")
    def test_recorded_step_trains_as_the_eager_one(self):
        # The same kernels on the same batches, launched from a graph or one by one: equal up to
        # float32 rounding. Losses and MAEs within 1e-5 relative; the accuracy on 64 test images
        # within one image (an argmax near a tie may flip with the last bit of a logit).
        for name, runs in (("softmax_regression", self.softmax_regression_runs("cuda")),
                           ("softmax_regression --autograd", self.softmax_regression_runs("cuda", "--autograd")),
                           ("sales", self.sales_runs("cuda"))):
            graph, eager = runs
            for rg, re_ in zip(graph, eager):
                for col, (g, e) in enumerate(zip(rg, re_)):
                    if name.startswith("softmax_regression") and col == 3:
                        self.assertLessEqual(abs(g - e), 1.0 / 64 + 1e-9, "%s: %s vs %s" % (name, rg, re_))
                    else:
                        self.assertLessEqual(abs(g - e), 1e-5 * max(abs(e), 1e-6), "%s: %s vs %s" % (name, rg, re_))

    def test_mnist_mlp_sgd(self):
        out = os.path.join(self.tmp, "mlp.csv")
        p = self.run_demo("mnist_mlp", "--data", self.mnist, "--epochs", "3", "--batch", "32", "--csv", out)
        self.assertIn("SGD lr 0.05 momentum 0.9; batch 32; 3 epochs", p.stdout)
        self.assertEqual(len(re.findall(r"(?m)^epoch +\d+/3 +train loss", p.stdout)), 3, p.stdout)
        self.assertIn("epoch 3/3 [", p.stderr)  # the progress bar's final line
        rows = read_metrics(out, ["epoch", "train_loss", "test_loss", "test_acc", "seconds"], 3)
        self.assertLess(rows[-1][1], rows[0][1], "the training loss did not fall: %s" % rows)
        self.assertGreater(rows[-1][3], 0.5, "accuracy on the easy fake set: %s" % rows)
        m = re.search(r"final test accuracy ([\d.]+)%", p.stdout)
        self.assertTrue(m, p.stdout)
        assert_printed_percent(self, m.group(1), rows[-1][3])

    def test_mnist_mlp_adam_with_limits(self):
        out = os.path.join(self.tmp, "mlp_adam.csv")
        p = self.run_demo("mnist_mlp", "--data", self.mnist, "--optim", "adam", "--epochs", "2", "--limit", "100",
                          "--test-limit", "30", "--csv", out)
        self.assertIn("100 train, 30 test images", p.stdout)
        self.assertIn("Adam lr 0.001", p.stdout)
        read_metrics(out, ["epoch", "train_loss", "test_loss", "test_acc", "seconds"], 2)

    def test_mnist_mlp_missing_data_names_the_file(self):
        p = self.run_demo("mnist_mlp", "--data", os.path.join(self.tmp, "nowhere"), "--csv", "", expect_rc=1)
        self.assertIn("mt_load_idx", p.stderr)
        self.assertIn("nowhere/train-images-idx3-ubyte", p.stderr)
        self.assertIn("cannot open", p.stderr)

    def test_softmax_regression_hand_backward_matches_autograd(self):
        csv_a, csv_b = os.path.join(self.tmp, "sr.csv"), os.path.join(self.tmp, "sr_autograd.csv")
        p = self.run_demo("softmax_regression", "--data", self.mnist, "--epochs", "2", "--csv", csv_a)
        m = re.search(r"gradient check on one batch: .* rel err (\S+), .* rel err (\S+)", p.stdout)
        self.assertTrue(m, p.stdout)
        self.assertLess(float(m.group(1)), 1e-4)
        self.assertLess(float(m.group(2).rstrip(",")), 1e-4)
        self.run_demo("softmax_regression", "--data", self.mnist, "--epochs", "2", "--autograd", "--csv", csv_b)
        cols = ["epoch", "train_loss", "test_loss", "test_acc", "seconds"]
        hand, auto = read_metrics(csv_a, cols, 2), read_metrics(csv_b, cols, 2)
        for h, a in zip(hand, auto):  # the same model and batches: the same curve up to rounding
            self.assertAlmostEqual(h[1], a[1], delta=1e-4 * max(1.0, abs(a[1])))
            self.assertAlmostEqual(h[3], a[3], delta=1.5 / 64)
        self.assertGreater(hand[-1][3], 0.5)

    def test_sales_sgd_and_adam(self):
        out = os.path.join(self.tmp, "sales.csv")
        p = self.run_demo("sales", "--data", self.sales, "--epochs", "8", "--batch", "32", "--csv", out)
        self.assertIn("2000 rows", p.stdout)
        self.assertIn("1600 train, 400 test", p.stdout)
        self.assertIn("-> 19 features", p.stdout)  # quantity, unit price, 16 categories, day of year
        for opt in ("sgd", "adam"):
            self.assertEqual(len(re.findall(r"(?m)^%s +epoch +\d+/8 +train loss" % opt, p.stdout)), 8, p.stdout)
        self.assertRegex(p.stdout, r"epochs to reach SGD's final train loss [\d.]+: sgd \d+, adam (\d+|not within 8)")
        rows = read_metrics(out, ["epoch", "sgd_train_loss", "sgd_test_mae", "adam_train_loss", "adam_test_mae",
                                  "baseline_mae"], 8)
        baseline = rows[-1][5]
        self.assertLess(rows[-1][2], baseline, "SGD's test MAE is not below the mean predictor's: %s" % rows[-1])
        self.assertLess(rows[-1][4], baseline, "Adam's test MAE is not below the mean predictor's: %s" % rows[-1])

    def test_malformed_numbers_are_refused(self):
        # a numeric flag whose value is not wholly a number, or is out of the flag's range, stops
        # the demo with the flag's name before any data is read (atoi/atof read "3x" as 3 and
        # "abc" as 0, and a negative count or rate meant "the default", and all went on)
        bad = ("%s wants an integer, got '%s'", "%s wants a finite number, got '%s'")
        for name, flag, value, want in (
                ("mnist_mlp", "--epochs", "3x", bad[0]), ("mnist_mlp", "--lr", "abc", bad[1]),
                ("mnist_mlp", "--batch", "", bad[0]), ("mnist_mlp", "--momentum", "inf", bad[1]),
                ("softmax_regression", "--limit", "1e3", bad[0]),
                ("sales", "--epochs", "99999999999", "%s must be 1..1000000, got %s"),
                ("sales", "--adam-lr", "0.01x", bad[1]),
                ("mnist_mlp", "--epochs", "-3", "%s must be 1..1000000, got %s"),
                ("mnist_mlp", "--lr", "-0.5", "%s must be >= 0, got %s"),
                ("mnist_mlp", "--limit", "-5", "%s must be 0..9223372036854775807, got %s"),
                ("mnist_mlp", "--momentum", "-1", "%s must be >= 0, got %s"),
                ("softmax_regression", "--lr", "-1", "%s must be >= 0, got %s"),
                ("softmax_regression", "--test-limit", "-1", "%s must be 0..9223372036854775807, got %s"),
                ("sales", "--sgd-lr", "-0.1", "%s must be >= 0, got %s"),
                ("sales", "--batch", "0", "%s must be 1..1048576, got %s")):
            with self.subTest(demo=name, flag=flag, value=value):
                p = self.run_demo(name, flag, value, "--csv", "", expect_rc=1)
                self.assertIn("%s: %s" % (name, want % (flag, value)), p.stderr)
                self.assertNotIn("epoch", p.stdout)

    def test_unknown_options_are_named(self):
        for name, args, want in (("mnist_mlp", ["--bogus", "1"], "unknown option --bogus"),
                                 ("softmax_regression", ["--autograd", "--bogus"], "--bogus is unknown or needs a value"),
                                 ("sales", ["--epochs"], "--epochs is unknown or needs a value")):
            with self.subTest(demo=name, args=args):
                p = self.run_demo(name, *args, expect_rc=2)
                self.assertIn("%s: %s" % (name, want), p.stderr)
                self.assertIn("usage: %s" % name, p.stderr)

    def test_sales_opens_its_metrics_before_training(self):
        blocker = os.path.join(self.tmp, "a_file")
        with open(blocker, "w") as f:
            f.write("x")
        p = self.run_demo("sales", "--data", self.sales, "--epochs", "2", "--csv", os.path.join(blocker, "m.csv"),
                          expect_rc=1)
        self.assertIn("metrics: cannot write %s" % os.path.join(blocker, "m.csv"), p.stderr)
        self.assertNotIn("epoch", p.stdout)

    def test_sales_missing_file(self):
        p = self.run_demo("sales", "--data", os.path.join(self.tmp, "none.tsv"), "--csv", "", expect_rc=1)
        self.assertIn("mt_load_tsv", p.stderr)
        self.assertIn("none.tsv: cannot open", p.stderr)

    def test_gen_sales_is_deterministic_with_the_schema(self):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_sales.py"), "--rows", "2000",
                              "--out", "-"], check=True, capture_output=True).stdout
        with open(self.sales, "rb") as f:
            self.assertEqual(hashlib.md5(out).hexdigest(), hashlib.md5(f.read()).hexdigest())
        lines = out.decode().splitlines()
        self.assertEqual(len(lines), 2000)
        for i, line in enumerate(lines[:200]):
            f = line.split("\t")
            self.assertEqual(len(f), 10, line)
            self.assertRegex(f[2], r"^\d{4}-\d{2}-\d{2}$")
            self.assertTrue(f[3].startswith(f[2] + " "), line)
            self.assertRegex(f[3], r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$")
            qty, price, total = float(f[4]), float(f[5]), float(f[8])
            self.assertGreater(qty, 0)
            self.assertGreater(total, 0)
            # total = qty * price * (1 + tax <= 0.19) * (1 - promo <= 0.15) * (1 + 2% noise), to cents
            self.assertLess(abs(total / (qty * price) - 1.0), 0.35, line)
            self.assertEqual(int(f[9]), i + 1)
        self.assertEqual(len({l.split("\t")[6] for l in lines}), 16)

    def test_plot_metrics_writes_a_png(self):
        src = os.path.join(self.tmp, "plot.csv")
        with open(src, "w") as f:
            f.write("epoch,train_loss,test_loss,test_acc,seconds\n1,0.5,0.4,0.88,1\n2,0.3,0.35,0.9,2\n")
        png = os.path.join(self.tmp, "plot.png")
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_metrics.py"), src, "-o", png,
                            "--no-install"], capture_output=True, text=True, timeout=TIMEOUT_S)
        if p.returncode != 0 and "neither matplotlib nor gnuplot" in p.stderr:
            self.skipTest("no plotting backend installed (plot_metrics.py installs one when allowed)")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        BUILD = os.path.abspath(sys.argv.pop(1))
    print("data demos in %s (MT_DEVICE=%s)" % (BUILD, os.environ.get("MT_DEVICE", "(default)")))
    unittest.main(verbosity=2)
