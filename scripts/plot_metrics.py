#!/usr/bin/env python3
"""plot_metrics.py - turns a demo's metrics CSV into a PNG of its curves.

  scripts/plot_metrics.py out/mnist_mlp.csv                 -> out/mnist_mlp.png
  scripts/plot_metrics.py out/sales.csv -o sales.png --title "sales.tsv, SGD vs Adam"

The first column is the x axis (the epoch). Columns whose name contains "loss" go in the
left panel; accuracy, MAE and any other metric in the right one ("seconds" is left out).
Accuracies between 0 and 1 are drawn as percentages; losses that span more than 20x get a
log axis.

Set-up: matplotlib draws the plot (Agg backend). When this interpreter cannot import it,
the script re-runs itself under Debian's /usr/bin/python3 where python3-matplotlib is
installed, installing that package with apt-get first if needed (as root, or with sudo;
--no-install skips this). Without matplotlib, gnuplot is used, installed the same way
(apt-get install gnuplot-nox) unless --no-install.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

SYSTEM_PYTHON = "/usr/bin/python3"
REEXEC_FLAG = "MT_PLOT_METRICS_REEXEC"


def read_csv(path):
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        sys.exit("plot_metrics: cannot read %s: %s" % (path, e.strerror or e))
    if not rows:
        sys.exit("plot_metrics: %s is empty" % path)
    header, data = rows[0], []
    for i, r in enumerate(rows[1:], start=2):
        if not r:
            continue
        if len(r) != len(header):
            sys.exit("plot_metrics: %s:%d has %d values for %d columns" % (path, i, len(r), len(header)))
        try:
            data.append([float(v) for v in r])
        except ValueError:
            sys.exit("plot_metrics: %s:%d has a value that is not a number: %r" % (path, i, r))
    if not data:
        sys.exit("plot_metrics: %s has a header and no rows" % path)
    return header, data


def panels(header, data):
    """(left column indices, right column indices, {index: scale})."""
    left, right, scale = [], [], {}
    for j, name in enumerate(header[1:], start=1):
        low = name.lower()
        if low in ("seconds", "time", "time_s"):
            continue
        if "loss" in low:
            left.append(j)
        else:
            right.append(j)
            if "acc" in low and all(0 <= row[j] <= 1 for row in data):
                scale[j] = 100.0
    return left, right, scale


def wide_range(data, cols):
    """Positive values spanning more than 20x: a log axis shows the tail of the curve."""
    vals = [r[j] for r in data for j in cols]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > 20


def label(name, j, scale):
    return name + (" (%)" if scale.get(j) == 100.0 else "")


def plot_matplotlib(plt, header, data, out, title):
    left, right, scale = panels(header, data)
    n = (1 if left else 0) + (1 if right else 0) or 1
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4), squeeze=False)
    axes = list(axes[0])
    x = [r[0] for r in data]
    for cols, ax in zip([c for c in (left, right) if c], axes):
        for j in cols:
            ax.plot(x, [r[j] * scale.get(j, 1.0) for r in data], marker="o", markersize=3,
                    label=label(header[j], j, scale))
        ax.set_xlabel(header[0])
        ax.grid(True, alpha=0.3)
        ax.legend()
    if left:
        axes[0].set_ylabel("loss")
        if wide_range(data, left):
            axes[0].set_yscale("log")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_gnuplot(gnuplot, header, data, out, title):
    left, right, scale = panels(header, data)
    groups = [c for c in (left, right) if c]
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        for r in data:
            f.write(" ".join(repr(v) for v in r) + "\n")
        dat = f.name
    lines = ["set terminal png size %d,420" % (560 * max(1, len(groups))),
             "set output '%s'" % out.replace("'", "''"),
             "set grid", "set key left bottom",
             "set multiplot layout 1,%d%s" % (max(1, len(groups)),
                                              " title '%s'" % title.replace("'", "''").replace("_", "\\_") if title else "")]
    for cols in groups:
        lines.append("set xlabel '%s'" % header[0])
        lines.append("set logscale y" if cols is left and wide_range(data, left) else "unset logscale y")
        lines.append("plot " + ", ".join("'%s' using 1:($%d*%g) with linespoints title '%s'"
                                         % (dat, j + 1, scale.get(j, 1.0), label(header[j], j, scale).replace("_", "\\_"))
                                         for j in cols))
    lines.append("unset multiplot")
    try:
        subprocess.run([gnuplot], input="\n".join(lines) + "\n", text=True, check=True)
    finally:
        os.unlink(dat)


def apt_install(pkg):
    if not shutil.which("apt-get"):
        return False
    sudo = [] if os.geteuid() == 0 else (["sudo"] if shutil.which("sudo") else None)
    if sudo is None:
        return False
    print("plot_metrics: installing %s with apt-get" % pkg, file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = {"stdout": subprocess.DEVNULL}
    apt = sudo + ["apt-get", "-o", "DPkg::Lock::Timeout=300"]  # waits while another apt-get runs
    if subprocess.run(apt + ["install", "-y", "-q", pkg], env=env, **quiet).returncode == 0:
        return True
    subprocess.run(apt + ["update", "-q"], env=env, **quiet)
    return subprocess.run(apt + ["install", "-y", "-q", pkg], env=env, **quiet).returncode == 0


def system_python_has_matplotlib():
    return (os.path.exists(SYSTEM_PYTHON) and
            subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], stderr=subprocess.DEVNULL).returncode == 0)


def import_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def main(argv):
    p = argparse.ArgumentParser(description="Plot a metrics CSV (epoch, losses, accuracies) to a PNG.")
    p.add_argument("csv")
    p.add_argument("-o", "--out", help="PNG path (default: the CSV's path with .png)")
    p.add_argument("--title", default=None, help="figure title (default: the CSV's file name)")
    p.add_argument("--no-install", action="store_true", help="never apt-get install python3-matplotlib")
    p.add_argument("--backend", choices=["auto", "matplotlib", "gnuplot"], default="auto")
    a = p.parse_args(argv)
    out = a.out or os.path.splitext(a.csv)[0] + ".png"
    title = a.title if a.title is not None else os.path.basename(a.csv)
    header, data = read_csv(a.csv)

    if a.backend != "gnuplot":
        plt = import_matplotlib()
        if plt is None and os.environ.get(REEXEC_FLAG) != "1":
            # Set-up: Debian's matplotlib lives in the system interpreter's dist-packages.
            if not system_python_has_matplotlib() and not a.no_install and \
                    (a.backend == "matplotlib" or not shutil.which("gnuplot")):
                apt_install("python3-matplotlib")
            if system_python_has_matplotlib() and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
                env = dict(os.environ, **{REEXEC_FLAG: "1"})
                return subprocess.run([SYSTEM_PYTHON, os.path.abspath(__file__)] + argv, env=env).returncode
        if plt is not None:
            plot_matplotlib(plt, header, data, out, title)
            print("plot_metrics: wrote %s (matplotlib)" % out)
            return 0
        if a.backend == "matplotlib":
            sys.exit("plot_metrics: matplotlib is not available (apt-get install python3-matplotlib)")
    gnuplot = shutil.which("gnuplot")
    if not gnuplot and not a.no_install and apt_install("gnuplot-nox"):
        gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        sys.exit("plot_metrics: neither matplotlib nor gnuplot is available "
                 "(apt-get install python3-matplotlib or gnuplot-nox)")
    plot_gnuplot(gnuplot, header, data, out, title)
    print("plot_metrics: wrote %s (gnuplot)" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
