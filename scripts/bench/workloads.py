"""workloads - the benchmarks of `make bench`: each runs minitorch (through the C ABI, by
ctypes) and the PyTorch equivalent on the same device in the same process, checks that both
compute the same thing, and returns table rows.

Contents: Ctx (sizes and handles of one run), helpers, then one function per workload
(copy, elementwise, reductions, casts, matmul, small-op overhead, XOR in Python, XOR as the C
program), then WORKLOADS (the order they run in) and PENDING (benchmarks the project plans that
the library does not offer yet: printed as skipped lines, never faked).

Inputs are large enough (256 MiB per operand at 64M floats) that caches cannot flatter a
bandwidth figure, so no buffer rotation is needed.
"""
import array
import math
import os
import random
import re
import subprocess
import sys
import time
from ctypes import byref, c_double, c_int64, c_void_p

import abi_util as U
from harness import Row, Skip, fmt_ms

F32 = U.MT_F32


class Ctx:
    def __init__(self, dry, device, torch, torch_cuda, timer, build_dir, reps):
        self.dry, self.device, self.torch, self.torch_cuda = dry, device, torch, torch_cuda
        self.tdev = "cuda" if torch_cuda else "cpu"
        self.timer, self.build_dir = timer, build_dir
        self.reps = reps
        self.n_elem = (1 << 16) if dry else (1 << 26)          # 64M floats
        self.matmul_n = 128 if dry else 4096
        self.xor_epochs = 300 if dry else 5000
        self.iters = 3 if dry else 20
        self.copy_gbs = None          # the ceiling of bandwidth-bound rows, set by bench_copy
        self.copy_source = ""
        self.torch_xor_ms = None

    def elem_shape(self):
        return "%dM f32" % (self.n_elem >> 20) if self.n_elem >= (1 << 20) else "%d f32" % self.n_elem


# ------------------------------------------------------------------ helpers
def mt_randn(ctx, shape, seed):
    return U.call("mt_tensor_randn", U.shape_array(shape), len(shape), c_int64(seed), F32, ctx.device)


def mt_host(h):
    n = U.numel_of(h)
    buf = array.array("f", bytes(4 * n))
    U.check(U.LIB.mt_tensor_copy_to_host(h, c_void_p(U.buffer_ptr(buf)), 4 * n), "mt_tensor_copy_to_host")
    return buf


def torch_from_host(ctx, buf, shape):
    torch = ctx.torch
    return torch.frombuffer(bytearray(buf.tobytes()), dtype=torch.float32).reshape(tuple(shape)).to(ctx.tdev)


def rel_err(got, want):
    d = math.sqrt(math.fsum((a - b) * (a - b) for a, b in zip(got, want)))
    n = math.sqrt(math.fsum(b * b for b in want))
    return d / n if n else d


def check_vs_torch(ctx, fn, torch_fn, shapes, tol):
    """Runs the minitorch op on fresh random inputs and torch on the same values; returns a note.
    Raises when they disagree: a fast wrong kernel must not land in the table."""
    ins = [mt_randn(ctx, s, 100 + i) for i, s in enumerate(shapes)]
    try:
        out = U.call(fn, *ins)
        got = mt_host(out)
        U.release(out)
        if ctx.torch is None:
            return "unchecked (no torch)"
        ts = [torch_from_host(ctx, mt_host(h), s) for h, s in zip(ins, shapes)]
        want = torch_fn(*ts).detach().to("cpu").reshape(-1).tolist()
        e = rel_err(got, want)
        if not e < tol:
            raise RuntimeError("%s disagrees with PyTorch: relative error %.3g >= %g" % (fn, e, tol))
        return "matches torch (rel err %.1e)" % e
    finally:
        for h in ins:
            U.release(h)


def need(*names):
    missing = [n for n in names if n in U.MISSING]
    if missing:
        raise Skip("%s not in the library" % ", ".join(missing))


def release_each(handles):
    for h in handles:
        U.release(h)


# ------------------------------------------------------------------ copy (the ceiling)
def bench_copy(ctx):
    n = ctx.n_elem
    nbytes = 4 * n
    rows = []
    torch = ctx.torch
    # device-to-device copy: mt_memcpy_d2d between two buffers vs dst.copy_(src)
    mt_ms = None
    if ctx.device == U.MT_CUDA:
        need("mt_malloc", "mt_memcpy_d2d")
        p, q = c_void_p(), c_void_p()
        U.check(U.LIB.mt_malloc(byref(p), nbytes, ctx.device), "mt_malloc")
        U.check(U.LIB.mt_malloc(byref(q), nbytes, ctx.device), "mt_malloc")
        try:
            mt_ms = ctx.timer.mt(lambda: U.LIB.mt_memcpy_d2d(q, p, nbytes), ctx.iters, ctx.reps)
            st = U.LIB.mt_memcpy_d2d(q, p, nbytes)
            U.check(st, "mt_memcpy_d2d")
        finally:
            U.LIB.mt_free(p, ctx.device)
            U.LIB.mt_free(q, ctx.device)
    t_ms = None
    if torch is not None:
        src = torch.empty(n, dtype=torch.float32, device=ctx.tdev)
        dst = torch.empty_like(src)
        t_ms = ctx.timer.torch_time(lambda: dst.copy_(src), ctx.iters, ctx.reps)
        del src, dst
    rows.append(Row("copy, device to device (mt_memcpy_d2d vs Tensor.copy_)", ctx.elem_shape(), mt_ms, t_ms,
                    work_bytes=2 * nbytes, note="read + write"))
    # clone: an op that allocates its output, as every op does
    x = mt_randn(ctx, (n,), 1)
    try:
        mt_clone = ctx.timer.mt(lambda: U.release(U.call("mt_tensor_clone", x)), ctx.iters, ctx.reps)
    finally:
        U.release(x)
    t_clone = None
    if torch is not None:
        tx = torch.randn(n, device=ctx.tdev)
        t_clone = ctx.timer.torch_time(lambda: tx.clone(), ctx.iters, ctx.reps)
        del tx
    rows.append(Row("clone (mt_tensor_clone vs Tensor.clone)", ctx.elem_shape(), mt_clone, t_clone,
                    work_bytes=2 * nbytes))
    # the ceiling: PyTorch's copy when there is one (the anchor), else ours
    if t_ms:
        ctx.copy_gbs, ctx.copy_source = 2 * nbytes / (t_ms * 1e-3) / 1e9, "PyTorch `dst.copy_(src)`"
    elif mt_ms:
        ctx.copy_gbs, ctx.copy_source = 2 * nbytes / (mt_ms * 1e-3) / 1e9, "mt_memcpy_d2d"
    else:
        ctx.copy_gbs, ctx.copy_source = 2 * nbytes / (mt_clone * 1e-3) / 1e9, "mt_tensor_clone"
    return rows


# ------------------------------------------------------------------ elementwise and reductions
ELEMENTWISE = [  # (name, ABI function, inputs, torch function, bytes per element)
    ("add", "mt_add", 2, lambda torch: torch.add, 12),
    ("mul", "mt_mul", 2, lambda torch: torch.mul, 12),
    ("relu", "mt_relu", 1, lambda torch: torch.relu, 8),
]
REDUCTIONS = [
    ("sum", "mt_sum", lambda torch: torch.sum),
    ("mean", "mt_mean", lambda torch: torch.mean),
]


def bench_elementwise(ctx):
    rows = []
    n = ctx.n_elem
    for name, fn, nin, tfn, bpe in ELEMENTWISE:
        need(fn)
        note = check_vs_torch(ctx, fn, tfn(ctx.torch) if ctx.torch else None, [(1 << 20,)] * nin, 1e-6)
        ins = [mt_randn(ctx, (n,), 10 + i) for i in range(nin)]
        try:
            mt_ms = ctx.timer.mt(lambda: U.release(U.call(fn, *ins)), ctx.iters, ctx.reps)
        finally:
            release_each(ins)
        t_ms = None
        if ctx.torch is not None:
            ts = [ctx.torch.randn(n, device=ctx.tdev) for _ in range(nin)]
            f = tfn(ctx.torch)
            t_ms = ctx.timer.torch_time(lambda: f(*ts), ctx.iters, ctx.reps)
            del ts
        rows.append(Row("%s (%s)" % (name, fn), ctx.elem_shape(), mt_ms, t_ms, work_bytes=bpe * n, note=note))
    return rows


def bench_reductions(ctx):
    rows = []
    n = ctx.n_elem
    for name, fn, tfn in REDUCTIONS:
        need(fn)
        # float32 sums of 1M terms in different orders: 1e-5 relative is what the parity suite allows
        note = check_vs_torch(ctx, fn, tfn(ctx.torch) if ctx.torch else None, [(1 << 20,)], 1e-4)
        x = mt_randn(ctx, (n,), 20)
        try:
            mt_ms = ctx.timer.mt(lambda: U.release(U.call(fn, x)), ctx.iters, ctx.reps)
        finally:
            U.release(x)
        t_ms = None
        if ctx.torch is not None:
            tx = ctx.torch.randn(n, device=ctx.tdev)
            f = tfn(ctx.torch)
            t_ms = ctx.timer.torch_time(lambda: f(tx), ctx.iters, ctx.reps)
            del tx
        rows.append(Row("%s (%s)" % (name, fn), ctx.elem_shape(), mt_ms, t_ms, work_bytes=4 * n, note=note))
    return rows


# ------------------------------------------------------------------ dtype casts
def bench_casts(ctx):
    """mt_tensor_cast against Tensor.to between float32 and bfloat16 (what mixed precision casts
    every step): both round to nearest even, so the check asks for the same values exactly."""
    need("mt_tensor_cast")
    rows = []
    n = ctx.n_elem
    x = mt_randn(ctx, (n,), 30)
    xb = U.call("mt_tensor_cast", x, U.MT_BF16)
    try:
        # the check: 1M values cast down and back up on both sides
        small = mt_randn(ctx, (1 << 20,), 31)
        try:
            down = U.call("mt_tensor_cast", small, U.MT_BF16)
            up = U.call("mt_tensor_cast", down, F32)
            got, src = mt_host(up), mt_host(small)
            release_each((down, up))
        finally:
            U.release(small)
        note = "unchecked (no torch)"
        if ctx.torch is not None:
            t = ctx.torch
            want = torch_from_host(ctx, src, (1 << 20,)).to(t.bfloat16).to(t.float32).cpu().tolist()
            e = rel_err(got, want)
            if e != 0.0:
                raise RuntimeError("mt_tensor_cast to bfloat16 disagrees with PyTorch: relative error %.3g" % e)
            note = "matches torch exactly"
        tx = ctx.torch.randn(n, device=ctx.tdev) if ctx.torch is not None else None
        for label, src_h, dst, tsrc, tdst in (
                ("float32 → bfloat16", x, U.MT_BF16, tx, "bfloat16"),
                ("bfloat16 → float32", xb, F32, None if tx is None else tx.to(ctx.torch.bfloat16), "float32")):
            mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_tensor_cast", src_h, dst)), ctx.iters, ctx.reps)
            t_ms = None
            if tsrc is not None:
                tdt = getattr(ctx.torch, tdst)
                t_ms = ctx.timer.torch_time(lambda: tsrc.to(tdt), ctx.iters, ctx.reps)
            rows.append(Row("cast %s (mt_tensor_cast vs Tensor.to)" % label, ctx.elem_shape(), mt_ms, t_ms,
                            work_bytes=6 * n, note=note))
        del tx
    finally:
        release_each((x, xb))
    return rows


# ------------------------------------------------------------------ matmul
def bench_matmul(ctx):
    need("mt_matmul")
    n = ctx.matmul_n
    note = check_vs_torch(ctx, "mt_matmul", ctx.torch.matmul if ctx.torch else None, [(256, 256), (256, 256)], 1e-5)
    a, b = mt_randn(ctx, (n, n), 30), mt_randn(ctx, (n, n), 31)
    iters = max(2, ctx.iters // 2)
    cublas_ms = None
    try:
        mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_matmul", a, b)), iters, ctx.reps)
        cublas_ms = _cublas_sgemm_ms(ctx, a, b, iters)
    finally:
        U.release(a)
        U.release(b)
    t_ms = None
    if ctx.torch is not None:
        ta = ctx.torch.randn(n, n, device=ctx.tdev)
        tb = ctx.torch.randn(n, n, device=ctx.tdev)
        t_ms = ctx.timer.torch_time(lambda: ctx.torch.matmul(ta, tb), iters, ctx.reps)
        del ta, tb
    if cublas_ms:
        note += "; GEMM ceiling: cuBLAS SGEMM %s through minitorch's cuBLAS path (mt_study_gemm_f32(1))" % (
            fmt_ms(cublas_ms))
    return [Row("SGEMM f32, TF32 off (mt_matmul vs torch.matmul)", "%d³" % n, mt_ms, t_ms,
                work_flops=2.0 * n ** 3, note=note, ceiling_ms=cublas_ms)]


def _cublas_sgemm_ms(ctx, a, b, iters):
    """The float32 GEMM ceiling: the same product on cuBLAS (CUBLAS_COMPUTE_32F), timed through
    minitorch's matmul with the internal hook mt_study_gemm_f32 sending every float32 product to
    cuBLAS; None where the library has no such hook (a CPU build) or the run is on the CPU."""
    hook = getattr(U.LIB, "mt_study_gemm_f32", None)
    if hook is None or ctx.device != U.MT_CUDA:
        return None
    hook.restype, hook.argtypes = c_int64, [c_int64]
    if hook(1) != 0:
        raise RuntimeError("mt_study_gemm_f32(1) refused")
    try:
        return ctx.timer.mt(lambda: U.release(U.call("mt_matmul", a, b)), iters, ctx.reps)
    finally:
        hook(0)


def _matmul_variant(ctx, label, mt_dtype, torch_dtype, tf32, tol):
    """4096³ matmul in a reduced precision: TF32 (float32 tensors, mt_set_allow_tf32) or
    bf16 tensors (float32 accumulation in both engines); checked against PyTorch in the same
    mode on 256³ first, with the tolerance of that precision."""
    torch = ctx.torch
    if ctx.dry or torch is None or not ctx.torch_cuda:
        raise Skip("needs a GPU and PyTorch")
    n = ctx.matmul_n
    prev = U.LIB.mt_set_allow_tf32(1 if tf32 else 0)
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
    try:
        def mt_pair(shape, seeds):
            out = []
            for s_ in seeds:
                x = mt_randn(ctx, shape, s_)
                if mt_dtype != F32:
                    y = U.call("mt_tensor_cast", x, mt_dtype)
                    U.release(x)
                    x = y
                out.append(x)
            return out
        # correctness: same values in both engines (cast back to f32 to read them)
        a, b = mt_pair((256, 256), (130, 131))
        c = U.call("mt_matmul", a, b)
        def host(h):
            f = U.call("mt_tensor_cast", h, F32) if mt_dtype != F32 else h
            v = mt_host(f)
            if f != h:
                U.release(f)
            return v
        got, ha, hb = host(c), host(a), host(b)
        release_each([a, b, c])
        ta = torch_from_host(ctx, ha, (256, 256)).to(torch_dtype)
        tb = torch_from_host(ctx, hb, (256, 256)).to(torch_dtype)
        want = torch.matmul(ta, tb).float().cpu().reshape(-1).tolist()
        e = rel_err(list(got), want)
        if not e < tol:
            raise RuntimeError("%s disagrees with PyTorch: relative error %.3g >= %g" % (label, e, tol))
        a, b = mt_pair((n, n), (132, 133))
        iters = max(2, ctx.iters // 2)
        try:
            mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_matmul", a, b)), iters, ctx.reps)
        finally:
            release_each([a, b])
        ta = torch.randn(n, n, device=ctx.tdev).to(torch_dtype)
        tb = torch.randn(n, n, device=ctx.tdev).to(torch_dtype)
        t_ms = ctx.timer.torch_time(lambda: torch.matmul(ta, tb), iters, ctx.reps)
        del ta, tb
    finally:
        U.LIB.mt_set_allow_tf32(prev)
        torch.backends.cuda.matmul.allow_tf32 = False
    # minitorch runs these precisions on cuBLASLt itself; the ceiling is cuBLAS through torch.matmul
    return Row(label, "%d³" % n, mt_ms, t_ms, work_flops=2.0 * n ** 3, ceiling_ms=t_ms,
               note="matches torch (rel err %.1e); GEMM ceiling: cuBLAS through torch.matmul" % e)


def bench_matmul_reduced(ctx):
    need("mt_matmul", "mt_set_allow_tf32", "mt_tensor_cast")
    if ctx.torch is None:
        raise Skip("needs PyTorch")
    return [_matmul_variant(ctx, "matmul TF32 (mt_set_allow_tf32(1) vs allow_tf32=True)", F32, ctx.torch.float32, True, 3e-3),
            _matmul_variant(ctx, "matmul bf16, f32 accumulate (mt_matmul on MT_BF16)", U.MT_BF16, ctx.torch.bfloat16,
                            False, 1e-2)]


# ------------------------------------------------------------------ host path of a tiny op
def bench_small_op(ctx):
    need("mt_add")
    x = U.from_list([1, 2, 3, 4], (4,), F32, ctx.device)
    iters = 200 if ctx.dry else 5000
    try:
        mt_ms = ctx.timer.mt(lambda: U.release(U.call("mt_add", x, x)), iters, ctx.reps)
    finally:
        U.release(x)
    t_ms = None
    if ctx.torch is not None:
        tx = ctx.torch.ones(4, device=ctx.tdev)
        t_ms = ctx.timer.torch_time(lambda: ctx.torch.add(tx, tx), iters, ctx.reps)
    rows = [Row("one small add, per call (host path: Python ctypes -> ABI -> launch)", "[4] f32", mt_ms, t_ms,
                note="minitorch time includes ~1 µs of ctypes call overhead")]
    pkg = _python_package()
    if pkg is None:
        rows.append(Row("one small add, per call (host path: the Python package, a + a)", "[4] f32",
                        note="not run: frontends/python does not import"))
        return rows
    a = pkg.tensor([1.0, 2.0, 3.0, 4.0], device="cuda" if ctx.device == U.MT_CUDA else "cpu")
    try:
        pkg_ms = ctx.timer.mt(lambda: a + a, iters, ctx.reps)
    finally:
        a.close()
    rows.append(Row("one small add, per call (host path: the Python package, a + a)", "[4] f32", pkg_ms, t_ms,
                    note="PyTorch: the torch.add of the row above"))
    return rows


def _python_package():
    """The minitorch Python package of this tree (frontends/python), on the library the
    harness loaded; None if it does not import."""
    os.environ.setdefault("MINITORCH_LIB", U.lib_path())
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontends", "python")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        import minitorch
    except Exception:  # noqa: BLE001 - any import failure means the row cannot run
        return None
    return minitorch


def _torch_op_overhead(ctx, calls, runs):
    """Microseconds per call of op_overhead's rows in PyTorch eager, timed the same way (wall clock
    of `calls` Python calls between two synchronizes, the median of `runs`): {(op, grad): us}."""
    torch = ctx.torch
    dev = ctx.tdev
    sync = torch.cuda.synchronize if ctx.torch_cuda else (lambda: None)

    def per_call(fn, n):
        for _ in range(max(2, n // 10)):
            fn()
        times = []
        for _ in range(runs):
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            times.append((time.perf_counter() - t0) * 1e6 / n)
        return sorted(times)[len(times) // 2]

    out = {}
    for grad in (False, True):
        a = torch.tensor([-1.5, -0.5, 0.5, 1.5], device=dev, requires_grad=grad)
        b = torch.tensor([1.0, 1.25, 1.5, 1.75], device=dev, requires_grad=grad)
        ma = torch.randn(4, 4, device=dev, requires_grad=grad)
        mb = torch.randn(4, 4, device=dev, requires_grad=grad)
        for name, fn in (("add", lambda: torch.add(a, b)), ("mul", lambda: torch.mul(a, b)),
                         ("relu", lambda: torch.relu(a)), ("matmul", lambda: torch.matmul(ma, mb)),
                         ("sum", lambda: torch.sum(a))):
            out[(name, "yes" if grad else "no")] = per_call(fn, calls)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(dev)
    x, y = torch.randn(4, 4, device=dev), torch.randn(4, 1, device=dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    mse = torch.nn.functional.mse_loss

    def forward():
        with torch.no_grad():
            return mse(net(x), y)

    def train_step():
        loss = mse(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out[("mlp_forward", "no")] = per_call(forward, max(1, calls // 10))
    out[("mlp_train_step", "yes")] = per_call(train_step, max(1, calls // 10))
    return out


def bench_op_overhead(ctx):
    """The C micro-benchmark frontends/c/op_overhead.c (build/op_overhead) on this run's device:
    microseconds per call of small ops with and without autograd recording, and of a tiny MLP's
    forward pass and training step; PyTorch eager timed the same way from Python."""
    exe = os.path.join(ctx.build_dir, "op_overhead")
    if not os.access(exe, os.X_OK):
        raise Skip("%s not built" % exe)
    calls, runs = (200, 3) if ctx.dry else (20000, max(3, ctx.reps))
    device = "cuda" if ctx.device == U.MT_CUDA else "cpu"
    p = subprocess.run([exe, "--device", device, "--calls", str(calls), "--runs", str(runs)], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (exe, p.returncode, p.stderr[-500:]))
    rows_mt = re.findall(r"(?m)^(\w+)\s+(\S+)\s+(no|yes)\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+checked$",
                         p.stdout)
    if not rows_mt:
        raise RuntimeError("%s printed no rows:\n%s" % (exe, p.stdout[-1000:]))
    torch_us = _torch_op_overhead(ctx, calls, runs) if ctx.torch is not None else {}
    rows = []
    for op, shape, grad, us in rows_mt:
        what = {"mlp_forward": "tiny MLP forward + MSE, grad mode off (4 op calls)",
                "mlp_train_step": "tiny MLP training step: forward, zero_grad, backward, SGD"}.get(op, "%s, per call" % op)
        rec = "" if op.startswith("mlp") else (", recorded (inputs require grad)" if grad == "yes" else ", not recorded")
        t = torch_us.get((op, grad))
        rows.append(Row("host path: %s%s (C program build/op_overhead)" % (what, rec), shape, float(us) / 1e3,
                        t / 1e3 if t is not None else None,
                        note="minitorch from C, PyTorch from Python (its time includes the interpreter's); "
                             "wall clock of %d calls between synchronizes, median of %d" % (
                                 calls if not op.startswith("mlp") else calls // 10, runs)))
    return rows


# ------------------------------------------------------------------ XOR
XOR_X = [0, 0, 0, 1, 1, 0, 1, 1]
XOR_Y = [0, 1, 1, 0]
XOR_LR = 0.5


def xor_init(seed=0):
    """Weights as torch.nn.Linear initialises them (uniform +-1/sqrt(fan_in)), from a fixed seed,
    shared by both engines: [W1 (4,2), b1 (4), W2 (1,4), b2 (1)]."""
    r = random.Random(seed)
    k1, k2 = 1 / math.sqrt(2), 1 / math.sqrt(4)
    return [[r.uniform(-k1, k1) for _ in range(8)], [r.uniform(-k1, k1) for _ in range(4)],
            [r.uniform(-k2, k2) for _ in range(4)], [r.uniform(-k2, k2)]]


XOR_SHAPES = [(4, 2), (4,), (1, 4), (1,)]


def mt_xor(ctx, init, epochs):
    """Trains the 2-4-1 network; returns (ms for the epochs, final loss)."""
    L = U.LIB
    dev = ctx.device
    x = U.from_list(XOR_X, (4, 2), F32, dev)
    y = U.from_list(XOR_Y, (4, 1), F32, dev)
    params = [U.from_list(v, s, F32, dev) for v, s in zip(init, XOR_SHAPES)]
    for p in params:
        U.set_requires_grad(p, 1)
    w1, b1, w2, b2 = params
    opt = c_void_p()
    arr = (c_void_p * 4)(*params)
    U.check(L.mt_optim_sgd(byref(opt), arr, 4, XOR_LR, 0.0, 0.0, 0), "mt_optim_sgd")
    h, a, p, loss = c_void_p(), c_void_p(), c_void_p(), c_void_p()
    final = None
    try:
        U.check(L.mt_synchronize(), "mt_synchronize")
        t0 = time.perf_counter()
        bad = 0
        for e in range(epochs):
            bad |= L.mt_optim_zero_grad(opt)
            bad |= L.mt_linear(byref(h), x, w1, b1)
            bad |= L.mt_sigmoid(byref(a), h)
            bad |= L.mt_linear(byref(p), a, w2, b2)
            bad |= L.mt_mse_loss(byref(loss), p, y)
            bad |= L.mt_backward(loss)
            bad |= L.mt_optim_step(opt)
            L.mt_tensor_release(h)
            L.mt_tensor_release(a)
            L.mt_tensor_release(p)
            if e + 1 < epochs:
                L.mt_tensor_release(loss)
            if bad:
                raise RuntimeError("XOR epoch %d failed: %s" % (e, U.last_error()))
        U.check(L.mt_synchronize(), "mt_synchronize")
        ms = (time.perf_counter() - t0) * 1e3
        if epochs:
            final = U.item_of(loss.value)
            L.mt_tensor_release(loss)
    finally:
        L.mt_optim_free(opt)
        release_each([x, y] + params)
    return ms, final


def torch_xor(ctx, init, epochs):
    torch = ctx.torch
    nn = torch.nn
    model = nn.Sequential(nn.Linear(2, 4), nn.Sigmoid(), nn.Linear(4, 1)).to(ctx.tdev)
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor(init[0]).reshape(4, 2))
        model[0].bias.copy_(torch.tensor(init[1]))
        model[2].weight.copy_(torch.tensor(init[2]).reshape(1, 4))
        model[2].bias.copy_(torch.tensor(init[3]))
    X = torch.tensor(XOR_X, dtype=torch.float32, device=ctx.tdev).reshape(4, 2)
    Y = torch.tensor(XOR_Y, dtype=torch.float32, device=ctx.tdev).reshape(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=XOR_LR)
    loss_fn = nn.MSELoss()
    loss = None

    def train():
        nonlocal loss
        for _ in range(epochs):
            opt.zero_grad()
            loss = loss_fn(model(X), Y)
            loss.backward()
            opt.step()
    if ctx.torch_cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        train()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
    else:
        t0 = time.perf_counter()
        train()
        ms = (time.perf_counter() - t0) * 1e3
    return ms, (loss.item() if loss is not None else None)


def bench_xor(ctx):
    need("mt_linear", "mt_sigmoid", "mt_mse_loss", "mt_backward", "mt_optim_sgd", "mt_optim_step")
    init = xor_init()
    epochs = ctx.xor_epochs
    reps = max(1, min(ctx.reps, 3))
    mt_xor(ctx, init, 50)                                   # warm-up
    mt_runs = [mt_xor(ctx, init, epochs) for _ in range(reps)]
    mt_ms = sorted(r[0] for r in mt_runs)[len(mt_runs) // 2]
    mt_loss = mt_runs[0][1]
    t_ms, t_loss = None, None
    if ctx.torch is not None:
        torch_xor(ctx, init, 50)                            # warm-up
        t_runs = [torch_xor(ctx, init, epochs) for _ in range(reps)]
        t_ms = sorted(r[0] for r in t_runs)[len(t_runs) // 2]
        t_loss = t_runs[0][1]
        ctx.torch_xor_ms = t_ms
    note = "final loss %.3g" % mt_loss
    if t_loss is not None:
        note = "final loss %.3g (PyTorch %.3g)" % (mt_loss, t_loss)
        if abs(mt_loss - t_loss) > max(1e-3, 0.05 * t_loss):
            note += " — the two trainings diverged"
    return [Row("XOR 2-4-1, SGD lr 0.5, full batch (Python ctypes loop)", "%d epochs" % epochs, mt_ms, t_ms,
                note=note)]


def mt_xor_graph(ctx, init, epochs):
    """One eager step (it creates gradients and optimizer state), one recorded step, then `epochs`
    replays of the recording; returns (ms for the replays, final loss)."""
    L = U.LIB
    dev = ctx.device
    x = U.from_list(XOR_X, (4, 2), F32, dev)
    y = U.from_list(XOR_Y, (4, 1), F32, dev)
    params = [U.from_list(v, s, F32, dev) for v, s in zip(init, XOR_SHAPES)]
    for p in params:
        U.set_requires_grad(p, 1)
    w1, b1, w2, b2 = params
    opt, graph = c_void_p(), c_void_p()
    arr = (c_void_p * 4)(*params)
    made = []

    def step():
        h, a, p, loss = c_void_p(), c_void_p(), c_void_p(), c_void_p()
        bad = L.mt_optim_zero_grad(opt)
        bad |= L.mt_linear(byref(h), x, w1, b1)
        bad |= L.mt_sigmoid(byref(a), h)
        bad |= L.mt_linear(byref(p), a, w2, b2)
        bad |= L.mt_mse_loss(byref(loss), p, y)
        bad |= L.mt_backward(loss)
        bad |= L.mt_optim_step(opt)
        out = [t.value for t in (h, a, p, loss) if t.value]
        if bad:
            release_each(out)
            raise RuntimeError("XOR step failed: %s" % U.last_error())
        return out
    try:
        U.check(L.mt_optim_sgd(byref(opt), arr, 4, XOR_LR, 0.0, 0.0, 0), "mt_optim_sgd")
        release_each(step())
        st = L.mt_graph_begin(dev)
        if st == U.MT_ERR_UNSUPPORTED:
            raise Skip("graphs: %s" % U.last_error())
        U.check(st, "mt_graph_begin")
        try:
            made = step()
        finally:
            st = L.mt_graph_end(byref(graph))
        U.check(st, "mt_graph_end")
        U.check(L.mt_synchronize(), "mt_synchronize")
        t0 = time.perf_counter()
        bad = 0
        for _ in range(epochs):
            bad |= L.mt_graph_replay(graph)
        U.check(L.mt_synchronize(), "mt_synchronize")
        ms = (time.perf_counter() - t0) * 1e3
        if bad:
            raise RuntimeError("mt_graph_replay failed: %s" % U.last_error())
        final = U.item_of(made[-1])
    finally:
        L.mt_graph_free(graph)
        release_each(made)
        L.mt_optim_free(opt)
        release_each([x, y] + params)
    return ms, final


def bench_xor_graph(ctx):
    """XOR with the training step recorded once as a CUDA graph and replayed."""
    need("mt_graph_begin", "mt_graph_end", "mt_graph_replay", "mt_graph_free")
    init = xor_init()
    epochs = ctx.xor_epochs
    mt_xor_graph(ctx, init, 50)                             # warm-up
    runs = [mt_xor_graph(ctx, init, epochs) for _ in range(max(1, min(ctx.reps, 3)))]
    ms = sorted(r[0] for r in runs)[len(runs) // 2]
    return [Row("XOR 2-4-1, same training, step recorded once and replayed (mt_graph_replay)",
                "%d epochs" % epochs, ms, ctx.torch_xor_ms,
                note="1 eager step + %d replays; final loss %.3g" % (epochs, runs[0][1]))]


def bench_xor_c(ctx):
    """The C program frontends/c/xor.c (build/xor): no Python in the loop."""
    exe = os.path.join(ctx.build_dir, "xor")
    if not os.access(exe, os.X_OK):
        raise Skip("%s not built" % exe)
    env = dict(os.environ, MT_DEVICE="cuda" if ctx.device == U.MT_CUDA else "cpu")
    runs, final = [], None
    for _ in range(max(1, min(ctx.reps, 3)) + 1):          # the first run is a warm-up
        t0 = time.perf_counter()
        out = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=600)
        wall = (time.perf_counter() - t0) * 1e3
        if out.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (exe, out.returncode, out.stderr[-500:]))
        m = re.search(r"time\s+([0-9.]+)\s*ms", out.stdout)
        runs.append(float(m.group(1)) if m else wall)
        f = re.search(r"final loss\s+([0-9.eE+-]+)", out.stdout)
        final = float(f.group(1)) if f else None
    runs = sorted(runs[1:])
    how = "training loop as timed by the program" if m else "whole process, start-up included"
    note = "%s; final loss %s" % (how, "%.3g" % final if final is not None else "?")
    return [Row("XOR 2-4-1, same training, C program build/xor", "5000 epochs", runs[len(runs) // 2],
                ctx.torch_xor_ms if ctx.xor_epochs == 5000 else None, note=note)]


# ------------------------------------------------------------------ the list
WORKLOADS = [
    ("copy", bench_copy),
    ("elementwise", bench_elementwise),
    ("reductions", bench_reductions),
    ("casts", bench_casts),
    ("matmul", bench_matmul),
    ("matmul-tf32-bf16", bench_matmul_reduced),
    ("small-op", bench_small_op),
    ("op-overhead", bench_op_overhead),
    ("xor", bench_xor),
    ("xor-graph", bench_xor_graph),
    ("xor-c", bench_xor_c),
]

# Benchmarks the project plans and the library does not offer yet, with the function each needs.
PENDING = [
]


# The rows of each family live in their own module (workloads_<family>.py), appended here in
# this order so run.py sees one list; a module that is not there yet is left out.
FAMILIES = ["classify", "transformer", "cnn", "gpt", "attention"]


def _add_families():
    import importlib
    for fam in FAMILIES:
        try:
            mod = importlib.import_module("workloads_" + fam)
        except ModuleNotFoundError as e:
            if e.name != "workloads_" + fam:
                raise
            continue
        WORKLOADS.extend(mod.WORKLOADS)


_add_families()


def pending_lines(lib):
    lines = []
    for work, symbol in PENDING:
        if hasattr(lib, symbol):
            lines.append("skipped: %s (%s exists; scripts/bench has no benchmark for it yet)" % (work, symbol))
        else:
            lines.append("skipped: %s (%s not in the library)" % (work, symbol))
    return lines
