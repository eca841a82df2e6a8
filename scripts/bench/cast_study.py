#!/usr/bin/env python3
"""cast_study.py - the CUDA cast kernels (backend/cuda/permute.cu) against Tensor.to, through the
internal hook mt_study_cast, in one process on one GPU: the measurements behind kCastVariant.

  python3 scripts/bench/cast_study.py [--reps N] [--iters N] [--n N]

Variants: 0 production, 1 one element a thread (cast_kernel), 2-4 chunks of up to 8 elements a
thread (16 bytes of the narrower type) with U = 1, 2, 4 chunks loaded before they are stored, on
one wave of resident blocks (grid-stride), 5-7 the same with a block for every 256 x U chunks.
Pairs: float32 <-> bfloat16 and float16 (mixed precision's casts), float64 -> float32, int64 ->
float32, float32 -> uint8. Each variant's output is compared with Tensor.to's first (the same
values exactly, NaN's payload aside: no NaN is drawn). Times: median over --reps of --iters
back-to-back casts between CUDA events on the library's stream (minitorch) or PyTorch's; GB/s
counts the read and the write.
"""
import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

from harness import positive_int  # noqa: E402

VARIANTS = {0: "production", 1: "element a thread", 2: "chunk, U1, wave", 3: "chunk, U2, wave",
            4: "chunk, U4, wave", 5: "chunk, U1, full grid", 6: "chunk, U2, full grid", 7: "chunk, U4, full grid"}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=positive_int, default=15)
    ap.add_argument("--iters", type=positive_int, default=20)
    ap.add_argument("--n", type=positive_int, default=1 << 26, help="elements (default 64M)")
    args = ap.parse_args(argv)
    import harness
    ready = harness.study_gpu("cast_study.py", "mt_study_cast")
    if ready is None:
        return 2
    U, torch, (hook,) = ready
    lib = U.LIB
    vp, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    hook.restype, hook.argtypes = ctypes.c_int, [vp, vp, i64, i32, i32, i32]
    T = {U.MT_F32: torch.float32, U.MT_BF16: torch.bfloat16, U.MT_F16: torch.float16, U.MT_F64: torch.float64,
         U.MT_I64: torch.int64, U.MT_U8: torch.uint8}
    pairs = [(U.MT_F32, U.MT_BF16), (U.MT_BF16, U.MT_F32), (U.MT_F32, U.MT_F16), (U.MT_F16, U.MT_F32),
             (U.MT_F64, U.MT_F32), (U.MT_I64, U.MT_F32), (U.MT_F32, U.MT_U8)]
    timer = harness.Timer(lib, torch, True)
    n = args.n
    print("cast_study on %s: %d elements, us (median of %d x %d)" % (
        lib.mt_device_name(U.MT_CUDA).decode(), n, args.reps, args.iters))
    for src, dst in pairs:
        g = torch.Generator(device="cuda").manual_seed(src * 10 + dst)
        if dst == U.MT_U8:  # in range: torch's float -> uint8 is undefined past it, the library's wraps
            x = (torch.rand(n, device="cuda", generator=g) * 255).to(T[src])
        else:
            x = (torch.randn(n, device="cuda", generator=g) * 100).to(T[src])
        want = x.to(T[dst])
        out = torch.empty(n, device="cuda", dtype=T[dst])
        nbytes = n * (x.element_size() + out.element_size())
        t_us = timer.torch_time(lambda: x.to(T[dst]), args.iters, args.reps) * 1e3
        print("%s -> %s: PyTorch %.1f us (%.0f GB/s)" % (U.DTYPE_NAMES[src], U.DTYPE_NAMES[dst], t_us,
                                                         nbytes / t_us / 1e3))
        for v, name in VARIANTS.items():
            out.zero_()
            torch.cuda.synchronize()

            def fn():
                return hook(out.data_ptr(), x.data_ptr(), n, dst, src, v)
            if fn() != 0:
                raise RuntimeError("mt_study_cast(%d): %s" % (v, U.last_error()))
            lib.mt_synchronize()
            if not torch.equal(out, want):
                raise RuntimeError("mt_study_cast(%d) disagrees with Tensor.to" % v)
            us = timer.mt(fn, args.iters, args.reps) * 1e3
            print("  (%d) %-22s %8.1f us %6.0f GB/s  %.2fx PyTorch" % (v, name, us, nbytes / us / 1e3, t_us / us))
        del x, want, out
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
