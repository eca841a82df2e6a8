#!/usr/bin/env bash
# scripts/gpu_check.sh - one pass on a GPU machine: build, GPU suites, benchmarks.
# Logs go to $OUT (or ./out). Usage: scripts/gpu_check.sh [build|test|bench|all]...
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
cudnn=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
steps=${*:-all}
for s in $steps; do
  case $s in
    build|test|bench|all) ;;
    *) echo "usage: scripts/gpu_check.sh [build|test|bench|all]... (got '$s')" >&2; exit 2 ;;
  esac
done
status=0
run() {  # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@" >"$out/$name.log" 2>&1; then echo "--- $name ok"; else status=1; echo "--- $name FAILED"; tail -n 40 "$out/$name.log"; fi
}
nvidia-smi -L | tee "$out/gpu.txt"
for s in $steps; do
  case $s in
    build|all) run build make -j16 CUDA=1 ;;&
    test|all) run unit env MT_DEVICE=cuda make --no-print-directory test-unit
              run c env MT_DEVICE=cuda make --no-print-directory test-c
              run python env MT_DEVICE=cuda make --no-print-directory test-python
              run gpu_parity make --no-print-directory test-gpu ;;&
    bench|all) run bench make --no-print-directory bench ;;
  esac
done
exit $status
