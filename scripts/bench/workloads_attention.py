"""workloads_attention - the attention rows of `make bench`: FlashAttention forward and
forward+backward (backend/cuda/attention/, production kernels) against PyTorch's
scaled_dot_product_attention restricted to SDPBackend.FLASH_ATTENTION (the PyTorch column) and
to SDPBackend.CUDNN_ATTENTION (in the note; a backend that is unavailable is said so), bf16,
same GPU, same run.

Shapes: B * T = 16384 tokens, H = 16 heads, T in {512, ..., 16384}, D in {64, 128}, causal and
not. Work counted (the napkin math behind TFLOP/s): 4 B H T^2 D flops forward (two T x T x D
products), x 2.5 for forward+backward (five), halved when causal.

minitorch is timed through the internal hook mt_study_flash_attention on raw buffers shared with
torch (the kernels, no tensor or tape work; the op adds two pool allocations), wall clock
around mt_synchronize()-bracketed loops; PyTorch with CUDA events. Each shape first checks
minitorch's output against PyTorch's (relative error < 1e-2, else the row fails).

  attention        every row (T x D x causal x direction: 48 rows with their checks);
                   MT_BENCH_ATTENTION_QUICK=1 keeps four representative shapes (8 rows):
                   T 2048 / 8192, D 64 / 128, causal and not; MT_BENCH_ATTENTION_T=512,1024
                   keeps the rows of those sequence lengths
  attention-f32    mt_self_attention (float32, the heads read in place from a packed q|k|v
                   projection [B, T, 3 H Dh]) forward and forward+backward, causal, at the char-GPT
                   shapes (B 32: T 128 with 4 heads of 16, T 256 with 4 heads of 32) and at T 1024,
                   against PyTorch's split (reshape, permute), SDPA restricted to
                   SDPBackend.EFFICIENT_ATTENTION (its float32 kernel) and merge (permute, reshape);
                   the note has SDPA's default choice. Through the recorded ops on both sides
                   (forward+backward: out = attention(qkv), loss = sum(out * w), backward);
                   outputs and qkv gradients checked against each other first (rel err < 1e-5)
"""
import os
from ctypes import c_double, c_int64, c_void_p

import abi_util as U
from harness import Row, Skip
from workloads import mt_host, torch_from_host

TOKENS = 16384
HEADS = 16
SEQ_LENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK = [(2048, 64, False), (2048, 128, True), (8192, 64, True), (8192, 128, False)]


def study_fn():
    fn = getattr(U.LIB, "mt_study_flash_attention", None)
    if fn is None:
        raise Skip("mt_study_flash_attention not in the library (a CPU-only build?)")
    fn.restype = c_int64
    fn.argtypes = [c_void_p] * 9 + [c_int64] * 5 + [c_double, c_int64, c_int64]
    return fn


def flops(B, H, T, D, causal, backward):
    f = 4.0 * B * H * T * T * D * (2.5 if backward else 1.0)
    return f / 2 if causal else f


class Problem:
    """bf16 q, k, v, dout and the output buffers of one shape, as torch CUDA tensors."""

    def __init__(self, torch, B, H, T, D, causal):
        self.torch, self.B, self.H, self.T, self.D, self.causal = torch, B, H, T, D, causal
        g = torch.Generator(device="cuda").manual_seed(B * 1000003 + T * 31 + D)
        mk = lambda: torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
        self.q, self.k, self.v, self.dout = mk(), mk(), mk(), mk()
        self.out = torch.empty_like(self.q)
        self.lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
        self.dq, self.dk, self.dv = [torch.empty_like(self.q) for _ in range(3)]
        torch.cuda.synchronize()

    def run(self, fn, backward):
        p = lambda t: c_void_p(t.data_ptr())  # noqa: E731
        st = fn(p(self.out), p(self.lse), p(self.q), p(self.k), p(self.v), p(self.dq), p(self.dk), p(self.dv),
                p(self.dout), self.B * self.H, self.T, self.T, self.D, U.MT_BF16, c_double(0.0),
                1 if self.causal else 0, 1 if backward else 0)
        if st != 0:
            raise RuntimeError("mt_study_flash_attention returned %d: %s" % (st, U.LIB.mt_last_error().decode()))


def sdpa_context(torch, backend_name):
    """A context manager restricting torch's SDPA to one backend, or None when torch lacks it."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    b = getattr(SDPBackend, backend_name, None)
    return None if b is None else (lambda: sdpa_kernel([b]))


def torch_times(ctx, prob, backend_name):
    """(forward ms, forward+backward ms, output) of torch's SDPA on one backend, or a reason string."""
    torch = ctx.torch
    mk = sdpa_context(torch, backend_name)
    if mk is None:
        return "torch has no SDPBackend.%s" % backend_name
    F = torch.nn.functional
    q, k, v = [x.detach().clone().requires_grad_(True) for x in (prob.q, prob.k, prob.v)]
    try:
        with mk():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=prob.causal)
            with torch.no_grad():
                fwd = ctx.timer.torch_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=prob.causal),
                                           ctx.iters, ctx.reps)

            def step():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=prob.causal)
                o.backward(prob.dout)

            both = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
    except RuntimeError as e:  # no kernel of that backend for this shape / GPU
        return "%s unavailable (%s)" % (backend_name, str(e).splitlines()[0][:80])
    return fwd, both, out.detach()


def rel_err(torch, a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def bench_rows(ctx, shapes):
    if ctx.torch is None or not ctx.torch_cuda or ctx.device != U.MT_CUDA:
        raise Skip("needs a GPU and torch with CUDA (the kernels share torch's buffers)")
    fn = study_fn()
    torch = ctx.torch
    rows = []
    for T, D, causal in shapes:
        B = max(1, TOKENS // T)
        prob = Problem(torch, B, HEADS, T, D, causal)
        shape = "B%d H%d T%d D%d%s" % (B, HEADS, T, D, " causal" if causal else "")
        prob.run(fn, False)
        U.check(U.LIB.mt_synchronize(), "mt_synchronize")
        mt_fwd = ctx.timer.mt(lambda: prob.run(fn, False), ctx.iters, ctx.reps)

        def both():
            prob.run(fn, False)
            prob.run(fn, True)

        mt_both = ctx.timer.mt(both, ctx.iters, ctx.reps)
        flash = torch_times(ctx, prob, "FLASH_ATTENTION")
        cudnn = torch_times(ctx, prob, "CUDNN_ATTENTION")
        U.check(U.LIB.mt_synchronize(), "mt_synchronize")
        notes = []
        ref = flash[2] if not isinstance(flash, str) else (cudnn[2] if not isinstance(cudnn, str) else None)
        if ref is not None:
            e = rel_err(torch, prob.out, ref)
            if not e < 1e-2:
                raise RuntimeError("%s: minitorch's output disagrees with torch SDPA: rel err %.3g" % (shape, e))
            notes.append("out matches torch (rel err %.1e)" % e)
        for direction, idx, mt_ms in (("forward", 0, mt_fwd), ("forward+backward", 1, mt_both)):
            f = flops(B, HEADS, T, D, causal, idx == 1)
            note = list(notes)
            if isinstance(flash, str):
                note.append(flash)
            if isinstance(cudnn, str):
                note.append(cudnn)
            else:
                note.append("torch cuDNN %.3f ms, %.0f TFLOP/s" % (cudnn[idx], f / (cudnn[idx] * 1e-3) / 1e12))
            rows.append(Row("attention bf16 %s (PyTorch: SDPA flash)" % direction, shape, mt_ms,
                            None if isinstance(flash, str) else flash[idx], work_flops=f, note="; ".join(note)))
        del prob
        torch.cuda.empty_cache()
    return rows


def all_shapes():
    return [(T, D, c) for T in SEQ_LENS for D in (64, 128) for c in (False, True)]


def bench_attention(ctx):
    """FlashAttention bf16 fwd and fwd+bwd vs torch SDPA (flash, cuDNN), B*T 16K, H 16, T 512..16K."""
    if ctx.dry:
        return bench_rows(ctx, QUICK[:1])
    shapes = QUICK if os.environ.get("MT_BENCH_ATTENTION_QUICK") == "1" else all_shapes()
    only_t = os.environ.get("MT_BENCH_ATTENTION_T", "")
    if only_t:
        keep = {int(v) for v in only_t.split(",")}
        shapes = [s for s in shapes if s[0] in keep]
    return bench_rows(ctx, shapes)


F32_SHAPES = [(32, 128, 4, 16), (32, 256, 4, 32), (8, 1024, 4, 32)]


def bench_attention_f32(ctx):
    """mt_self_attention f32 fwd and fwd+bwd against torch's split + SDPA (efficient) + merge."""
    if ctx.torch is None or not ctx.torch_cuda or ctx.device != U.MT_CUDA:
        raise Skip("needs a GPU and torch with CUDA")
    if "mt_self_attention" in U.MISSING:
        raise Skip("mt_self_attention not in the library")
    torch = ctx.torch
    F = torch.nn.functional
    rows = []
    for B, T, H, Dh in (F32_SHAPES[1:2] if ctx.dry else F32_SHAPES):
        D = H * Dh
        g = torch.Generator().manual_seed(B * 7 + T)
        x_host, w_host = torch.randn(B, T, 3 * D, generator=g), torch.randn(B, T, D, generator=g)
        x, w = x_host.cuda(), w_host.cuda()
        shape = "B%d T%d H%d Dh%d causal" % (B, T, H, Dh)
        xh, wh = [U.call("mt_tensor_from_data", c_void_p(t.data_ptr()), U.shape_array(t.shape), t.dim(), U.MT_F32,
                         U.MT_CUDA) for t in (x_host, w_host)]
        U.check(U.LIB.mt_tensor_set_requires_grad(xh, 1), "mt_tensor_set_requires_grad")

        def mt_forward():
            U.release(U.call("mt_self_attention", xh, c_int64(H), c_int64(1)))

        def mt_step():
            out = U.call("mt_self_attention", xh, c_int64(H), c_int64(1))
            prod = U.call("mt_mul", out, wh)
            loss = U.call("mt_sum", prod)
            U.check(U.LIB.mt_backward(loss), "mt_backward")
            for h in (loss, prod, out):
                U.release(h)
            U.check(U.LIB.mt_tensor_clear_grad(xh), "mt_tensor_clear_grad")

        def torch_attention(xt, backend):
            p = xt.reshape(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)
            mk = sdpa_context(torch, backend) if backend else None
            if mk is None:
                y = F.scaled_dot_product_attention(p[0], p[1], p[2], is_causal=True)
            else:
                with mk():
                    y = F.scaled_dot_product_attention(p[0], p[1], p[2], is_causal=True)
            return y.permute(0, 2, 1, 3).reshape(B, T, D)

        # the check: out and the qkv gradient of both engines on the same values
        out = U.call("mt_self_attention", xh, c_int64(H), c_int64(1))
        prod = U.call("mt_mul", out, wh)
        loss = U.call("mt_sum", prod)
        U.check(U.LIB.mt_backward(loss), "mt_backward")
        got = torch_from_host(ctx, mt_host(out), (B, T, D))
        gh = U.grad_of(xh)
        got_g = torch_from_host(ctx, mt_host(gh), (B, T, 3 * D))
        for h in (gh, loss, prod, out):
            U.release(h)
        U.check(U.LIB.mt_tensor_clear_grad(xh), "mt_tensor_clear_grad")
        xt = x.detach().clone().requires_grad_(True)
        ref = torch_attention(xt, "EFFICIENT_ATTENTION")
        (ref * w).sum().backward()
        errs = (rel_err(torch, got, ref), rel_err(torch, got_g, xt.grad))
        if not max(errs) < 1e-5:
            raise RuntimeError("%s: mt_self_attention disagrees with torch: rel err %.3g / %.3g" % ((shape,) + errs))

        def torch_step(backend):
            xt.grad = None
            (torch_attention(xt, backend) * w).sum().backward()

        mt_fwd = ctx.timer.mt(mt_forward, ctx.iters, ctx.reps)
        mt_both = ctx.timer.mt(mt_step, ctx.iters, ctx.reps)
        rows_note = ""
        hook = getattr(U.LIB, "mt_study_attention_f32", None)  # the other kernel generations, for comparison
        if hook is not None:
            hook.restype, hook.argtypes = c_int64, [c_int64]
            for variant, name in ((2, "the mma.sync kernels"), (1, "the FFMA row kernels")):
                if hook(variant) != 0:
                    continue
                try:
                    other_fwd = ctx.timer.mt(mt_forward, ctx.iters, ctx.reps)
                    other_both = ctx.timer.mt(mt_step, ctx.iters, ctx.reps)
                finally:
                    hook(0)
                rows_note += "; %s %.1f / %.1f us" % (name, other_fwd * 1e3, other_both * 1e3)
        with torch.no_grad():
            t_fwd = ctx.timer.torch_time(lambda: torch_attention(x, "EFFICIENT_ATTENTION"), ctx.iters, ctx.reps)
            t_fwd_default = ctx.timer.torch_time(lambda: torch_attention(x, None), ctx.iters, ctx.reps)
        t_both = ctx.timer.torch_time(lambda: torch_step("EFFICIENT_ATTENTION"), ctx.iters, ctx.reps)
        t_both_default = ctx.timer.torch_time(lambda: torch_step(None), ctx.iters, ctx.reps)
        U.release(xh)
        U.release(wh)
        base = "matches torch (rel err %.1e / %.1e)" % errs
        for direction, mt_ms, t_ms, t_def, bwd in (("forward", mt_fwd, t_fwd, t_fwd_default, False),
                                                   ("forward+backward", mt_both, t_both, t_both_default, True)):
            rows.append(Row("attention f32 %s, heads read in place (mt_self_attention; PyTorch: split, SDPA "
                            "efficient, merge)" % direction, shape, mt_ms, t_ms,
                            work_flops=flops(B, H, T, Dh, True, bwd),
                            note="%s; PyTorch with SDPA's default backend %.3f ms%s" % (base, t_def, rows_note)))
        torch.cuda.empty_cache()
    return rows


WORKLOADS = [
    ("attention", bench_attention),
    ("attention-f32", bench_attention_f32),
]
