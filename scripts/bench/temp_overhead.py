#!/usr/bin/env python3
"""temp_overhead.py - host time per eager call of ops whose CUDA launchers take temporaries
(reduction partials, CUB's workspace), through the Python package.

  MINITORCH_LIB=build/libminitorch.so python3 scripts/bench/temp_overhead.py [--calls N] [--reps R]

Each row: N calls queued back to back between two synchronizes, wall clock, median of R; the
per-call time is the host path (the GPU finishes each of these small reductions in a few µs,
under the host's time per call). Prints one line per op: name, shape, µs per call.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontends", "python"))
import minitorch as mt  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import positive_int  # noqa: E402

def per_call(fn, calls, reps):
    for _ in range(50):
        fn()
    mt.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        mt.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=positive_int, default=5000)
    ap.add_argument("--reps", type=positive_int, default=7)
    a = ap.parse_args()
    if not mt.cuda.is_available():
        print("temp_overhead: no usable GPU", file=sys.stderr)
        return 2
    flat = mt.rand(1 << 20, device="cuda")
    wide = mt.rand(8, 65536, device="cuda")
    tall = mt.rand(65536, 8, device="cuda")
    small = mt.rand(4, device="cuda")
    rows = [
        ("sum, all elements (block partials)", "1M f32", lambda: flat.sum()),
        ("sum over dim 1 (chunk partials)", "8x65536 f32", lambda: wide.sum(1)),
        ("sum over dim 0 (split partials)", "65536x8 f32", lambda: tall.sum(0)),
        ("sum, all elements (one block, no temporary)", "4 f32", lambda: small.sum()),
    ]
    for name, shape, fn in rows:
        print("%-46s %-12s %6.2f us/call" % (name, shape, per_call(fn, a.calls, a.reps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
