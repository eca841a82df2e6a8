#!/usr/bin/env python3
"""profile_rows.py - calls of the row kernels that miss (or missed) their bandwidth goal, for
Nsight Compute: softmax 65536x1024 and 262144x128, layernorm forward 8192x32768, GELU backward
64M, cross-entropy forward+backward 65536x1024 and layernorm forward+backward 8192x32768.

    ncu --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis \\
        -k 'regex:softmax|ln_fwd|gelu' python3 scripts/bench/profile_rows.py [softmax,ln,gelu,ce,ln-bwd]

The argument picks the ops (all by default). Each op runs twice (the first call warms the
pool); ncu's -c / --launch-skip pick the launches.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "frontends", "python"))
import minitorch as mt  # noqa: E402

F = mt.nn.functional


def main(argv):
    dev = "cuda"
    known = ("softmax", "ln", "gelu", "ce", "ln-bwd")
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    ops = set((argv[1] if len(argv) > 1 else ",".join(known)).split(","))
    if not ops <= set(known):
        print("profile_rows.py: unknown ops %s (known: %s)" % (sorted(ops - set(known)), ",".join(known)),
              file=sys.stderr)
        return 2
    if "softmax" in ops:
        for rows, cols in ((65536, 1024), (262144, 128)):
            x = mt.randn(rows, cols, device=dev)
            for _ in range(2):
                F.softmax(x, -1)
    if "ln" in ops or "ln-bwd" in ops:
        x = mt.randn(8192, 32768, device=dev, requires_grad="ln-bwd" in ops)
        w = mt.ones(32768, device=dev, requires_grad="ln-bwd" in ops)
        b = mt.zeros(32768, device=dev, requires_grad="ln-bwd" in ops)
        for _ in range(2):
            y = F.layer_norm(x, (32768,), w, b)
            if "ln-bwd" in ops:
                y.sum().backward()
        del x, w, b, y
    if "gelu" in ops:
        x = mt.randn(1 << 26, device=dev, requires_grad=True)
        for _ in range(2):
            F.gelu(x, approximate="tanh").sum().backward()
        del x
    if "ce" in ops:
        x = mt.randn(65536, 1024, device=dev, requires_grad=True)
        t = (mt.rand(65536, device=dev) * 1024).long()
        for _ in range(2):
            F.cross_entropy(x, t).backward()
    mt.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
