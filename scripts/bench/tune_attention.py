#!/usr/bin/env python3
"""tune_attention.py - times every FlashAttention kernel configuration (the generations fa_v1,
fa_v2, fa_v3 and each row of the tuned table in backend/cuda/attention/fa_configs.h) over a set
of shapes, forward and backward separately, and prints a markdown table (TFLOP/s) with the best
row per head dim and direction (the candidates for fa_configs.h's production defaults).

  python3 scripts/bench/tune_attention.py            print only
  python3 scripts/bench/tune_attention.py --write    also replace the tuning section of
                                                     docs/flash_attention.md
  python3 scripts/bench/tune_attention.py --quick    two sequence lengths instead of three
  python3 scripts/bench/tune_attention.py --seq 512 --dims 64 --only wgmma
                                                     chosen sequence lengths, head dims, kernels
  python3 scripts/bench/tune_attention.py --only "wgmma 1,wgmma 12" --mask causal --forward-only
                                                     wgmma rows 1 and 12 alone (a name matches
                                                     itself; "wgmma 1" alone would also match
                                                     10-13 as a prefix), the forward under the
                                                     causal mask only: half the shapes, no
                                                     backward, for A/B rounds of one change

Needs a GPU and torch (buffers are torch CUDA tensors; torch's SDPA output checks each
configuration's forward: relative error < 1e-2 or the cell says FAIL). Kernels run through the
internal hooks mt_study_flash_config / mt_study_flash_attention (flash_attention.cu); timing is
the median over --reps repetitions of --iters launches, wall clock between mt_synchronize()s.
The forward table ends with torch's SDPA restricted to its flash and to its cuDNN backend, timed
the same way (torch.cuda.synchronize()), where torch has them.
Shapes: B * T = 16384 tokens, H = 16, bf16; flops as workloads_attention.py counts them
(forward 4 B H T^2 D; the backward alone 6 B H T^2 D, the forward+backward's 2.5x less the
forward; causal halves both).
"""
import argparse
import datetime
from ctypes import c_int64
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

DOC = os.path.join(REPO, "docs", "flash_attention.md")
BEGIN, END = "<!-- tuning:begin -->", "<!-- tuning:end -->"


# The forward's anchors: torch's SDPA restricted to one backend (skipped where torch lacks it).
ANCHORS = [("torch flash", "FLASH_ATTENTION"), ("torch cudnn", "CUDNN_ATTENTION")]


from harness import positive_int  # noqa: E402

def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the tuning section of docs/flash_attention.md")
    ap.add_argument("--quick", action="store_true", help="T in {2048, 8192} only")
    ap.add_argument("--only", default="",
                    help="comma-separated kernels to time: a kernel's whole name matches that kernel only, "
                         "anything else is a name prefix (e.g. 'tuned 1,wgmma')")
    ap.add_argument("--mask", choices=("both", "none", "causal"), default="both",
                    help="shapes without the causal mask, with it, or both (default)")
    ap.add_argument("--forward-only", action="store_true", help="time the forward alone (no backward table)")
    ap.add_argument("--seq", default="", help="comma-separated sequence lengths (overrides --quick)")
    ap.add_argument("--dims", default="64,128", help="comma-separated head dims (64, 128)")
    ap.add_argument("--iters", type=positive_int, default=10)
    ap.add_argument("--reps", type=positive_int, default=5)
    args = ap.parse_args()
    if args.write and (args.only or args.seq or args.dims != "64,128" or args.mask != "both" or args.forward_only):
        print("tune_attention.py: --write replaces the whole tuning table of %s; run it without --only, --seq, "
              "--dims, --mask and --forward-only" % DOC, file=sys.stderr)
        return 2

    import torch
    import abi_util as U
    import workloads  # noqa: F401 - first: it imports workloads_attention itself
    from workloads_attention import HEADS, TOKENS, Problem, flops, sdpa_context, study_fn

    if not torch.cuda.is_available() or not U.HAVE_CUDA:
        print("tune_attention.py: needs a GPU visible to torch and to the library", file=sys.stderr)
        return 2
    cfg = getattr(U.LIB, "mt_study_flash_config", None)
    if cfg is None:
        print("tune_attention.py: the library has no mt_study_flash_config (a CPU-only build?)", file=sys.stderr)
        return 2
    cfg.restype, cfg.argtypes = c_int64, [c_int64, c_int64]
    fn = study_fn()
    n_tuned = cfg(-1, 0)
    n_wgmma = cfg(-2, 0)
    configs = [("fa_v1", 1, 0), ("fa_v2", 2, 0), ("fa_v3", 3, 0)] + [("tuned %d" % i, 4, i) for i in range(n_tuned)]
    configs += [("wgmma %d" % i, 5, i) for i in range(n_wgmma)]
    if args.only:
        names = {c[0] for c in configs}
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        configs = [c for c in configs if any(c[0] == w if w in names else c[0].startswith(w) for w in wanted)]
        if not configs:
            print("tune_attention.py: --only %r matches no kernel (names: fa_v1..3, tuned N, wgmma N)" % args.only,
                  file=sys.stderr)
            return 2
    seq = [2048, 8192] if args.quick else [1024, 4096, 16384]
    if args.seq:
        seq = [int(v) for v in args.seq.split(",")]
    dims = [int(v) for v in args.dims.split(",")]
    if not seq or any(T < 1 for T in seq) or any(d not in (64, 128) for d in dims):
        print("tune_attention.py: --seq needs positive lengths and --dims 64 and/or 128", file=sys.stderr)
        return 2
    masks = {"both": (False, True), "none": (False,), "causal": (True,)}[args.mask]
    shapes = [(T, D, c) for D in dims for T in seq for c in masks]
    directions = ("fwd",) if args.forward_only else ("fwd", "bwd")

    def mt_sync():
        U.check(U.LIB.mt_synchronize(), "mt_synchronize")

    def timed(f, sync=mt_sync):
        f()
        sync()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            for _ in range(args.iters):
                f()
            sync()
            times.append((time.perf_counter() - t0) * 1e3 / args.iters)
        return statistics.median(times)

    results = {}  # (config name, shape, direction) -> TFLOP/s or None (failed check)
    t_start = time.time()
    for T, D, causal in shapes:
        B = max(1, TOKENS // T)
        prob = Problem(torch, B, HEADS, T, D, causal)
        ref = torch.nn.functional.scaled_dot_product_attention(prob.q, prob.k, prob.v, is_causal=causal)
        torch.cuda.synchronize()
        for anchor, backend in ANCHORS:  # torch's SDPA backends, forward, timed the same way
            mk = sdpa_context(torch, backend)
            if mk is None:
                continue
            with mk(), torch.no_grad():
                F = torch.nn.functional
                ms_t = timed(lambda: F.scaled_dot_product_attention(prob.q, prob.k, prob.v, is_causal=causal),
                             torch.cuda.synchronize)
            results[(anchor, (T, D, causal), "fwd")] = flops(B, HEADS, T, D, causal, False) / (ms_t * 1e-3) / 1e12
            print("  T=%-5d D=%-3d causal=%-5s %-8s fwd %7.3f ms" % (T, D, causal, anchor, ms_t), flush=True)
        for name, gen, c in configs:
            if cfg(gen, c) != 0:
                raise RuntimeError("mt_study_flash_config(%d, %d) refused" % (gen, c))
            prob.out.fill_(float("nan"))
            torch.cuda.synchronize()
            prob.run(fn, False)
            U.check(U.LIB.mt_synchronize(), "mt_synchronize")
            e = ((prob.out.double() - ref.double()).norm() / ref.double().norm()).item()
            ok = e < 1e-2
            f_fwd, f_bwd = flops(B, HEADS, T, D, causal, False), flops(B, HEADS, T, D, causal, True) - flops(
                B, HEADS, T, D, causal, False)
            ms_f = timed(lambda: prob.run(fn, False))
            results[(name, (T, D, causal), "fwd")] = f_fwd / (ms_f * 1e-3) / 1e12 if ok else None
            bwd = ""
            if not args.forward_only:
                ms_b = timed(lambda: prob.run(fn, True))
                results[(name, (T, D, causal), "bwd")] = f_bwd / (ms_b * 1e-3) / 1e12 if ok else None
                bwd = "  bwd %7.3f ms" % ms_b
            print("  T=%-5d D=%-3d causal=%-5s %-8s fwd %7.3f ms%s  out rel err %.1e%s" % (
                T, D, causal, name, ms_f, bwd, e, "" if ok else "  FAIL"), flush=True)
        del prob
        torch.cuda.empty_cache()
    cfg(0, 0)

    gpu = torch.cuda.get_device_name(0)
    lines = ["Measured on %s, %s, by `python3 scripts/bench/tune_attention.py%s` (bf16, B*T = %d, H = %d; "
             "TFLOP/s of the forward and of the backward alone; FAIL: output check failed)." % (
                 gpu, datetime.date.today().isoformat(), "".join(" " + a for a in sys.argv[1:]), TOKENS, HEADS), ""]
    for direction in directions:
        cols = ["T%d D%d%s" % (T, D, " c" if c else "") for T, D, c in shapes]
        lines.append("| %s | %s | geomean D64 | geomean D128 |" % (direction, " | ".join(cols)))
        lines.append("|---|" + "---:|" * (len(cols) + 2))
        best = {}
        rows = configs + [(anchor, None, None) for anchor, _ in ANCHORS
                          if direction == "fwd" and (anchor, shapes[0], "fwd") in results]
        for name, _, _ in rows:
            cells, by_d = [], {64: [], 128: []}
            for s in shapes:
                v = results[(name, s, direction)]
                cells.append("FAIL" if v is None else "%.0f" % v)
                by_d[s[1]].append(v)
            gm = {64: None, 128: None}
            for d, vs in by_d.items():
                gm[d] = None if (not vs or any(v is None for v in vs)) else math.exp(sum(math.log(v) for v in vs) / len(vs))
                if gm[d] is not None and name.startswith(("tuned", "wgmma")) and (d not in best or gm[d] > best[d][1]):
                    best[d] = (name, gm[d])
            lines.append("| %s | %s | %s | %s |" % (name, " | ".join(cells),
                                                    "—" if gm[64] is None else "%.0f" % gm[64],
                                                    "—" if gm[128] is None else "%.0f" % gm[128]))
        lines.append("")
        for d in dims:
            if d in best:
                lines.append("Best tuned or wgmma %s row for D = %d: %s (geomean %.0f TFLOP/s)." % (direction, d, best[d][0],
                                                                                          best[d][1]))
        lines.append("")
    text = "\n".join(lines)
    print()
    print(text)
    print("(%.0f s)" % (time.time() - t_start))
    if args.write:
        with open(DOC) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            print("tune_attention.py: %s lacks the %s / %s markers" % (DOC, BEGIN, END), file=sys.stderr)
            return 1
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(DOC, "w") as f:
            f.write(head + BEGIN + "\n" + text + "\n" + END + tail)
        print("wrote the tuning section of %s" % DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
