#!/usr/bin/env bash
# scripts/gpu/gpu_check.sh is a check that can fail: without a GPU it says so and exits 2; on the
# emulated GPU (TED_GPU_CHECK_EMULATED=1) it passes a good run and exits 1 on a planted test
# failure (the emulated GPU given 64 KiB of memory), a skipped test (cuDNN's, not emulated), and a
# loss out of bounds; a build whose configure found no NCCL stops it with one line and exit 2.
#   gpu_check_verdicts.sh <source root> <build folder> <scratch folder>
set -uo pipefail
root=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
failures=0
quick='^(cuda_kernels_emulated|comm_cuda_emulated_nccl_np1)$'
check() {  # <expected exit> <expected line, grep -E> <what> [VAR=value...]
  local want=$1 pattern=$2 what=$3
  shift 3
  local folder="$scratch/run$((++runs))"
  env "$@" bash "$root/scripts/gpu/gpu_check.sh" "$folder" >"$folder.out" 2>&1
  local status=$?
  if [ "$status" -ne "$want" ] || ! grep -Eq -- "$pattern" "$folder.out"; then
    echo "FAILED: $what: exit $status (expected $want), output:"
    sed 's/^/    /' "$folder.out" | tail -25
    failures=$((failures + 1))
  else
    echo "ok: $what: exit $status, $(grep -Em1 -- "$pattern" "$folder.out")"
  fi
}
runs=0
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  check 2 "^gpu_check: no NVIDIA GPU visible" "no GPU"
fi
emu=(TED_GPU_CHECK_EMULATED=1 TED_GPU_BUILD_DIR="$build")
check 0 "^verdict: PASS" "a good run" "${emu[@]}" TED_GPU_CHECK_TESTS="$quick"
check 1 "^verdict: FAIL.*a cuda test failed" "a planted test failure (64 KiB of GPU memory)" \
  "${emu[@]}" TED_GPU_CHECK_TESTS="$quick" TED_EMU_MEMORY=64K
check 1 "^verdict: FAIL.*1 cuda test\(s\) skipped" "a skipped test" \
  "${emu[@]}" TED_GPU_CHECK_TESTS='^backend_cuda_emulated_cudnn$'
check 1 "^verdict: FAIL.*loss is out of bounds" "a loss out of bounds" \
  "${emu[@]}" TED_GPU_CHECK_TESTS="$quick" TED_GPU_CHECK_LOSS_BOUND=-1
# A build whose configure did not find NCCL: the same programs, another summary.
fake="$scratch/build-without-nccl"
mkdir -p "$fake/tests" "$fake/apps"
ln -s "$build/tests/test_backend_emulated" "$build/tests/ted_train_emulated" "$fake/tests/"
ln -s "$build/apps/ted_train" "$fake/apps/"
sed 's/^\( *NCCL *:\).*/\1 not found (looked everywhere)/' "$build/ted_summary.txt" >"$fake/ted_summary.txt"
check 2 "^gpu_check: the configure did not find NCCL: *not found" "no NCCL in the configure" \
  TED_GPU_CHECK_EMULATED=1 TED_GPU_BUILD_DIR="$fake"
[ "$(grep -c "^gpu_check:" "$scratch/run$runs.out")" -eq 1 ] || {
  echo "FAILED: the missing NCCL was said in more than one line"
  failures=$((failures + 1))
}
[ "$failures" -eq 0 ] && echo "gpu_check: every verdict as expected"
exit $((failures > 0))
