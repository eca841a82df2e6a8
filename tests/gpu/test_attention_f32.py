"""test_attention_f32 - the float32 attention kernels (backend/cuda/attention/attention_f32.cu)
behind mt_scaled_dot_product_attention (float32, head dim 16 or 32) and mt_self_attention
(heads read from a packed q|k|v projection and written side by side), forward and backward.

  sdpa           out, dq, dk, dv of float32 q, k, v [B, H, T, D] against
                 torch.nn.functional.scaled_dot_product_attention in float64 on the same values;
                 T and S from 1 to 1000 (tails of the 32-row and 64-row tiles), S != T, causal
                 (the mask aligned at the end) and not
  self_attention out and dqkv of qkv [B, T, 3 H Dh] against the same split, attention and merge in
                 torch float64, at the char-GPT shapes and at tails; twice, to the same bits
  dispatch       one recorded node for each; head dim 8 and 64 stay on the composed path

Inputs are fresh torch.randn values per case (seed printed on failure); the device pool is
filled with NaN before each case, so an output element the kernels never write shows up.
Tolerance: relative error ||got - ref|| / ||ref|| below 2e-6 (float32 math with float32
accumulation over at most 1000 terms, against float64).

Run by `make test-gpu`; alone: MINITORCH_LIB=build/libminitorch.so python3 -m unittest
tests.gpu.test_attention_f32 -v. Without a usable GPU or without torch every test is skipped.
"""
import os
import random
import sys
import unittest
from ctypes import c_int64

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import abi_util as U  # noqa: E402
from abi_util import LIB, MT_F32  # noqa: E402

from tests.gpu.test_flash_attention import (RUN, SKIP_WHY, backward_of, first_bad, from_mt,  # noqa: E402
                                          poison_pool, rel, to_mt)

try:
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = None

TOL = 2e-6
SEED = int(os.environ.get("MT_TEST_SEED", "4321"))

# (B, H, T, S, D, causal)
SDPA_CASES = [
    (1, 1, 1, 1, 16, True), (1, 1, 1, 1, 32, False), (2, 3, 17, 17, 32, True), (1, 2, 33, 33, 16, False),
    (1, 2, 65, 65, 32, True), (2, 1, 100, 130, 32, True), (1, 1, 130, 40, 16, False), (3, 2, 256, 256, 32, True),
    (1, 1, 1000, 1000, 32, True), (1, 2, 1000, 1000, 16, False), (1, 1, 7, 1000, 32, True),
]
# (B, T, H, Dh): the char-GPT presets (small 16, large 32) and tails
PACKED_CASES = [(4, 128, 4, 16), (4, 256, 4, 32), (3, 1, 2, 32), (2, 97, 3, 16), (1, 300, 2, 32)]


def torch_sdpa64(q, k, v, causal, dout):
    """out and (dq, dk, dv) in float64 on the GPU; causal key j visible to query i when j <= i + S - T."""
    qd, kd, vd = [x.detach().double().cuda().requires_grad_(True) for x in (q, k, v)]
    T, S = q.shape[-2], k.shape[-2]
    mask = None
    if causal:
        mask = torch.arange(S, device="cuda")[None, :] <= torch.arange(T, device="cuda")[:, None] + (S - T)
    out = TF.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)
    out.backward(dout.double().cuda())
    return out.detach().cpu(), [x.grad.detach().cpu() for x in (qd, kd, vd)]


def torch_packed64(qkv, heads, causal, dout):
    """out [B, T, D] and dqkv of the split / attention / merge chain in float64 on the GPU."""
    B, T, D3 = qkv.shape
    D = D3 // 3
    x = qkv.detach().double().cuda().requires_grad_(True)
    p = x.reshape(B, T, 3, heads, D // heads).permute(2, 0, 3, 1, 4)
    y = TF.scaled_dot_product_attention(p[0], p[1], p[2], is_causal=causal)
    out = y.permute(0, 2, 1, 3).reshape(B, T, D)
    out.backward(dout.double().cuda())
    return out.detach().cpu(), x.grad.detach().cpu()


@unittest.skipUnless(RUN, SKIP_WHY)
class AttentionF32Test(unittest.TestCase):
    def setUp(self):
        LIB.mt_tape_clear()

    def tearDown(self):
        LIB.mt_tape_clear()

    def check(self, label, got, want):
        e = rel(got, want)
        self.assertLess(e, TOL, "%s: rel err %.3g; %s" % (label, e, first_bad(got, want, TOL)))

    def test_sdpa(self):
        for n, (B, H, T, S, D, causal) in enumerate(SDPA_CASES):
            seed = SEED * 7919 + n
            with self.subTest(B=B, H=H, T=T, S=S, D=D, causal=causal, seed=seed):
                g = torch.Generator().manual_seed(seed)
                q, dout = [torch.randn(B, H, T, D, generator=g) for _ in range(2)]
                k, v = [torch.randn(B, H, S, D, generator=g) for _ in range(2)]
                want, wgrads = torch_sdpa64(q, k, v, causal, dout)
                poison_pool()
                hs = [to_mt(x, True) for x in (q, k, v)]
                try:
                    before = LIB.mt_tape_size()
                    out = U.call("mt_scaled_dot_product_attention", hs[0], hs[1], hs[2], c_int64(1 if causal else 0))
                    self.assertEqual(LIB.mt_tape_size() - before, 1, "one FLASH_ATTENTION node")
                    self.check("out", from_mt(out, torch.float32), want)
                    grads = backward_of(out, dout, hs, torch.float32)
                    for name, got, ref in zip(("dq", "dk", "dv"), grads, wgrads):
                        self.check(name, got, ref)
                finally:
                    for h in hs:
                        U.release(h)

    def test_self_attention(self):
        for n, (B, T, H, Dh) in enumerate(PACKED_CASES):
            for causal in (True, False):
                seed = SEED * 104729 + 2 * n + causal
                with self.subTest(B=B, T=T, H=H, Dh=Dh, causal=causal, seed=seed):
                    g = torch.Generator().manual_seed(seed)
                    qkv = torch.randn(B, T, 3 * H * Dh, generator=g)
                    dout = torch.randn(B, T, H * Dh, generator=g)
                    want, wgrad = torch_packed64(qkv, H, causal, dout)
                    runs = []
                    for _ in range(2):
                        poison_pool()
                        x = to_mt(qkv, True)
                        try:
                            before = LIB.mt_tape_size()
                            out = U.call("mt_self_attention", x, c_int64(H), c_int64(1 if causal else 0))
                            self.assertEqual(LIB.mt_tape_size() - before, 1, "one SELF_ATTENTION node")
                            got = from_mt(out, torch.float32)
                            runs.append((got, backward_of(out, dout, [x], torch.float32)[0]))
                        finally:
                            U.release(x)
                    self.check("out", runs[0][0], want)
                    self.check("dqkv", runs[0][1], wgrad)
                    self.assertTrue(torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1]),
                                    "two runs differ in some bit")

    def test_other_head_dims_stay_composed(self):
        rng = random.Random(SEED)
        for Dh in (8, 64):
            with self.subTest(Dh=Dh):
                g = torch.Generator().manual_seed(rng.randrange(1 << 30))
                qkv = torch.randn(2, 40, 3 * 2 * Dh, generator=g)
                dout = torch.randn(2, 40, 2 * Dh, generator=g)
                want, wgrad = torch_packed64(qkv, 2, True, dout)
                x = to_mt(qkv, True)
                try:
                    before = LIB.mt_tape_size()
                    out = U.call("mt_self_attention", x, c_int64(2), c_int64(1))
                    self.assertGreater(LIB.mt_tape_size() - before, 1, "composed: more than one node")
                    self.check("out", from_mt(out, torch.float32), want)
                    self.check("dqkv", backward_of(out, dout, [x], torch.float32)[0], wgrad)
                finally:
                    U.release(x)


if __name__ == "__main__":
    unittest.main()
