#!/usr/bin/env python3
"""softmax_study.py - the softmax study: every variant of backend/cuda/softmax.cu against
torch.softmax, row widths 32..32768, row counts up to 65536, float32 (and float16 / bfloat16).

  python3 scripts/bench/softmax_study.py                 the table (float32), printed
  python3 scripts/bench/softmax_study.py --dtypes f32,f16,bf16 --write
                                                         ... and written to docs/benchmarks.md
                                                         (its own section per GPU, beside make bench's)
Options: --reps N (median of N, default 5), --variants 0,1,2,3,4 (the default; 5 is vec-ilp), --max-elems N (default 2^28),
--naive-max-elems N (the naive variant is only timed up to 2^24 elements: it is ~100x slower),
--quick (fewer shapes), --perf-only (the three anchor shapes), --out PATH.

Variants (mt_study_softmax, an internal hook of libminitorch.so, not in abi/minitorch.h):
  0 production dispatch   what mt_softmax runs for the shape
  1 naive                 one thread per row, three passes, uncoalesced
  2 warp                  a warp per row, online (max, sum), re-reads x for the write
  3 block                 a block per row, online pair merged in shared memory, re-reads x
  4 vectorized            128-bit accesses, the row held in registers (G lanes or a block per row);
                          needs cols * element size % 16 == 0
  5 vec-ilp               (4) with 4 packs in flight per lane up to 1024 columns; wider rows
                          re-read x from L2 (the 128-bit block kernel, no register cache)
Each result is validated against torch.softmax (in float32) before it is timed; a wrong result
is reported as FAIL and makes the exit status 1.

Timing (PERF.md rules): warm-up, then the median of --reps repetitions of a loop sized to
~20 ms. PyTorch with CUDA events around the loop; minitorch with the wall clock between
mt_synchronize() calls (it runs on its own stream), so small shapes include launch overhead on
both sides. Throughput counts one read of x and one write of y: 2 * rows * cols * element size.
The copy ceiling is y.copy_(x) of the largest float32 shape, measured in the same run.
"""
import argparse
import ctypes
import os
import platform
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import harness  # noqa: E402
from harness import positive_int  # noqa: E402

VARIANTS = {0: "production", 1: "naive", 2: "warp", 3: "block", 4: "vectorized", 5: "vec-ilp"}
WIDTHS = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
ROWS = [1024, 8192, 65536]
PERF_SHAPES = [(65536, 1024), (8192, 32768), (262144, 128)]   # the PERF.md anchors
QUICK_WIDTHS = [32, 128, 1024, 4096, 32768]
DTYPES = {"f32": (0, 4), "f16": (2, 2), "bf16": (3, 2)}        # name -> (mt_dtype, bytes)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--dtypes", default="f32", help="comma-separated: f32,f16,bf16")
    ap.add_argument("--variants", default="0,1,2,3,4")
    ap.add_argument("--perf-only", action="store_true", help="only the three PERF.md anchor shapes")
    ap.add_argument("--reps", type=positive_int, default=5)
    ap.add_argument("--max-elems", type=positive_int, default=1 << 28)
    ap.add_argument("--naive-max-elems", type=positive_int, default=1 << 24)
    ap.add_argument("--quick", action="store_true", help="widths 32,128,1024,4096,32768 and the PERF shapes")
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md (or --out)")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def production_variant(cols, elem):
    """The kernel family mt_softmax picks (backend/cuda/softmax.cu, softmax_forward_variant)."""
    if (cols * elem) % 16 == 0 and elem <= 4:
        return 4
    return 2 if cols <= 1024 else 3


def shapes(args):
    if args.perf_only:
        return [s for s in PERF_SHAPES if s[0] * s[1] <= args.max_elems]
    widths = QUICK_WIDTHS if args.quick else WIDTHS
    out = []
    for rows in ROWS:
        for cols in widths:
            if rows * cols <= args.max_elems:
                out.append((rows, cols))
    for s in PERF_SHAPES:
        if s not in out and s[0] * s[1] <= args.max_elems:
            out.append(s)
    return out


def iters_for(one_ms, target_ms=20.0):
    return max(3, min(2000, int(target_ms / max(one_ms, 1e-3))))


def main(argv):
    args = parse_args(argv)
    import abi_util as U
    try:
        import torch
    except ImportError:
        print("softmax_study.py: needs PyTorch with CUDA", file=sys.stderr)
        return 2
    if not U.HAVE_CUDA or not torch.cuda.is_available():
        print("softmax_study.py: needs a GPU (mt_cuda_device_count() = %d, torch.cuda.is_available() = %s)"
              % (U.LIB.mt_cuda_device_count(), torch.cuda.is_available()), file=sys.stderr)
        return 2
    hook = getattr(U.LIB, "mt_study_softmax", None)
    if hook is None:
        print("softmax_study.py: %s does not export mt_study_softmax (a CPU-only build?)" % U.lib_path(),
              file=sys.stderr)
        return 2
    hook.restype = ctypes.c_int
    hook.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32]
    try:
        variants = [int(v) for v in args.variants.split(",") if v != ""]
    except ValueError:
        variants = [None]
    if not variants or any(v not in VARIANTS for v in variants):
        print("softmax_study.py: --variants takes numbers from %s, got %r" % (sorted(VARIANTS), args.variants),
              file=sys.stderr)
        return 2
    dtypes = [d for d in args.dtypes.split(",") if d]
    for d in dtypes:
        if d not in DTYPES:
            print("softmax_study.py: unknown dtype %r (f32, f16, bf16)" % d, file=sys.stderr)
            return 2
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    timer = harness.Timer(U.LIB, torch, True)
    gpu = U.LIB.mt_device_name(U.MT_CUDA).decode()
    torch.manual_seed(0)
    t_start = time.time()

    if not shapes(args):
        print("softmax_study.py: no shape has at most --max-elems %d elements" % args.max_elems, file=sys.stderr)
        return 2
    # the copy ceiling, float32, the largest shape
    big = max(shapes(args), key=lambda s: s[0] * s[1])
    src = torch.randn(big, device="cuda")
    dst = torch.empty_like(src)
    one = timer.torch_time(lambda: dst.copy_(src), 1, 1)
    copy_ms = timer.torch_time(lambda: dst.copy_(src), iters_for(one), args.reps)
    copy_gbs = 2 * src.numel() * 4 / (copy_ms * 1e-3) / 1e9
    del src, dst
    print("softmax study on %s; copy ceiling %.0f GB/s (%d x %d f32)" % (gpu, copy_gbs, big[0], big[1]), flush=True)

    lines, failures = [], 0
    head = "| shape | dtype | PyTorch GB/s | " + " | ".join("(%d) %s" % (v, VARIANTS[v]) for v in variants) + \
           " | mt_softmax picks |"
    lines.append(head)
    lines.append("|---|---|---:|" + "---:|" * len(variants) + "---|")
    for dname in dtypes:
        code, elem = DTYPES[dname]
        tol = 1e-2 if dname != "f32" else None
        for rows, cols in shapes(args):
            nbytes = 2 * rows * cols * elem
            x = (torch.randn(rows, cols, device="cuda") * 3).to(tdt[dname])
            y = torch.empty_like(x)
            ref = torch.softmax(x.float(), -1)
            one = timer.torch_time(lambda: torch.softmax(x, -1), 1, 1)
            t_ms = timer.torch_time(lambda: torch.softmax(x, -1), iters_for(one), args.reps)
            cells = []
            for v in variants:
                if v == 1 and rows * cols > args.naive_max_elems:
                    cells.append("—")
                    continue
                y.fill_(float("nan"))
                torch.cuda.synchronize()
                st = hook(y.data_ptr(), x.data_ptr(), rows, cols, code, v)
                if st != 0:
                    unsupported = st == 9  # MT_ERR_UNSUPPORTED: the variant does not take this shape
                    cells.append("n/a" if unsupported else "error %d" % st)
                    if not unsupported:
                        failures += 1
                    continue
                U.LIB.mt_synchronize()
                err = float((y.float() - ref).norm() / ref.norm())
                lim = tol if tol else (1e-4 if cols > 4096 else 1e-5)
                if not err < lim:
                    cells.append("FAIL (rel err %.2g)" % err)
                    failures += 1
                    continue
                call = lambda: hook(y.data_ptr(), x.data_ptr(), rows, cols, code, v)  # noqa: E731
                one = timer.mt(call, 1, 1, warmup=1)
                ms = timer.mt(call, iters_for(one), args.reps)
                gbs = nbytes / (ms * 1e-3) / 1e9
                cells.append("%.0f (%.2f×)" % (gbs, t_ms / ms))
            pick = production_variant(cols, elem)
            lines.append("| %d × %d | %s | %.0f | %s | (%d) %s |" % (rows, cols, dname, nbytes / (t_ms * 1e-3) / 1e9,
                                                                  " | ".join(cells), pick, VARIANTS[pick]))
            print(lines[-1], flush=True)
            del x, y, ref
            torch.cuda.empty_cache()

    section = ["## softmax study on %s — %s" % (gpu, harness.today()), "",
               "scripts/bench/softmax_study.py: minitorch %s (commit %s), PyTorch %s (CUDA %s), Python %s. "
               "Cells: GB/s (one read of x + one write of y) and, in brackets, PyTorch time / variant time "
               "(above 1: the variant is faster). Median of %d repetitions; PyTorch timed with CUDA events, "
               "minitorch with the wall clock between mt_synchronize() calls. Copy ceiling (y.copy_(x), %d × %d "
               "f32): %.0f GB/s. n/a: the vectorized variant needs rows of a multiple of 16 bytes; —: not timed "
               "(the naive variant above %d elements)." % (
                   U.LIB.mt_version().decode(), harness.git_commit(REPO), torch.__version__, torch.version.cuda,
                   platform.python_version(), args.reps, big[0], big[1], copy_gbs, args.naive_max_elems),
               ""] + lines + ["", "The study took %.0f s." % (time.time() - t_start)]
    text = "\n".join(section) + "\n"
    print()
    print(text)
    if args.write or args.out:
        path = args.out or os.path.join(REPO, "docs", "benchmarks.md")
        update_docs(path, gpu, text)
        print("wrote the softmax study section for %s in %s" % (gpu, path))
    if failures:
        print("softmax_study.py: %d variant result(s) failed validation or returned an error" % failures,
              file=sys.stderr)
    return 1 if failures else 0


def update_docs(path, gpu, section_text):
    """Replaces this GPU's softmax-study section of path (markers of its own, so make bench's
    sections stay as they are); appends one when there is none."""
    key = re.sub(r"[^A-Za-z0-9 ._()-]", "_", gpu)
    begin, end = "<!-- softmax study: begin %s -->" % key, "<!-- softmax study: end %s -->" % key
    block = "%s\n%s\n%s\n" % (begin, section_text.rstrip("\n"), end)
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if not text.strip():
        text = harness.DOC_HEADER
    i, j = text.find(begin), text.find(end)
    if i >= 0 and j > i:
        rest = text[j + len(end):]
        text = text[:i] + block + (rest[1:] if rest.startswith("\n") else rest)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
