#!/usr/bin/env python3
"""gemm_pad_study.py - 16-bit products whose rows are not whole 16-byte groups, run by cuBLAS as
they are against the problem padded to multiples of 8 (backend/cuda/matmul.cu's padding()), both
through the library's dispatch (the internal hooks mt_study_gemm_pad and mt_study_matmul_run),
and against torch.matmul on the same operands, in one process on one GPU: the measurements behind
padding()'s rule (at least kPadMinMacs = 2^30 multiply-adds, each copied matrix's other size at
least kPadMinOther = 128).

  python3 scripts/bench/gemm_pad_study.py [--reps N] [--iters N] [--dtype bfloat16|float16]

Shapes: GPT-2's tied head at its vocabulary of 50257 (8192 token rows, d 768: the logits x W^T,
dx = dlogits W, dW = dlogits^T x); then, for each of those three forms (the odd size is C's row
length, the k both operands share, A's row length), products from 2^26 to 2^32 multiply-adds with
one odd size (1031), across the MAC threshold; and products where the copied matrix's other size is
32 to 256, across the other-size threshold.

Each product is checked first: relative error ||c - ref|| / ||ref|| against torch in float64 for
both selections (printed). Times are the median over --reps of --iters back-to-back products,
between CUDA events on the library's stream (minitorch) or PyTorch's (torch.matmul into a
preallocated output). Columns: "as is" (mt_study_gemm_pad(1)), "padded" (3: whatever the size),
"prod" (0: production's rule), torch, and as-is / padded.
"""
import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

from harness import positive_int  # noqa: E402

ODD = 1031
# (label, m, n, k, ta, tb): c (m, n) = op(a) (m, k) @ op(b) (k, n)
HEAD = [("head x W^T", 8192, 50257, 768, 0, 1), ("head dy W", 8192, 768, 50257, 0, 0),
        ("head dy^T x", 50257, 768, 8192, 1, 0)]
MACS = []
for _s in (256, 512, 1024, 2048, 4096):
    MACS += [("macs C odd", _s, ODD, _s, 0, 1), ("macs k odd", _s, _s, ODD, 0, 0), ("macs A odd", ODD, _s, _s, 1, 0)]
OTHER = []
for _o in (32, 64, 128, 256):
    # the copied matrix is A (8192 x 1031) in "A odd k", whose other size is n; C (8192 x 1031) in
    # "C odd", whose other size is k
    OTHER += [("other A odd k", 8192, _o, ODD, 0, 0), ("other C odd", 8192, ODD, _o, 0, 1)]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=positive_int, default=15)
    ap.add_argument("--iters", type=positive_int, default=10)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    args = ap.parse_args(argv)
    import harness
    ready = harness.study_gpu("gemm_pad_study.py", "mt_study_gemm_pad", "mt_study_matmul_run")
    if ready is None:
        return 2
    U, torch, (sel, run) = ready
    lib = U.LIB
    sel.restype, sel.argtypes = ctypes.c_int64, [ctypes.c_int64]
    vp, i64, cint = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    run.restype, run.argtypes = cint, [vp, vp, vp, i64, i64, i64, cint, cint, cint]
    tdt, mdt = (torch.bfloat16, U.MT_BF16) if args.dtype == "bfloat16" else (torch.float16, U.MT_F16)
    timer = harness.Timer(lib, torch, True)
    gpu = lib.mt_device_name(U.MT_CUDA).decode()
    print("gemm_pad_study on %s: %s products, us (median of %d x %d)" % (gpu, args.dtype, args.reps, args.iters))
    print("%-15s %6s %6s %6s %2s %9s %9s %9s %9s %7s %8s %9s %9s" % (
        "product", "m", "n", "k", "op", "as is", "padded", "prod", "torch", "as/pad", "MMACs", "err as is",
        "err pad"))
    try:
        for label, m, n, k, ta, tb in HEAD + MACS + OTHER:
            g = torch.Generator(device="cuda").manual_seed(m * 131 + n * 17 + k)
            a = torch.randn((k, m) if ta else (m, k), device="cuda", generator=g).to(tdt)
            b = torch.randn((n, k) if tb else (k, n), device="cuda", generator=g).to(tdt)
            opa, opb = (a.t() if ta else a), (b.t() if tb else b)
            c = torch.empty(m, n, device="cuda", dtype=tdt)
            ref = opa.double() @ opb.double()
            torch.cuda.synchronize()

            def fn():
                return run(c.data_ptr(), a.data_ptr(), b.data_ptr(), m, n, k, ta, tb, mdt)
            errs, times = {}, {}
            for variant in (1, 3, 0):
                if sel(variant) != 0:
                    raise RuntimeError("mt_study_gemm_pad(%d) failed" % variant)
                c.fill_(float("nan"))
                torch.cuda.synchronize()
                if fn() != 0:
                    raise RuntimeError("mt_study_matmul_run: %s" % U.last_error())
                lib.mt_synchronize()
                errs[variant] = float((c.double() - ref).norm() / ref.norm())
                times[variant] = timer.mt(fn, args.iters, args.reps) * 1e3
            sel(0)
            t_us = timer.torch_time(lambda: torch.matmul(opa, opb, out=c), args.iters, args.reps) * 1e3
            print("%-15s %6d %6d %6d %2s %9.1f %9.1f %9.1f %9.1f %7.2f %8.0f %9.2e %9.2e" % (
                label, m, n, k, ("T" if ta else "N") + ("T" if tb else "N"), times[1], times[3], times[0], t_us,
                times[1] / times[3], m * n * k * 1e-6, errs[1], errs[3]))
            del a, b, c, ref
    finally:
        sel(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
