"""minitorch.gpt, the Python twin of frontends/c/gpt.h, on the CPU in float64.

A tiny GPT (vocabulary 7, context 6, 1 layer, 2 heads, d_model 8; and 2 layers for the block
chaining) with every parameter set to fresh random values (LayerNorm weights and biases too,
so no term hides behind a 1 or a 0):
  - logits and loss against an independent forward written here in plain Python lists
    (float64 both sides: agreement to 1e-10 relative; what is left is summation order);
  - the gradient of every parameter tensor, at sampled elements, against central differences
    (eps 1e-6) of that pure-Python loss: in float64 the truncation error is O(eps^2 f''') and
    the rounding error O(1e-16 / eps), both under 1e-7 relative here, so 1e-6 can fail;
  - the data helpers against known values (SplitMix64's published first output, the schedule's
    endpoints), the weight-decay split, GPT-2 initialisation statistics, and a few float32
    AdamW steps lowering the loss on a fixed batch.
"""

import argparse
import contextlib
import math
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import TestCase, flat, mt  # noqa: E402

from minitorch import gpt  # noqa: E402

F64 = mt.float64
CFG = gpt.GPTConfig(vocab=7, context=6, n_layer=1, n_head=2, d_model=8)


# ------------------------------------------------------------- the reference, in lists

def _matvec_t(w, x):           # w [out][in] (as nn.Linear), x [in] -> [out]
    return [math.fsum(wi * xi for wi, xi in zip(row, x)) for row in w]


def _linear(w, b, x):
    y = _matvec_t(w, x)
    return [a + c for a, c in zip(y, b)] if b is not None else y


def _layer_norm(x, g, b, eps=gpt.LN_EPS):
    m = math.fsum(x) / len(x)
    v = math.fsum((t - m) ** 2 for t in x) / len(x)
    return [(t - m) / math.sqrt(v + eps) * gi + bi for t, gi, bi in zip(x, g, b)]


def _gelu(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def ref_forward(w, cfg, idx, targets):
    """(logits [B][T][V], mean cross-entropy) from the state dict w of nested lists."""
    D, H = cfg.d_model, cfg.n_head
    Dh = D // H
    logits, nll = [], []
    for b, seq in enumerate(idx):
        xs = [[e + p for e, p in zip(w["wte.weight"][t], w["wpe.weight"][i])] for i, t in enumerate(seq)]
        for l in range(cfg.n_layer):
            pre = "h.%d." % l
            h = [_layer_norm(x, w[pre + "ln_1.weight"], w[pre + "ln_1.bias"]) for x in xs]
            qkv = [_linear(w[pre + "attn.c_attn.weight"], w[pre + "attn.c_attn.bias"], x) for x in h]
            att = []
            for i in range(len(xs)):
                out = []
                for hd in range(H):
                    q = qkv[i][hd * Dh:(hd + 1) * Dh]
                    s = [math.fsum(a * c for a, c in zip(q, qkv[j][D + hd * Dh:D + (hd + 1) * Dh])) / math.sqrt(Dh)
                         for j in range(i + 1)]                      # causal: keys 0..i
                    mx = max(s)
                    e = [math.exp(v - mx) for v in s]
                    z = math.fsum(e)
                    out += [math.fsum(e[j] / z * qkv[j][2 * D + hd * Dh + k] for j in range(i + 1)) for k in range(Dh)]
                att.append(out)
            xs = [[a + c for a, c in zip(x, _linear(w[pre + "attn.c_proj.weight"], w[pre + "attn.c_proj.bias"], y))]
                  for x, y in zip(xs, att)]
            h = [_layer_norm(x, w[pre + "ln_2.weight"], w[pre + "ln_2.bias"]) for x in xs]
            m = [_linear(w[pre + "mlp.c_proj.weight"], w[pre + "mlp.c_proj.bias"],
                         [_gelu(v) for v in _linear(w[pre + "mlp.c_fc.weight"], w[pre + "mlp.c_fc.bias"], x)])
                 for x in h]
            xs = [[a + c for a, c in zip(x, y)] for x, y in zip(xs, m)]
        rows = [_linear(w["lm_head.weight"], None, _layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])) for x in xs]
        logits.append(rows)
        for row, t in zip(rows, targets[b]):
            mx = max(row)
            nll.append(mx + math.log(math.fsum(math.exp(v - mx) for v in row)) - row[t])
    return logits, math.fsum(nll) / len(nll)


def random_model(cfg, seed):
    """A float64 minitorch GPT with every parameter uniform in [-0.5, 0.5] (LayerNorm weights
    in [0.5, 1.5]), and the same values as nested lists."""
    rng = random.Random(seed)
    model = gpt.make_gpt(mt)(cfg, dtype=F64)
    lists = {}
    for name, p in model.named_parameters():
        lo = 0.5 if (".ln_" in name or name.startswith("ln_f")) and name.endswith("weight") else -0.5
        vals = [lo + rng.random() for _ in range(p.numel())]
        with mt.no_grad():
            p.copy_(mt.tensor(vals, dtype=F64).reshape(tuple(p.shape)))
        lists[name] = p.tolist()
    return model, lists


def random_batch(cfg, B, seed):
    rng = random.Random(seed)
    idx = [[rng.randrange(cfg.vocab) for _ in range(cfg.context)] for _ in range(B)]
    tgt = [[rng.randrange(cfg.vocab) for _ in range(cfg.context)] for _ in range(B)]
    return idx, tgt


def _set(lists, name, i, value):
    rows = lists[name]
    if isinstance(rows[0], list):
        rows[i // len(rows[0])][i % len(rows[0])] = value
    else:
        rows[i] = value


def _get(lists, name, i):
    rows = lists[name]
    return rows[i // len(rows[0])][i % len(rows[0])] if isinstance(rows[0], list) else rows[i]


class GPTTwin(TestCase):
    def check_forward(self, cfg, seed):
        model, w = random_model(cfg, seed)
        idx, tgt = random_batch(cfg, 2, seed + 1)
        logits, loss = model(mt.tensor(idx), mt.tensor(tgt))
        ref_logits, ref_loss = ref_forward(w, cfg, idx, tgt)
        self.assertEqual(tuple(logits.shape), (2, cfg.context, cfg.vocab))
        self.assertClose(logits, ref_logits, rtol=1e-10, atol=1e-12)
        self.assertAlmostEqual(loss.item(), ref_loss, delta=1e-10 * abs(ref_loss))
        return model, w, idx, tgt, loss

    def test_forward_matches_the_reference(self):
        self.check_forward(CFG, 10)

    def test_two_layers_and_a_short_sequence(self):
        cfg = CFG._replace(n_layer=2)
        model, w = random_model(cfg, 20)
        idx, tgt = random_batch(cfg._replace(context=4), 3, 21)       # T = 4 < context: positions 0..3
        logits, loss = model(mt.tensor(idx), mt.tensor(tgt))
        ref_logits, ref_loss = ref_forward(w, cfg, idx, tgt)
        self.assertClose(logits, ref_logits, rtol=1e-10, atol=1e-12)
        self.assertAlmostEqual(loss.item(), ref_loss, delta=1e-10 * abs(ref_loss))
        with self.assertRaises(ValueError):
            model(mt.tensor([[0] * (cfg.context + 1)]))

    def test_gradients_match_central_differences(self):
        model, w, idx, tgt, loss = self.check_forward(CFG, 30)
        loss.backward()
        rng = random.Random(31)
        eps = 1e-6
        checked = 0
        for name, p in model.named_parameters():
            grad = flat(p.grad.tolist())
            for i in rng.sample(range(p.numel()), min(3, p.numel())):
                v = _get(w, name, i)
                _set(w, name, i, v + eps)
                up = ref_forward(w, CFG, idx, tgt)[1]
                _set(w, name, i, v - eps)
                down = ref_forward(w, CFG, idx, tgt)[1]
                _set(w, name, i, v)
                fd = (up - down) / (2 * eps)
                self.assertLessEqual(abs(grad[i] - fd), 1e-6 * max(abs(fd), 1e-3),
                                     "%s[%d]: autograd %r, central difference %r" % (name, i, grad[i], fd))
                checked += 1
        self.assertEqual(checked, 3 * len(list(model.parameters())))

    def test_tied_head_shares_the_embedding(self):
        cfg = CFG._replace(tie=True)
        model = gpt.make_gpt(mt)(cfg, dtype=F64)
        names = [n for n, _ in model.named_parameters()]
        self.assertNotIn("lm_head.weight", names)
        self.assertIs(model.lm_head.weight, model.wte.weight)
        idx, tgt = random_batch(cfg, 2, 40)
        _, loss = model(mt.tensor(idx), mt.tensor(tgt))
        loss.backward()                               # the embedding receives both gradients
        self.assertEqual(tuple(model.wte.weight.grad.shape), (cfg.vocab, cfg.d_model))

    def test_compute_dtype_runs_the_linear_layers_in_it(self):
        # compute_dtype's wiring (the casts of inputs, weights and biases, the branch outputs back
        # into the residual stream, the tied head), checkable on the CPU with float32 as the
        # compute dtype of a float64 model: the logits come out float32 and agree with the float64
        # model's to float32's rounding (a few ulps over ~10 steps: 1e-5 relative); the gradients
        # reach the float64 parameters through the casts and agree to 1e-4 (sums over the batch).
        cfg = CFG._replace(n_layer=2, tie=True)
        model, _ = random_model(cfg, 50)
        amp = gpt.make_gpt(mt)(cfg, dtype=F64, compute_dtype=mt.float32)
        amp.load_state_dict(model.state_dict())
        idx, tgt = random_batch(cfg, 3, 51)
        logits, loss = model(mt.tensor(idx), mt.tensor(tgt))
        loss.backward()                      # (a backward ends the tape: one model at a time)
        alogits, aloss = amp(mt.tensor(idx), mt.tensor(tgt))
        aloss.backward()
        self.assertEqual(alogits.dtype, mt.float32)
        self.assertEqual(aloss.dtype, mt.float32)
        self.assertClose(alogits.double(), logits.tolist(), rtol=1e-5, atol=1e-5)
        self.assertAlmostEqual(aloss.item(), loss.item(), delta=1e-5 * abs(loss.item()))
        for (name, p), (aname, ap) in zip(model.named_parameters(), amp.named_parameters()):
            self.assertEqual(name, aname)
            self.assertEqual(ap.grad.dtype, F64, name)
            g, ag = flat(p.grad.tolist()), flat(ap.grad.tolist())
            err = math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(ag, g)) / max(math.fsum(b * b for b in g), 1e-300))
            self.assertLess(err, 1e-4, "%s: gradient relative error %.3g" % (name, err))

    def test_gpt2_initialisation(self):
        cfg = gpt.GPTConfig(vocab=50, context=64, n_layer=2, n_head=4, d_model=64)
        mt.manual_seed(5)
        model = gpt.make_gpt(mt)(cfg)
        p = dict(model.named_parameters())

        def std(t):
            v = flat(t.tolist())
            m = math.fsum(v) / len(v)
            return math.sqrt(math.fsum((x - m) ** 2 for x in v) / len(v))

        # 4096+ draws: the sample std is within 5% of the target with overwhelming probability
        self.assertAlmostEqual(std(p["h.0.attn.c_attn.weight"]), 0.02, delta=0.001)
        self.assertAlmostEqual(std(p["wte.weight"]), 0.02, delta=0.001)
        self.assertAlmostEqual(std(p["h.1.mlp.c_proj.weight"]), 0.02 / math.sqrt(4), delta=0.0005)
        self.assertEqual(set(flat(p["h.0.ln_1.weight"].tolist())), {1.0})
        self.assertEqual(set(flat(p["h.0.mlp.c_fc.bias"].tolist())), {0.0})
        opt = gpt.configure_optimizer(mt, model)
        decay, no_decay = opt.param_groups
        self.assertEqual(decay["weight_decay"], 0.1)
        self.assertEqual(no_decay["weight_decay"], 0.0)
        self.assertTrue(all(q.ndim == 2 for q in decay["params"]))
        self.assertTrue(all(q.ndim == 1 for q in no_decay["params"]))
        self.assertEqual(len(decay["params"]) + len(no_decay["params"]), len(p))
        # further options reach the library's AdamW as they are (torch's fused=True in make bench)
        with self.assertRaisesRegex(NotImplementedError, "amsgrad"):
            gpt.configure_optimizer(mt, model, amsgrad=True)
        with self.assertRaises(TypeError):
            gpt.configure_optimizer(mt, model, no_such_option=1)

    def test_adamw_steps_lower_the_loss(self):
        cfg = gpt.GPTConfig(vocab=11, **gpt.PRESETS["tiny"])
        mt.manual_seed(7)
        model = gpt.make_gpt(mt)(cfg)
        opt = gpt.configure_optimizer(mt, model, lr=1e-2)
        idx, tgt = random_batch(cfg, 4, 8)
        x, y = mt.tensor(idx), mt.tensor(tgt)
        losses = []
        for _ in range(8):
            opt.zero_grad()
            _, loss = model(x, y)
            loss.backward()
            mt.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
        self.assertAlmostEqual(losses[0], math.log(cfg.vocab), delta=0.1)   # small init: near uniform
        self.assertLess(losses[-1], losses[0] - 0.3, losses)

    def test_data_helpers(self):
        self.assertEqual(gpt._splitmix64(0), 0xE220A8397B1DCDAF)   # SplitMix64's first output from state 0
        offs = [gpt.batch_offset(1, gpt.STREAM_TRAIN, 5, b, 1000) for b in range(64)]
        self.assertTrue(all(0 <= o < 1000 for o in offs))
        self.assertGreater(len(set(offs)), 50)
        self.assertEqual(offs, [gpt.batch_offset(1, gpt.STREAM_TRAIN, 5, b, 1000) for b in range(64)])
        self.assertNotEqual(offs, [gpt.batch_offset(1, gpt.STREAM_VAL, 5, b, 1000) for b in range(64)])
        ids = bytes(range(50))
        x, y = gpt.get_batch(ids, 10, 50, 3, 1, 0, 2, 5)
        for xs, ys in zip(x, y):
            self.assertEqual(ys, [v + 1 for v in xs])
            self.assertTrue(10 <= xs[0] and ys[-1] < 50)
        self.assertAlmostEqual(gpt.lr_at(0, 1000), 1e-5)
        self.assertAlmostEqual(gpt.lr_at(99, 1000), 1e-3)
        self.assertAlmostEqual(gpt.lr_at(999, 1000), 1e-4)
        self.assertAlmostEqual(gpt.unigram_entropy(bytes([0, 1, 0, 1]), 4), math.log(2))

    @staticmethod
    @contextlib.contextmanager
    def example_run(seed, words, line_end):
        """The example module (frontends/python/examples/char_gpt.py) and a generated corpus of
        400 lines of 5 of the words, as (module, path); the file is removed afterwards."""
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontends",
                                        "python", "examples"))
        import char_gpt
        rng = random.Random(seed)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, newline="") as f:
            f.write("".join(" ".join(rng.choice(words) for _ in range(5)) + "." + line_end for _ in range(400)))
        try:
            yield char_gpt, f.name
        finally:
            os.unlink(f.name)

    def test_example_program(self):
        """frontends/python/examples/char_gpt.py on a generated corpus of repeated words."""
        with self.example_run(3, ["the", "king", "my", "lord", "sweet", "love"], "\r\n") as (char_gpt, data):
            args = argparse.Namespace(data=data, max_chars=0, preset="tiny", steps=30, batch=8, eval_every=10,
                                      eval_batches=2, seed=1, device="cpu")
            lines = []
            model, chars, train_loss, val_loss, dev = char_gpt.train(mt, args, log=lines.append)
            self.assertNotIn(ord("\r"), chars)                    # CRLF became LF
            self.assertEqual(len(lines), 4, lines)                # the header, then steps 10, 20, 30
            first = float(lines[1].split("train loss ")[1].split()[0])
            self.assertLess(train_loss, first, lines)
            text = char_gpt.sample(mt, model, chars, "the ", 25, 0.8, 5, 1, dev)
            self.assertTrue(text.startswith("the ") and len(text) == 29, repr(text))
            self.assertTrue(set(text.encode()) <= set(chars))

    @unittest.skipUnless(mt.cuda.is_available(), "needs a usable GPU")
    def test_example_program_graph_replay_equals_eager(self):
        """On CUDA the example records its step once and replays it: the same losses as eager steps."""
        with self.example_run(4, ["to", "be", "or", "not", "that", "is"], "\n") as (char_gpt, data):
            runs = {}
            for no_graph in (False, True):
                args = argparse.Namespace(data=data, max_chars=0, preset="tiny", steps=12, batch=8, eval_every=6,
                                          eval_batches=2, seed=1, device="cuda", no_graph=no_graph)
                lines = []
                _, _, train_loss, val_loss, _ = char_gpt.train(mt, args, log=lines.append)
                self.assertIn("step: eager" if no_graph else "step: graph replay", lines[0])
                runs[no_graph] = (train_loss, val_loss)
            for got, want in zip(runs[False], runs[True]):
                self.assertLess(abs(got - want), 1e-6 * abs(want), runs)

if __name__ == "__main__":
    unittest.main()
