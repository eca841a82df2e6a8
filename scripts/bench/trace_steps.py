#!/usr/bin/env python3
"""trace_steps.py - where the GPU time of a benchmark step goes: each kernel's time, and the idle
time between kernels, of the fused forward+backward steps that `make bench` times, traced with
PyTorch's profiler (CUPTI sees every kernel of the process, minitorch's stream included).

    python3 scripts/bench/trace_steps.py [--steps bias-gelu-bwd,add-ln-bwd,ln-bwd,ce] [--iters 20]

For each step and shape it prints: the step's span (first kernel start to last kernel end, per
step), the kernels' summed time, the idle rest, and a line per kernel name (launches per step,
mean µs). Needs a CUDA build (MINITORCH_LIB) and PyTorch with CUDA.
"""
import argparse
import json
import os
import sys
import tempfile
from ctypes import c_double, c_int64

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))


from harness import positive_int  # noqa: E402

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="bias-gelu-bwd,add-ln-bwd,ln-bwd,ce")
    ap.add_argument("--iters", type=positive_int, default=20)
    return ap.parse_args(argv[1:])


class Ctx:
    """What the benchmark's input makers read of run.py's context: the device."""
    def __init__(self, device):
        self.device = device


def steps_of(names, T):
    """(label, input shapes, mt_ function, its extra arguments) for each requested step and shape."""
    out = []
    for name in names:
        if name == "bias-gelu-bwd":
            for r, c in T.FUSION_SHAPES:
                out.append(("bias+GELU fwd+bwd %dx%d" % (r, c), [(r, c), (c,)], "mt_bias_act", (2,)))
        elif name == "add-ln-bwd":
            for r, c in T.FUSION_SHAPES:
                out.append(("add+LN fwd+bwd %dx%d" % (r, c), [(r, c), (r, c), (c,), (c,)], "mt_add_layer_norm",
                            (c_double(T.LN_EPS),)))
        elif name == "ln-bwd":
            for r, c in ((65536, 1024), (8192, 32768)):
                out.append(("LN fwd+bwd %dx%d" % (r, c), [(r, c), (c,), (c,)], "mt_layer_norm",
                            (c_double(T.LN_EPS),)))
        elif name == "ce":
            out.append(("cross-entropy fwd+bwd 65536x1024", [(65536, 1024)], "mt_cross_entropy", ()))
        else:
            raise SystemExit("trace_steps.py: unknown step %r" % name)
    return out


def main(argv):
    args = parse_args(argv)
    import abi_util as U
    import workloads as W
    import workloads_classify as C
    import workloads_transformer as T
    import torch
    from torch.profiler import ProfilerActivity, profile
    if not U.HAVE_CUDA or not torch.cuda.is_available():
        print("trace_steps.py: needs a CUDA build and a GPU", file=sys.stderr)
        return 2
    sync = lambda: U.check(U.LIB.mt_synchronize(), "mt_synchronize")  # noqa: E731
    ctx = Ctx(U.MT_CUDA)
    for label, shapes, fn, extra in steps_of(args.steps.split(","), T):
        ins = [W.mt_randn(ctx, s, 10 + i) for i, s in enumerate(shapes)]
        handles = list(ins)
        try:
            if fn == "mt_cross_entropy":
                n, c = shapes[0]
                tgt, _ = C._mt_targets(ctx, n, c, 6)
                handles.append(tgt)
                U.set_requires_grad(ins[0], 1)

                def step():
                    loss = U.call("mt_cross_entropy", ins[0], tgt)
                    U.check(U.LIB.mt_backward(loss), "mt_backward")
                    U.release(loss)
                    U.check(U.LIB.mt_tensor_clear_grad(ins[0]), "mt_tensor_clear_grad")
            else:
                for h in ins:
                    U.set_requires_grad(h, 1)

                def step():
                    T._mt_loss_step(fn, ins, extra, True)
            for _ in range(3):
                step()
            sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.iters):
                    step()
                sync()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trace.json")
                prof.export_chrome_trace(path)
                with open(path) as f:
                    events = json.load(f)["traceEvents"]
            kern = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
                          key=lambda e: e["ts"])
            if not kern:
                print("%s: no kernels traced" % label)
                continue
            span = kern[-1]["ts"] + kern[-1]["dur"] - kern[0]["ts"]
            busy = sum(e["dur"] for e in kern)
            per = {}  # kernel name -> (launches, summed us), in order of first launch
            for e in kern:
                k = e["name"][:90]
                cnt, tot = per.get(k, (0, 0.0))
                per[k] = (cnt + 1, tot + e["dur"])
            gaps = sorted(b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(kern, kern[1:]))
            print("%s: span %.1f us/step, kernels %.1f us/step, idle %.1f us/step; gaps median %.1f max %.1f us"
                  % (label, span / args.iters, busy / args.iters, (span - busy) / args.iters,
                     gaps[len(gaps) // 2] if gaps else 0, gaps[-1] if gaps else 0))
            for k, (cnt, tot) in per.items():
                print("    %5.2f x %8.1f us  %s" % (cnt / args.iters, tot / cnt, k))
        finally:
            W.release_each(handles)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
