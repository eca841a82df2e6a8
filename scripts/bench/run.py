#!/usr/bin/env python3
"""run.py - `make bench`: minitorch against PyTorch eager, same process, same GPU.

  python3 scripts/bench/run.py               the GPU run: prints the table and writes this GPU's
                                             section of docs/benchmarks.md
  python3 scripts/bench/run.py --dry-run     every workload with tiny sizes on the CPU backend (PyTorch
                                             on the CPU when importable, else left out); writes nothing
                                             unless --out is given. For checking the harness without a GPU.

Options: --reps N (median of N, default 7), --only copy,xor,... (see --list), --out PATH,
--no-write, --deterministic (mt_set_deterministic(1) for the whole run). The library is $MINITORCH_LIB, else build/libminitorch.so; the commit named in the
section is git's HEAD, or $MT_BENCH_COMMIT. Each workload's rows are printed as it finishes.
It measures the device copy bandwidth first (the ceiling of the bandwidth-bound rows),
then each workload; the GEMM rows measure their own ceiling, cuBLAS at the row's precision. Workloads that fail are reported in the table and make the exit status 1;
work the library does not offer yet is listed as skipped.
"""
import argparse
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

import harness  # noqa: E402
from harness import Row, Skip, Timer, positive_int  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU backend; writes nothing by default")
    ap.add_argument("--reps", type=positive_int, default=None, help="repetitions per measurement (median); default 7, 3 dry")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("--out", default=None, help="markdown file to update (default docs/benchmarks.md; none when dry)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--deterministic", action="store_true",
                    help="mt_set_deterministic(1) first: the kernels that give the same bits every run")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    import abi_util as U          # loads the library
    import workloads as W
    if args.list:
        for name, fn in W.WORKLOADS:
            print("%-12s %s" % (name, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""))
        return 0
    if U.MISSING:
        print("note: the library lacks %s" % ", ".join(U.MISSING))
    if args.deterministic:
        U.LIB.mt_set_deterministic(1)
        print("note: mt_set_deterministic(1): every kernel gives the same bits on every run")
    dry = args.dry_run
    if not dry and not U.HAVE_CUDA:
        print("run.py: no usable GPU (mt_cuda_device_count() == 0); `make bench` needs one. "
              "Use --dry-run to check the harness on the CPU.", file=sys.stderr)
        return 2
    device = U.MT_CPU if dry else U.MT_CUDA
    reps = args.reps or (3 if dry else 7)

    try:
        import torch
    except ImportError:
        torch = None
    torch_cuda = bool(torch is not None and not dry and torch.cuda.is_available())
    if torch is not None and not dry and not torch_cuda:
        print("run.py: PyTorch is importable but sees no GPU: the PyTorch columns stay empty", file=sys.stderr)
        torch = None
    if torch is None:
        print("note: PyTorch not importable%s: the PyTorch columns stay empty" % (" (dry run)" if dry else ""))
    else:
        # TF32 off in both engines: minitorch's matmul is full float32 by default
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.manual_seed(0)

    build_dir = os.path.dirname(os.path.abspath(U.lib_path()))
    ctx = W.Ctx(dry, device, torch, torch_cuda, Timer(U.LIB, torch, torch_cuda), build_dir, reps)
    gpu = U.LIB.mt_device_name(device).decode()
    if dry:
        gpu = "%s (dry run)" % gpu
    only = [s for s in args.only.split(",") if s]
    unknown = [s for s in only if s not in dict(W.WORKLOADS)]
    if unknown:
        print("run.py: unknown workloads %s (see --list)" % unknown, file=sys.stderr)
        return 2
    print("minitorch bench on %s, %d repetitions per measurement%s" % (gpu, reps, ", dry run" if dry else ""))

    rows, skipped, failed = [], [], []
    t_start = time.time()
    for name, fn in W.WORKLOADS:
        if only and name not in only:
            continue
        t0 = time.time()
        print("  %-12s ..." % name, end="", flush=True)
        try:
            new = fn(ctx)
            rows.extend(new)
            print(" %.1f s" % (time.time() - t0), flush=True)
            # the rows at once, so a run cut short by a time limit keeps what it measured
            for line in harness.format_table(new, ctx.copy_gbs)[2:]:
                print("    " + line, flush=True)
        except Skip as e:
            skipped.append("skipped: %s (%s)" % (name, e))
            print(" skipped: %s" % e, flush=True)
        except Exception as e:  # a failed workload is reported, the others still run
            failed.append(name)
            traceback.print_exc()
            r = Row(name, "", note="FAILED: %s" % str(e).splitlines()[0][:200] if str(e) else "FAILED")
            r.failed = True
            rows.append(r)
            print(" FAILED", flush=True)
        finally:
            if torch_cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    skipped.extend(W.pending_lines(U.LIB))

    section = render(U, ctx, gpu, rows, skipped, reps, time.time() - t_start, args.deterministic)
    print()
    print(section)
    out = args.out if args.out else (None if dry else os.path.join(REPO, "docs", "benchmarks.md"))
    if out and not args.no_write:
        harness.update_docs(out, gpu, section)
        print("wrote the %s section of %s" % (gpu, out))
    return 1 if failed else 0


def render(U, ctx, gpu, rows, skipped, reps, seconds, deterministic=False):
    torch = ctx.torch
    lines = ["## %s — %s" % (gpu, harness.today()), ""]
    who = "minitorch %s (commit %s)" % (U.LIB.mt_version().decode(), harness.git_commit(REPO))
    if deterministic:
        who += " with mt_set_deterministic(1)"
    if torch is not None:
        who += ", PyTorch %s%s" % (torch.__version__, " (CUDA %s)" % torch.version.cuda if ctx.torch_cuda else " (CPU)")
    else:
        who += ", PyTorch not available"
    if ctx.torch_cuda and ctx.timer.mt_stream() is not None:
        how = ("both timed with CUDA events around a loop of launches, recorded on the stream each library "
               "queues its work on (minitorch's through mt_study_stream)")
    elif ctx.torch_cuda:
        how = "PyTorch timed with CUDA events, minitorch with the wall clock around mt_synchronize()-bracketed loops"
    else:
        how = "both timed with the wall clock"
    lines.append("%s, Python %s. Median of %d repetitions after warm-up; %s; TF32 off in both; "
                 "ratio = PyTorch time / minitorch time (above 1: minitorch is faster)." % (
                     who, platform.python_version(), reps, how))
    if ctx.copy_gbs:
        lines.append("Copy bandwidth (read + write), the ceiling of the bandwidth-bound rows: %.0f GB/s, "
                     "measured with %s on %s." % (ctx.copy_gbs, ctx.copy_source, ctx.elem_shape()))
    lines.append("The GEMM rows' % column is against cuBLAS on the same product and precision in the same run, "
                 "as each row's note says.")
    lines.append("")
    lines.extend(harness.format_table(rows, ctx.copy_gbs))
    lines.append("")
    for s in skipped:
        lines.append("- " + s)
    lines.append("")
    lines.append("`make bench` took %.0f s." % seconds)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
