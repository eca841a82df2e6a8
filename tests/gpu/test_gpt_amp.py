"""test_gpt_amp - minitorch.gpt with compute_dtype=bfloat16 against the same model under
torch.autocast(bfloat16): the twin's Linear layers and attention in bfloat16 (FlashAttention-2 at
head dim 64), LayerNorm, the residual stream and the parameters in float32.

PyTorch builds the model (vocabulary 65, context 64, 2 layers, 2 heads, d_model 128: head dim 64;
GPT-2 initialisation from torch's generator) and a batch of 4 x 64; minitorch's twin loads the
same weights. Compared: the logits, the loss, the gradient of every parameter, then the losses of
10 AdamW steps on that batch (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on the matrices).

Tolerances (relative error ||got - ref|| / ||ref||): both sides round the same float32 values to
bfloat16 (8 significant bits, 3.9e-3 relative) before every product and keep float32 sums, so they
differ where a float32 value sits near a rounding boundary and one side rounds it the other way,
and in the order of the products' sums; those differences are of bfloat16's size and pass through
a dozen such steps: logits and loss 2e-2 (minitorch's loss is itself a bfloat16 value, torch's is
float32), gradients 5e-2 (the backward's products are bfloat16 too), step losses 3e-2. A wrong
kernel or a missing cast shows as O(1). The same model in float32 is also run on both sides and
must agree to 1e-4, so that the tolerances above measure bfloat16 alone.

Run by `make test-gpu`. Without torch or a usable GPU every test is skipped.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# test_gpt_parity puts tests/python and frontends/python on the path, imports torch when it can,
# and turns TF32 off in it
from test_gpt_parity import (LR, SELF_TEST, STEPS, WD, U, assert_runs_agree, from_torch, gpt, mt,  # noqa: E402
                             mt_twin_run, rel_err, torch)

HAVE_TORCH = torch is not None and not SELF_TEST and bool(torch.cuda.is_available())

CFG = gpt.GPTConfig(vocab=65, context=64, n_layer=2, n_head=2, d_model=128)
B = 4
TOL_OUT, TOL_GRAD, TOL_STEPS, TOL_F32 = 2e-2, 5e-2, 3e-2, 1e-4


def torch_run(state, idx, tgt, amp):
    """(logits, loss, {name: grad}, [STEPS losses]) of the torch model from state, under
    torch.autocast(bfloat16) when amp."""
    model = gpt.make_gpt(torch)(CFG).cuda()
    model.load_state_dict(state)

    def fwd():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            return model(idx, tgt)
    logits, loss = fwd()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    out = (logits.detach().float(), loss.detach().float())
    opt = gpt.configure_optimizer(torch, model, lr=LR, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = fwd()
        l.backward()
        opt.step()
        losses.append(l.item())
    return out[0], out[1], grads, losses


def mt_run(state, idx, tgt, amp):
    """The same with minitorch's twin (compute_dtype bfloat16 when amp), and (the logits' dtype,
    the set of the parameters' gradient dtypes)."""
    model = gpt.make_gpt(mt)(CFG, device="cuda", compute_dtype=mt.bfloat16 if amp else None)
    with mt.no_grad():
        logits_dtype = model(idx)[0].dtype
    got = mt_twin_run(model, state, idx, tgt)
    return got + ((logits_dtype, {p.grad.dtype for p in model.parameters()}),)


@unittest.skipUnless(U.HAVE_CUDA, "no usable GPU (mt_cuda_device_count() == 0)")
@unittest.skipUnless(HAVE_TORCH, "PyTorch with CUDA is not importable")
class GPTAmp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(4321)
        model = gpt.make_gpt(torch)(CFG)
        cls.state = {n: p.detach().clone() for n, p in model.state_dict().items()}
        g = torch.Generator().manual_seed(77)
        idx = torch.randint(0, CFG.vocab, (B, CFG.context), generator=g)
        tgt = torch.randint(0, CFG.vocab, (B, CFG.context), generator=g)
        cls.t_idx, cls.t_tgt = idx.cuda(), tgt.cuda()
        cls.m_idx, cls.m_tgt = from_torch(idx).to("cuda"), from_torch(tgt).to("cuda")

    @classmethod
    def tearDownClass(cls):
        # the suites after this one count live tensors from zero
        del cls.m_idx, cls.m_tgt

    def compare(self, what, got, ref, tol_out, tol_grad, tol_steps):
        assert_runs_agree(self, what, got, ref, tol_out, tol_grad, tol_steps)
        losses = got[3]
        self.assertLess(losses[-1], losses[0], "%s did not learn the batch: %s" % (what, losses))

    def test_float32_agrees(self):
        ref = torch_run(self.state, self.t_idx, self.t_tgt, amp=False)
        got = mt_run(self.state, self.m_idx, self.m_tgt, amp=False)
        self.assertEqual(got[4][0], mt.float32)
        self.compare("float32", got[:4], ref, TOL_F32, 10 * TOL_F32, 5 * TOL_F32)

    def test_bfloat16_against_autocast(self):
        ref = torch_run(self.state, self.t_idx, self.t_tgt, amp=True)
        got = mt_run(self.state, self.m_idx, self.m_tgt, amp=True)
        logits_dtype, grad_dtypes = got[4]
        self.assertEqual(logits_dtype, mt.bfloat16)       # the head ran in bfloat16
        self.assertEqual(grad_dtypes, {mt.float32})       # the parameters stay float32
        self.compare("bfloat16", got[:4], ref, TOL_OUT, TOL_GRAD, TOL_STEPS)
        # it really rounded: the bfloat16 run differs from the float32 one by more than float32 noise
        f32 = torch_run(self.state, self.t_idx, self.t_tgt, amp=False)
        self.assertGreater(rel_err(got[0], f32[0].cpu()), 10 * TOL_F32)


if __name__ == "__main__":
    unittest.main(verbosity=2)
