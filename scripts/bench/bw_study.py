#!/usr/bin/env python3
"""bw_study.py - the bandwidth-bound kernels at the copy ceiling: every study variant of relu, GELU
(forward, and backward on a real gradient), the full sum, softmax and log_softmax (forward, and
backward on a real gradient) and layernorm forward against PyTorch, in one process on one GPU.

  python3 scripts/bench/bw_study.py                      the table (float32), printed
  python3 scripts/bench/bw_study.py --write FILE         ... and written to FILE as markdown
Options: --ops relu,gelu,gelu_bwd,sum,softmax,log_softmax,softmax_bwd,log_softmax_bwd,layer_norm, --dtype f32|f16|bf16, --reps N (timed
launches per variant, median, default 30), --bufs N (input buffers rotated over, default 3),
--quick (only the largest shape of each op), --shapes ROWSxCOLS,... (the row ops' shapes instead of their
three), --no-affine (layer_norm without gamma and beta).

Variants (the mt_study_* hooks, internal to libminitorch.so, not in abi/minitorch.h; the variant
lists and what each adds are documented beside each hook):
  relu         backend/cuda/elementwise.cu  mt_study_relu         0..6
  gelu         backend/cuda/fused.cu        mt_study_gelu         0..3 (tanh form, forward)
  gelu_bwd     backend/cuda/fused.cu        mt_study_gelu         0..3: dx = gelu'(x) * dy for a real
                                                                  random dy, against PyTorch's
                                                                  aten.gelu_backward on the same dy
  sum          backend/cuda/reduce.cu       mt_study_sum          0..4
  softmax      backend/cuda/softmax.cu      mt_study_softmax      0, 2..12 (1, naive, is skipped)
  log_softmax  backend/cuda/softmax.cu      mt_study_log_softmax  as softmax
  softmax_bwd  backend/cuda/softmax.cu      mt_study_softmax_backward 0..12: dx from y = softmax(x) and
                                                                  a real random dy, against PyTorch's
                                                                  aten._softmax_backward_data
  log_softmax_bwd                           the same hook (log 1) against
                                                                  aten._log_softmax_backward_data
  layer_norm   backend/cuda/fused.cu        mt_study_layer_norm   0..11
  cross_entropy backend/cuda/classify.cu    mt_study_cross_entropy 0..6: forward + backward (mean
                                                                  loss, dloss 1) against
                                                                  F.cross_entropy(x, t).backward()
Variant 0 is the production choice. A variant that cannot take a shape answers
MT_ERR_UNSUPPORTED and shows as n/a.

Each variant's output is checked against PyTorch on fresh random inputs (relative error
||out - ref|| / ||ref||, printed; float32 limit 1e-5, 1e-4 for rows over 4096 and for the sum, 1e-2
for f16/bf16) before it is timed; a wrong result is FAIL and makes the exit status 1.

Timing: every launch between two CUDA events, minitorch's recorded on the library's own stream
(mt_study_stream, wrapped as torch.cuda.ExternalStream), PyTorch's on its current stream; warm-up
launches first, then --reps launches rotating over --bufs input buffers, the median taken. GB/s
counts the bytes the op must move (relu, gelu, softmax, layernorm: one read of x and one write of
y; gelu_bwd, softmax_bwd, log_softmax_bwd: read x (or y) and dy, write dx; sum: one read of x; cross_entropy: the forward reads x, the
backward reads x and writes dx); % copy is that against y.copy_(x) of 64M f32 timed the same way.
"""
import argparse
import ctypes
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

MT_ERR_UNSUPPORTED = 9
DTYPES = {"f32": (0, 4), "f16": (2, 2), "bf16": (3, 2)}  # name -> (mt_dtype, bytes)

ROW_SHAPES = [(65536, 1024), (262144, 128), (8192, 32768)]
FLAT_SIZES = [1 << 26, 1 << 24]
OPS = {
    # op: (hook, variants, variant names)
    "relu": ("mt_study_relu", list(range(7)),
             {0: "production (tiles of 256 x 1 pack)", 1: "4 packs a grid apart, 1 block/1024 packs",
              2: "4 packs a grid apart, one-wave grid-stride", 3: "tiles of 256 x 2 packs", 4: "tiles of 128 x 2 packs",
              5: "tiles of 256 x 4 packs", 6: "tiles of 128 x 1 pack"}),
    "gelu": ("mt_study_gelu", list(range(4)),
             {0: "production (tiles of 256 x 1 pack)", 1: "tiles of 256 x 4 packs", 2: "tiles of 256 x 2 packs",
              3: "tiles of 128 x 2 packs"}),
    "sum": ("mt_study_sum", list(range(5)),
            {0: "production (CUB)", 1: "split-row, 2 passes", 2: "one pass, 8 loads, last block",
             3: "one pass, 4 loads, last block", 4: "one pass, 8 loads .cs, last block"}),
    "softmax": ("mt_study_softmax", [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
                {0: "production", 2: "warp online", 3: "block online", 4: "vectorized", 5: "vec-ilp / block L2",
                 6: ">=2 packs/lane, exp kept", 7: ">=4 packs/lane, exp kept", 8: "exact fit, >=4 packs/lane",
                 9: "cluster of 8", 10: "cluster of 4", 11: "cluster of 4, one exchange",
                 12: "cluster of 8, one exchange"}),
    "layer_norm": ("mt_study_layer_norm", list(range(12)),
                   {0: "production", 1: ">=2 packs/lane", 2: ">=4 packs/lane", 3: "block, L2 re-read",
                    4: "cluster of 8", 5: "cluster of 4", 6: "exact fit, >=4 packs/lane",
                    7: "cluster of 4, one exchange", 8: "cluster of 8, one exchange",
                    9: "persistent clusters of 4, gamma/beta in smem", 10: "9 + next row loaded early",
                    11: "10 + st.async pair exchange"}),
}
OPS["log_softmax"] = ("mt_study_log_softmax",) + OPS["softmax"][1:]
OPS["softmax_bwd"] = ("mt_study_softmax_backward", list(range(13)),
                      {0: "production", 1: "warp / block per row, y and dy read twice", 2: "cluster of 4",
                       3: "cluster of 8", 4: "cached warp rows, 64-thread blocks",
                       5: "cached warp rows, 128-thread blocks", 6: "cached warp rows, >= 3 blocks an SM",
                       7: "cached block per row, <= 64 threads", 8: "cached block per row, <= 128 threads",
                       9: "cached block per row, <= 256 threads", 10: "cluster of 4, one exchange",
                       11: "cluster of 8, one exchange", 12: "cached block per row, <= 1024 threads"})
OPS["log_softmax_bwd"] = OPS["softmax_bwd"]
OPS["gelu_bwd"] = OPS["gelu"]
OPS["cross_entropy"] = ("mt_study_cross_entropy", list(range(7)),
                        {0: "production (forward on <= 1 wave, even rounds)", 1: "backward 4 units in flight",
                         2: "backward 8 units in flight", 3: "forward on <= 1 wave", 4: "forward on <= 2 waves",
                         5: "forward on <= 8 waves", 6: "forward on <= 4 waves"})
FLAT_OPS = ("relu", "gelu", "gelu_bwd", "sum")
BWD_OPS = ("gelu_bwd", "softmax_bwd", "log_softmax_bwd")  # the ops that read a random dy
CE_SHAPES = [(65536, 1024), (8192, 32768)]


from harness import positive_int  # noqa: E402


def row_shapes(text):
    """--shapes: ROWSxCOLS,... as a list of (rows, cols), each a positive integer."""
    try:
        shapes = [tuple(int(v) for v in part.split("x")) for part in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(sh) != 2 or min(sh) < 1 for sh in shapes):
        raise argparse.ArgumentTypeError("%r is not a list of ROWSxCOLS shapes of positive integers" % text)
    return shapes


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--ops", default="relu,gelu,gelu_bwd,sum,softmax,log_softmax,softmax_bwd,log_softmax_bwd,"
                                      "layer_norm,cross_entropy")
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--reps", type=positive_int, default=30)
    ap.add_argument("--bufs", type=positive_int, default=3)
    ap.add_argument("--quick", action="store_true", help="only the largest shape of each op")
    ap.add_argument("--shapes", type=row_shapes, default=None,
                    help="row shapes ROWSxCOLS,... for the row ops instead of theirs")
    ap.add_argument("--no-affine", action="store_true", help="layer_norm without gamma and beta")
    ap.add_argument("--write", metavar="FILE", default=None, help="write the table as markdown to FILE")
    return ap.parse_args(argv)


class EventTimer:
    """Median GPU time (µs) of single launches, each between two CUDA events on `stream`."""

    def __init__(self, torch, reps, warmup=3):
        self.torch, self.reps, self.warmup = torch, reps, warmup

    def time(self, fn, nbufs, stream=None):
        torch = self.torch
        for i in range(self.warmup):
            fn(i % nbufs)
        torch.cuda.synchronize()
        pairs = []
        for i in range(self.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if stream is None:
                a.record()
                fn(i % nbufs)
                b.record()
            else:
                a.record(stream)
                fn(i % nbufs)
                b.record(stream)
            pairs.append((a, b))
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in pairs) * 1e3


def rel_err(torch, got, want):
    want = want.double()
    return float((got.double() - want).norm() / max(float(want.norm()), 1e-300))


def main(argv):
    args = parse_args(argv)
    import harness
    names = ["mt_study_stream"] + sorted(set(OPS[o][0] for o in OPS))
    ready = harness.study_gpu("bw_study.py", *names)
    if ready is None:
        return 2
    U, torch, fns = ready
    lib = U.LIB
    hooks = dict(zip(names, fns))
    for fn in fns:
        fn.restype = ctypes.c_int
    vp, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    hooks["mt_study_stream"].argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    hooks["mt_study_relu"].argtypes = [vp, vp, i64, i32, i32]
    hooks["mt_study_sum"].argtypes = [vp, vp, i64, i32, i32]
    hooks["mt_study_gelu"].argtypes = [vp, vp, vp, i64, i32, i32, i32]
    hooks["mt_study_cross_entropy"].argtypes = [vp, vp, vp, vp, vp, vp, i64, i64, i32, i32]
    hooks["mt_study_softmax"].argtypes = [vp, vp, i64, i64, i32, i32]
    hooks["mt_study_log_softmax"].argtypes = [vp, vp, i64, i64, i32, i32]
    hooks["mt_study_softmax_backward"].argtypes = [vp, vp, vp, i64, i64, i32, i32, i32]
    hooks["mt_study_layer_norm"].argtypes = [vp, vp, vp, vp, vp, vp, i64, i64, ctypes.c_double, i32, i32]
    sp = ctypes.c_void_p()
    if hooks["mt_study_stream"](ctypes.byref(sp)) != 0:
        print("bw_study.py: mt_study_stream failed: %s" % U.last_error(), file=sys.stderr)
        return 2
    mt_stream = torch.cuda.ExternalStream(sp.value)

    ops = [o for o in args.ops.split(",") if o]
    for o in ops:
        if o not in OPS:
            print("bw_study.py: unknown op %r (%s)" % (o, ", ".join(OPS)), file=sys.stderr)
            return 2
    code, elem = DTYPES[args.dtype]
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    timer = EventTimer(torch, args.reps)
    gpu = lib.mt_device_name(U.MT_CUDA).decode()
    torch.manual_seed(0)
    t_start = time.time()

    src = torch.randn(1 << 26, device="cuda")
    dst = torch.empty_like(src)
    copy_us = timer.time(lambda i: dst.copy_(src), 1)
    copy_gbs = 2 * src.numel() * 4 / (copy_us * 1e-6) / 1e9
    del src, dst
    print("bandwidth study on %s, %s; copy 64M f32: %.1f µs, %.0f GB/s" % (gpu, args.dtype, copy_us, copy_gbs),
          flush=True)

    head = "| op | shape | variant | µs | GB/s | % copy | × torch | rel err |"
    lines = [head, "|---|---|---|---:|---:|---:|---:|---:|"]
    best = []
    failures = 0

    def emit(cells):
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)

    for op in ops:
        hook_name, variants, names = OPS[op]
        hook = hooks[hook_name]
        flat = op in FLAT_OPS
        shapes = [(n,) for n in FLAT_SIZES] if flat else (CE_SHAPES if op == "cross_entropy" else ROW_SHAPES)
        if args.quick:
            shapes = shapes[:1] if flat else [shapes[0], shapes[-1]]
        if args.shapes and not flat:
            shapes = args.shapes
        for shape in shapes:
            numel = shape[0] if flat else shape[0] * shape[1]
            nbytes = numel * elem * {"sum": 1, "gelu_bwd": 3, "cross_entropy": 3, "softmax_bwd": 3,
                                     "log_softmax_bwd": 3}.get(op, 2)
            shape_s = "%dM" % (numel >> 20) if flat else "%d×%d" % shape
            xs = [(torch.randn(*shape, device="cuda") * 2).to(tdt) for _ in range(args.bufs)]
            ys = [torch.empty(1 if op == "sum" else shape, device="cuda", dtype=tdt) for _ in range(args.bufs)]
            rows = 1 if flat else shape[0]
            cols = numel if flat else shape[1]
            dys = [torch.randn(*shape, device="cuda").to(tdt) for _ in range(args.bufs)] if op in BWD_OPS else None
            if op in ("softmax_bwd", "log_softmax_bwd"):  # the backward reads the forward's output
                f = torch.softmax if op == "softmax_bwd" else torch.log_softmax
                xs = [f(x.float(), -1).to(tdt) for x in xs]
            affine = op == "layer_norm" and not args.no_affine
            w = (torch.randn(cols, device="cuda") * 0.5 + 1).to(tdt) if affine else None
            if op == "cross_entropy":
                tgt = [torch.randint(0, cols, (rows,), device="cuda") for _ in range(args.bufs)]
                ce_lse = torch.empty(rows, device="cuda", dtype=tdt)
                ce_loss = torch.empty(1, device="cuda", dtype=tdt)
                ce_one = torch.ones(1, device="cuda", dtype=tdt)
            b = (torch.randn(cols, device="cuda") * 0.5).to(tdt) if affine else None
            stats = [(torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")) for _ in range(args.bufs)]
            if op == "relu":
                tfn = lambda i: torch.relu(xs[i])  # noqa: E731
                ref = torch.relu(xs[0].float())
            elif op == "gelu":
                tfn = lambda i: torch.nn.functional.gelu(xs[i], approximate="tanh")  # noqa: E731
                ref = torch.nn.functional.gelu(xs[0].double(), approximate="tanh")
            elif op == "gelu_bwd":
                tfn = lambda i: torch.ops.aten.gelu_backward(dys[i], xs[i], approximate="tanh")  # noqa: E731
                ref = torch.ops.aten.gelu_backward(dys[0].double(), xs[0].double(), approximate="tanh")
            elif op == "sum":
                tfn = lambda i: xs[i].sum()  # noqa: E731
                ref = xs[0].double().sum().reshape(1)
            elif op == "softmax":
                tfn = lambda i: torch.softmax(xs[i], -1)  # noqa: E731
                ref = torch.softmax(xs[0].double(), -1)
            elif op == "log_softmax":
                tfn = lambda i: torch.log_softmax(xs[i], -1)  # noqa: E731
                ref = torch.log_softmax(xs[0].double(), -1)
            elif op in ("softmax_bwd", "log_softmax_bwd"):
                bwd = (torch.ops.aten._softmax_backward_data if op == "softmax_bwd"
                       else torch.ops.aten._log_softmax_backward_data)
                tfn = lambda i: bwd(dys[i], xs[i], -1, tdt)  # noqa: E731
                ref = bwd(dys[0].double(), xs[0].double(), -1, torch.float64)
            elif op == "cross_entropy":
                for x in xs:
                    x.requires_grad_(True)

                def tfn(i):
                    torch.nn.functional.cross_entropy(xs[i], tgt[i]).backward()
                    xs[i].grad = None
                xd = xs[0].detach().double().requires_grad_(True)
                ref_loss = torch.nn.functional.cross_entropy(xd, tgt[0])
                ref_loss.backward()
                ref, ref_loss = xd.grad, ref_loss.detach().reshape(1)
            else:
                tfn = lambda i: torch.nn.functional.layer_norm(xs[i], (cols,), w, b, 1e-5)  # noqa: E731
                xd = xs[0].double()
                ref = torch.nn.functional.layer_norm(xd, (cols,), w.double() if affine else None,
                                                     b.double() if affine else None, 1e-5)
                ref_mean = xd.mean(-1)
                ref_rstd = 1 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5)
            torch_us = timer.time(tfn, args.bufs)
            emit([op, shape_s, "PyTorch", "%.1f" % torch_us, "%.0f" % (nbytes / (torch_us * 1e-6) / 1e9),
                  "%.0f%%" % (100 * nbytes / (torch_us * 1e-6) / 1e9 / copy_gbs), "1.00", "—"])
            if args.dtype != "f32":
                lim = 1e-2
            else:
                lim = 1e-4 if (op == "sum" or cols > 4096) else 1e-5

            def call(v, i):
                x, y = xs[i].data_ptr(), ys[i].data_ptr()
                if op in ("relu", "sum"):
                    return hook(y, x, numel, code, v)
                if op in ("gelu", "gelu_bwd"):
                    bwd = op == "gelu_bwd"
                    return hook(y, x, dys[i].data_ptr() if bwd else None, numel, code, int(bwd), v)
                if op in ("softmax_bwd", "log_softmax_bwd"):
                    return hook(y, x, dys[i].data_ptr(), rows, cols, code, int(op == "log_softmax_bwd"), v)
                if op == "cross_entropy":
                    return hook(ce_loss.data_ptr(), ce_lse.data_ptr(), y, x, tgt[i].data_ptr(), ce_one.data_ptr(),
                                rows, cols, code, v)
                if op == "layer_norm":
                    return hook(y, stats[i][0].data_ptr(), stats[i][1].data_ptr(), x, w.data_ptr() if affine else None,
                                b.data_ptr() if affine else None, rows, cols, 1e-5, code, v)
                return hook(y, x, rows, cols, code, v)

            best_v = None
            for v in variants:
                label = "(%d) %s" % (v, names[v])
                ys[0].fill_(float("nan"))
                torch.cuda.synchronize()
                st = call(v, 0)
                if st == MT_ERR_UNSUPPORTED:
                    continue  # the variant does not take this shape: not a row of the table
                if st != 0:
                    emit([op, shape_s, label, "error %d" % st, "", "", "", U.last_error()])
                    failures += 1
                    continue
                lib.mt_synchronize()
                err = rel_err(torch, ys[0].reshape(ref.shape), ref)
                if op == "cross_entropy":
                    err = max(err, rel_err(torch, ce_loss, ref_loss))
                if op == "layer_norm":
                    err = max(err, rel_err(torch, stats[0][0], ref_mean), rel_err(torch, stats[0][1], ref_rstd))
                if not err < lim:
                    emit([op, shape_s, label, "FAIL", "", "", "", "%.1e" % err])
                    failures += 1
                    continue
                us = timer.time(lambda i: call(v, i), args.bufs, stream=mt_stream)
                gbs = nbytes / (us * 1e-6) / 1e9
                emit([op, shape_s, label, "%.1f" % us, "%.0f" % gbs, "%.0f%%" % (100 * gbs / copy_gbs),
                      "%.2f" % (torch_us / us), "%.1e" % err])
                if best_v is None or us < best_v[1]:
                    best_v = (label, us)
            if best_v:
                best.append("%s %s: best %s, %.1f µs, %.0f%% of copy, %.2f× PyTorch" % (
                    op, shape_s, best_v[0], best_v[1], 100 * nbytes / (best_v[1] * 1e-6) / 1e9 / copy_gbs,
                    torch_us / best_v[1]))
            del xs, ys, dys, stats, ref, tfn
            xd = tgt = None
            torch.cuda.empty_cache()

    took = time.time() - t_start
    text = "\n".join([
        "## bandwidth study on %s — %s" % (gpu, harness.today()), "",
        "scripts/bench/bw_study.py: minitorch %s (commit %s), PyTorch %s (CUDA %s), Python %s, %s. Each launch "
        "between two CUDA events (minitorch's on its own stream), median of %d, rotating over %d input buffers. "
        "GB/s: bytes the op must move; %% copy against y.copy_(x) of 64M f32: %.1f µs, %.0f GB/s. × torch: PyTorch "
        "time / variant time (above 1: faster). Variants that cannot take a shape are left out." % (
            lib.mt_version().decode(), harness.git_commit(REPO), torch.__version__, torch.version.cuda,
            platform.python_version(), args.dtype, args.reps, args.bufs, copy_us, copy_gbs),
        ""] + lines + ["", "Best per shape:", ""] + ["- " + s for s in best] +
        ["", "The study took %.0f s." % took]) + "\n"
    print()
    print("\n".join("- " + s for s in best))
    print("the study took %.0f s" % took)
    if args.write:
        with open(args.write, "w") as f:
            f.write(text)
        print("wrote %s" % args.write)
    if failures:
        print("bw_study.py: %d variant result(s) failed validation or returned an error" % failures, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
