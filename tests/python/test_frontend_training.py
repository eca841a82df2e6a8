"""End to end: long training loops do not leak handles or bytes, and the XOR example
trains (in a subprocess with small settings, and in process to convergence)."""

import gc
import importlib.util
import io
import os
import subprocess
import sys
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import DEVICE, PACKAGE_DIR, TestCase, mt  # noqa: E402

nn = mt.nn
XOR = os.path.join(PACKAGE_DIR, "examples", "xor.py")


def load_xor():
    spec = importlib.util.spec_from_file_location("minitorch_example_xor", XOR)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class LeakTest(TestCase):
    def train_steps(self, model, opt, x, y, steps, loss_fn):
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        return loss.item()

    def check_flat(self, make_opt, loss_fn, y):
        mt.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
        opt = make_opt(model.parameters())
        x = mt.randn(32, 8)
        first = self.train_steps(model, opt, x, y, 3, loss_fn)   # optimizer state and grads exist now
        gc.collect()
        tensors, host, dev = mt.live_tensors(), mt.live_bytes("cpu"), mt.live_bytes(DEVICE)
        last = self.train_steps(model, opt, x, y, 300, loss_fn)
        gc.collect()
        self.assertEqual(mt.live_tensors(), tensors)
        self.assertEqual(mt.live_bytes("cpu"), host)
        self.assertEqual(mt.live_bytes(DEVICE), dev)
        self.assertEqual(mt.autograd.tape_size(), 0)
        self.assertLess(last, first)

    def test_sgd_mse_loop_is_flat(self):
        self.check_flat(lambda p: mt.optim.SGD(p, lr=0.05, momentum=0.9), nn.MSELoss(), mt.randn(32, 4))

    def test_adam_cross_entropy_loop_is_flat(self):
        y = mt.tensor([i % 4 for i in range(32)])
        self.check_flat(lambda p: mt.optim.Adam(p, lr=1e-2), nn.CrossEntropyLoss(), y)

    def test_everything_is_released_at_the_end(self):
        gc.collect()
        base = mt.live_tensors()
        model = nn.Linear(4, 2)
        opt = mt.optim.AdamW(model.parameters())
        x = mt.randn(5, 4)
        for _ in range(5):
            opt.zero_grad()
            out = model(x)
            loss = (out[1:] ** 2).mean() + out.softmax(1).max()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        with mt.no_grad():
            model(x).sum().item()
        del model, opt, x, out, loss
        gc.collect()
        self.assertEqual(mt.live_tensors(), base)


class XorExampleTest(TestCase):
    def test_runs_as_a_script_with_small_settings(self):
        env = dict(os.environ)
        r = subprocess.run([sys.executable, XOR, "--epochs", "300", "--log-every", "100", "--target", "1"],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("epoch   100  loss", r.stdout)
        self.assertIn("epoch   300  loss", r.stdout)
        self.assertIn("final loss", r.stdout)
        self.assertIn("1 xor 1 ->", r.stdout)

    def test_converges_with_the_default_settings(self):
        xor = load_xor()
        with redirect_stdout(io.StringIO()) as out:
            loss = xor.train(epochs=5000, lr=0.5, seed=0, log_every=1000, show_bar=False)
        self.assertLess(loss, 0.01, out.getvalue())
        lines = [l for l in out.getvalue().splitlines() if " xor " in l]
        answers = [float(l.split("->")[1]) for l in lines]
        self.assertEqual([round(a) for a in answers], [0, 1, 1, 0])


if __name__ == "__main__":
    unittest.main()
