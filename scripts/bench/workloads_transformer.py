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
  gelu forward+backward       on the GPU: y = gelu(x), then dx = gelu'(x) dy for a random dy in
                              both engines (see _bench_gelu): forward 8n, dx reads x and dy and
                              writes dx (12n): 20n; on the CPU the y.sum().backward() step:
                              forward 8n, sum 4n, its gradient 4n, dx 12n: 28n
Small terms (gamma, beta, statistics, partial sums) are left out of the forward+backward counts.
% of copy bandwidth uses the device copy measured by the copy row (measured here first when
that row is not part of the run).
"""
import ctypes
from ctypes import byref, c_double, c_int64, c_void_p

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
def _gelu_study_hook(ctx):
    """mt_study_gelu (an internal hook of a CUDA build, backend/cuda/fused.cu) when the run is on
    the GPU, else None."""
    fn = getattr(U.LIB, "mt_study_gelu", None) if ctx.device == U.MT_CUDA else None
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [c_void_p, c_void_p, c_void_p, c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    return fn


def _bench_gelu(ctx, backward):
    """GELU forward, or forward + backward. The backward is measured on a real random gradient dy
    in both engines, the same bytes on both sides (forward 8n, dx = gelu'(x) dy 12n): PyTorch runs
    y = gelu(x); y.backward(dy), minitorch mt_gelu and then its backward kernel through
    mt_study_gelu (the ABI has no seed gradient for mt_backward). The earlier y.sum().backward()
    step compared different work: PyTorch's sum backward is an expanded view of one scalar,
    minitorch's materializes a gradient of ones that the GELU backward then reads (8n more).
    Without the hook (a CPU run) the y.sum().backward() step is timed and labelled so."""
    need("mt_gelu")
    _copy_ceiling(ctx)
    torch = ctx.torch
    n = ctx.n_elem
    tfn = (lambda x: torch.nn.functional.gelu(x, approximate="tanh")) if torch else None
    hook = _gelu_study_hook(ctx) if backward else None
    if backward:
        note = _check(ctx, "mt_gelu", tfn, [(1 << 20,)], (), True)
    else:
        note = check_vs_torch(ctx, "mt_gelu", tfn, [(1 << 20,)], 1e-5)
    x = mt_randn(ctx, (n,), 7)
    extra = []
    try:
        if hook is not None:
            dy, dx = mt_randn(ctx, (n,), 8), mt_randn(ctx, (n,), 9)
            extra = [dy, dx]
            px, pdy, pdx = (c_void_p(U.data_ptr_of(h)) for h in (x, dy, dx))

            def mt_step():
                U.release(U.call("mt_gelu", x))
                U.check(hook(pdx, px, pdy, n, U.MT_F32, 1, 0), "mt_study_gelu")
            mt_ms = ctx.timer.mt(mt_step, ctx.iters, ctx.reps)
        elif backward:
            U.set_requires_grad(x, 1)
            mt_ms = ctx.timer.mt(lambda: _mt_step("mt_gelu", [x], ()), ctx.iters, ctx.reps)
        else:
            mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_gelu", x)), ctx.iters, ctx.reps)
    finally:
        release_each([x] + extra)
    t_ms = None
    if torch is not None:
        tx = [torch.randn(n, device=ctx.tdev)]
        if hook is not None:
            tdy = torch.randn(n, device=ctx.tdev)
            tx[0].requires_grad_(True)

            def step():
                tfn(tx[0]).backward(tdy)
                tx[0].grad = None
        else:
            step = _torch_step(tfn, tx) if backward else (lambda: tfn(tx[0]))
        t_ms = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
        del tx
    if hook is not None:
        what, work = "GELU tanh forward+backward, y.backward(dy) with a random dy", 20 * n
    elif backward:
        what, work = "GELU tanh forward+backward, y.sum().backward()", 28 * n
    else:
        what, work = "GELU tanh forward", 8 * n
    return [Row("%s (mt_gelu vs gelu(approximate='tanh'))" % what, ctx.elem_shape(), mt_ms, t_ms,
                work_bytes=work, note=note)]


def bench_gelu(ctx):
    """GELU (tanh) forward on 64M floats."""
    return _bench_gelu(ctx, False)


def bench_gelu_backward(ctx):
    """GELU (tanh) forward+backward on 64M floats."""
    return _bench_gelu(ctx, True)


# ------------------------------------------------------------------ fusions
# bias + GELU, residual add + LayerNorm, dropout + residual add (mt_bias_act, mt_add_layer_norm,
# mt_dropout_add) against torch's eager compositions, at FUSION_SHAPES (rows x n, f32). Bytes:
#   bias_act forward            reads x, writes y: 8n (the composition moves 20n: add, then gelu)
#   bias_act forward+backward   y = act(x + b); loss = y.sum(): forward 8n, sum 4n, its gradient
#                               4n, dx reads dy and x and writes dx (12n): 28n
#   add_layer_norm forward      reads x, r, writes s, y: 16n
#   add_layer_norm fwd+bwd      loss = s.sum() + y.sum(): forward 16n, sums 8n, their gradients 8n,
#                               the LayerNorm backward 20n, the add of the two gradients of s 12n: 64n
#   dropout_add forward         reads x, r, writes out: 12n
#   dropout_add fwd+bwd         loss = out.sum(): forward 12n, sum 4n, its gradient 4n, dx reads
#                               dy, writes dx (8n): 28n
FUSION_SHAPES = [(65536, 1024), (8192, 4096)]
DROPOUT_P = 0.1


def _fusion_shapes(ctx):
    for r, c in FUSION_SHAPES:
        yield (max(2, r // 1024), max(8, c // 64)) if ctx.dry else (r, c)


def _mt_outputs(fn, ins, args):
    """The output handles of one call of fn: one for most ops, two for mt_add_layer_norm."""
    if fn != "mt_add_layer_norm":
        return [U.call(fn, *ins, *args)]
    s, y = c_void_p(), c_void_p()
    U.check(U.LIB.mt_add_layer_norm(byref(s), byref(y), *ins, *args), fn)
    return [s.value, y.value]


def _mt_loss_step(fn, ins, args, backward):
    """The outputs of fn; with backward, loss = the sum of their sums, backward, grads cleared."""
    outs = _mt_outputs(fn, ins, args)
    handles = list(outs)
    try:
        if backward:
            loss = U.call("mt_sum", outs[0])
            handles.append(loss)
            for o in outs[1:]:
                part = U.call("mt_sum", o)
                total = U.call("mt_add", loss, part)
                handles += [part, total]
                loss = total
            U.check(U.LIB.mt_backward(loss), "mt_backward")
    finally:
        release_each(handles)
    if backward:
        _clear_grads(ins)


def _host_values(make_outputs, ins, backward):
    """Every output's values of make_outputs(ins), then (backward) every input's gradient under
    the loss above."""
    for h in ins:
        U.set_requires_grad(h, 1 if backward else 0)
    outs = make_outputs(ins)
    handles = list(outs)
    try:
        got = [list(mt_host(o)) for o in outs]
        if backward:
            loss = U.call("mt_sum", outs[0])
            handles.append(loss)
            for o in outs[1:]:
                part = U.call("mt_sum", o)
                loss = U.call("mt_add", loss, part)
                handles += [part, loss]
            U.check(U.LIB.mt_backward(loss), "mt_backward")
            for h in ins:
                g = U.call("mt_tensor_grad", h)
                handles.append(g)
                got.append(list(mt_host(g)))
                U.check(U.LIB.mt_tensor_clear_grad(h), "mt_tensor_clear_grad")
    finally:
        release_each(handles)
    return got


def _check_fusion(ctx, fn, args, ref, shapes, backward):
    """fn on fresh values against ref: ('torch', f) runs torch's composition f on the same values
    (1e-5 outputs, 1e-4 gradients, sums in other orders); ('mt', compose, what) runs a minitorch
    composition, compose(ins) -> output handles, that must give the same bits (dropout_add:
    torch draws other masks)."""
    ins = [mt_randn(ctx, s, 400 + i) for i, s in enumerate(shapes)]
    try:
        got = _host_values(lambda hs: _mt_outputs(fn, hs, args), ins, backward)
        if ref[0] == "mt":
            if got != _host_values(ref[1], ins, backward):
                raise RuntimeError("%s differs from its composition %s" % (fn, ref[2]))
            return "same bits as %s" % ref[2]
        if ctx.torch is None:
            return "unchecked (no torch)"
        ts = [torch_from_host(ctx, mt_host(h), s).requires_grad_(backward) for h, s in zip(ins, shapes)]
    finally:
        release_each(ins)
    outs = ref[1](*ts)
    want = [o.detach().cpu().reshape(-1).tolist() for o in outs]
    if backward:
        sum(o.sum() for o in outs).backward()
        want += [t.grad.cpu().reshape(-1).tolist() for t in ts]
    errs = [rel_err(g, w) for g, w in zip(got, want)]
    for k, e in enumerate(errs):
        if not e < (1e-5 if k < len(outs) else 1e-4):
            raise RuntimeError("%s disagrees with PyTorch (value %d): relative error %.3g" % (fn, k, e))
    return "matches torch (rel err %s)" % " / ".join("%.1e" % e for e in errs)


def _bench_fusion(ctx, name, fn, args, torch_fn, ref, shapes_of, work_of, backward):
    need(fn)
    _copy_ceiling(ctx)
    torch = ctx.torch
    rows = []
    for r, c in _fusion_shapes(ctx):
        chk_rows = max(1, min(r, CHECK_ELEMS // c))
        note = _check_fusion(ctx, fn, args, ref, shapes_of(chk_rows, c), backward)
        ins = [mt_randn(ctx, s, 10 + i) for i, s in enumerate(shapes_of(r, c))]
        try:
            for h in ins:
                U.set_requires_grad(h, 1 if backward else 0)
            mt_ms = ctx.timer.mt(lambda: _mt_loss_step(fn, ins, args, backward), ctx.iters, ctx.reps)
        finally:
            release_each(ins)
        t_ms = None
        if torch is not None:
            ts = [torch.randn(*s, device=ctx.tdev).requires_grad_(backward) for s in shapes_of(r, c)]

            def step():
                outs = torch_fn(*ts)
                if backward:
                    sum(o.sum() for o in outs).backward()
                    for t in ts:
                        t.grad = None
            t_ms = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
            del ts
        what = "%s %s f32" % (name, "forward+backward, loss = sum of the outputs' sums" if backward else "forward")
        rows.append(Row("%s (%s)" % (what, fn), "%d×%d" % (r, c), mt_ms, t_ms, work_bytes=work_of(r * c, backward),
                        note=note))
    return rows


def _bias_gelu(ctx, backward):
    F = ctx.torch.nn.functional if ctx.torch else None
    return _bench_fusion(ctx, "bias + GELU tanh", "mt_bias_act", (2,),  # MT_ACT_GELU
                         lambda x, b: [F.gelu(x + b, approximate="tanh")],
                         ("torch", lambda x, b: [F.gelu(x + b, approximate="tanh")]),
                         lambda r, c: [(r, c), (c,)], lambda n, bwd: 28 * n if bwd else 8 * n, backward)


def _add_layernorm(ctx, backward):
    F = ctx.torch.nn.functional if ctx.torch else None

    def tfn(x, res, g, b):
        s = x + res
        return [s, F.layer_norm(s, (s.shape[-1],), g, b, LN_EPS)]
    return _bench_fusion(ctx, "residual add + LayerNorm", "mt_add_layer_norm", (c_double(LN_EPS),), tfn,
                         ("torch", tfn), lambda r, c: [(r, c), (r, c), (c,), (c,)],
                         lambda n, bwd: 64 * n if bwd else 16 * n, backward)


def _dropout_add(ctx, backward):
    F = ctx.torch.nn.functional if ctx.torch else None
    args = (c_double(DROPOUT_P), c_int64(7))

    def composed(ins):  # mt_add(r, mt_dropout(x, p, seed))
        d = U.call("mt_dropout", ins[0], *args)
        try:
            return [U.call("mt_add", ins[1], d)]
        finally:
            U.release(d)
    return _bench_fusion(ctx, "dropout p=%g + residual add" % DROPOUT_P, "mt_dropout_add", args,
                         lambda x, res: [res + F.dropout(x, DROPOUT_P)],
                         ("mt", composed, "mt_add(r, mt_dropout(x))"), lambda r, c: [(r, c), (r, c)],
                         lambda n, bwd: 28 * n if bwd else 12 * n, backward)


def bench_bias_gelu(ctx):
    """bias + GELU forward (mt_bias_act) vs gelu(x + b)."""
    return _bias_gelu(ctx, False)


def bench_bias_gelu_backward(ctx):
    """bias + GELU forward+backward (dx and dbias in one pass)."""
    return _bias_gelu(ctx, True)


def bench_add_layernorm(ctx):
    """residual add + LayerNorm forward (mt_add_layer_norm) vs x + r, layer_norm(x + r)."""
    return _add_layernorm(ctx, False)


def bench_add_layernorm_backward(ctx):
    """residual add + LayerNorm forward+backward through both outputs."""
    return _add_layernorm(ctx, True)


def bench_dropout_add(ctx):
    """dropout + residual add forward (mt_dropout_add) vs r + dropout(x)."""
    return _dropout_add(ctx, False)


def bench_dropout_add_backward(ctx):
    """dropout + residual add forward+backward (the mask drawn again, not stored)."""
    return _dropout_add(ctx, True)


WORKLOADS = [
    ("layernorm", bench_layernorm),
    ("layernorm-bwd", bench_layernorm_backward),
    ("gelu", bench_gelu),
    ("gelu-bwd", bench_gelu_backward),
    ("bias-gelu", bench_bias_gelu),
    ("bias-gelu-bwd", bench_bias_gelu_backward),
    ("add-layernorm", bench_add_layernorm),
    ("add-layernorm-bwd", bench_add_layernorm_backward),
    ("dropout-add", bench_dropout_add),
    ("dropout-add-bwd", bench_dropout_add_backward),
]
