#!/usr/bin/env bash
# A GPU the CUDA runtime cannot use is an error, not a skip (docs/testing.md): on the emulated GPU
# with a driver older than the runtime (TED_EMU_DRIVER=12020), a CUDA test program exits 2 with
# one line naming cudaErrorInsufficientDriver, not 77, and ted_train exits 2 with one line and
# writes no CSV. Without any driver (TED_EMU_DRIVER=0, a build machine) or without a GPU
# (TED_EMU_GPUS=0) the test program skips (77), saying why.
#   gpu_runtime_errors.sh <test_backend_emulated> <ted_train_emulated> <repository root> <scratch>
set -u
tests=$1
train=$2
root=$3
scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"

# <description> <expected exit code> <text the output must hold> <command...>
expect() {
  local description=$1 want=$2 text=$3 rc
  shift 3
  "$@" >"$scratch/out" 2>&1
  rc=$?
  [ "$rc" = "$want" ] || fail "$description: exit code $rc, expected $want: $(head -5 "$scratch/out")"
  grep -q -- "$text" "$scratch/out" || fail "$description: no '$text' in: $(head -5 "$scratch/out")"
  echo "ok: $description -> $rc: $(grep -m1 -- "$text" "$scratch/out")"
}

old_driver="env TED_EMU_DRIVER=12020"
expect "old driver, CUDA test program" 2 \
  "^error: the CUDA runtime cannot use this machine's GPUs: cudaGetDeviceCount: cudaErrorInsufficientDriver .*CUDA 12.2, this build needs 13.0" \
  $old_driver "$tests" --device cuda
[ "$(grep -c . "$scratch/out")" = 1 ] || fail "old driver: more than one line: $(cat "$scratch/out")"
bad_input "old driver, ted_train --backend cuda" ted_train $old_driver "$train" \
  -c "$root/experiments/train/tiny-cpu.yaml" --steps 1 --backend cuda
grep -q "cudaErrorInsufficientDriver" "$scratch/err" || fail "ted_train: the CUDA error is not named"
expect "no driver, CUDA test program" 77 "^SKIPPED: backend cuda: no GPU is visible" \
  env TED_EMU_DRIVER=0 "$tests" --device cuda
expect "no GPU, CUDA test program" 77 "^SKIPPED: backend cuda: no GPU is visible" \
  env TED_EMU_GPUS=0 "$tests" --device cuda
finish
