#!/usr/bin/env python3
"""run_c_demos.py BUILD_DIR - runs the C programs of frontends/c and checks their output.

  xor           Linear(2,4) -> Sigmoid -> Linear(4,1), MSE, SGD lr 0.5, 5000 epochs: a loss line
                every 500 epochs ("epoch  500  loss 0.2491"), 4 prediction lines, "final loss X"
                with X < 0.01
  fill          a 4x4 tensor of 3.14 on the default device: sixteen values equal to 3.14
  matmul_check  128x64 @ 64x128 against a CPU triple loop: "max abs error E" with E < 1e-4
  hand_mlp      Linear(2,3) -> Sigmoid -> Linear(3,1) with hand-set weights on [[1,2],[3,4]]:
                "output v0 v1", each within 1e-5 of the value computed here

  xor's arguments  "xor 1000 --no-graph" (and --eager) trains 1000 epochs: loss lines up to
                epoch 1000; a word that is neither an epoch count nor an option ("--no-grahp",
                "0", "12x"), or a second count, exits 2 with a usage line on stderr, training
                nothing (a loss that does not fall below 0.01 is status 1)

Every program must exist (they are deliverables), exit 0 and finish within the time limit.
The device is the programs' default (MT_DEVICE=cpu|cuda is passed through).
Exit status: 0 when every check passes, 1 otherwise.
"""
import math
import os
import re
import subprocess
import sys

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
TIMEOUT_S = 600


class CheckFailed(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def hand_mlp_reference():
    """y = sigmoid(x W1^T + b1) W2^T + b2 with weights [out, in], on x = [[1,2],[3,4]]."""
    x = [[1.0, 2.0], [3.0, 4.0]]
    w1 = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
    b1 = [0.1, 0.2, 0.3]
    w2 = [[0.7, 0.8, 0.9]]
    b2 = [0.1]
    out = []
    for row in x:
        h = [sigmoid(sum(row[i] * w1[o][i] for i in range(2)) + b1[o]) for o in range(3)]
        out.append(sum(h[o] * w2[0][o] for o in range(3)) + b2[0])
    return out


def check_xor(out):
    losses = [(int(m.group(1)), float(m.group(2)))
              for m in re.finditer(r"^\s*epoch\s+(\d+)\s+loss\s+(%s)\s*$" % NUM, out, re.M | re.I)]
    expect(losses, "no 'epoch N loss L' lines")
    epochs = [e for e, _ in losses]
    expect(all(e % 500 == 0 for e in epochs), "loss lines not every 500 epochs: %s" % epochs)
    expect([e for e in epochs if e > 0] == list(range(500, 5001, 500)),
           "expected loss lines at epochs 500, 1000, ..., 5000, got %s" % epochs)
    expect(all(math.isfinite(l) for _, l in losses), "non-finite loss: %s" % losses)
    m = re.search(r"^\s*final loss\s+(%s)\s*$" % NUM, out, re.M | re.I)
    expect(m, "no 'final loss X' line")
    final = float(m.group(1))
    expect(final < 0.01, "final loss %g is not below 0.01" % final)
    # the prediction lines: the lines after the last loss line and before 'final loss' that carry
    # the two inputs and a prediction, e.g. "xor(0, 1) = 0.9712 (target 1)"
    lines = out[:m.start()].splitlines()
    last_epoch = max(i for i, l in enumerate(lines) if re.match(r"^\s*epoch\s+\d+", l, re.I))
    preds = [l for l in lines[last_epoch + 1:] if re.search(r"\d", l)]
    expect(len(preds) == 4, "expected 4 prediction lines, got %d: %r" % (len(preds), preds))
    seen = set()
    for line in preds:
        nums = re.findall(NUM, line)
        expect(len(nums) >= 3, "prediction line without inputs and a value: %r" % line)
        a, b = float(nums[0]), float(nums[1])
        expect(a in (0.0, 1.0) and b in (0.0, 1.0), "prediction line does not start with the inputs: %r" % line)
        after_eq = re.findall(NUM, line.split("=", 1)[1]) if "=" in line else nums[2:]
        pred = float(after_eq[0])
        want = float(int(a) ^ int(b))
        expect(abs(pred - want) < 0.5, "xor(%d, %d) predicted %g, want %g: %r" % (a, b, pred, want, line))
        seen.add((a, b))
    expect(len(seen) == 4, "the 4 predictions do not cover the 4 inputs: %s" % sorted(seen))
    return "final loss %g, loss lines at %s" % (final, epochs)


def check_fill(out):
    decimals = [float(t) for t in re.findall(r"[-+]?\d*\.\d+(?:[eE][-+]?\d+)?", out)]
    close = [v for v in decimals if abs(v - 3.14) <= 1e-5]
    expect(len(close) == 16, "expected sixteen values equal to 3.14, found %d" % len(close))
    others = [v for v in decimals if abs(v - 3.14) > 1e-5]
    expect(not others, "values other than 3.14 printed: %s" % others)
    return "sixteen values of 3.14"


def check_matmul(out):
    m = re.search(r"max abs error\s+(%s)" % NUM, out, re.I)
    expect(m, "no 'max abs error E' line")
    err = float(m.group(1))
    expect(err < 1e-4, "max abs error %g is not below 1e-4" % err)
    return "max abs error %g" % err


def check_hand_mlp(out):
    m = re.search(r"^\s*output\s+(%s)\s+(%s)\s*$" % (NUM, NUM), out, re.M | re.I)
    expect(m, "no 'output v0 v1' line")
    got = [float(m.group(1)), float(m.group(2))]
    want = hand_mlp_reference()
    for i, (g, w) in enumerate(zip(got, want)):
        expect(abs(g - w) <= 1e-5, "output %d is %.9g, expected %.9g (|diff| %.3g > 1e-5)" % (i, g, w, abs(g - w)))
    return "outputs %s match %s" % (got, ["%.7f" % w for w in want])


DEMOS = [("xor", check_xor), ("fill", check_fill), ("matmul_check", check_matmul), ("hand_mlp", check_hand_mlp)]


def run_demo(build_dir, name, check):
    exe = os.path.join(build_dir, name)
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise CheckFailed("%s not found: frontends/c/%s.c is a required demo (build it with `make`)" % (exe, name))
    try:
        proc = subprocess.run([exe], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CheckFailed("did not finish within %d s" % TIMEOUT_S)
    if proc.returncode != 0:
        raise CheckFailed("exit status %d\n--- stdout\n%s--- stderr\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    try:
        return check(proc.stdout)
    except CheckFailed as e:
        raise CheckFailed("%s\n--- stdout\n%s" % (e, proc.stdout))


def check_xor_arguments(build_dir):
    exe = os.path.join(build_dir, "xor")
    for opt in ("--no-graph", "--eager"):
        proc = subprocess.run([exe, "1000", opt], capture_output=True, text=True, timeout=TIMEOUT_S)
        expect(proc.returncode == 0, "xor 1000 %s: exit status %d\n%s" % (opt, proc.returncode, proc.stderr))
        epochs = [int(m.group(1)) for m in re.finditer(r"^\s*epoch\s+(\d+)\s+loss", proc.stdout, re.M | re.I)]
        expect(epochs and max(epochs) == 1000, "xor 1000 %s: loss lines at epochs %s, want the last at 1000"
               % (opt, epochs))
    for bad in ("--no-grahp", "0", "12x", "", ["1000", "5"]):
        bad = bad if isinstance(bad, list) else [bad]
        proc = subprocess.run([exe] + bad, capture_output=True, text=True, timeout=TIMEOUT_S)
        expect(proc.returncode == 2, "xor %r: exit status %d, want 2" % (bad, proc.returncode))
        expect("usage: xor" in proc.stderr and proc.stdout == "",
               "xor %r: want a usage line on stderr and no training; stdout %r stderr %r"
               % (bad, proc.stdout, proc.stderr))
    return "1000 epochs with --no-graph and --eager; 5 bad argument lists refused"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    build_dir = argv[1]
    failed = 0
    print("C demos in %s (MT_DEVICE=%s)" % (build_dir, os.environ.get("MT_DEVICE", "(default)")))
    for name, check in DEMOS:
        try:
            summary = run_demo(build_dir, name, check)
            print("  PASS %-13s %s" % (name, summary))
        except CheckFailed as e:
            failed += 1
            print("  FAIL %-13s %s" % (name, e))
    try:
        print("  PASS %-13s %s" % ("xor args", check_xor_arguments(build_dir)))
    except CheckFailed as e:
        failed += 1
        print("  FAIL %-13s %s" % ("xor args", e))
    print("C demos: %d passed, %d failed" % (len(DEMOS) + 1 - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
