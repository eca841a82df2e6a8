#!/usr/bin/env python3
"""gemm_study.py - the float32 products of a training step on the 3xTF32 tensor-core kernel
(backend/cuda/gemm_f32.cu) against cuBLAS's float32 GEMM, both through the library's dispatch
(the internal hooks mt_study_gemm_f32 and mt_study_matmul_run), and against torch.matmul
(float32, TF32 off), in one process on one GPU.

  python3 scripts/bench/gemm_study.py [--reps N] [--iters N] [--shapes gpt|all|shortk] [--tiles i,j]

Shapes: the twelve products of char-GPT large's Linears at batch 32 (8192 token rows, d 128: the
forward x W^T, the input gradient dy W and the weight gradient dy^T x of the qkv, projection, fc1
and fc2 layers), three of the small preset (4096 rows, d 64), the first layers of the MNIST MLP
(784-128) and CNN (Linear(784, 64)) at batch 64, and 4096^3. The total is char-GPT's.

Each product is checked first: relative error ||c - ref|| / ||ref|| against torch in float64,
for both selections (printed). Times are the median over --reps of --iters back-to-back products,
between CUDA events on the library's stream (minitorch) or PyTorch's (torch.matmul into a
preallocated output).
"""
import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

# (label, m, n, k, ta, tb): c (m, n) = op(a) (m, k) @ op(b) (k, n)
GPT_LARGE = []
for _name, _out, _in in (("qkv", 384, 128), ("proj", 128, 128), ("fc1", 512, 128), ("fc2", 128, 512)):
    GPT_LARGE += [("large %s x W^T" % _name, 8192, _out, _in, 0, 1),
                  ("large %s dy W" % _name, 8192, _in, _out, 0, 0),
                  ("large %s dy^T x" % _name, _out, _in, 8192, 1, 0)]
GPT_SMALL = [("small qkv x W^T", 4096, 192, 64, 0, 1), ("small fc1 dy W", 4096, 64, 256, 0, 0),
             ("small fc1 dy^T x", 256, 64, 4096, 1, 0)]
MLP = [("mlp fc1 x W^T", 64, 128, 784, 0, 1), ("mlp fc1 dy^T x", 128, 784, 64, 1, 0),
       ("cnn fc x W^T", 64, 64, 784, 0, 1)]
SQUARE = [("square", 4096, 4096, 4096, 0, 0)]
# Short-k products with outputs from 2^22 to 2^26 elements, where pick_tile's k <= 64 rule chooses
# the wgmma kernel's 64 x 64 tile with 2 stages over the 64 x 128 or 128 x 128 the output's size
# would take: time them with --shapes shortk --tiles 9,6,10 (those three tiles forced).
SHORT_K = []
for _m, _n, _k in ((2048, 2048, 64), (4096, 4096, 32), (4096, 4096, 64), (8192, 8192, 16), (8192, 8192, 64),
                   (16384, 4096, 64)):
    SHORT_K += [("shortk NN", _m, _n, _k, 0, 0), ("shortk NT", _m, _n, _k, 0, 1), ("shortk TN", _m, _n, _k, 1, 0)]


from harness import positive_int  # noqa: E402

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=positive_int, default=15)
    ap.add_argument("--iters", type=positive_int, default=20)
    ap.add_argument("--shapes", default="all", choices=("gpt", "all", "shortk"))
    ap.add_argument("--tiles", default="", help="also time the kernel with these tiles forced (0,1,...: "
                    "mt_study_gemm_f32 variant 3 + tile), printed after the error columns")
    args = ap.parse_args(argv)
    import harness
    ready = harness.study_gpu("gemm_study.py", "mt_study_gemm_f32", "mt_study_matmul_run")
    if ready is None:
        return 2
    U, torch, (sel, run) = ready
    lib = U.LIB
    sel.restype, sel.argtypes = ctypes.c_int64, [ctypes.c_int64]
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    run.restype, run.argtypes = ctypes.c_int, [vp, vp, vp, i64, i64, i64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    torch.backends.cuda.matmul.allow_tf32 = False
    timer = harness.Timer(lib, torch, True)
    gpu = lib.mt_device_name(U.MT_CUDA).decode()
    shapes = (SHORT_K if args.shapes == "shortk" else
              GPT_LARGE + GPT_SMALL + (MLP + SQUARE if args.shapes == "all" else []))
    print("gemm_study on %s: float32 products, us (median of %d x %d), TF32 off in torch" % (gpu, args.reps,
                                                                                              args.iters))
    print("%-22s %5s %5s %5s %2s %8s %8s %8s %7s %7s %9s %9s" % ("product", "m", "n", "k", "op", "3xTF32",
                                                                  "cuBLAS", "torch", "torch/", "TFLOP/s",
                                                                  "err 3x", "err cuBLAS"))
    tiles = [int(x) for x in args.tiles.split(",") if x]
    totals = [0.0, 0.0, 0.0]
    tile_totals = [0.0] * len(tiles)
    for label, m, n, k, ta, tb in shapes:
        g = torch.Generator(device="cuda").manual_seed(m * 131 + n * 17 + k)
        a = torch.randn((k, m) if ta else (m, k), device="cuda", generator=g)
        b = torch.randn((n, k) if tb else (k, n), device="cuda", generator=g)
        opa, opb = (a.t() if ta else a), (b.t() if tb else b)
        c = torch.empty(m, n, device="cuda")
        ref = opa.double() @ opb.double()
        torch.cuda.synchronize()
        errs, times = [], []
        for variant in (0, 1):
            if sel(variant) != 0:
                raise RuntimeError("mt_study_gemm_f32(%d) failed" % variant)
            c.fill_(float("nan"))
            torch.cuda.synchronize()
            fn = lambda: run(c.data_ptr(), a.data_ptr(), b.data_ptr(), m, n, k, ta, tb, U.MT_F32)  # noqa: E731
            if fn() != 0:
                raise RuntimeError("mt_study_matmul_run: %s" % U.last_error())
            lib.mt_synchronize()
            errs.append(float((c.double() - ref).norm() / ref.norm()))
            times.append(timer.mt(fn, args.iters, args.reps) * 1e3)
        tile_us = []
        for tile in tiles:
            if sel(3 + tile) != 0:
                raise RuntimeError("mt_study_gemm_f32(%d) failed" % (3 + tile))
            tile_us.append(timer.mt(lambda: run(c.data_ptr(), a.data_ptr(), b.data_ptr(), m, n, k, ta, tb, U.MT_F32),
                                    args.iters, args.reps) * 1e3)
        sel(0)
        t_us = timer.torch_time(lambda: torch.matmul(opa, opb, out=c), args.iters, args.reps) * 1e3
        if label.startswith("large") or label.startswith("small"):
            totals = [x + y for x, y in zip(totals, times + [t_us])]
            tile_totals = [x + y for x, y in zip(tile_totals, tile_us)]
        flops = 2.0 * m * n * k
        print("%-22s %5d %5d %5d %2s %8.1f %8.1f %8.1f %7.2f %7.1f %9.2e %9.2e" % (
            label, m, n, k, ("T" if ta else "N") + ("T" if tb else "N"), times[0], times[1], t_us,
            t_us / times[0], flops / times[0] * 1e-6, errs[0], errs[1]) +
              "".join(" t%d %7.1f" % (tile, us) for tile, us in zip(tiles, tile_us)))
    if totals[0] > 0:  # the char-GPT products were among the shapes
        print("%-22s %23s %8.1f %8.1f %8.1f %7.2f   (char-GPT's)" % ("total", "", totals[0], totals[1],
                                                                            totals[2], totals[2] / totals[0]) +
              "".join(" t%d %7.1f" % (tile, us) for tile, us in zip(tiles, tile_totals)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
