"""Convolutional layers of the Python frontend: nn.functional.conv2d / max_pool2d / avg_pool2d /
batch_norm and nn.Conv2d, MaxPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d against pure-Python
references (values, float64 central-difference gradients), torch's argument conventions
(pairs, padding strings, default strides, unbatched inputs), the train/eval switch of batch
norm, its running buffers in state_dict, and the refusals of what the C ABI lacks."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import TestCase, flat, mt, numeric_grad, rand_list, unflat  # noqa: E402

nn = mt.nn
F = mt.nn.functional


def ref_conv(x, w, b, stride, pad, dil):
    """Nested-list conv2d of x [N][C][H][W] with w [K][C][R][S]."""
    N, C, H, W = len(x), len(x[0]), len(x[0][0]), len(x[0][0][0])
    K, R, S = len(w), len(w[0][0]), len(w[0][0][0])
    Ho = (H + 2 * pad[0] - dil[0] * (R - 1) - 1) // stride[0] + 1
    Wo = (W + 2 * pad[1] - dil[1] * (S - 1) - 1) // stride[1] + 1
    out = []
    for n in range(N):
        out.append([])
        for k in range(K):
            plane = []
            for oh in range(Ho):
                row = []
                for ow in range(Wo):
                    acc = b[k] if b is not None else 0.0
                    for c in range(C):
                        for r in range(R):
                            for s in range(S):
                                ih, iw = oh * stride[0] - pad[0] + r * dil[0], ow * stride[1] - pad[1] + s * dil[1]
                                if 0 <= ih < H and 0 <= iw < W:
                                    acc += w[k][c][r][s] * x[n][c][ih][iw]
                    row.append(acc)
                plane.append(row)
            out[n].append(plane)
    return out


def ref_pool(x, k, st, mode):
    def win(p, oh, ow):
        return [p[oh * st + i][ow * st + j] for i in range(k) for j in range(k)]
    return [[[[max(win(p, oh, ow)) if mode == "max" else sum(win(p, oh, ow)) / (k * k)
               for ow in range((len(p[0]) - k) // st + 1)] for oh in range((len(p) - k) // st + 1)]
             for p in img] for img in x]


class FunctionalTest(TestCase):
    def test_conv2d_values_pairs_and_padding_strings(self):
        rng = self.rng(1)
        x, w, b = rand_list((2, 3, 6, 5), rng), rand_list((4, 3, 3, 3), rng), rand_list((4,), rng)
        tx, tw, tb = mt.tensor(x, dtype=mt.float64), mt.tensor(w, dtype=mt.float64), mt.tensor(b, dtype=mt.float64)
        self.assertClose(F.conv2d(tx, tw, tb), ref_conv(x, w, b, (1, 1), (0, 0), (1, 1)), 1e-12, 1e-12)
        self.assertClose(F.conv2d(tx, tw, tb, stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
                         ref_conv(x, w, b, (2, 1), (1, 2), (1, 2)), 1e-12, 1e-12)
        self.assertClose(F.conv2d(tx, tw, padding="same"), ref_conv(x, w, None, (1, 1), (1, 1), (1, 1)), 1e-12,
                         1e-12)
        self.assertEqual(tuple(F.conv2d(tx, tw, padding="valid").shape), (2, 4, 4, 3))
        unbatched = F.conv2d(tx[0], tw, tb, padding=1)
        self.assertClose(unbatched, ref_conv(x[:1], w, b, (1, 1), (1, 1), (1, 1))[0], 1e-12, 1e-12)
        # float32 input and float32 weights stay float32
        self.assertIs(F.conv2d(mt.tensor(x), mt.tensor(w)).dtype, mt.float32)

    def test_conv2d_gradients(self):
        rng = self.rng(2)
        xs, ws = (1, 2, 5, 4), (3, 2, 2, 3)
        x, w, b = rand_list(xs, rng), rand_list(ws, rng), rand_list((3,), rng)
        g = rand_list((1, 3, 6, 1), rng)
        gt = mt.tensor(g, dtype=mt.float64)

        def loss(tx, tw, tb):
            return (F.conv2d(tx, tw, tb, stride=(1, 2), padding=(1, 0)) * gt).sum()

        tx, tw, tb = (mt.tensor(v, dtype=mt.float64, requires_grad=True) for v in (x, w, b))
        loss(tx, tw, tb).backward()
        tw0, tb0 = mt.tensor(w, dtype=mt.float64), mt.tensor(b, dtype=mt.float64)
        self.assertClose(tx.grad, numeric_grad(lambda t: loss(t, tw0, tb0), flat(x), xs), 1e-6, 1e-8)
        self.assertClose(tw.grad, numeric_grad(lambda t: loss(mt.tensor(x, dtype=mt.float64), t, tb0), flat(w), ws),
                         1e-6, 1e-8)
        self.assertClose(tb.grad, [sum(flat(g[0][k])) for k in range(3)], 1e-12, 1e-12)

    def test_pools(self):
        rng = self.rng(3)
        x = rand_list((2, 2, 7, 6), rng)
        t = mt.tensor(x, dtype=mt.float64)
        self.assertClose(F.max_pool2d(t, 2), ref_pool(x, 2, 2, "max"), 0, 0)      # stride defaults to kernel
        self.assertClose(F.max_pool2d(t, (3, 3), stride=1), ref_pool(x, 3, 1, "max"), 0, 0)
        self.assertClose(F.avg_pool2d(t, 3, 2), ref_pool(x, 3, 2, "avg"), 1e-12, 1e-12)
        self.assertClose(F.avg_pool2d(t[0], 2), ref_pool(x[:1], 2, 2, "avg")[0], 1e-12, 1e-12)  # unbatched
        with self.assertRaises(NotImplementedError):
            F.max_pool2d(t, 2, padding=1)
        with self.assertRaises(NotImplementedError):
            F.avg_pool2d(t, (2, 3))

    def test_batch_norm_function(self):
        rng = self.rng(4)
        x = rand_list((5, 3), rng)
        rm, rv = mt.zeros(3, dtype=mt.float64), mt.ones(3, dtype=mt.float64)
        y = F.batch_norm(mt.tensor(x, dtype=mt.float64), rm, rv, training=True, momentum=0.5, eps=0.0)
        cols = list(zip(*x))
        mean = [sum(c) / 5 for c in cols]
        var = [sum((v - m) ** 2 for v in c) / 5 for c, m in zip(cols, mean)]
        self.assertClose(y, [[(v - mean[j]) / math.sqrt(var[j]) for j, v in enumerate(row)] for row in x],
                         1e-10, 1e-12)
        self.assertClose(rm, [0.5 * m for m in mean], 1e-12, 1e-12)
        self.assertClose(rv, [0.5 + 0.5 * v * 5 / 4 for v in var], 1e-12, 1e-12)
        with self.assertRaises(NotImplementedError):
            F.batch_norm(mt.tensor(x), None, None, training=True, momentum=None)


class ModuleTest(TestCase):
    def test_conv2d_module(self):
        mt.manual_seed(0)
        m = nn.Conv2d(3, 8, (3, 2), stride=2, padding=1)
        self.assertEqual(tuple(m.weight.shape), (8, 3, 3, 2))
        bound = 1 / math.sqrt(3 * 3 * 2)
        self.assertTrue(all(abs(v) <= bound for v in flat(m.weight.tolist()) + m.bias.tolist()))
        x = mt.randn(2, 3, 7, 6)
        y = m(x)
        self.assertClose(y, F.conv2d(x, m.weight, m.bias, 2, 1).tolist(), 1e-6, 1e-6)
        self.assertEqual(tuple(y.shape), (2, 8, 4, 4))
        self.assertIsNone(nn.Conv2d(1, 1, 3, bias=False).bias)
        self.assertIn("kernel_size=(3, 2)", repr(m))
        with self.assertRaises(NotImplementedError):
            nn.Conv2d(4, 4, 3, groups=2)

    def test_pool_modules(self):
        x = mt.randn(1, 2, 6, 6)
        self.assertClose(nn.MaxPool2d(2)(x), F.max_pool2d(x, 2, 2).tolist(), 0, 0)
        self.assertClose(nn.AvgPool2d(3, stride=1)(x), F.avg_pool2d(x, 3, 1).tolist(), 0, 0)
        with self.assertRaises(NotImplementedError):
            nn.MaxPool2d(2, ceil_mode=True)
        with self.assertRaises(NotImplementedError):
            nn.AvgPool2d(2, padding=1)

    def test_batchnorm2d_train_eval_and_state_dict(self):
        mt.manual_seed(1)
        bn = nn.BatchNorm2d(3, momentum=0.2)
        self.assertEqual(list(bn.state_dict()), ["weight", "bias", "running_mean", "running_var"])
        x = mt.randn(4, 3, 2, 2, dtype=mt.float32) * 3 + 1
        vals = x.tolist()
        y = bn(x)                                     # training: batch statistics
        per_c = [[vals[n][c][i][j] for n in range(4) for i in range(2) for j in range(2)] for c in range(3)]
        mean = [sum(v) / 16 for v in per_c]
        var = [sum((a - m) ** 2 for a in v) / 16 for v, m in zip(per_c, mean)]
        self.assertClose(bn.running_mean, [0.2 * m for m in mean], 1e-5, 1e-6)
        self.assertClose(bn.running_var, [0.8 + 0.2 * v * 16 / 15 for v in var], 1e-5, 1e-6)
        bn.eval()                                      # eval: the running statistics
        y = bn(x)
        want = [[[[(vals[n][c][i][j] - bn.running_mean.tolist()[c]) / math.sqrt(bn.running_var.tolist()[c] + 1e-5)
                   for j in range(2)] for i in range(2)] for c in range(3)] for n in range(4)]
        self.assertClose(y, want, 1e-5, 1e-6)
        rm = bn.running_mean.tolist()
        bn(x)
        self.assertEqual(bn.running_mean.tolist(), rm, "eval leaves the running statistics")
        other = nn.BatchNorm2d(3)
        other.load_state_dict(bn.state_dict())
        self.assertClose(other.running_var, bn.running_var.tolist(), 0, 0)
        with self.assertRaises(ValueError):
            bn(mt.randn(4, 3))

    def test_batchnorm1d_without_running_stats(self):
        bn = nn.BatchNorm1d(2, affine=False, track_running_stats=False)
        self.assertEqual(list(bn.state_dict()), [])
        bn.eval()                                      # no running stats: batch statistics even in eval
        y = bn(mt.tensor([[1.0, 2.0], [3.0, 6.0]]))
        self.assertClose(y, [[-1.0, -1.0], [1.0, 1.0]], 1e-4, 1e-4)

    def test_small_cnn_trains(self):
        mt.manual_seed(2)
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(4, 4, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(4, 2))
        x = mt.randn(8, 1, 8, 8)
        target = mt.tensor([0, 1] * 4)
        opt = mt.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(10):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        self.assertLess(losses[-1], losses[0])


if __name__ == "__main__":
    unittest.main()
