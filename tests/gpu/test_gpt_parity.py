"""test_gpt_parity - the character-level GPT against PyTorch, the llm.c way: the same model
(minitorch.gpt's class, built once over torch and once over minitorch), the same weights, the
same batch, compared output by output.

PyTorch builds the model (vocabulary 65, context 32, 2 layers, 4 heads, d_model 64, float32,
GPT-2 initialisation from torch's generator) and a batch of 4 x 32; the weights, the batch and
the configuration go to a safetensors file. Two minitorch implementations load it:
  - the C model, frontends/c/gpt.h, through `char_gpt --parity DIR` (what char_gpt trains and
    the benchmark times);
  - the Python twin, minitorch.gpt over minitorch.nn, through the Python frontend.
Each is compared with PyTorch on: the logits, the loss, the gradient of every parameter (before
any update), then the losses of 10 training steps on that batch with char_gpt's optimizer
(AdamW lr 1e-3, betas 0.9/0.99, weight decay 0.1 on the matrices, gradients clipped to 1.0).

Tolerances (relative error ||got - ref|| / ||ref||, TF32 off on both sides):
  logits, loss     1e-5  float32 throughout; each logit ends a chain of ~10 matmuls, layernorms
                         and softmaxes whose roundings (a few ulps each) add, not compound
  gradients        1e-4  the backward sums over the 128 positions (and the heads); float32
                         accumulations in different orders (cuBLAS vs the reference) differ by
                         ~sqrt(n) ulps
  step losses      5e-4  AdamW divides by sqrt(v): an entry whose gradient is rounding noise gets
                         a full-size update of either sign, so the curves drift apart slowly; a
                         wrong kernel shows as 1e-2 or more within a step or two
Run by `make test-gpu` (MT_DEVICE=cuda; minitorch on CUDA, torch on CUDA). Without torch or a
usable GPU every test is skipped; MT_PARITY_DEVICE=cpu checks the harness with both on the CPU.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "frontends", "python"))
import abi_util as U  # noqa: E402
import minitorch as mt  # noqa: E402
from minitorch import gpt  # noqa: E402

SELF_TEST = os.environ.get("MT_PARITY_DEVICE") == "cpu"
RUN = SELF_TEST or U.HAVE_CUDA
try:
    import torch
    HAVE_TORCH = bool(torch.cuda.is_available()) or SELF_TEST
except ImportError:
    torch = None
    HAVE_TORCH = False
TORCH_DEV = "cuda" if (HAVE_TORCH and not SELF_TEST) else "cpu"
MT_DEV = "cpu" if SELF_TEST else "cuda"
if HAVE_TORCH and TORCH_DEV == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

CFG = gpt.GPTConfig(vocab=65, context=32, n_layer=2, n_head=4, d_model=64)
B = 4
STEPS = 10                       # char_gpt.c's PARITY_STEPS
LR, WD, CLIP = 1e-3, 0.1, 1.0    # char_gpt.c's defaults
TOL_OUT, TOL_GRAD, TOL_STEPS = 1e-5, 1e-4, 5e-4


def rel_err(got, want):
    got, want = got.double().reshape(-1), want.double().reshape(-1)
    n = want.norm().item()
    d = (got - want).norm().item()
    return d / n if n else d


def to_torch(t):
    """A minitorch tensor (any float dtype) as a float64 CPU torch tensor (through a Python list)."""
    return torch.tensor(t.double().to("cpu").tolist(), dtype=torch.float64)


def from_torch(t):
    dtype = mt.int64 if t.dtype == torch.int64 else mt.float32
    return mt.tensor(t.detach().cpu().reshape(-1).tolist(), dtype=dtype).reshape(tuple(t.shape))


def torch_run(model, idx, tgt):
    """(logits, loss, {name: grad}, [STEPS losses]) of the reference."""
    logits, loss = model(idx, tgt)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    out = (logits.detach(), loss.detach())
    opt = gpt.configure_optimizer(torch, model, lr=LR, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = model(idx, tgt)
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(l.item())
    return out[0], out[1], grads, losses


def mt_twin_run(model, state, idx, tgt, clip=None, steps=STEPS):
    """(logits, loss, {name: grad}, [steps losses]) of minitorch's twin `model` loaded from the
    torch state dict `state` on idx, tgt: the first step's outputs and gradients as float64 torch
    tensors, then the losses of `steps` AdamW steps (gradients clipped to `clip` when given)."""
    dev = model.wte.weight.device
    model.load_state_dict({n: from_torch(t).to(dev) for n, t in state.items()})
    logits, loss = model(idx, tgt)
    loss.backward()
    grads = {n: to_torch(p.grad) for n, p in model.named_parameters()}
    out = (to_torch(logits), to_torch(loss))
    opt = gpt.configure_optimizer(mt, model, lr=LR, weight_decay=WD)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, l = model(idx, tgt)
        l.backward()
        if clip is not None:
            mt.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(l.item())
    return out[0], out[1], grads, losses


def assert_runs_agree(test, what, got, ref, tol_out, tol_grad, tol_steps):
    """Checks, in unittest.TestCase `test`, one run (logits, loss, {name: grad}, [step losses])
    against the reference's: relative errors of the logits and the loss below tol_out, of the
    worst gradient below tol_grad (the same parameter names on both sides), and of each step's
    loss below tol_steps."""
    logits, loss, grads, losses = got
    ref_logits, ref_loss, ref_grads, ref_losses = ref
    e = rel_err(logits, ref_logits.cpu())
    test.assertLess(e, tol_out, "%s: logits rel err %.3g" % (what, e))
    e = rel_err(loss, ref_loss.cpu())
    test.assertLess(e, tol_out, "%s: loss %r vs %r" % (what, loss.item(), ref_loss.item()))
    test.assertEqual(sorted(grads), sorted(ref_grads))
    worst = max((rel_err(grads[n], ref_grads[n].cpu()), n) for n in ref_grads)
    test.assertLess(worst[0], tol_grad, "%s: gradient of %s rel err %.3g" % (what, worst[1], worst[0]))
    for i, (a, b) in enumerate(zip(losses, ref_losses)):
        test.assertLess(abs(a - b), tol_steps * abs(b), "%s: step %d loss %r vs torch %r (all: %s vs %s)"
                        % (what, i, a, b, losses, ref_losses))


@unittest.skipUnless(RUN, "no usable GPU (mt_cuda_device_count() == 0); MT_PARITY_DEVICE=cpu checks the harness")
@unittest.skipUnless(HAVE_TORCH, "PyTorch with CUDA is not importable")
class GPTParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mt_gpt_parity_")
        torch.manual_seed(1234)
        model = gpt.make_gpt(torch)(CFG).to(TORCH_DEV)
        cls.state = {n: p.detach().clone() for n, p in model.named_parameters()}
        g = torch.Generator().manual_seed(99)
        cls.idx = torch.randint(0, CFG.vocab, (B, CFG.context), generator=g).to(TORCH_DEV)
        cls.tgt = torch.randint(0, CFG.vocab, (B, CFG.context), generator=g).to(TORCH_DEV)
        cls.ref = torch_run(model, cls.idx, cls.tgt)
        entries = {n: from_torch(t) for n, t in cls.state.items()}
        entries["config"] = mt.tensor([CFG.vocab, CFG.context, CFG.n_layer, CFG.n_head, CFG.d_model, 0],
                                      dtype=mt.int64)
        entries["idx"] = from_torch(cls.idx)
        entries["targets"] = from_torch(cls.tgt.reshape(-1))
        mt.save(entries, os.path.join(cls.tmp, "in.safetensors"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def compare(self, what, logits, loss, grads, losses):
        assert_runs_agree(self, what, (logits, loss, grads, losses), self.ref, TOL_OUT, TOL_GRAD, TOL_STEPS)
        self.assertEqual(len(losses), STEPS)
        ref_losses = self.ref[3]
        self.assertLess(ref_losses[-1], ref_losses[0], "the reference did not learn the batch: %s" % ref_losses)

    def test_c_model(self):
        exe = os.path.join(os.path.dirname(os.path.abspath(U.lib_path())), "char_gpt")
        self.assertTrue(os.access(exe, os.X_OK), "%s not built" % exe)
        env = dict(os.environ, MT_DEVICE=MT_DEV)
        p = subprocess.run([exe, "--parity", self.tmp], capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("live tensors: 0", p.stdout)
        out = mt.load(os.path.join(self.tmp, "out.safetensors"), map_location="cpu")
        grads = {k[len("grad."):]: to_torch(v) for k, v in out.items() if k.startswith("grad.")}
        self.compare("char_gpt --parity", to_torch(out["logits"]), to_torch(out["loss"]), grads,
                     out["losses"].tolist())

    def test_python_twin(self):
        model = gpt.make_gpt(mt)(CFG, device=MT_DEV)
        idx, tgt = from_torch(self.idx).to(MT_DEV), from_torch(self.tgt).to(MT_DEV)
        self.compare("minitorch.gpt", *mt_twin_run(model, self.state, idx, tgt, CLIP))


if __name__ == "__main__":
    unittest.main(verbosity=2)
