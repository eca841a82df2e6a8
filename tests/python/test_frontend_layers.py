"""The transformer blocks of the Python frontend: F.gelu, F.layer_norm, F.embedding,
F.dropout, F.scaled_dot_product_attention, minitorch.cat/stack, Tensor.masked_fill and the
modules GELU, LayerNorm, Embedding, Dropout, MultiheadAttention. Values are checked against
pure-Python float64 references on random inputs, gradients against central differences
in float64."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import (TestCase, flat, mt, numeric_grad, rand_list, shape_of,  # noqa: E402
                                   unflat)

nn = mt.nn
F = mt.nn.functional
F64 = mt.float64


# ------------------------------------------------------------- references

def ref_gelu(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def ref_layer_norm_rows(values, d, weight=None, bias=None, eps=1e-5):
    out = []
    for r in range(0, len(values), d):
        row = values[r:r + d]
        mean = math.fsum(row) / d
        var = math.fsum((v - mean) ** 2 for v in row) / d
        inv = 1.0 / math.sqrt(var + eps)
        for i, v in enumerate(row):
            y = (v - mean) * inv
            if weight is not None:
                y *= weight[i]
            if bias is not None:
                y += bias[i]
            out.append(y)
    return out


def ref_softmax(row):
    m = max(row)
    if m == -math.inf:
        return [math.nan] * len(row)
    e = [math.exp(v - m) for v in row]
    s = math.fsum(e)
    return [v / s for v in e]


def ref_attention_matrix(q, k, v, causal=False, scale=None, allowed=None, add=None):
    """One head: q [T][D], k [S][D], v [S][Dv]; causal is torch's top-left alignment (key j
    masked for query i when j > i); allowed [T][S] of 0/1 and add [T][S] are masks.
    Returns (out [T][Dv], weights [T][S])."""
    T, S, D = len(q), len(k), len(q[0])
    s = 1.0 / math.sqrt(D) if scale is None else scale
    weights = []
    for i in range(T):
        row = []
        for j in range(S):
            x = math.fsum(q[i][d] * k[j][d] for d in range(D)) * s
            if causal and j > i:
                x = -math.inf
            if allowed is not None and not allowed[i][j]:
                x = -math.inf
            if add is not None:
                x += add[i][j]
            row.append(x)
        weights.append(ref_softmax(row))
    out = [[math.fsum(weights[i][j] * v[j][e] for j in range(S)) for e in range(len(v[0]))]
           for i in range(T)]
    return out, weights


def ref_attention(q, k, v, **kw):
    """Over the leading dims of nested lists q [..., T, D], k [..., S, D], v [..., S, Dv]."""
    if isinstance(q[0][0], list):
        return [ref_attention(a, b, c, **kw) for a, b, c in zip(q, k, v)]
    return ref_attention_matrix(q, k, v, **kw)[0]


def ref_cat(parts, dim):
    if dim == 0:
        out = []
        for p in parts:
            out.extend(p)
        return out
    return [ref_cat([p[i] for p in parts], dim - 1) for i in range(len(parts[0]))]


def ref_linear(x, w, b):
    """x [N][in], w [out][in], b [out] or None."""
    return [[math.fsum(xi[t] * w[o][t] for t in range(len(xi))) + (b[o] if b else 0.0)
             for o in range(len(w))] for xi in x]


def t64(values, requires_grad=False):
    return mt.tensor(values, dtype=F64, requires_grad=requires_grad)


class GradCase(TestCase):
    def check_grad(self, f, inputs, which, rtol=1e-5, atol=1e-7):
        """d sum(f(*inputs) * r)/d inputs[which] by autograd against central differences, for
        a fixed random r (a weighted sum, so normalising ops do not hide their gradient)."""
        rng = self.rng(99)
        shape = shape_of(inputs[which])
        tensors = [t64(x, requires_grad=(i == which)) for i, x in enumerate(inputs)]
        probe = f(*[t.detach() for t in tensors])
        r = t64(rand_list(tuple(probe.shape), rng))

        def loss_of(x):
            args = [x if i == which else t.detach() for i, t in enumerate(tensors)]
            return (f(*args) * r).sum()

        loss_of(tensors[which]).backward()
        got = tensors[which].grad
        expected = numeric_grad(loss_of, flat(inputs[which]), shape)
        self.assertClose(got, expected, rtol=rtol, atol=atol)


# ------------------------------------------------------------------ gelu

class GeluTest(GradCase):
    def test_values_against_reference(self):
        rng = self.rng(1)
        x = rand_list((3, 5), rng, -4, 4)
        self.assertClose(F.gelu(t64(x)), [[ref_gelu(v) for v in row] for row in x], rtol=1e-12, atol=1e-12)
        self.assertClose(F.gelu(mt.tensor(x)), [[ref_gelu(v) for v in row] for row in x], rtol=1e-5, atol=1e-6)
        self.assertClose(F.gelu(t64(x), approximate="tanh"), [[ref_gelu(v) for v in row] for row in x],
                         rtol=1e-12, atol=1e-12)
        self.assertClose(nn.GELU()(t64(x)), [[ref_gelu(v) for v in row] for row in x], rtol=1e-12, atol=1e-12)

    def test_gradient(self):
        x = rand_list((2, 4), self.rng(2), -3, 3)
        self.check_grad(lambda a: F.gelu(a), [x], 0)

    def test_exact_form_is_refused_clearly(self):
        with self.assertRaises(NotImplementedError) as cm:
            F.gelu(mt.ones(2), approximate="none")
        self.assertIn("tanh", str(cm.exception))
        with self.assertRaises(NotImplementedError):
            nn.GELU(approximate="none")
        with self.assertRaises(ValueError):
            F.gelu(mt.ones(2), approximate="erf")
        self.assertEqual(repr(nn.GELU()), "GELU(approximate='tanh')")


# ------------------------------------------------------------- layer_norm

class LayerNormTest(GradCase):
    def test_values_against_reference(self):
        rng = self.rng(3)
        x = rand_list((2, 3, 6), rng, -2, 2)
        w = rand_list((6,), rng)
        b = rand_list((6,), rng)
        got = F.layer_norm(t64(x), (6,), t64(w), t64(b), eps=1e-5)
        self.assertClose(got, unflat(ref_layer_norm_rows(flat(x), 6, w, b, 1e-5), (2, 3, 6)),
                         rtol=1e-10, atol=1e-10)
        got = F.layer_norm(t64(x), 6, eps=0.1)
        self.assertClose(got, unflat(ref_layer_norm_rows(flat(x), 6, eps=0.1), (2, 3, 6)),
                         rtol=1e-10, atol=1e-10)
        got = F.layer_norm(mt.tensor(x), [6], mt.tensor(w), None)
        self.assertClose(got, unflat(ref_layer_norm_rows(flat(x), 6, w), (2, 3, 6)), rtol=1e-4, atol=1e-5)

    def test_several_trailing_dims(self):
        rng = self.rng(4)
        x = rand_list((2, 3, 4), rng)
        w = rand_list((3, 4), rng)
        got = F.layer_norm(t64(x), (3, 4), t64(w), None)
        self.assertClose(got, unflat(ref_layer_norm_rows(flat(x), 12, flat(w)), (2, 3, 4)),
                         rtol=1e-10, atol=1e-10)

    def test_gradients(self):
        rng = self.rng(5)
        x = rand_list((3, 5), rng, -2, 2)
        w = rand_list((5,), rng)
        b = rand_list((5,), rng)

        def f(a, ww, bb):
            return F.layer_norm(a, 5, ww, bb)
        for which in range(3):
            self.check_grad(f, [x, w, b], which, rtol=1e-5, atol=1e-6)

    def test_bad_shapes(self):
        with self.assertRaises(ValueError):
            F.layer_norm(mt.ones(2, 3), 4)
        with self.assertRaises(ValueError):
            F.layer_norm(mt.ones(2, 3), (3,), mt.ones(4))

    def test_module(self):
        ln = nn.LayerNorm(4)
        self.assertEqual([n for n, _ in ln.named_parameters()], ["weight", "bias"])
        self.assertEqual(ln.weight.tolist(), [1.0] * 4)
        self.assertEqual(ln.bias.tolist(), [0.0] * 4)
        x = rand_list((3, 4), self.rng(6))
        self.assertClose(ln(mt.tensor(x)), unflat(ref_layer_norm_rows(flat(x), 4), (3, 4)), rtol=1e-4, atol=1e-5)
        bare = nn.LayerNorm(4, elementwise_affine=False)
        self.assertEqual(list(bare.parameters()), [])
        self.assertIsNone(bare.weight)
        self.assertEqual([n for n, _ in nn.LayerNorm(4, bias=False).named_parameters()], ["weight"])
        self.assertEqual(tuple(nn.LayerNorm((2, 3)).weight.shape), (2, 3))
        self.assertIn("(4,), eps=1e-05", repr(ln))
        y = ln(mt.tensor(x))
        (y * mt.tensor(rand_list((3, 4), self.rng(7)))).sum().backward()
        self.assertEqual(tuple(ln.weight.grad.shape), (4,))
        self.assertEqual(tuple(ln.bias.grad.shape), (4,))


# -------------------------------------------------------------- embedding

class EmbeddingTest(GradCase):
    def test_values(self):
        rng = self.rng(8)
        w = rand_list((5, 3), rng)
        idx = [[0, 4, 2], [2, 2, 1]]
        expected = [[w[i] for i in row] for row in idx]
        self.assertClose(F.embedding(mt.tensor(idx), t64(w)), expected, rtol=0, atol=0)
        self.assertClose(F.embedding(mt.tensor(idx, dtype=mt.int32), t64(w)), expected, rtol=0, atol=0)
        self.assertClose(F.embedding(idx, t64(w)), expected, rtol=0, atol=0)
        self.assertClose(F.embedding(mt.tensor(3), t64(w)), w[3], rtol=0, atol=0)

    def test_gradient_accumulates_repeats(self):
        rng = self.rng(9)
        w = rand_list((4, 3), rng)
        idx = mt.tensor([[1, 3], [1, 1]])
        self.check_grad(lambda ww: F.embedding(idx, ww), [w], 0)
        wt = t64(w, requires_grad=True)
        F.embedding(idx, wt).sum().backward()
        self.assertEqual(wt.grad.tolist(), [[0.0] * 3, [3.0] * 3, [0.0] * 3, [1.0] * 3])

    def test_errors(self):
        w = mt.ones(4, 2)
        with self.assertRaises(ValueError) as cm:
            F.embedding(mt.tensor([0, 7]), w)
        self.assertIn("mt_embedding", str(cm.exception))
        with self.assertRaises(TypeError):
            F.embedding(mt.tensor([0.0, 1.0]), w)
        with self.assertRaises(NotImplementedError):
            F.embedding(mt.tensor([0]), w, padding_idx=0)

    def test_module(self):
        mt.manual_seed(123)
        e = nn.Embedding(200, 50)
        self.assertEqual(tuple(e.weight.shape), (200, 50))
        self.assertTrue(e.weight.requires_grad)
        vals = flat(e.weight.tolist())
        mean = math.fsum(vals) / len(vals)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))
        self.assertLess(abs(mean), 0.05)
        self.assertLess(abs(std - 1.0), 0.05)
        mt.manual_seed(123)
        self.assertEqual(nn.Embedding(200, 50).weight.tolist(), e.weight.tolist())
        out = e(mt.tensor([[3, 7]]))
        self.assertEqual(tuple(out.shape), (1, 2, 50))
        self.assertEqual(out.tolist()[0][1], e.weight.tolist()[7])
        self.assertEqual(repr(e), "Embedding(200, 50)")
        pre = nn.Embedding.from_pretrained(mt.tensor([[1.0, 2.0], [3.0, 4.0]]))
        self.assertFalse(pre.weight.requires_grad)
        self.assertEqual(pre(mt.tensor([1])).tolist(), [[3.0, 4.0]])
        with self.assertRaises(NotImplementedError):
            nn.Embedding(3, 2, padding_idx=0)


# ---------------------------------------------------------------- dropout

class DropoutTest(TestCase):
    def test_mask_scale_and_rate(self):
        x = mt.ones(20000, dtype=F64)
        y = F.dropout(x, 0.25)
        vals = y.tolist()
        self.assertTrue(all(v == 0.0 or abs(v - 1 / 0.75) < 1e-12 for v in vals))
        dropped = sum(1 for v in vals if v == 0.0) / len(vals)
        self.assertLess(abs(dropped - 0.25), 0.02)

    def test_seeded_by_manual_seed_and_advanced_per_call(self):
        x = mt.ones(64)
        mt.manual_seed(7)
        a, b = F.dropout(x, 0.5).tolist(), F.dropout(x, 0.5).tolist()
        self.assertNotEqual(a, b)
        mt.manual_seed(7)
        self.assertEqual(F.dropout(x, 0.5).tolist(), a)
        self.assertEqual(F.dropout(x, 0.5).tolist(), b)

    def test_identity_cases_and_errors(self):
        x = mt.tensor(rand_list((3, 4), self.rng(10)))
        self.assertIs(F.dropout(x, 0.5, training=False), x)
        self.assertIs(F.dropout(x, 0.0), x)
        self.assertEqual(F.dropout(x, 1.0).tolist(), [[0.0] * 4] * 3)
        for p in (-0.1, 1.5):
            with self.assertRaises(ValueError):
                F.dropout(x, p)

    def test_gradient_is_the_mask(self):
        x = t64(rand_list((50,), self.rng(11)), requires_grad=True)
        y = F.dropout(x, 0.4)
        y.sum().backward()
        for g, yv, xv in zip(x.grad.tolist(), y.tolist(), x.detach().tolist()):
            if yv == 0.0:
                self.assertEqual(g, 0.0)
            else:
                self.assertAlmostEqual(g, 1 / 0.6, places=12)
                self.assertAlmostEqual(yv, xv / 0.6, places=12)

    def test_module_train_eval(self):
        d = nn.Dropout(0.5)
        x = mt.ones(100)
        self.assertIn(0.0, d(x).tolist())
        d.eval()
        self.assertIs(d(x), x)
        d.train()
        self.assertIn(0.0, d(x).tolist())
        self.assertEqual(repr(d), "Dropout(p=0.5, inplace=False)")
        with self.assertRaises(ValueError):
            nn.Dropout(2.0)


# ------------------------------------------------------------------- sdpa

class AttentionTest(GradCase):
    def qkv(self, seed, T=4, S=4, D=3, Dv=2, lead=(2, 2)):
        rng = self.rng(seed)
        return (rand_list(lead + (T, D), rng), rand_list(lead + (S, D), rng), rand_list(lead + (S, Dv), rng))

    def test_values_against_reference(self):
        for causal in (False, True):
            for T, S in ((4, 4), (3, 5), (5, 3)):
                q, k, v = self.qkv(12, T, S)
                got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), is_causal=causal)
                self.assertClose(got, ref_attention(q, k, v, causal=causal), rtol=1e-10, atol=1e-12,
                                 msg="causal=%s T=%d S=%d" % (causal, T, S))
        q, k, v = self.qkv(13)
        got = F.scaled_dot_product_attention(mt.tensor(q), mt.tensor(k), mt.tensor(v))
        self.assertClose(got, ref_attention(q, k, v), rtol=1e-4, atol=1e-5)

    def test_set_deterministic(self):
        """set_deterministic returns the previous setting (off by default). On this path every
        kernel is deterministic, so attention and its gradients keep their bits either way;
        the values match the float64 reference (tolerance as above)."""
        q, k, v = self.qkv(17, T=5, S=6)
        prev = mt.set_deterministic(True)
        try:
            self.assertFalse(prev, "deterministic is off by default")
            self.assertTrue(mt.set_deterministic(True))
            runs = []
            for on in (True, False):
                mt.set_deterministic(on)
                ts = [t64(x, requires_grad=True) for x in (q, k, v)]
                out = F.scaled_dot_product_attention(*ts, is_causal=True)
                out.sum().backward()
                runs.append([out.tolist()] + [t.grad.tolist() for t in ts])
            self.assertEqual(runs[0], runs[1], "values or gradients changed with the setting")
            self.assertClose(runs[0][0], ref_attention(q, k, v, causal=True), rtol=1e-10, atol=1e-12)
        finally:
            mt.set_deterministic(prev)

    def test_scale(self):
        q, k, v = self.qkv(14)
        for scale in (0.3, 2.0, 0.0, -1.0):
            got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), scale=scale, is_causal=True)
            self.assertClose(got, ref_attention(q, k, v, causal=True, scale=scale), rtol=1e-10, atol=1e-12)

    def test_masks(self):
        q, k, v = self.qkv(15, T=3, S=4, lead=(2,))
        rng = self.rng(16)
        allowed = [[1 if (i + j) % 3 else 0 for j in range(4)] for i in range(3)]
        allowed[0] = [1, 0, 0, 0]
        got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=mt.tensor(allowed).byte())
        exp = [ref_attention_matrix(q[b], k[b], v[b], allowed=allowed)[0] for b in range(2)]
        self.assertClose(got, exp, rtol=1e-10, atol=1e-12)
        add = rand_list((3, 4), rng, -2, 2)
        got = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=t64(add))
        exp = [ref_attention_matrix(q[b], k[b], v[b], add=add)[0] for b in range(2)]
        self.assertClose(got, exp, rtol=1e-10, atol=1e-12)
        with self.assertRaises(ValueError):
            F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=t64(add), is_causal=True)

    def test_gradients(self):
        for causal in (False, True):
            q, k, v = self.qkv(17 + causal, T=3, S=3, lead=(2,))

            def f(a, b, c):
                return F.scaled_dot_product_attention(a, b, c, is_causal=causal)
            for which in range(3):
                self.check_grad(f, [q, k, v], which, rtol=1e-5, atol=1e-8)

    def test_gradients_composed_path(self):
        q, k, v = self.qkv(19, T=2, S=3, lead=(1,))

        def f(a, b, c):
            return F.scaled_dot_product_attention(a, b, c, is_causal=True)
        for which in range(3):
            self.check_grad(f, [q, k, v], which, rtol=1e-5, atol=1e-8)

    def test_dropout_p(self):
        q, k, v = self.qkv(20)
        mt.manual_seed(3)
        a = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), dropout_p=0.5).tolist()
        mt.manual_seed(3)
        self.assertEqual(F.scaled_dot_product_attention(t64(q), t64(k), t64(v), dropout_p=0.5).tolist(), a)
        self.assertNotEqual(a, ref_attention(q, k, v))

    def test_shape_errors(self):
        with self.assertRaises(ValueError):
            F.scaled_dot_product_attention(mt.ones(2, 3), mt.ones(2, 4), mt.ones(2, 3))


# ------------------------------------------------------------ cat, masked_fill

class CatTest(GradCase):
    def test_values(self):
        rng = self.rng(21)
        a, b, c = rand_list((2, 3, 2), rng), rand_list((2, 1, 2), rng), rand_list((2, 4, 2), rng)
        self.assertClose(mt.cat([t64(a), t64(b), t64(c)], 1), ref_cat([a, b, c], 1), rtol=0, atol=0)
        self.assertClose(mt.cat((t64(a), t64(a)), dim=-1), ref_cat([a, a], 2), rtol=0, atol=0)
        self.assertClose(mt.cat([t64(a), t64(a)]), ref_cat([a, a], 0), rtol=0, atol=0)
        self.assertClose(mt.concat([t64(a)], 0), a, rtol=0, atol=0)
        self.assertEqual(mt.cat([mt.tensor([1, 2]), mt.tensor([3])]).tolist(), [1, 2, 3])
        self.assertEqual(mt.cat([mt.tensor([[1.0]]), mt.zeros(0)], 0).tolist(), [[1.0]])

    def test_promotion(self):
        out = mt.cat([mt.tensor([1, 2]), mt.tensor([0.5], dtype=F64)])
        self.assertIs(out.dtype, F64)
        self.assertEqual(out.tolist(), [1.0, 2.0, 0.5])

    def test_gradients(self):
        rng = self.rng(22)
        a, b = rand_list((2, 3), rng), rand_list((2, 2), rng)
        for which in range(2):
            self.check_grad(lambda x, y: mt.cat([x, y], 1), [a, b], which)
            self.check_grad(lambda x, y: mt.cat([x, x, y], -1), [a, b], which)

    def test_stack(self):
        a, b = [[1.0, 2.0]], [[3.0, 4.0]]
        self.assertEqual(mt.stack([mt.tensor(a), mt.tensor(b)]).tolist(), [a, b])
        self.assertEqual(mt.stack([mt.tensor(a), mt.tensor(b)], -1).tolist(), [[[1.0, 3.0], [2.0, 4.0]]])

    def test_errors(self):
        with self.assertRaises(ValueError):
            mt.cat([])
        with self.assertRaises(TypeError):
            mt.cat(mt.ones(2))
        with self.assertRaises(TypeError):
            mt.cat([mt.ones(2), [1.0]])
        with self.assertRaises(ValueError) as cm:
            mt.cat([mt.ones(2, 3), mt.ones(3, 3)], 1)
        self.assertIn("mt_cat", str(cm.exception))
        with self.assertRaises(ValueError):
            mt.stack([mt.ones(2), mt.ones(3)])
        with self.assertRaisesRegex(TypeError, "stack\\(\\): expected Tensor as element 1"):
            mt.stack([mt.ones(2), [1.0, 2.0]])           # AttributeError ('list' has no shape) before


class MaskedFillTest(TestCase):
    def test_values_with_comparison_masks(self):
        x = rand_list((3, 4), self.rng(23))
        t = t64(x)
        got = t.masked_fill(t > 0, -1.5)
        self.assertEqual(got.tolist(), [[-1.5 if v > 0 else v for v in row] for row in x])
        row_mask = mt.tensor([1, 0, 0, 1]).byte()            # broadcast over rows
        self.assertEqual(t.masked_fill(row_mask, float("-inf")).tolist(),
                         [[float("-inf") if m else v for v, m in zip(row, [1, 0, 0, 1])] for row in x])
        self.assertEqual(mt.masked_fill(t, t < 0, mt.tensor(2.0)).tolist(),
                         [[2.0 if v < 0 else v for v in row] for row in x])

    def test_gradient(self):
        x = t64(rand_list((2, 3), self.rng(24)), requires_grad=True)
        mask = x.detach() > 0
        x.masked_fill(mask, 5.0).sum().backward()
        self.assertEqual(x.grad.tolist(), [[0.0 if v > 0 else 1.0 for v in row] for row in x.detach().tolist()])

    def test_in_place_and_errors(self):
        t = mt.tensor([1.0, -2.0, 3.0])
        self.assertIs(t.masked_fill_(t < 0, 0.0), t)
        self.assertEqual(t.tolist(), [1.0, 0.0, 3.0])
        with self.assertRaises(TypeError) as cm:
            t.masked_fill(mt.tensor([1.0, 0.0, 0.0]), 1.0)
        self.assertIn("uint8", str(cm.exception))
        with self.assertRaises(RuntimeError):
            t.masked_fill(t > 0, mt.tensor([1.0, 2.0]))
        with self.assertRaises(RuntimeError):
            mt.ones(2, requires_grad=True).masked_fill_(mt.tensor([1, 0]).byte(), 0.0)


# ---------------------------------------------------------- MultiheadAttention

class MultiheadAttentionTest(TestCase):
    def reference(self, m, query, key, value, key_padding=None, attn_blocked=None):
        """Pure-Python forward of m for batch-first nested lists; returns (out, mean weights)."""
        E, H = m.embed_dim, m.num_heads
        hd = E // H
        W = m.in_proj_weight.tolist()
        b = m.in_proj_bias.tolist()
        Wo, bo = m.out_proj.weight.tolist(), m.out_proj.bias.tolist()
        outs, weights = [], []
        for bi in range(len(query)):
            q = ref_linear(query[bi], W[:E], b[:E])
            k = ref_linear(key[bi], W[E:2 * E], b[E:2 * E])
            v = ref_linear(value[bi], W[2 * E:], b[2 * E:])
            T, S = len(q), len(k)
            allowed = [[1] * S for _ in range(T)]
            for i in range(T):
                for j in range(S):
                    if key_padding is not None and key_padding[bi][j]:
                        allowed[i][j] = 0
                    if attn_blocked is not None and attn_blocked[i][j]:
                        allowed[i][j] = 0
            heads, wsum = [], [[0.0] * S for _ in range(T)]
            for h in range(H):
                sl = slice(h * hd, (h + 1) * hd)
                o, w = ref_attention_matrix([r[sl] for r in q], [r[sl] for r in k], [r[sl] for r in v],
                                            allowed=allowed)
                heads.append(o)
                for i in range(T):
                    for j in range(S):
                        wsum[i][j] += w[i][j] / H
            concat = [sum((heads[h][i] for h in range(H)), []) for i in range(T)]
            outs.append(ref_linear(concat, Wo, bo))
            weights.append(wsum)
        return outs, weights

    def make(self, **kw):
        mt.manual_seed(31)
        m = nn.MultiheadAttention(8, 2, batch_first=True, dtype=F64, **kw)
        with mt.no_grad():
            m.in_proj_bias.copy_(t64(rand_list((24,), self.rng(32))))
            m.out_proj.bias.copy_(t64(rand_list((8,), self.rng(33))))
        return m

    def test_parameters_like_torch(self):
        m = nn.MultiheadAttention(8, 2, batch_first=True)
        self.assertEqual([n for n, _ in m.named_parameters()],
                         ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"])
        self.assertEqual(tuple(m.in_proj_weight.shape), (24, 8))
        self.assertEqual(m.in_proj_bias.tolist(), [0.0] * 24)
        self.assertEqual(m.out_proj.bias.tolist(), [0.0] * 8)
        bound = math.sqrt(6.0 / (24 + 8))
        self.assertTrue(all(abs(v) <= bound for v in flat(m.in_proj_weight.tolist())))
        with self.assertRaises(ValueError):
            nn.MultiheadAttention(8, 3)
        with self.assertRaises(NotImplementedError):
            nn.MultiheadAttention(8, 2, kdim=4)

    def test_self_and_cross_attention(self):
        m = self.make()
        rng = self.rng(34)
        x = rand_list((2, 3, 8), rng)
        mem = rand_list((2, 5, 8), rng)
        for q, kv in ((x, x), (x, mem)):
            exp_out, exp_w = self.reference(m, q, kv, kv)
            out, w = m(t64(q), t64(kv), t64(kv))
            self.assertClose(out, exp_out, rtol=1e-10, atol=1e-12)
            self.assertClose(w, exp_w, rtol=1e-10, atol=1e-12)
            out, w = m(t64(q), t64(kv), t64(kv), need_weights=False)
            self.assertIsNone(w)
            self.assertClose(out, exp_out, rtol=1e-10, atol=1e-12)
            _, w = m(t64(q), t64(kv), t64(kv), average_attn_weights=False)
            self.assertEqual(tuple(w.shape), (2, 2, 3, len(kv[0])))

    def test_masks(self):
        m = self.make()
        rng = self.rng(35)
        x = rand_list((2, 4, 8), rng)
        pad = [[0, 0, 1, 1], [0, 0, 0, 1]]
        causal = [[1 if j > i else 0 for j in range(4)] for i in range(4)]
        exp_out, exp_w = self.reference(m, x, x, x, key_padding=pad, attn_blocked=causal)
        for need_weights in (True, False):
            out, w = m(t64(x), t64(x), t64(x), key_padding_mask=mt.tensor(pad).byte(),
                       attn_mask=mt.tensor(causal).byte(), need_weights=need_weights, is_causal=True)
            self.assertClose(out, exp_out, rtol=1e-10, atol=1e-12)
            if need_weights:
                self.assertClose(w, exp_w, rtol=1e-10, atol=1e-12)
        float_mask = t64([[float("-inf") if c else 0.0 for c in row] for row in causal])
        out, _ = m(t64(x), t64(x), t64(x), key_padding_mask=mt.tensor(pad).byte(), attn_mask=float_mask)
        self.assertClose(out, exp_out, rtol=1e-10, atol=1e-12)
        with self.assertRaises(RuntimeError):
            m(t64(x), t64(x), t64(x), is_causal=True)

    def test_sequence_first_and_unbatched(self):
        m = self.make()
        x = rand_list((2, 3, 8), self.rng(36))
        exp_out, _ = self.reference(m, x, x, x)
        m.batch_first = False
        xs = t64(x).transpose(0, 1)
        out, w = m(xs, xs, xs)
        self.assertClose(out.transpose(0, 1), exp_out, rtol=1e-10, atol=1e-12)
        self.assertEqual(tuple(w.shape), (2, 3, 3))
        out, w = m(t64(x[0]), t64(x[0]), t64(x[0]))
        self.assertClose(out, exp_out[0], rtol=1e-10, atol=1e-12)
        self.assertEqual(tuple(w.shape), (3, 3))

    def test_trains(self):
        m = self.make(dropout=0.1)
        x = t64(rand_list((2, 3, 8), self.rng(37)))
        out, _ = m(x, x, x)
        out.sum().backward()
        for name, p in m.named_parameters():
            self.assertIsNotNone(p.grad, name)
        m.eval()
        a, _ = m(x, x, x)
        b, _ = m(x, x, x)
        self.assertEqual(a.tolist(), b.tolist())


if __name__ == "__main__":
    unittest.main()
