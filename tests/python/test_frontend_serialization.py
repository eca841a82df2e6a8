"""minitorch.save/load (safetensors through the library), optimizer state_dict /
load_state_dict (mt_optim_save / mt_optim_load), and the MNIST MLP example end to end on a
small fake MNIST."""

import gc
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fake_mnist import write_fake_mnist  # noqa: E402
from test_frontend_support import DEVICE, PACKAGE_DIR, TestCase, mt  # noqa: E402

from minitorch._lib import lib  # noqa: E402

nn = mt.nn
CHECKPOINT_FUNCS = ("mt_save_safetensors", "mt_safetensors_count", "mt_safetensors_name", "mt_load_safetensors")
HAVE_CHECKPOINTS = not any(f in lib.missing for f in CHECKPOINT_FUNCS)
HAVE_OPTIM_STATE = HAVE_CHECKPOINTS and "mt_optim_save" not in lib.missing and "mt_optim_load" not in lib.missing
MNIST = os.path.join(PACKAGE_DIR, "examples", "mnist_mlp.py")


class TempDir(TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mt_frontend_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)


@unittest.skipUnless(HAVE_CHECKPOINTS, "the library does not export the safetensors functions yet")
class SaveLoadTest(TempDir):
    def test_state_dict_round_trip(self):
        mt.manual_seed(1)
        model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        sd = model.state_dict()
        mt.save(sd, self.path("m.safetensors"))
        loaded = mt.load(self.path("m.safetensors"))
        self.assertEqual(list(loaded), list(sd))                 # names in file order
        for k in sd:
            self.assertEqual(loaded[k].tolist(), sd[k].tolist())
            self.assertIs(loaded[k].dtype, sd[k].dtype)
            self.assertEqual(loaded[k].device, DEVICE)
        mt.manual_seed(2)
        other = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        other.load_state_dict(mt.load(self.path("m.safetensors"), map_location="cpu"))
        x = mt.randn(5, 4)
        self.assertEqual(other(x).tolist(), model(x).tolist())

    def test_dtypes_and_names(self):
        d = {"a.int": mt.arange(5), "b.u8": mt.tensor([1, 255], dtype=mt.uint8),
             "c.f64": mt.tensor([[0.1, 0.2]], dtype=mt.float64), "d.scalar": mt.tensor(3.5)}
        mt.save(d, self.path("d.safetensors"))
        self.assertEqual(mt.serialization.names(self.path("d.safetensors")), list(d))
        back = mt.load(self.path("d.safetensors"))
        for k, v in d.items():
            self.assertIs(back[k].dtype, v.dtype)
            self.assertEqual(back[k].tolist(), v.tolist())

    def test_errors(self):
        with self.assertRaises(TypeError):
            mt.save(mt.ones(2), self.path("x"))
        with self.assertRaises(TypeError):
            mt.save({"a": [1, 2]}, self.path("x"))
        with self.assertRaises(RuntimeError) as cm:       # MT_ERR_IO
            mt.load(self.path("missing.safetensors"))
        self.assertIn("missing.safetensors", str(cm.exception))
        # a NUL inside a path or a name: C would stop there (x\0y.st wrote the file x)
        import ctypes
        with self.assertRaises((ValueError, ctypes.ArgumentError)) as cm:
            mt.save({"a": mt.ones(2)}, self.path("x\0y.st"))
        self.assertIn("NUL", str(cm.exception))
        with self.assertRaises(ValueError):
            mt.save({"a\0b": mt.ones(2)}, self.path("ab.st"))
        self.assertEqual(sorted(os.listdir(self.dir)), [])  # nothing written
        # a name longer than the first name buffer (4096 bytes) loads as it was saved
        long_name = "w" * 5000 + ".é"
        mt.save({long_name: mt.arange(3.0), "b": mt.ones(1)}, self.path("long.st"))
        back = mt.load(self.path("long.st"))
        self.assertEqual(list(back), [long_name, "b"])
        self.assertEqual(back[long_name].tolist(), [0.0, 1.0, 2.0])


@unittest.skipUnless(HAVE_OPTIM_STATE, "the library does not export mt_optim_save / mt_optim_load yet")
class OptimizerStateTest(TempDir):
    def run_steps(self, model, opt, batches):
        for x, y in batches:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()

    def check_resume(self, make_opt):
        mt.manual_seed(3)
        batches = [(mt.randn(8, 4), mt.randn(8, 2)) for _ in range(5)]
        model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
        opt = make_opt(model.parameters())
        self.run_steps(model, opt, batches[:3])
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        state = opt.state_dict()
        self.run_steps(model, opt, batches[3:])
        # A fresh model and optimizer resumed from the snapshot take the same two steps.
        resumed = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
        resumed.load_state_dict(weights)
        opt2 = make_opt(resumed.parameters())
        opt2.param_groups[0]["lr"] = 123.0                 # restored by load_state_dict
        opt2.load_state_dict(state)
        self.assertEqual(opt2.param_groups[0]["lr"], state["param_groups"][0]["lr"])
        self.run_steps(resumed, opt2, batches[3:])
        for (k, a), b in zip(model.state_dict().items(), resumed.state_dict().values()):
            self.assertEqual(a.tolist(), b.tolist(), k)
        return state

    def test_sgd_momentum(self):
        state = self.check_resume(lambda p: mt.optim.SGD(p, lr=0.1, momentum=0.9))
        self.assertEqual(sorted(state["state"][0]), ["momentum_buffer"])
        self.assertEqual(state["param_groups"][0]["params"], [0, 1, 2, 3])

    def test_adam(self):
        state = self.check_resume(lambda p: mt.optim.Adam(p, lr=0.01))
        self.assertEqual(sorted(state["state"][1]), ["exp_avg", "exp_avg_sq", "step"])
        self.assertEqual(state["state"][1]["step"].item(), 3)

    def test_adamw_two_groups(self):
        def make(params):
            params = list(params)
            return mt.optim.AdamW([{"params": params[:2]}, {"params": params[2:], "lr": 0.003}], lr=0.01)
        state = self.check_resume(make)
        self.assertEqual([g["params"] for g in state["param_groups"]], [[0, 1], [2, 3]])

    def test_mismatch(self):
        a = nn.Linear(3, 2)
        opt = mt.optim.Adam(a.parameters())
        with self.assertRaises(ValueError):
            opt.load_state_dict({"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]})
        sgd_state = mt.optim.SGD(a.parameters(), lr=0.1, momentum=0.9).state_dict()
        with self.assertRaises(RuntimeError):              # adam cannot load sgd's state
            opt.load_state_dict(sgd_state)


class MnistExampleTest(TempDir):
    def test_runs_as_a_script(self):
        write_fake_mnist(self.dir)
        args = [sys.executable, MNIST, "--data", self.dir, "--epochs", "3", "--batch", "32", "--limit", "256",
                "--test-limit", "64", "--device", "cpu", "--progress"]
        if HAVE_CHECKPOINTS:
            args += ["--save", self.path("mlp.safetensors")]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("256 training and 64 test images", p.stdout)
        self.assertIn("epoch 3/3", p.stderr)                  # the progress bar
        acc = float(p.stdout.rsplit("final test accuracy:", 1)[1].strip().rstrip("%"))
        self.assertGreaterEqual(acc, 90.0, p.stdout)
        if HAVE_CHECKPOINTS:
            sd = mt.load(self.path("mlp.safetensors"))
            self.assertEqual([tuple(v.shape) for v in sd.values()], [(128, 784), (128,), (10, 128), (10,)])

    def test_in_process_does_not_leak(self):
        import importlib.util
        write_fake_mnist(self.dir, 128, 32)
        spec = importlib.util.spec_from_file_location("minitorch_example_mnist", MNIST)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        gc.collect()
        live = mt.live_tensors()
        model, history = mod.train(self.dir, epochs=1, batch=32, optim="adam", log=lambda *a: None,
                                   show_bar=False, device=str(DEVICE))
        self.assertEqual(len(history), 1)
        del model, history
        gc.collect()
        self.assertEqual(mt.live_tensors(), live)

    @unittest.skipUnless(DEVICE.type == "cuda", "the recorded step runs on CUDA only")
    def test_recorded_step_trains_as_the_eager_one(self):
        import importlib.util
        write_fake_mnist(self.dir, 200, 32)   # 6 full batches of 32 and a partial one per epoch
        spec = importlib.util.spec_from_file_location("minitorch_example_mnist", MNIST)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        runs = []
        for graph in (False, True):
            model, history = mod.train(self.dir, epochs=2, batch=32, optim="adam", log=lambda *a: None,
                                       show_bar=False, device="cuda", graph=graph)
            runs.append(([p.detach().clone() for p in model.parameters()], history))
        # the same kernels on the same batches: equal up to rounding
        for a, b in zip(runs[0][0], runs[1][0]):
            self.assertLess((a - b).abs().max().item(), 1e-5)
        for (_, la, aa), (_, lb, ab) in zip(runs[0][1], runs[1][1]):
            self.assertAlmostEqual(la, lb, delta=1e-5)
            self.assertEqual(aa, ab)


if __name__ == "__main__":
    unittest.main()
