"""CUDA graphs through minitorch.cuda.CUDAGraph: a recorded training step (forward,
backward, optimizer) replayed N times leaves the parameters where N eager steps leave them,
for SGD with momentum and for Adam/AdamW (whose step counts live on the device). On the CPU
only the error paths run: recording is CUDA-only."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import ON_CUDA, TestCase, mt  # noqa: E402

nn = mt.nn


def make_model(seed):
    mt.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


class GraphErrors(TestCase):
    @unittest.skipIf(ON_CUDA, "checked where no GPU is in use")
    def test_no_recording_without_a_gpu(self):
        with self.assertRaises((mt.DeviceError, mt.UnsupportedError)):  # no GPU, or a CPU-only build
            mt.cuda.CUDAGraph().capture_begin()

    def test_replay_before_capture(self):
        with self.assertRaisesRegex(RuntimeError, "nothing recorded"):
            mt.cuda.CUDAGraph().replay()

    def test_end_without_begin_names_the_function(self):
        with self.assertRaisesRegex(mt.StateError, "mt_graph_capture_end"):
            mt.cuda.CUDAGraph().capture_end()


@unittest.skipUnless(ON_CUDA, "CUDA graphs need the CUDA device (MT_DEVICE=cuda)")
class GraphReplay(TestCase):
    STEPS = 7

    def batches(self):
        g = mt.Generator().manual_seed(11)
        return [(mt.randn(32, 6, generator=g), mt.randn(32, 3, generator=g)) for _ in range(self.STEPS + 1)]

    def run_pair(self, make_opt, schedule=None):
        data = self.batches()

        def step(model, opt, x, y):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        # eager: STEPS + 1 steps
        eager = make_model(3)
        opt_e = make_opt(eager.parameters())
        def set_lr(opt, i):
            if schedule:
                for group in opt.param_groups:
                    group["lr"] = schedule(i)

        eager_losses = []
        for i, (x, y) in enumerate(data):
            set_lr(opt_e, i)
            eager_losses.append(step(eager, opt_e, x, y).item())

        # recorded: one eager step (creates grads and state), then record, then replay STEPS times
        model = make_model(3)
        opt = make_opt(model.parameters())
        set_lr(opt, 0)
        first = step(model, opt, *data[0]).item()
        x_s, y_s = data[1][0].clone(), data[1][1].clone()
        g = mt.cuda.CUDAGraph()
        with mt.cuda.graph(g):
            loss_s = step(model, opt, x_s, y_s)
        losses = [first]
        for i, (x, y) in enumerate(data[1:], 1):
            set_lr(opt, i)            # a recorded update reads the learning rate on the device
            x_s.copy_(x)
            y_s.copy_(y)
            g.replay()
            losses.append(loss_s.item())
        g.reset()
        # The same kernels on the same inputs in the same order: equal to rounding noise.
        for a, b in zip(losses, eager_losses):
            self.assertAlmostEqual(a, b, delta=1e-6 * max(1.0, abs(b)))
        for pa, pb in zip(model.parameters(), eager.parameters()):
            self.assertLess((pa - pb).abs().max().item(), 1e-6)
        self.assertLess(eager_losses[-1], eager_losses[0])   # it trained

    def test_sgd_momentum(self):
        self.run_pair(lambda ps: mt.optim.SGD(ps, lr=0.1, momentum=0.9))

    def test_adam(self):
        self.run_pair(lambda ps: mt.optim.Adam(ps, lr=1e-2))

    def test_adamw_state_after_replays(self):
        self.run_pair(lambda ps: mt.optim.AdamW(ps, lr=1e-2, weight_decay=0.1))

    def test_learning_rate_schedule_reaches_replays(self):
        sched = lambda i: 1e-2 * (0.5 ** i)  # noqa: E731
        self.run_pair(lambda ps: mt.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), sched)
        self.run_pair(lambda ps: mt.optim.SGD(ps, lr=0.1, momentum=0.9), lambda i: 0.1 / (1 + i))


if __name__ == "__main__":
    unittest.main()
