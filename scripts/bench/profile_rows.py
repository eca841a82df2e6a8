#!/usr/bin/env python3
"""profile_rows.py - one call of each row kernel that misses its bandwidth goal, for Nsight
Compute: softmax 65536x1024 and 262144x128, layernorm forward 8192x32768, GELU backward 64M.

    ncu --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis \\
        -k 'regex:softmax|ln_fwd|gelu' python3 scripts/bench/profile_rows.py

Each op runs twice (the first call warms the pool); ncu's -c / --launch-skip pick the launches.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontends", "python"))
import minitorch as mt  # noqa: E402

F = mt.nn.functional


def main():
    dev = "cuda"
    for rows, cols in ((65536, 1024), (262144, 128)):
        x = mt.randn(rows, cols, device=dev)
        for _ in range(2):
            F.softmax(x, -1)
    x = mt.randn(8192, 32768, device=dev)
    w, b = mt.ones(32768, device=dev), mt.zeros(32768, device=dev)
    for _ in range(2):
        F.layer_norm(x, (32768,), w, b)
    x = mt.randn(1 << 26, device=dev, requires_grad=True)
    for _ in range(2):
        F.gelu(x, approximate="tanh").sum().backward()
    mt.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
