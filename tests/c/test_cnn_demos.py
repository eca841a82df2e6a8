#!/usr/bin/env python3
"""test_cnn_demos.py [BUILD_DIR] - runs the convolutional demos of frontends/c (mnist_cnn, lenet5)
on the small fake MNIST of tests/fake_mnist.py (class k is a bright 6x6 square at a place of its
own, plus noise): 256 training and 64 test images, a few epochs, so that CI (no GPU, 2 cores)
runs them in seconds.

Each run must exit 0, describe the model it built (layers and the parameter count, checked against
the count worked out here by hand), print one line per epoch with the training accuracy, report the
training time and peak device memory, end with "live tensors: 0", and write a metrics CSV of
finite numbers with one row per epoch. On the easy fake set the training loss must fall and the
test accuracy must pass 50%.

One test checks the training path against the evaluation path: with --lr 0 the model never changes,
and when the test split is the training split the epoch's mean training loss and accuracy (kept on
the device, batch by batch, by mnist_batch_accuracy and the loss meters) must equal the test loss
and accuracy (computed by mnist_evaluate in chunks, the accuracy counted on the host).

The real-data targets (MNIST >= 98.5%, Fashion-MNIST >= 89%, LeNet-5 >= 99%) are checked by
running the demos on the real sets on a GPU (`make bench`, rows mnist-cnn, fashion-cnn, lenet5).
BUILD_DIR defaults to build/; the device is the demos' default (MT_DEVICE=cpu|cuda is passed through).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from fake_mnist import fake_mnist, write_split  # noqa: E402
from test_data_demos import assert_printed_percent, read_metrics, run_demo  # noqa: E402

BUILD = os.path.abspath(os.environ.get("MINITORCH_BUILD", os.path.join(ROOT, "build")))
TIMEOUT_S = 300
COLUMNS = ["epoch", "train_loss", "train_acc", "test_loss", "test_acc", "seconds"]


def conv_params(cin, cout, k):
    return cout * cin * k * k + cout


def linear_params(cin, cout):
    return cout * cin + cout


# worked out from the layer lists in frontends/c/mnist_cnn.c and lenet5.c
ROADMAP_PARAMS = conv_params(1, 8, 3) + conv_params(8, 16, 3) + linear_params(16 * 7 * 7, 64) + linear_params(64, 10)
ROADMAP_BN_PARAMS = ROADMAP_PARAMS + 2 * 8 + 2 * 16   # gamma and beta of BatchNorm2d(8), (16)
LENET_PARAMS = (conv_params(1, 6, 5) + conv_params(6, 16, 5) + linear_params(400, 120) + linear_params(120, 84)
                + linear_params(84, 10))


class CnnDemos(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mt_cnn_demos_")
        cls.mnist = os.path.join(cls.tmp, "mnist")
        cls.same = os.path.join(cls.tmp, "same")  # the test split is the training split
        os.makedirs(cls.mnist)
        os.makedirs(cls.same)
        train = fake_mnist(256, 1)
        write_split(cls.mnist, "train", *train)
        write_split(cls.mnist, "t10k", *fake_mnist(64, 2))
        write_split(cls.same, "train", *train)
        write_split(cls.same, "t10k", *train)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_demo(self, name, *args, expect_rc=0):
        return run_demo(self, BUILD, self.tmp, name, *args, expect_rc=expect_rc)

    def check_training(self, p, csv_path, epochs, model_line, params):
        """The model line, the per-epoch lines, the final lines and the CSV of a finished run."""
        self.assertIn("model: %s; %d parameters" % (model_line, params), p.stdout)
        lines = re.findall(r"(?m)^epoch +\d+/%d +train loss [\d.]+ +train acc ([\d.]+)%%" % epochs, p.stdout)
        self.assertEqual(len(lines), epochs, p.stdout)
        self.assertIn("epoch %d/%d [" % (epochs, epochs), p.stderr)  # the progress bar's final line
        rows = read_metrics(csv_path, COLUMNS, epochs)
        for r in rows:
            self.assertTrue(0 <= r[2] <= 1 and 0 <= r[4] <= 1, "accuracies out of [0, 1]: %s" % r)
        for line, r in zip(lines, rows):
            assert_printed_percent(self, line, r[2])
        m = re.search(r"final test accuracy ([\d.]+)%", p.stdout)
        self.assertTrue(m, p.stdout)
        assert_printed_percent(self, m.group(1), rows[-1][4])
        self.assertRegex(p.stdout, r"(?m)^training time [\d.]+ s")
        m = re.search(r"(?m)^peak device memory ([\d.]+) MiB", p.stdout)
        self.assertTrue(m, p.stdout)
        self.assertGreater(float(m.group(1)), 0)
        return rows

    def test_mnist_cnn_learns(self):
        out = os.path.join(self.tmp, "cnn.csv")
        p = self.run_demo("mnist_cnn", "--data", self.mnist, "--epochs", "3", "--batch", "32", "--csv", out)
        self.assertIn("training: Adam lr 0.001; batch 32; 3 epochs", p.stdout)
        rows = self.check_training(
            p, out, 3, "roadmap CNN: Conv2d(1,8,k3,p1) -> ReLU -> MaxPool2d(2) -> Conv2d(8,16,k3,p1) -> ReLU -> "
            "MaxPool2d(2) -> Flatten -> Linear(784,64) -> ReLU -> Linear(64,10)", ROADMAP_PARAMS)
        self.assertLess(rows[-1][1], rows[0][1], "the training loss did not fall: %s" % rows)
        self.assertGreater(rows[-1][4], 0.5, "accuracy on the easy fake set: %s" % rows)

    def test_mnist_cnn_batch_norm_sgd_with_limits(self):
        out = os.path.join(self.tmp, "cnn_bn.csv")
        p = self.run_demo("mnist_cnn", "--bn", "--data", self.mnist, "--optim", "sgd", "--epochs", "3", "--limit",
                          "200", "--test-limit", "40", "--csv", out)
        self.assertIn("200 train, 40 test images", p.stdout)
        self.assertIn("SGD lr 0.05 momentum 0.9", p.stdout)
        rows = self.check_training(
            p, out, 3, "roadmap CNN with BatchNorm: Conv2d(1,8,k3,p1) -> BatchNorm2d(8) -> ReLU -> MaxPool2d(2) -> "
            "Conv2d(8,16,k3,p1) -> BatchNorm2d(16) -> ReLU -> MaxPool2d(2) -> Flatten -> Linear(784,64) -> ReLU -> "
            "Linear(64,10)", ROADMAP_BN_PARAMS)
        self.assertLess(rows[-1][1], rows[0][1], "the training loss did not fall: %s" % rows)

    def test_lenet5_relu_max_and_tanh_avg(self):
        out = os.path.join(self.tmp, "lenet.csv")
        p = self.run_demo("lenet5", "--data", self.mnist, "--epochs", "3", "--batch", "32", "--csv", out)
        rows = self.check_training(
            p, out, 3, "LeNet-5: Conv2d(1,6,k5,p2) -> ReLU -> MaxPool2d(2) -> Conv2d(6,16,k5,p0) -> ReLU -> "
            "MaxPool2d(2) -> Flatten -> Linear(400,120) -> ReLU -> Linear(120,84) -> ReLU -> Linear(84,10)",
            LENET_PARAMS)
        self.assertLess(rows[-1][1], rows[0][1], "the training loss did not fall: %s" % rows)
        self.assertGreater(rows[-1][4], 0.5, "accuracy on the easy fake set: %s" % rows)
        p = self.run_demo("lenet5", "--tanh", "--avgpool", "--data", self.mnist, "--epochs", "1", "--csv", out)
        self.check_training(
            p, out, 1, "LeNet-5: Conv2d(1,6,k5,p2) -> Tanh -> AvgPool2d(2) -> Conv2d(6,16,k5,p0) -> Tanh -> "
            "AvgPool2d(2) -> Flatten -> Linear(400,120) -> Tanh -> Linear(120,84) -> Tanh -> Linear(84,10)",
            LENET_PARAMS)

    def test_training_meters_agree_with_evaluation(self):
        out = os.path.join(self.tmp, "frozen.csv")
        # batch 48 leaves a tail batch of 16: the meters must weight it by its size
        self.run_demo("mnist_cnn", "--data", self.same, "--lr", "0", "--epochs", "1", "--batch", "48", "--csv", out)
        (row,) = read_metrics(out, COLUMNS, 1)
        # float32 losses summed in different orders (48-row batches vs one 256-row chunk)
        self.assertAlmostEqual(row[1], row[3], delta=1e-5 * max(1.0, abs(row[3])))
        self.assertAlmostEqual(row[2], row[4], delta=1e-5)  # 1/256 would be one image

    def test_bad_flags(self):
        p = self.run_demo("mnist_cnn", "--optim", "rmsprop", "--data", self.mnist, expect_rc=1)
        self.assertIn("mnist_cnn: --optim must be sgd or adam, got rmsprop", p.stderr)
        p = self.run_demo("lenet5", "--device", "tpu", "--data", self.mnist, expect_rc=1)
        self.assertIn("lenet5: --device must be cpu or cuda, got tpu", p.stderr)
        p = self.run_demo("mnist_cnn", "--no-such-flag", expect_rc=2)
        self.assertIn("usage: mnist_cnn [--bn]", p.stderr)
        p = self.run_demo("mnist_cnn", "--data", os.path.join(self.tmp, "nowhere"), "--csv", "", expect_rc=1)
        self.assertIn("mt_load_idx", p.stderr)
        self.assertIn("nowhere/train-images-idx3-ubyte", p.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        BUILD = os.path.abspath(sys.argv.pop(1))
    print("cnn demos in %s (MT_DEVICE=%s)" % (BUILD, os.environ.get("MT_DEVICE", "(default)")))
    unittest.main(verbosity=2)
