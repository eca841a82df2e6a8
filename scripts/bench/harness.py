"""harness - timing, result rows, the markdown table and docs/benchmarks.md for `make bench`.

Timing rules (PERF.md): warm-up first, then the median of several repetitions, each
repetition a loop of iterations whose mean is taken.
  PyTorch on CUDA:  torch.cuda.Event pairs around the loop (elapsed_time, ms).
  minitorch on CUDA: the same, with the events recorded on the stream minitorch queues its
                    work on (mt_study_stream, wrapped as a torch.cuda.ExternalStream), so both
                    columns are measured one way. Without torch: wall clock around a loop
                    bracketed by mt_synchronize(), which also counts the first launch's and the
                    final synchronize's latency (about 1 us per call in a loop of 20 launches
                    of 100 us).
  CPU (--dry-run):  wall clock for both.
"""
import ctypes
import datetime
import os
import re
import statistics
import subprocess
import sys
import time


def positive_int(text):
    """argparse type of the counts (repetitions, iterations, buffers, steps): an integer >= 1."""
    import argparse
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %d" % v)
    return v


def study_gpu(script, *hooks):
    """(abi_util, torch, [the library's functions named in hooks]) for a study script that needs a
    GPU and PyTorch with CUDA, or None after saying on stderr, in the script's name, what is
    missing."""
    import abi_util as U
    try:
        import torch
    except ImportError:
        print("%s: needs PyTorch with CUDA" % script, file=sys.stderr)
        return None
    if not U.HAVE_CUDA or not torch.cuda.is_available():
        print("%s: needs a GPU" % script, file=sys.stderr)
        return None
    fns = [getattr(U.LIB, name, None) for name in hooks]
    missing = [name for name, fn in zip(hooks, fns) if fn is None]
    if missing:
        print("%s: %s does not export %s" % (script, U.lib_path(), ", ".join(missing)), file=sys.stderr)
        return None
    return U, torch, fns


class Skip(Exception):
    """A benchmark that cannot run here (an op the library lacks, no torch, ...)."""


class Row:
    """One line of the table. Times in ms; work_bytes or work_flops give the throughput.
    ceiling_ms, where set, is the time of the ceiling for this same work measured in the same
    run (the GEMM rows: cuBLAS at the row's precision); the % column is then against it."""

    def __init__(self, work, shape, mt_ms=None, torch_ms=None, work_bytes=None, work_flops=None, note="",
                 ceiling_ms=None):
        self.work, self.shape = work, shape
        self.mt_ms, self.torch_ms = mt_ms, torch_ms
        self.work_bytes, self.work_flops = work_bytes, work_flops
        self.note = note
        self.ceiling_ms = ceiling_ms
        self.failed = False

    def ratio(self):
        if self.mt_ms and self.torch_ms:
            return self.torch_ms / self.mt_ms
        return None

    def throughput(self, ms):
        """(value, unit) for a time in ms: GB/s for bytes, TFLOP/s for flops."""
        if not ms:
            return None, ""
        if self.work_bytes:
            return self.work_bytes / (ms * 1e-3) / 1e9, "GB/s"
        if self.work_flops:
            return self.work_flops / (ms * 1e-3) / 1e12, "TFLOP/s"
        return None, ""


class Timer:
    def __init__(self, lib, torch=None, torch_cuda=False):
        self.lib, self.torch, self.torch_cuda = lib, torch, torch_cuda

    def mt(self, fn, iters, reps, warmup=2):
        """Median ms per call of fn() (minitorch work): CUDA events on minitorch's stream where
        PyTorch's CUDA is here, else wall clock between mt_synchronize()s."""
        stream = self.mt_stream()
        return self._median_ms(fn, iters, reps, warmup, self._mt_sync, stream is not None, stream)

    def mt_stream(self):
        """minitorch's CUDA stream as a torch.cuda.ExternalStream, or None (no torch CUDA, or a
        library without the stream hook)."""
        if not self.torch_cuda:
            return None
        if not hasattr(self, "_stream"):
            self._stream = None
            hook = getattr(self.lib, "mt_study_stream", None)
            ptr = ctypes.c_void_p()
            if hook is not None and hook(ctypes.byref(ptr)) == 0 and ptr.value:
                self._stream = self.torch.cuda.ExternalStream(ptr.value)
        return self._stream

    def torch_time(self, fn, iters, reps, warmup=2):
        """Median ms per call of fn() (PyTorch work): CUDA events on a GPU, wall clock on the CPU."""
        return self._median_ms(fn, iters, reps, warmup, self._torch_sync, self.torch_cuda, None)

    def _median_ms(self, fn, iters, reps, warmup, sync, events, stream):
        """Median over reps of the ms per call of iters back-to-back fn() calls: timed by CUDA
        events recorded on stream (None: PyTorch's current stream) when events, else by the wall
        clock up to sync()."""
        for _ in range(warmup):
            fn()
        sync()
        times = []
        for _ in range(reps):
            sync()
            if events:
                start = self.torch.cuda.Event(enable_timing=True)
                end = self.torch.cuda.Event(enable_timing=True)
                start.record(stream)
                for _ in range(iters):
                    fn()
                end.record(stream)
                sync()
                end.synchronize()
                times.append(start.elapsed_time(end) / iters)
            else:
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                sync()
                times.append((time.perf_counter() - t0) * 1e3 / iters)
        return statistics.median(times)

    def _mt_sync(self):
        st = self.lib.mt_synchronize()
        if st != 0:
            raise RuntimeError("mt_synchronize failed: %s" % self.lib.mt_last_error().decode())

    def _torch_sync(self):
        if self.torch_cuda:
            self.torch.cuda.synchronize()


def fmt_ms(ms):
    if ms is None:
        return "—"
    if ms >= 100:
        return "%.0f ms" % ms
    if ms >= 1:
        return "%.2f ms" % ms
    return "%.1f µs" % (ms * 1e3)


def fmt_num(v):
    if v is None:
        return "—"
    return "%.0f" % v if v >= 100 else ("%.1f" % v if v >= 10 else "%.2f" % v)


def percent_of_ceiling(r, copy_gbs):
    """minitorch's share of the row's ceiling as a table cell: the measured copy bandwidth for a
    row in GB/s, the row's own ceiling_ms (the GEMM rows' cuBLAS) where set; else a dash."""
    if r.ceiling_ms and r.mt_ms:
        return "%.0f%%" % (100 * r.ceiling_ms / r.mt_ms)
    mt_tp, unit = r.throughput(r.mt_ms)
    if unit == "GB/s" and mt_tp and copy_gbs:
        return "%.0f%%" % (100 * mt_tp / copy_gbs)
    return "—"


def format_table(rows, copy_gbs):
    """The markdown table: work, shape, minitorch, PyTorch, ratio (PyTorch time / minitorch time),
    throughput (minitorch / PyTorch), % of the ceiling (minitorch against the measured copy
    bandwidth, or against cuBLAS for the GEMM rows), notes."""
    out = ["| work | shape | minitorch | PyTorch | ratio | GB/s or TFLOP/s (minitorch / PyTorch) "
           "| % of copy BW or GEMM ceiling | notes |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = r.ratio()
        mt_tp, unit = r.throughput(r.mt_ms)
        pt_tp, unit2 = r.throughput(r.torch_ms)
        unit = unit or unit2
        tp = "—" if unit == "" else "%s / %s %s" % (fmt_num(mt_tp), fmt_num(pt_tp), unit)
        pct = percent_of_ceiling(r, copy_gbs)
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r.work, r.shape, fmt_ms(r.mt_ms), fmt_ms(r.torch_ms),
            "%.2f×" % ratio if ratio else "—", tp, pct, r.note.replace("|", "/")))
    return out


def git_commit(repo):
    """HEAD's short hash (+dirty), or $MT_BENCH_COMMIT when set (a copy of the tree whose .git is
    not the one it was made from)."""
    if os.environ.get("MT_BENCH_COMMIT"):
        return os.environ["MT_BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def section_markers(gpu):
    key = re.sub(r"[^A-Za-z0-9 ._()-]", "_", gpu)
    return "<!-- make bench: begin %s -->" % key, "<!-- make bench: end %s -->" % key


DOC_HEADER = """# Benchmarks

`make bench` (scripts/bench/run.py) writes one section per GPU below, replacing the previous
section of the same GPU. Every ratio is PyTorch time / minitorch time for the same work measured in
the same process on the same GPU; never compare numbers across GPUs.
"""


def update_docs(path, gpu, section_text):
    """Writes section_text between this GPU's markers in path, replacing an earlier one; appends
    when there is none; creates the file when absent. Text outside the markers is kept."""
    begin, end = section_markers(gpu)
    block = "%s\n%s\n%s\n" % (begin, section_text.rstrip("\n"), end)
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if not text.strip():
        text = DOC_HEADER
    i, j = text.find(begin), text.find(end)
    if i >= 0 and j > i:
        rest = text[j + len(end):]
        text = text[:i] + block + (rest[1:] if rest.startswith("\n") else rest)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
