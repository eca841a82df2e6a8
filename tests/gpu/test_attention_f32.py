"""test_attention_f32 - the float32 attention kernels (backend/cuda/attention/attention_f32.cu)
behind mt_scaled_dot_product_attention (float32, head dim 16 or 32) and mt_self_attention
(heads read from a packed q|k|v projection and written side by side), forward and backward.

  sdpa           out, dq, dk, dv of float32 q, k, v [B, H, T, D] against
                 torch.nn.functional.scaled_dot_product_attention in float64 on the same values;
                 T and S from 1 to 1000 (tails of the 32-row and 64-row tiles), S != T, causal
                 (the mask aligned at the end) and not
  self_attention out and dqkv of qkv [B, T, 3 H Dh] against the same split, attention and merge in
                 torch float64, at the char-GPT shapes and at tails; twice, to the same bits
  dispatch       one recorded node for each; head dim 8 and 64 stay on the composed path;
                 which kernels ran, by the hook's launch count (variant 3): on a compute
                 capability 9.0 device production runs the three warpgroup-MMA kernels of a
                 forward and backward at head dim 32 and none at head dim 16, variants 1 and 2
                 none; on other GPUs none

sdpa and self_attention run every case under each kernel generation of the internal hook
mt_study_attention_f32: 0, the tensor-core kernels (production; 3xTF32 products; on Hopper at head
dim 32 the warpgroup-MMA kernels of attention_f32_wgmma.cu), 1, the row-per-thread FFMA kernels,
and 2, the mma.sync tensor-core kernels everywhere (on other GPUs the same kernels as 0).

Inputs are fresh torch.randn values per case (seed printed on failure); the device pool is
filled with NaN before each case, so an output element the kernels never write shows up.
Tolerance: relative error ||got - ref|| / ||ref|| below 2e-6 (float32 math with float32
accumulation over at most 1000 terms, against float64; the 3xTF32 products keep about 21 of
float32's 24 bits per product). With one key (S = 1) dq and dk are exactly zero: the softmax of
one key is constant, so ds = p (dp - delta) cancels, and a kernel whose dp (a tensor-core
product) and delta (dout . out) round differently leaves float32 noise of terms the size of
|dout| |v|; those two are checked by their largest magnitude, below 1e-5.

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

TOL = {0: 2e-6, 1: 2e-6, 2: 2e-6}  # by kernel variant (below)
WORST = {}  # the largest relative error seen, by kernel variant
SEED = int(os.environ.get("MT_TEST_SEED", "4321"))

# the kernel variants of the internal hook mt_study_attention_f32 (0: the tensor-core kernels,
# production; 1: the row-per-thread FFMA kernels; 2: the mma.sync tensor-core kernels); a library
# without the hook runs production only
STUDY = getattr(LIB, "mt_study_attention_f32", None)
if STUDY is not None:
    STUDY.restype, STUDY.argtypes = c_int64, [c_int64]
VARIANTS = (0, 1, 2) if STUDY is not None else (0,)

# (B, H, T, S, D, causal)
SDPA_CASES = [
    (1, 1, 1, 1, 16, True), (1, 1, 1, 1, 32, False), (2, 3, 17, 17, 32, True), (1, 2, 33, 33, 16, False),
    (1, 2, 65, 65, 32, True), (2, 1, 100, 130, 32, True), (1, 1, 130, 40, 16, False), (3, 2, 256, 256, 32, True),
    (1, 1, 1000, 1000, 32, True), (1, 2, 1000, 1000, 16, False), (1, 1, 7, 1000, 32, True),
    (2, 2, 150, 70, 32, False), (1, 1, 64, 192, 32, False),
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
        if STUDY is not None:
            STUDY(0)

    def test_hook_refuses_unknown_variants(self):
        if STUDY is None:
            self.skipTest("the library has no mt_study_attention_f32")
        for bad in (-1, 4, 100):
            self.assertNotEqual(STUDY(bad), 0, "variant %d" % bad)
        for good in VARIANTS:
            self.assertEqual(STUDY(good), 0, "variant %d" % good)

    @classmethod
    def tearDownClass(cls):
        for variant, e in sorted(WORST.items()):
            print("\n  test_attention_f32: worst relative error of kernel variant %d: %.3g (tolerance %.3g)"
                  % (variant, e, TOL[variant]), file=sys.stderr)

    def check(self, label, got, want, variant=0):
        e = rel(got, want)
        WORST[variant] = max(WORST.get(variant, 0.0), e)
        self.assertLess(e, TOL[variant], "%s: rel err %.3g; %s" % (label, e, first_bad(got, want, TOL[variant])))

    def test_sdpa(self):
        for n, (B, H, T, S, D, causal), variant in [(n, c, v) for v in VARIANTS for n, c in enumerate(SDPA_CASES)]:
            seed = SEED * 7919 + n
            if STUDY is not None:
                self.assertEqual(STUDY(variant), 0)
            with self.subTest(B=B, H=H, T=T, S=S, D=D, causal=causal, seed=seed, variant=variant):
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
                    self.check("out", from_mt(out, torch.float32), want, variant)
                    grads = backward_of(out, dout, hs, torch.float32)
                    for name, got, ref in zip(("dq", "dk", "dv"), grads, wgrads):
                        if name in ("dq", "dk") and S == 1:  # zero up to the rounding of dp - delta (the top)
                            self.assertLess(got.abs().max().item(), 1e-5, "%s with one key" % name)
                            continue
                        self.check(name, got, ref, variant)
                finally:
                    for h in hs:
                        U.release(h)

    def test_self_attention(self):
        for n, (B, T, H, Dh), variant in [(n, c, v) for v in VARIANTS for n, c in enumerate(PACKED_CASES)]:
            if STUDY is not None:
                self.assertEqual(STUDY(variant), 0)
            for causal in (True, False):
                seed = SEED * 104729 + 2 * n + causal
                with self.subTest(B=B, T=T, H=H, Dh=Dh, causal=causal, seed=seed, variant=variant):
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
                    self.check("out", runs[0][0], want, variant)
                    self.check("dqkv", runs[0][1], wgrad, variant)
                    self.assertTrue(torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1]),
                                    "two runs differ in some bit")

    def wgmma_launches(self, variant, D):
        """warpgroup-MMA launches counted by the hook over one forward and backward at head dim D."""
        self.assertEqual(STUDY(variant), 0)
        g = torch.Generator().manual_seed(SEED + D)
        q, k, v, dout = [torch.randn(2, 2, 80, D, generator=g) for _ in range(4)]
        hs = [to_mt(x, True) for x in (q, k, v)]
        try:
            before = STUDY(3)
            out = U.call("mt_scaled_dot_product_attention", hs[0], hs[1], hs[2], c_int64(1))
            backward_of(out, dout, hs, torch.float32)
            return STUDY(3) - before
        finally:
            for h in hs:
                U.release(h)

    def test_kernels_that_run(self):
        if STUDY is None:
            self.skipTest("the library has no mt_study_attention_f32")
        hopper = torch.cuda.get_device_capability() == (9, 0)
        for variant in VARIANTS:
            for D in (16, 32):
                with self.subTest(variant=variant, D=D, hopper=hopper):
                    want = 3 if hopper and variant == 0 and D == 32 else 0
                    self.assertEqual(self.wgmma_launches(variant, D), want)

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
