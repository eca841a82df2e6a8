"""workloads_transformer - the fused transformer rows of `make bench`: LayerNorm forward and
forward+backward at the three row shapes of the softmax rows (65536x1024, 262144x128,
8192x32768, with gamma and beta), and GELU (tanh form) forward and forward+backward on 64M
floats, each against PyTorch in the same run (torch.nn.functional.layer_norm,
torch.nn.functional.gelu(approximate='tanh')) and checked against it first on the same values.

Bytes counted (the napkin math behind GB/s and % of copy bandwidth), f32, n = rows x d:
  layernorm forward           reads x, writes y: 8n, plus gamma, beta (8d) and the row mean and
                              rstd (8 rows); PyTorch's forward writes the same statistics
  layernorm forward+backward  the step is y = layer_norm(x, gamma, beta); loss = y.sum();
                              loss.backward() in both engines: forward 8n, the sum reads y (4n),
                              its backward writes the gradient of y (4n), dx reads x and dy and
                              writes dx (12n), dgamma/dbeta read x and dy again (8n): 36n
  gelu forward                reads x, writes y: 8n
  gelu forward+backward       the same step: forward 8n, sum 4n, its gradient 4n, dx reads x and
                              dy and writes dx (12n): 28n
Small terms (gamma, beta, statistics, partial sums) are left out of the forward+backward counts.
% of copy bandwidth uses the device copy measured by the copy row (measured here first when
that row is not part of the run).
"""
from ctypes import c_double

import abi_util as U
from harness import Row
from workloads import bench_copy, check_vs_torch, mt_host, mt_randn, need, rel_err, release_each, torch_from_host

LN_SHAPES = [(65536, 1024), (262144, 128), (8192, 32768)]
LN_EPS = 1e-5
CHECK_ELEMS = 1 << 21      # the correctness check runs on at most this many elements per row shape


def _copy_ceiling(ctx):
    """The copy bandwidth the % column divides by, measured once per run."""
    if ctx.copy_gbs is None:
        bench_copy(ctx)


def _ln_shapes(ctx):
    for r, c in LN_SHAPES:
        yield (max(2, r // 1024), max(8, c // 64)) if ctx.dry else (r, c)


def _clear_grads(handles):
    for h in handles:
        U.check(U.LIB.mt_tensor_clear_grad(h), "mt_tensor_clear_grad")


def _mt_step(fn, inputs, args):
    """y = fn(*inputs, *args); y.sum().backward(); the handles released and the grads cleared."""
    y = U.call(fn, *inputs, *args)
    loss = U.call("mt_sum", y)
    try:
        U.check(U.LIB.mt_backward(loss), "mt_backward")
    finally:
        release_each([y, loss])
    _clear_grads(inputs)


def _check(ctx, fn, torch_fn, shapes, args, backward):
    """fn against torch_fn on the same fresh values: the output, and with backward the gradient of
    every input under loss = sum(output). Raises on disagreement; returns the note."""
    if ctx.torch is None:
        return "unchecked (no torch)"
    torch = ctx.torch
    ins = [mt_randn(ctx, s, 300 + i) for i, s in enumerate(shapes)]
    handles = list(ins)
    try:
        for h in ins:
            U.set_requires_grad(h, 1 if backward else 0)
        y = U.call(fn, *ins, *args)
        handles.append(y)
        got = [list(mt_host(y))]
        if backward:
            loss = U.call("mt_sum", y)
            handles.append(loss)
            U.check(U.LIB.mt_backward(loss), "mt_backward")
            for h in ins:
                g = U.call("mt_tensor_grad", h)
                handles.append(g)
                got.append(list(mt_host(g)))
        ts = [torch_from_host(ctx, mt_host(h), s).requires_grad_(backward) for h, s in zip(ins, shapes)]
        ty = torch_fn(*ts)
        want = [ty.detach().cpu().reshape(-1).tolist()]
        if backward:
            ty.sum().backward()
            want += [t.grad.cpu().reshape(-1).tolist() for t in ts]
    finally:
        release_each(handles)
    errs = [rel_err(g, w) for g, w in zip(got, want)]
    # float32 row and column sums in different orders: 1e-5 for the outputs, 1e-4 for gradients
    # that are sums over up to 2M terms (dgamma, dbeta)
    for k, e in enumerate(errs):
        if not e < (1e-5 if k < 2 else 1e-4):
            raise RuntimeError("%s disagrees with PyTorch (%s): relative error %.3g" % (
                fn, "output" if k == 0 else "gradient of input %d" % (k - 1), e))
    return "matches torch (rel err %s)" % " / ".join("%.1e" % e for e in errs)


def _torch_step(f, ts):
    for t in ts:
        t.requires_grad_(True)

    def step():
        f(*ts).sum().backward()
        for t in ts:
            t.grad = None
    return step


# ------------------------------------------------------------------ layernorm
def _bench_layernorm(ctx, backward):
    need("mt_layer_norm")
    _copy_ceiling(ctx)
    torch = ctx.torch
    eps = c_double(LN_EPS)
    rows = []
    for r, c in _ln_shapes(ctx):
        chk_rows = max(1, min(r, CHECK_ELEMS // c))
        tfn = (lambda x, g, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, LN_EPS)) if torch else None
        note = _check(ctx, "mt_layer_norm", tfn, [(chk_rows, c), (c,), (c,)], (eps,), backward)
        ins = [mt_randn(ctx, (r, c), 3), mt_randn(ctx, (c,), 4), mt_randn(ctx, (c,), 5)]
        try:
            if backward:
                for h in ins:
                    U.set_requires_grad(h, 1)
                mt_ms = ctx.timer.mt(lambda: _mt_step("mt_layer_norm", ins, (eps,)), ctx.iters, ctx.reps)
            else:
                mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_layer_norm", *ins, eps)), ctx.iters, ctx.reps)
        finally:
            release_each(ins)
        t_ms = None
        if torch is not None:
            ts = [torch.randn(r, c, device=ctx.tdev), torch.randn(c, device=ctx.tdev), torch.randn(c, device=ctx.tdev)]
            step = _torch_step(tfn, ts) if backward else (lambda: tfn(*ts))
            t_ms = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
            del ts
        n = r * c
        work = 36 * n if backward else 8 * n + 8 * c + 8 * r
        what = "layernorm forward+backward f32, y.sum().backward()" if backward else "layernorm forward f32"
        rows.append(Row("%s (mt_layer_norm, gamma and beta)" % what, "%d×%d" % (r, c), mt_ms, t_ms, work_bytes=work,
                        note=note))
    return rows


def bench_layernorm(ctx):
    """LayerNorm forward at the three row shapes."""
    return _bench_layernorm(ctx, False)


def bench_layernorm_backward(ctx):
    """LayerNorm forward+backward (dx, dgamma, dbeta) at the three row shapes."""
    return _bench_layernorm(ctx, True)


# ------------------------------------------------------------------ gelu
def _bench_gelu(ctx, backward):
    need("mt_gelu")
    _copy_ceiling(ctx)
    torch = ctx.torch
    n = ctx.n_elem
    tfn = (lambda x: torch.nn.functional.gelu(x, approximate="tanh")) if torch else None
    if backward:
        note = _check(ctx, "mt_gelu", tfn, [(1 << 20,)], (), True)
    else:
        note = check_vs_torch(ctx, "mt_gelu", tfn, [(1 << 20,)], 1e-5)
    x = mt_randn(ctx, (n,), 7)
    try:
        if backward:
            U.set_requires_grad(x, 1)
            mt_ms = ctx.timer.mt(lambda: _mt_step("mt_gelu", [x], ()), ctx.iters, ctx.reps)
        else:
            mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_gelu", x)), ctx.iters, ctx.reps)
    finally:
        U.release(x)
    t_ms = None
    if torch is not None:
        tx = [torch.randn(n, device=ctx.tdev)]
        step = _torch_step(tfn, tx) if backward else (lambda: tfn(tx[0]))
        t_ms = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
        del tx
    what = "GELU tanh forward+backward, y.sum().backward()" if backward else "GELU tanh forward"
    return [Row("%s (mt_gelu vs gelu(approximate='tanh'))" % what, ctx.elem_shape(), mt_ms, t_ms,
                work_bytes=(28 if backward else 8) * n, note=note)]


def bench_gelu(ctx):
    """GELU (tanh) forward on 64M floats."""
    return _bench_gelu(ctx, False)


def bench_gelu_backward(ctx):
    """GELU (tanh) forward+backward on 64M floats."""
    return _bench_gelu(ctx, True)


WORKLOADS = [
    ("layernorm", bench_layernorm),
    ("layernorm-bwd", bench_layernorm_backward),
    ("gelu", bench_gelu),
    ("gelu-bwd", bench_gelu_backward),
]
