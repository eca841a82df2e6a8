"""minitorch.nn: Module bookkeeping, Parameter, layers against pure-Python references,
initialisation, state_dict round trips."""

import math
import os
import pickle
import sys
import unittest
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_frontend_support import (DEVICE, TestCase, flat, mt, rand_list, ref_binary, ref_matmul,  # noqa: E402
                                   ref_transpose2, sigmoid)

nn = mt.nn
F = mt.nn.functional


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(4, 2, bias=False)
        self.register_buffer("scale", mt.tensor([2.0, 3.0]))
        self.register_buffer("scratch", mt.zeros(1), persistent=False)
        self.note = "plain attribute"

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


class ModuleTest(TestCase):
    def test_registration_and_walks(self):
        m = TwoLayer()
        self.assertEqual([n for n, _ in m.named_parameters()], ["fc1.weight", "fc1.bias", "fc2.weight"])
        self.assertEqual(len(list(m.parameters())), 3)
        self.assertTrue(all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters()))
        self.assertEqual([n for n, _ in m.named_children()], ["fc1", "act", "fc2"])
        self.assertEqual([n for n, _ in m.named_modules()], ["", "fc1", "act", "fc2"])
        self.assertEqual([n for n, _ in m.named_buffers()], ["scale", "scratch"])
        self.assertEqual(m.note, "plain attribute")
        self.assertIsNone(m.fc2.bias)
        self.assertEqual(len(list(m.fc1.parameters())), 2)
        self.assertEqual(list(m.parameters(recurse=False)), [])
        with self.assertRaises(AttributeError):
            m.missing
        with self.assertRaises(TypeError):
            m.fc1.weight = mt.ones(4, 3)            # a plain tensor cannot replace a parameter
        del m.act
        self.assertEqual([n for n, _ in m.named_children()], ["fc1", "fc2"])

    def test_shared_parameters_listed_once(self):
        lin = nn.Linear(2, 2)
        seq = nn.Sequential(lin, nn.ReLU(), lin)
        self.assertEqual(len(list(seq.parameters())), 2)

    def test_call_runs_forward(self):
        m = TwoLayer()
        x = rand_list((5, 3), self.rng(1))
        out = m(mt.tensor(x))
        self.assertEqual(out.shape, (5, 2))
        w1, b1 = m.fc1.weight.tolist(), m.fc1.bias.tolist()
        w2 = m.fc2.weight.tolist()
        h = [[math.tanh(v) for v in row]
             for row in ref_binary(lambda p, q: p + q, ref_matmul(x, ref_transpose2(w1)), b1)]
        want = ref_binary(lambda p, q: p * q, ref_matmul(h, ref_transpose2(w2)), [2.0, 3.0])
        self.assertClose(out, want, rtol=1e-5, atol=1e-6)
        with self.assertRaises(NotImplementedError):
            nn.Module()(1)

    def test_train_eval(self):
        m = TwoLayer()
        self.assertTrue(m.training and m.fc1.training)
        self.assertIs(m.eval(), m)
        self.assertFalse(m.training or m.fc1.training or m.act.training)
        m.train()
        self.assertTrue(m.fc2.training)
        with self.assertRaises(ValueError):
            m.train("no")

    def test_state_dict_round_trip(self):
        mt.manual_seed(1)
        a = TwoLayer()
        b = TwoLayer()
        sd = a.state_dict()
        # torch order: own parameters, own buffers, then children
        self.assertEqual(list(sd), ["scale", "fc1.weight", "fc1.bias", "fc2.weight"])
        self.assertFalse(sd["fc1.weight"].requires_grad)
        self.assertNotEqual(a.fc1.weight.tolist(), b.fc1.weight.tolist())
        w_before = b.fc1.weight
        result = b.load_state_dict(sd)
        self.assertEqual(result.missing_keys, [])
        self.assertEqual(result.unexpected_keys, [])
        self.assertIs(b.fc1.weight, w_before)            # loaded in place
        for k in sd:
            self.assertEqual(b.state_dict()[k].tolist(), sd[k].tolist())
        # the state_dict shares storage with the module
        with mt.no_grad():
            sd["scale"].fill_(7.0)
        self.assertEqual(a.scale.tolist(), [7.0, 7.0])
        # plain nested lists load too
        b.load_state_dict({k: v.tolist() for k, v in sd.items()})
        self.assertEqual(b.scale.tolist(), [7.0, 7.0])
        # pickling a state_dict works (torch.save-like use)
        restored = pickle.loads(pickle.dumps(a.state_dict()))
        self.assertEqual(restored["fc1.bias"].tolist(), a.fc1.bias.tolist())

    def test_load_state_dict_strictness(self):
        m = TwoLayer()
        sd = m.state_dict()
        del sd["fc1.bias"]
        sd["extra"] = mt.zeros(1)
        with self.assertRaises(RuntimeError) as cm:
            m.load_state_dict(sd)
        self.assertIn('Missing key(s) in state_dict: "fc1.bias"', str(cm.exception))
        self.assertIn('Unexpected key(s) in state_dict: "extra"', str(cm.exception))
        r = m.load_state_dict(sd, strict=False)
        self.assertEqual(r.missing_keys, ["fc1.bias"])
        self.assertEqual(r.unexpected_keys, ["extra"])
        bad = m.state_dict()
        bad["fc1.weight"] = mt.zeros(3, 3)
        with self.assertRaises(RuntimeError) as cm:
            m.load_state_dict(bad)
        self.assertIn("size mismatch for fc1.weight", str(cm.exception))

    def test_zero_grad_and_requires_grad(self):
        m = nn.Linear(3, 2)
        xv = rand_list((4, 3), self.rng(7))
        x = mt.tensor(xv, dtype=mt.float32)
        m(x).sum().backward()
        self.assertIsNotNone(m.weight.grad)
        m.zero_grad(set_to_none=False)  # zeroed in place: the buffer stays
        self.assertEqual(flat(m.weight.grad.tolist()), [0.0] * 6)
        m.zero_grad()  # set_to_none=True, as torch: dropped
        self.assertIsNone(m.weight.grad)
        self.assertIsNone(m.bias.grad)
        # the next backward writes a fresh gradient, not added to the old one: d(sum)/dW = column sums of x
        m(x).sum().backward()
        cols = [sum(xv[r][c] for r in range(4)) for c in range(3)]
        self.assertClose(m.weight.grad, [cols, cols], rtol=1e-6)
        m.requires_grad_(False)
        self.assertFalse(m.weight.requires_grad)

    def test_to_dtype(self):
        m = nn.Linear(2, 3)
        w = m.weight.tolist()
        m.double()
        self.assertIs(m.weight.dtype, mt.float64)
        self.assertTrue(m.weight.requires_grad)
        self.assertIsInstance(m.weight, nn.Parameter)
        self.assertClose(m.weight, w, rtol=0, atol=0)
        self.assertIs(m.to(DEVICE), m)

    def test_repr(self):
        seq = nn.Sequential(nn.Linear(2, 4), nn.Sigmoid(), nn.Linear(4, 1))
        self.assertEqual(repr(seq), "Sequential(\n  (0): Linear(in_features=2, out_features=4, bias=True)\n"
                                    "  (1): Sigmoid()\n  (2): Linear(in_features=4, out_features=1, bias=True)\n)")
        self.assertEqual(repr(nn.ReLU()), "ReLU()")
        self.assertEqual(repr(nn.Softmax(dim=1)), "Softmax(dim=1)")


class ContainerTest(TestCase):
    def test_sequential(self):
        seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
        self.assertEqual(len(seq), 3)
        self.assertIsInstance(seq[1], nn.ReLU)
        self.assertIsInstance(seq[-1], nn.Linear)
        self.assertEqual(len(seq[:2]), 2)
        self.assertEqual([type(m).__name__ for m in seq], ["Linear", "ReLU", "Linear"])
        x = mt.tensor([[1.0, -1.0]])
        self.assertClose(seq(x), seq[2](seq[1](seq[0](x))).tolist())
        named = nn.Sequential(OrderedDict([("inp", nn.Linear(2, 2)), ("act", nn.Tanh())]))
        self.assertEqual([n for n, _ in named.named_parameters()], ["inp.weight", "inp.bias"])
        seq.append(nn.Sigmoid())
        self.assertEqual(len(seq), 4)

    def test_module_list(self):
        ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
        self.assertEqual(len(ml), 3)
        self.assertEqual(len(list(ml.parameters())), 6)
        holder = nn.Module()
        holder.layers = ml
        self.assertEqual([n for n, _ in holder.named_parameters()][:2], ["layers.0.weight", "layers.0.bias"])


class LayerTest(TestCase):
    def test_linear_shapes_and_init_bounds(self):
        mt.manual_seed(3)
        lin = nn.Linear(16, 32)
        self.assertEqual(lin.weight.shape, (32, 16))
        self.assertEqual(lin.bias.shape, (32,))
        bound = 1 / math.sqrt(16)
        w = flat(lin.weight.tolist())
        b = lin.bias.tolist()
        self.assertTrue(all(-bound <= v <= bound for v in w + b))
        self.assertGreater(max(w), 0.8 * bound)          # spread over the whole range
        self.assertLess(min(w), -0.8 * bound)
        self.assertAlmostEqual(sum(w) / len(w), 0.0, delta=0.05)
        mt.manual_seed(3)
        self.assertEqual(nn.Linear(16, 32).weight.tolist(), lin.weight.tolist())   # reproducible
        self.assertIs(nn.Linear(2, 2, dtype=mt.float64).weight.dtype, mt.float64)
        self.assertEqual(repr(nn.Linear(2, 3, bias=False)), "Linear(in_features=2, out_features=3, bias=False)")

    def test_activation_modules(self):
        a = [[-1.0, 0.0, 2.0]]
        x = mt.tensor(a, dtype=mt.float64)
        self.assertClose(nn.ReLU()(x), [[0.0, 0.0, 2.0]])
        self.assertClose(nn.Sigmoid()(x), [[sigmoid(v) for v in a[0]]], rtol=1e-14)
        self.assertClose(nn.Tanh()(x), [[math.tanh(v) for v in a[0]]], rtol=1e-14)
        self.assertClose(nn.Identity()(x), a)
        e = [math.exp(v) for v in a[0]]
        self.assertClose(nn.Softmax(dim=1)(x), [[v / sum(e) for v in e]], rtol=1e-14)
        self.assertClose(nn.LogSoftmax(dim=-1)(x), [[math.log(v / sum(e)) for v in e]], rtol=1e-14)
        self.assertEqual(nn.Flatten()(mt.zeros(2, 3, 4)).shape, (2, 12))
        self.assertClose(F.relu(x), [[0.0, 0.0, 2.0]])
        self.assertClose(F.sigmoid(x), [[sigmoid(v) for v in a[0]]], rtol=1e-14)
        self.assertClose(F.tanh(x), [[math.tanh(v) for v in a[0]]], rtol=1e-14)

    def test_losses(self):
        p = mt.tensor([[0.5], [2.0]])
        t = mt.tensor([[1.0], [0.0]])
        self.assertClose(nn.MSELoss()(p, t), (0.25 + 4.0) / 2)
        with self.assertRaises(ValueError):
            nn.MSELoss(reduction="bogus")
        with self.assertRaises(NotImplementedError):
            nn.CrossEntropyLoss(label_smoothing=0.1)


class ArgumentTypeTest(TestCase):
    def test_non_tensor_inputs_are_type_errors(self):
        # a list or a number where a Tensor belongs raised AttributeError ('list' object has no
        # attribute 'dtype') from inside the op; now a TypeError naming the function and argument
        x = mt.tensor(rand_list((2, 3), self.rng(1)), device=DEVICE)
        lin = nn.Linear(3, 2).to(DEVICE)
        cases = [("linear", "input", lambda: F.linear(x.tolist(), lin.weight)),
                 ("linear", "weight", lambda: F.linear(x, lin.weight.tolist())),
                 ("linear", "bias", lambda: F.linear(x, lin.weight, [0.0, 0.0])),
                 ("linear", "input", lambda: lin([1.0, 2.0, 3.0])),
                 ("relu", "input", lambda: F.relu([1.0, -2.0])),
                 ("softmax", "input", lambda: F.softmax(3.0, dim=0)),
                 ("mse_loss", "target", lambda: F.mse_loss(x, 0.0)),
                 ("cross_entropy", "target", lambda: F.cross_entropy(x, [0, 1])),
                 ("layer_norm", "weight", lambda: F.layer_norm(x, (3,), weight=[1.0, 1.0, 1.0])),
                 ("scaled_dot_product_attention", "value", lambda: F.scaled_dot_product_attention(x, x, "v")),
                 ("relu", "input", lambda: mt.relu((1.0,))),
                 ("sum", "input", lambda: mt.sum([1, 2])),
                 ("index_select", "input", lambda: mt.index_select([1, 2], 0, [0]))]
        for fn, arg, call in cases:
            with self.subTest(fn=fn, arg=arg):
                with self.assertRaisesRegex(TypeError, r"^%s\(\): argument '%s' must be a Tensor" % (fn, arg)):
                    call()
        # tensors of the wrong dtype still get the library's own error, and the right ones work
        with self.assertRaisesRegex(mt.DTypeError, "mt_relu: x must be a floating tensor"):
            F.relu(x.long())
        with self.assertRaisesRegex(TypeError, "'indices' to have one of the following scalar types"):
            F.embedding(x, lin.weight)
        self.assertClose(F.relu(x), [[max(v, 0.0) for v in row] for row in x.tolist()])
        self.assertEqual(F.linear(x, lin.weight, None).shape, (2, 2))

    def test_layer_options_and_names(self):
        # a string eps was kept and float() read it at the first forward
        for make in (lambda: nn.LayerNorm(3, eps="1e-5"), lambda: nn.BatchNorm2d(3, eps="1e-5")):
            with self.assertRaisesRegex(TypeError, "^eps must be a real number, got str"):
                make()
        with self.assertRaisesRegex(TypeError, "^momentum must be a real number, got str"):
            nn.BatchNorm1d(3, momentum="0.1")
        # torch's rules for registered names: a dotted name was accepted and broke state_dict keys
        m = nn.Module()
        for register in (lambda n: m.add_module(n, nn.ReLU()), lambda n: m.register_buffer(n, mt.ones(1)),
                         lambda n: m.register_parameter(n, nn.Parameter(mt.ones(1)))):
            for bad in ("a.b", ""):
                with self.assertRaisesRegex(KeyError, "name must be non-empty and hold no dot"):
                    register(bad)
            with self.assertRaisesRegex(TypeError, "name should be a string, got int"):
                register(3)
        self.assertEqual(list(dict(m.named_children())), [])
        m.add_module("act", nn.ReLU())
        self.assertEqual(list(dict(m.named_children())), ["act"])
        with self.assertRaisesRegex(TypeError, "Expected state_dict to be dict-like, got list"):
            nn.Linear(2, 2).load_state_dict([("weight", mt.ones(2, 2))])

    def test_attention_needs_two_dims(self):
        v = mt.tensor(rand_list((4,), self.rng(2)), device=DEVICE)
        for name, args in (("query", (v, v.reshape(2, 2), v.reshape(2, 2))),
                           ("key", (v.reshape(2, 2), v, v.reshape(2, 2)))):
            with self.assertRaisesRegex(ValueError, "%s must have at least 2 dims" % name):
                F.scaled_dot_product_attention(*args)


class InitTest(TestCase):
    def test_fills(self):
        t = mt.zeros(50, 40, dtype=mt.float64)
        nn.init.constant_(t, 0.5)
        self.assertEqual(set(flat(t.tolist())), {0.5})
        nn.init.ones_(t)
        self.assertEqual(set(flat(t.tolist())), {1.0})
        nn.init.zeros_(t)
        self.assertEqual(set(flat(t.tolist())), {0.0})
        nn.init.uniform_(t, -0.1, 0.2)
        v = flat(t.tolist())
        self.assertTrue(all(-0.1 <= x < 0.2 for x in v))
        nn.init.normal_(t, 1.0, 2.0)
        v = flat(t.tolist())
        m = sum(v) / len(v)
        sd = math.sqrt(sum((x - m) ** 2 for x in v) / len(v))
        self.assertAlmostEqual(m, 1.0, delta=0.2)
        self.assertAlmostEqual(sd, 2.0, delta=0.2)

    def test_fan_based(self):
        t = mt.zeros(60, 40, dtype=mt.float64)          # fan_in 40, fan_out 60
        nn.init.xavier_uniform_(t)
        bound = math.sqrt(6.0 / 100)
        v = flat(t.tolist())
        self.assertTrue(all(-bound <= x <= bound for x in v))
        self.assertGreater(max(v), 0.9 * bound)
        nn.init.kaiming_uniform_(t, nonlinearity="relu")
        bound = math.sqrt(2.0) * math.sqrt(3.0 / 40)
        v = flat(t.tolist())
        self.assertTrue(all(-bound <= x <= bound for x in v))
        self.assertGreater(max(v), 0.9 * bound)
        for fn, std in ((nn.init.xavier_normal_, math.sqrt(2.0 / 100)),
                        (lambda x: nn.init.kaiming_normal_(x, nonlinearity="relu"), math.sqrt(2.0 / 40))):
            fn(t)
            v = flat(t.tolist())
            sd = math.sqrt(sum(x * x for x in v) / len(v))
            self.assertAlmostEqual(sd, std, delta=0.1 * std)
        self.assertAlmostEqual(nn.init.calculate_gain("tanh"), 5.0 / 3)
        with self.assertRaises(NotImplementedError):
            nn.init.kaiming_uniform_(t, mode="fan_out")

    def test_parameters_need_no_grad_only_for_tensor_methods(self):
        p = nn.Parameter(mt.zeros(3))
        nn.init.uniform_(p)                      # nn.init turns grad mode off itself
        with self.assertRaises(RuntimeError):
            p.uniform_()                         # the Tensor method follows the in-place rule


class ParameterTest(TestCase):
    def test_parameter(self):
        t = mt.tensor([1.0, 2.0])
        p = nn.Parameter(t)
        self.assertTrue(p.requires_grad)
        self.assertFalse(t.requires_grad)
        self.assertIsInstance(p, mt.Tensor)
        self.assertEqual(p.data_ptr(), t.data_ptr())        # same storage
        self.assertFalse(nn.Parameter(t, requires_grad=False).requires_grad)
        self.assertNotIsInstance(p * 2, nn.Parameter)
        with self.assertRaises(TypeError):
            nn.Parameter([1.0])
        q = pickle.loads(pickle.dumps(p))
        self.assertIsInstance(q, nn.Parameter)
        self.assertEqual(q.tolist(), [1.0, 2.0])


class ClipGradTest(TestCase):
    def test_clip_grad_norm(self):
        a = mt.tensor([3.0, 0.0], dtype=mt.float64, requires_grad=True)
        b = mt.tensor([[4.0]], dtype=mt.float64, requires_grad=True)
        ((a * a).sum() / 2 + (b * b).sum() / 2).backward()     # grads = a, b: norm 5
        norm = nn.utils.clip_grad_norm_([a, b], 1.0)
        self.assertAlmostEqual(norm.item(), 5.0, places=12)
        scale = 1.0 / (5.0 + 1e-6)
        self.assertClose(a.grad, [3.0 * scale, 0.0], rtol=1e-12)
        self.assertClose(b.grad, [[4.0 * scale]], rtol=1e-12)
        norm = nn.utils.clip_grad_norm_([a, b], 10.0)          # already below: unchanged
        self.assertClose(a.grad, [3.0 * scale, 0.0], rtol=1e-12)
        with self.assertRaises(NotImplementedError):
            nn.utils.clip_grad_norm_([a], 1.0, norm_type=1)
        # float() took "1" as 1.0
        with self.assertRaisesRegex(TypeError, "^max_norm must be a real number, got str"):
            nn.utils.clip_grad_norm_([a], "1")
        with self.assertRaisesRegex(TypeError, "^norm_type must be a real number, got str"):
            nn.utils.clip_grad_norm_([a], 1.0, norm_type="2")
        for make in (lambda: nn.Dropout("0.5"), lambda: F.dropout(a, "0.5"), lambda: F.dropout_add(a, a, "0.5")):
            with self.assertRaisesRegex(TypeError, "^dropout probability must be a real number, got str"):
                make()

    def test_clip_grad_norm_without_gradients(self):
        c = mt.tensor([1.0, 2.0], requires_grad=True)          # no backward yet: no .grad
        norm = nn.utils.clip_grad_norm_([c], 1.0)
        self.assertEqual(norm.shape, ())
        self.assertEqual(norm.item(), 0.0)                       # torch returns tensor(0.) too
        self.assertIsNone(c.grad)


if __name__ == "__main__":
    unittest.main()
