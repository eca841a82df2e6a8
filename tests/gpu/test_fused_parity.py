"""test_fused_parity - the fused transformer kernels (mt_layer_norm, mt_gelu, the causal mask of
mt_scaled_dot_product_attention), MT_CUDA against the CPU reference backend (float64 sums) and,
where torch with CUDA is importable, against PyTorch, forward and backward, through the Python
frontend.

  layer_norm  shapes that reach every CUDA path (warp kernels with fewer than 32 lanes per row
              and with several packs per lane, register-cached and uncached block kernels, d not
              a multiple of 4, one row; the fused backward with 2 to 256 lanes per row, one to four
              packs per lane, several rows or one per block, rows not a multiple of them; the cluster
              backward of wider rows with 2, 4 and 8 blocks per row, a last block's slice cut short,
              fewer rows than clusters and many rows per cluster), gamma and
              beta present and absent; dgamma/dbeta without dx; dgamma/dbeta bit-identical
              run to run; float16/bfloat16 against the CPU on the same rounded values; the three
              benchmark shapes against torch.nn.functional.layer_norm
  gelu        odd sizes (the vector tail), float16/bfloat16, 64M elements against
              torch.nn.functional.gelu(approximate='tanh')
  causal      the mask's effect against the CPU, and a training step with causal attention
              recorded into a CUDA graph and replayed (the mask is built on the device)
  clip        mt_clip_grad_norm over 150 gradients (three 64-tensor launches) of sizes from 1
              to 70000, clipping and not: the norm and every gradient against the CPU and
              torch.nn.utils.clip_grad_norm_; the same bits run to run

Run by `make test-gpu` (MT_DEVICE=cuda). Without a usable GPU every test is skipped;
MT_PARITY_DEVICE=cpu runs the harness CPU against CPU.

Tolerances, relative error ||gpu - ref|| / ||ref||: float64 1e-12; float32 1e-5 (row sums in
float, rsqrtf and tanhf within 2 ulp), 1e-4 for dgamma/dbeta summed over thousands of rows and
for the comparisons with torch (which sums in another order); float16/bfloat16 1e-2.
"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_support  # noqa: E402
from parity_support import GPU, HAVE_TORCH, RUN, SELF_TEST, SKIP_WHY, flat, mt, rel_err, torch  # noqa: E402,F401


F = mt.nn.functional
TOL = {mt.float32: 1e-5, mt.float64: 1e-12}
# (rows, d): see the module docstring; the CUDA path each reaches is in backend/cuda/fused.cu
LN_SHAPES = [(1, 7), (3, 8), (5, 33), (1000, 128), (257, 1024), (3, 1028), (7, 2050), (4, 20000), (2, 40000),
             (4096, 96), (1, 4096), (1000, 64), (999, 768), (77, 384), (1001, 2048), (513, 3072), (300, 4096),
             (9, 4100), (64, 8192), (300, 12288), (37, 32768)]
BENCH_SHAPES = [(65536, 1024), (262144, 128), (8192, 32768)]


def draw(shape, seed, dtype, lo=-3.0, hi=5.0):
    return parity_support.draw(shape, seed, dtype, lo, hi)


def ln_run(x, gamma, beta, dy, dev):
    """y and the gradients of x, gamma, beta (None where absent) of layer_norm on dev."""
    xs = x.to(dev).detach().requires_grad_(True)
    gs = None if gamma is None else gamma.to(dev).detach().requires_grad_(True)
    bs = None if beta is None else beta.to(dev).detach().requires_grad_(True)
    y = F.layer_norm(xs, x.shape[-1], gs, bs, eps=1e-5)
    (y * dy.to(dev)).sum().backward()
    return [y, xs.grad] + [None if p is None else p.grad for p in (gs, bs)]


@unittest.skipUnless(RUN, SKIP_WHY)
class LayerNormParity(unittest.TestCase):
    def test_against_cpu(self):
        for dt in (mt.float32, mt.float64):
            for i, (rows, d) in enumerate(LN_SHAPES):
                for with_g, with_b in ((True, True), (False, False), (True, False)):
                    x, dy = draw((rows, d), 10 + i, dt), draw((rows, d), 40 + i, dt, -1, 1)
                    g = draw((d,), 70 + i, dt, 0.5, 1.5) if with_g else None
                    b = draw((d,), 90 + i, dt, -1, 1) if with_b else None
                    want, got = ln_run(x, g, b, dy, "cpu"), ln_run(x, g, b, dy, GPU)
                    for k, name in enumerate(("y", "dx", "dgamma", "dbeta")):
                        if want[k] is None:
                            continue
                        tol = TOL[dt] if k < 2 or dt is mt.float64 or rows < 1000 else 1e-4
                        self.assertLess(rel_err(got[k], want[k]), tol, "%s %s %s g=%s b=%s" % (
                            name, dt, (rows, d), with_g, with_b))

    def test_parameter_gradients_bit_identical(self):
        for rows, d in ((4096, 1024), (8192, 96), (64, 20000), (700, 8192)):
            x, dy = draw((rows, d), 1, mt.float32), draw((rows, d), 2, mt.float32, -1, 1)
            g, b = draw((d,), 3, mt.float32), draw((d,), 4, mt.float32)
            first = ln_run(x, g, b, dy, GPU)
            again = ln_run(x, g, b, dy, GPU)
            for k in (1, 2, 3):
                self.assertEqual(rel_err(again[k], first[k]), 0.0, "run-to-run %d %s" % (k, (rows, d)))

    def test_parameter_gradients_without_dx(self):
        # x does not require grad: the backward writes dgamma/dbeta only (the column-sum kernels)
        for rows, d in ((1000, 128), (257, 1024), (7, 2050)):
            x, dy = draw((rows, d), 21, mt.float32), draw((rows, d), 22, mt.float32, -1, 1)
            g, b = draw((d,), 23, mt.float32, 0.5, 1.5), draw((d,), 24, mt.float32, -1, 1)
            got, want = [], []
            for dev, out in ((GPU, got), ("cpu", want)):
                gs, bs = g.to(dev).detach().requires_grad_(True), b.to(dev).detach().requires_grad_(True)
                (F.layer_norm(x.to(dev), d, gs, bs, eps=1e-5) * dy.to(dev)).sum().backward()
                out += [gs.grad, bs.grad]
            # dgamma/dbeta are float32 sums over the rows (the CPU sums in double): their rounding
            # grows with the row count, so 1000 rows get 1e-4
            for k, name in enumerate(("dgamma", "dbeta")):
                self.assertLess(rel_err(got[k], want[k]), 1e-5 if rows < 1000 else 1e-4, "%s %s" % (name, (rows, d)))

    def test_half_types(self):
        if SELF_TEST:
            self.skipTest("the CPU backend has no float16/bfloat16 arithmetic")
        for dt in (mt.float16, mt.bfloat16):
            for rows, d in ((64, 1024), (99, 768), (50, 2048), (33, 40), (4, 8192), (3, 100), (40, 16384),
                            (10, 32768), (5, 8200)):
                x, dy = draw((rows, d), 5, dt), draw((rows, d), 6, dt, -1, 1)
                g, b = draw((d,), 7, dt, 0.5, 1.5), draw((d,), 8, dt, -1, 1)
                got = ln_run(x, g, b, dy, GPU)
                want = ln_run(x.float(), g.float(), b.float(), dy.float(), "cpu")  # same rounded values
                for k in range(4):
                    self.assertLess(rel_err(got[k].float(), want[k]), 1e-2, "%d %s %s" % (k, dt, (rows, d)))

    @unittest.skipUnless(HAVE_TORCH, "torch with CUDA is not importable")
    def test_against_torch_at_the_benchmark_shapes(self):
        for rows, d in BENCH_SHAPES:
            x = mt.randn(rows, d, device=GPU)
            x.requires_grad_(True)
            g, b = mt.randn(d, device=GPU), mt.randn(d, device=GPU)
            g.requires_grad_(True)
            b.requires_grad_(True)
            dy = mt.randn(rows, d, device=GPU)
            y = F.layer_norm(x, d, g, b, eps=1e-5)
            (y * dy).sum().backward()
            tx = torch.from_dlpack(x.detach()).clone().requires_grad_(True)
            tg = torch.from_dlpack(g.detach()).clone().requires_grad_(True)
            tb = torch.from_dlpack(b.detach()).clone().requires_grad_(True)
            ty = torch.nn.functional.layer_norm(tx, (d,), tg, tb, eps=1e-5)
            (ty * torch.from_dlpack(dy)).sum().backward()
            for name, ours, theirs in (("y", y, ty), ("dx", x.grad, tx.grad), ("dgamma", g.grad, tg.grad),
                                       ("dbeta", b.grad, tb.grad)):
                o = torch.from_dlpack(ours.detach()).double()
                t = theirs.detach().double()
                err = ((o - t).norm() / t.norm()).item()
                self.assertLess(err, 1e-4, "%s %s" % (name, (rows, d)))


@unittest.skipUnless(RUN, SKIP_WHY)
class ClipGradNormParity(unittest.TestCase):
    SIZES = [1, 3, 4, 7, 128, 1000, 8191, 8192, 8193, 70000] * 15

    def clipped(self, ws, dev, dtype, max_norm):
        """The norm and the clipped gradients of parameters whose gradients are ws, on dev."""
        ps = [mt.zeros(w.shape, dtype=dtype, device=dev) for w in ws]
        for p in ps:
            p.requires_grad_(True)
        loss = None
        for p, w in zip(ps, ws):
            term = (p * w.to(dev)).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        norm = mt.nn.utils.clip_grad_norm_(ps, max_norm)
        return norm, [p.grad for p in ps]

    def test_against_cpu_and_torch(self):
        for dt in (mt.float32, mt.float64):
            ws = [draw((n,), 300 + i, dt, -1, 1) for i, n in enumerate(self.SIZES)]
            total = math.sqrt(sum(sum(v * v for v in flat(w.tolist())) for w in ws))
            for max_norm in (0.25 * total, 4.0 * total):
                with self.subTest(dtype=str(dt), max_norm=max_norm):
                    norm, grads = self.clipped(ws, GPU, dt, max_norm)
                    again, grads2 = self.clipped(ws, GPU, dt, max_norm)
                    rnorm, rgrads = self.clipped(ws, "cpu", dt, max_norm)
                    tol = TOL[dt]
                    self.assertLess(abs(norm.item() - total) / total, tol, "norm")
                    self.assertEqual(norm.item(), again.item(), "norm differs from run to run")
                    coef = min(1.0, max_norm / (total + 1e-6))
                    for i, (g, g2, r, w) in enumerate(zip(grads, grads2, rgrads, ws)):
                        self.assertEqual(g.tolist(), g2.tolist(), "gradient %d differs from run to run" % i)
                        self.assertLess(rel_err(g, r), tol, "gradient %d against the cpu" % i)
                        self.assertLess(rel_err(g, w * coef), tol, "gradient %d against w * %g" % (i, coef))
                    if HAVE_TORCH:
                        tps = [torch.zeros(w.shape, dtype=torch.float64 if dt == mt.float64 else torch.float32,
                                           device="cuda", requires_grad=True) for w in ws]
                        for tp, w in zip(tps, ws):
                            tp.grad = torch.tensor(w.tolist(), dtype=tp.dtype, device="cuda")
                        tn = torch.nn.utils.clip_grad_norm_(tps, max_norm)
                        self.assertLess(abs(norm.item() - tn.item()) / tn.item(), tol, "norm vs torch")
                        for i, (g, tp) in enumerate(zip(grads, tps)):
                            o = torch.tensor(g.tolist(), dtype=torch.float64)
                            t = tp.grad.double().cpu()
                            self.assertLess(((o - t).norm() / t.norm()).item(), tol, "gradient %d vs torch" % i)


@unittest.skipUnless(RUN, SKIP_WHY)
class GeluParity(unittest.TestCase):
    def test_against_cpu(self):
        for dt in (mt.float32, mt.float64):
            for n in (1, 5, 1027, (1 << 20) + 3):
                x, dy = draw((n,), 20, dt, -8, 8), draw((n,), 21, dt, -1, 1)
                res = []
                for dev in ("cpu", GPU):
                    xs = x.to(dev).detach().requires_grad_(True)
                    y = F.gelu(xs, approximate="tanh")
                    (y * dy.to(dev)).sum().backward()
                    res.append((y, xs.grad))
                for k in range(2):
                    self.assertLess(rel_err(res[1][k], res[0][k]), TOL[dt], "%s %s %d" % (dt, n, k))

    def test_half_types(self):
        if SELF_TEST:
            self.skipTest("the CPU backend has no float16/bfloat16 arithmetic")
        for dt in (mt.float16, mt.bfloat16):
            x, dy = draw((4099,), 22, dt, -6, 6), draw((4099,), 23, dt, -1, 1)
            xs = x.to(GPU).detach().requires_grad_(True)
            y = F.gelu(xs)
            (y * dy.to(GPU)).sum().backward()
            xf = x.float().detach().requires_grad_(True)
            yf = F.gelu(xf)
            (yf * dy.float()).sum().backward()
            self.assertLess(rel_err(y.float(), yf), 1e-2, "y %s" % dt)
            self.assertLess(rel_err(xs.grad.float(), xf.grad), 1e-2, "dx %s" % dt)

    @unittest.skipUnless(HAVE_TORCH, "torch with CUDA is not importable")
    def test_against_torch_64m(self):
        n = 1 << 26
        x = mt.randn(n, device=GPU)
        x.requires_grad_(True)
        dy = mt.randn(n, device=GPU)
        y = F.gelu(x)
        (y * dy).sum().backward()
        tx = torch.from_dlpack(x.detach()).clone().requires_grad_(True)
        ty = torch.nn.functional.gelu(tx, approximate="tanh")
        (ty * torch.from_dlpack(dy)).sum().backward()
        for name, ours, theirs in (("y", y, ty), ("dx", x.grad, tx.grad)):
            o, t = torch.from_dlpack(ours.detach()).double(), theirs.detach().double()
            self.assertLess(((o - t).norm() / t.norm()).item(), 1e-5, name)


@unittest.skipUnless(RUN, SKIP_WHY)
class CausalAttention(unittest.TestCase):
    def test_causal_against_cpu(self):
        for T, S in ((5, 5), (3, 7), (64, 64)):
            q, k, v = draw((2, 3, T, 8), 30, mt.float64, -1, 1), draw((2, 3, S, 8), 31, mt.float64, -1, 1), \
                draw((2, 3, S, 4), 32, mt.float64, -1, 1)
            want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            got = F.scaled_dot_product_attention(q.to(GPU), k.to(GPU), v.to(GPU), is_causal=True)
            # T == S: one mt_scaled_dot_product_attention call with causal = 1 (the mask built on the
            # device); T != S: the frontend's composition (torch's top-left alignment)
            self.assertLess(rel_err(got, want), 1e-12, "%s" % ((T, S),))

    def test_recorded_causal_step_replays(self):
        if SELF_TEST or not mt.cuda.is_available():
            self.skipTest("graphs need the CUDA device")
        nn = mt.nn
        mt.manual_seed(5)
        proj = [nn.Linear(16, 16).to(GPU) for _ in range(3)]
        params = [p for m in proj for p in m.parameters()]
        g = mt.Generator().manual_seed(6)
        data = [(mt.randn(2, 8, 16, generator=g).to(GPU), mt.randn(2, 8, 16, generator=g).to(GPU))
                for _ in range(5)]
        init = [p.detach().clone() for p in params]

        def step(opt, x, y):
            opt.zero_grad()
            out = F.scaled_dot_product_attention(proj[0](x), proj[1](x), proj[2](x), is_causal=True)
            loss = F.mse_loss(out, y)
            loss.backward()
            opt.step()
            return loss

        opt = mt.optim.SGD(params, lr=0.1)
        eager = [step(opt, x, y).item() for x, y in data]
        with mt.no_grad():
            for p, p0 in zip(params, init):
                p.copy_(p0)
        opt = mt.optim.SGD(params, lr=0.1)
        losses = [step(opt, *data[0]).item()]
        x_s, y_s = data[1][0].clone(), data[1][1].clone()
        graph = mt.cuda.CUDAGraph()
        with mt.cuda.graph(graph):
            loss_s = step(opt, x_s, y_s)
        for x, y in data[1:]:
            x_s.copy_(x)
            y_s.copy_(y)
            graph.replay()
            losses.append(loss_s.item())
        graph.reset()
        for a, b in zip(losses, eager):
            self.assertAlmostEqual(a, b, delta=1e-6 * max(1.0, abs(b)))


if __name__ == "__main__":
    unittest.main()
