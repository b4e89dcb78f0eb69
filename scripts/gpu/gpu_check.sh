#!/usr/bin/env bash
# The first thing to run on a machine with an NVIDIA GPU (docs/testing.md), and a check that can
# fail: installs what is missing (as main.sh does), builds for this GPU's architecture only, stops
# with one line if the configure did not find CUDA with cuBLAS, NCCL or cuDNN, runs every `cuda`
# test on the GPU, the GPU block benchmark (with its self-check against the fp32 model) and, where
# PyTorch with CUDA is installed, PyTorch eager on the same block, and a short ted_train in bf16
# against the CPU's fp32 run. Writes one summary and the CSVs, the device's name in every row,
# into one folder (ignored by git). Meant to finish within 10 minutes on a 16-core H100 machine.
#   ./scripts/gpu/gpu_check.sh [output folder]     # default results/gpu_check/<gpu>-<date>
# Exit codes: 0 every check passed; 1 a check failed (a `cuda` test failed or was skipped, the
# block's self-check failed, the loss ratio is out of bounds, a program failed); 2 nothing could
# be checked (no GPU, missing dependencies, the configure did not find CUDA, NCCL or cuDNN).
# Tests that need more GPUs than the machine has (label gpus2) are left out and named.
# Environment:
#   TED_GPU_BUILD_DIR        build folder (default build-gpu; build with TED_GPU_CHECK_EMULATED)
#   TED_GPU_CHECK_LOSS_BOUND largest |GPU bf16 loss / CPU fp32 loss - 1| after the steps (0.02)
#   TED_GPU_CHECK_STEPS      ted_train steps (50; 10 on the emulated GPU)
#   TED_GPU_CHECK_TESTS      a ctest -R pattern: only these tests (default: every one)
#   TED_GPU_CHECK_EMULATED=1 no GPU: the same checks on the emulated GPU of an existing build
#                            (label cuda_emulated, ted_train_emulated; no benchmark, no PyTorch),
#                            so that this script's own verdicts are tested (tests/CMakeLists.txt)
#   TED_DEPS_PREFIX=<dir>    a machine without a package registry: the dependencies as Debian
#                            packages unpacked into <dir> (its usr/ is searched); nothing installed
#   TED_GPU_CHECK_PREBUILT=1 a GPU machine with no compiler toolchain for the suite (the packed
#                            tree of a build made elsewhere, scripts/gpu/gpu_session.sh): nothing is
#                            installed, configured or built; the build's executables are checked
#   TED_GPU_CHECK_JOBS       ctest's parallel jobs (4); the tests sharing one GPU fit 16 CPU cores
#   TED_GPU_CHECK_EXCLUDE    a ctest -E pattern: tests left out (named in the summary), e.g. one
#                            the caller ran first on its own
#   TED_GPU_CHECK_BENCH=0    leave out the block benchmark and PyTorch's block (a caller that
#                            times them itself, alternated, e.g. scripts/gpu/gpu_session.sh)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -gt 0 ] && out=$(realpath -m "$1")  # a relative folder is the caller's, not the tree's
cd "$root"
emulated=${TED_GPU_CHECK_EMULATED:-0}
prebuilt=${TED_GPU_CHECK_PREBUILT:-0}
jobs=${TED_GPU_CHECK_JOBS:-4}
bench=${TED_GPU_CHECK_BENCH:-1}
say() { echo "gpu_check: $*" >&2; }
if [ "$emulated" = 1 ]; then
  gpu="emulated GPU"
  cap=""
  driver="none (emulated)"
  gpus=1
  build=${TED_GPU_BUILD_DIR:-build}
  steps=${TED_GPU_CHECK_STEPS:-10}
else
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    say "no NVIDIA GPU visible (nvidia-smi lists none); nothing to check here"
    say "the CUDA sources run on the emulated GPU in the test suite instead (ctest -L cuda_emulated)"
    exit 2
  fi
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  gpus=$(nvidia-smi -L | grep -c '^GPU ')
  build=${TED_GPU_BUILD_DIR:-build-gpu}
  steps=${TED_GPU_CHECK_STEPS:-50}
fi
bound=${TED_GPU_CHECK_LOSS_BOUND:-0.02}
slug=$(echo "$gpu" | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
out=${out:-$root/results/gpu_check/${slug}-$(date +%Y%m%d-%H%M)}
mkdir -p "$out" || { say "cannot make the output folder $out"; exit 2; }
out=$(cd "$out" && pwd)  # absolute from here on (ctest's --output-junit, the summary's paths)
summary="$out/summary.md"
log="$out/log.txt"
: >"$log"
failures=()
note() { echo "$*" | tee -a "$summary"; }
fail() {  # a check that failed: said in the summary, counted for the exit code
  failures+=("$1")
  note "**FAILED: $1**"
}
section() { echo -e "\n## $1\n" >>"$summary"; echo "== $1"; }

if [ -n "${TED_DEPS_PREFIX:-}" ]; then  # unpacked Debian packages: libraries, tools, OpenMPI
  export PATH="$TED_DEPS_PREFIX/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$(find "$TED_DEPS_PREFIX/usr/lib" -maxdepth 2 -name '*.so*' -printf '%h\n' | sort -u | paste -sd:):${LD_LIBRARY_PATH:-}"
  export CMAKE_PREFIX_PATH="$TED_DEPS_PREFIX/usr:${CMAKE_PREFIX_PATH:-}"
  export OPAL_PREFIX="$TED_DEPS_PREFIX/usr/lib/x86_64-linux-gnu/openmpi"
elif [ "$emulated" != 1 ] && [ "$prebuilt" != 1 ]; then
  source "$root/scripts/common.sh"
  ted_install_missing >>"$log" 2>&1 ||
    { say "could not install the build dependencies (see $log); or set TED_DEPS_PREFIX"; exit 2; }
  TED_BUILD=$(realpath -m "$build")
  ted_fetch_cudnn_frontend >>"$log" 2>&1 || true  # the configure says if it is missing
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

{
  echo "# GPU check: $gpu"
  echo
  if [ "$emulated" = 1 ]; then
    echo "- **the emulated GPU** (TED_GPU_CHECK_EMULATED=1): the CUDA sources on the CPU; no GPU's number"
  else
    echo "- driver $driver, compute capability ${cap:0:1}.${cap:1}, $gpus GPU(s), $(nvcc --version | grep -o 'release [0-9.]*')"
  fi
  echo "- git $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- host: $(nproc) CPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
} >"$summary"

section "Build"
start=$SECONDS
if [ "$emulated" = 1 ]; then
  # The build the test suite made: configuring or building it again here could race the ctest
  # that runs this script.
  for binary in tests/test_backend_emulated tests/ted_train_emulated apps/ted_train; do
    [ -x "$build/$binary" ] || { say "$build/$binary is not built (build $build first)"; exit 2; }
  done
  note "the existing build $build (emulated GPU targets)"
elif [ "$prebuilt" = 1 ]; then
  for binary in tests/test_backend apps/ted_train apps/bench_moe_block_cuda; do
    [ -x "$build/$binary" ] || { say "$build/$binary is not built (TED_GPU_CHECK_PREBUILT)"; exit 2; }
  done
  built_for=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
  note "the prebuilt $build (CUDA architectures ${built_for:-?}; this GPU: sm_$cap); nothing configured or built here"
else
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$cap" \
    >>"$log" 2>&1; then
    say "the configure failed (see $log)"
    exit 2
  fi
fi
# The configure's summary: the GPU's libraries must all have been found.
features="$build/ted_summary.txt"
if [ "$prebuilt" = 1 ] && [ ! -r "$features" ]; then
  # A packed build carries its executables and CTest files, not the configure's summary: the
  # cuda tests themselves fail where a library is missing.
  note "no configure summary in the packed build: the cuda tests stand for it"
  features=/dev/null
fi
[ -r "$features" ] || { say "$features is missing: configure $build with this tree's CMakeLists"; exit 2; }
sed 's/^/    /' "$features" >>"$summary"
[ "$features" = /dev/null ] ||
for library in CUDA NCCL cuDNN; do
  line=$(grep -E "^ *$library +:" "$features")
  if ! echo "$line" | grep -Eq ": found"; then
    say "the configure did not find $library:$(echo "$line" | cut -d: -f2-) (full summary: $features)"
    exit 2
  fi
done
if [ "$emulated" != 1 ] && [ "$prebuilt" != 1 ]; then
  if cmake --build "$build" -j "$(nproc)" >>"$log" 2>&1; then
    note "built for sm_$cap in $((SECONDS - start)) s"
  else
    say "the build failed (see $log)"
    exit 2
  fi
fi

section "Every cuda test on the GPU"
start=$SECONDS
# ctest through a folder of its own, so that its Testing/ logs stay out of the build's.
mkdir -p "$out/ctest"
echo "subdirs(\"$(cd "$build" && pwd)\")" >"$out/ctest/CTestTestfile.cmake"
if [ "$emulated" = 1 ]; then
  selection=(-L cuda_emulated)
  [ -z "${TED_GPU_CHECK_TESTS:-}" ] && selection+=(-E '^backend_cuda_emulated_cudnn$') &&
    note "left out: backend_cuda_emulated_cudnn (cuDNN is not emulated)"
else
  selection=(-L '^cuda$')
  if [ "$gpus" -lt 2 ]; then
    selection+=(-LE gpus2)
    note "left out, $gpus GPU here: $(ctest --test-dir "$out/ctest" -N -L gpus2 | sed -n 's/^ *Test *#[0-9]*: //p' | paste -sd' ') (label gpus2: one GPU per rank)"
  fi
fi
[ -n "${TED_GPU_CHECK_TESTS:-}" ] && selection+=(-R "$TED_GPU_CHECK_TESTS")
if [ -n "${TED_GPU_CHECK_EXCLUDE:-}" ]; then
  selection+=(-E "$TED_GPU_CHECK_EXCLUDE")
  note "left out by the caller (TED_GPU_CHECK_EXCLUDE): $(ctest --test-dir "$out/ctest" -N -R "$TED_GPU_CHECK_EXCLUDE" | sed -n 's/^ *Test *#[0-9]*: //p' | paste -sd' ')"
fi
ctest --test-dir "$out/ctest" "${selection[@]}" -j "$jobs" --output-on-failure \
  --output-junit "$out/ctest.xml" >"$out/ctest.txt" 2>&1
status=$?
grep -E "tests passed|Test +#|\*\*\*" "$out/ctest.txt" | sed 's/^/    /' >>"$summary"
ran=$(grep -Ec "Test +#[0-9]+:" "$out/ctest.txt")
skipped=$(grep -Ec "Test +#[0-9]+:.*\*\*\*Skipped|Test +#[0-9]+:.*Not Run" "$out/ctest.txt")
note "ctest: exit $status, $ran test(s), $skipped skipped, in $((SECONDS - start)) s (full output: ctest.txt)"
[ "$ran" -eq 0 ] && fail "no cuda test ran"
[ "$status" -ne 0 ] && fail "a cuda test failed (ctest.txt)"
[ "$skipped" -ne 0 ] && fail "$skipped cuda test(s) skipped with a GPU visible (ctest.txt says why)"

section "The MoE block against cuBLAS (bench_moe_block_cuda)"
if [ "$bench" = 0 ]; then
  note "left out (TED_GPU_CHECK_BENCH=0): the caller runs the block benchmark, its self-check included"
elif [ "$emulated" = 1 ]; then
  note "not run on the emulated GPU (its speed means nothing; the self-check runs on a GPU)"
else
  "$build/apps/bench_moe_block_cuda" --benchmark_format=csv --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true >"$out/bench_raw.csv" 2>>"$log"
  status=$?
  errors=$(grep -c "self-check failed" "$out/bench_raw.csv")
  note "bench_moe_block_cuda: exit $status, $(grep -c median "$out/bench_raw.csv") medians, $errors failed self-check(s)"
  [ "$status" -ne 0 ] || [ "$errors" -ne 0 ] && fail "the block benchmark or its self-check failed (bench_moe_block_cuda.csv, log.txt)"
  # The device's name in every row.
  awk -v gpu="$gpu" 'NR == 1 && /^name,/ {print $0 ",device"; next} /^"/ {print $0 ",\"" gpu "\""}' \
    "$out/bench_raw.csv" >"$out/bench_moe_block_cuda.csv" && rm -f "$out/bench_raw.csv"
  grep median "$out/bench_moe_block_cuda.csv" | cut -d, -f1,3,4 | sed 's/^/    /' >>"$summary"
fi

section "PyTorch eager on the same block"
if [ "$bench" = 0 ]; then
  note "left out (TED_GPU_CHECK_BENCH=0): the caller times it"
elif [ "$emulated" = 1 ]; then
  note "not run on the emulated GPU"
elif python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  if python3 tests/cuda/torch_moe_block.py >"$out/torch_raw.csv" 2>>"$log"; then
    awk -v gpu="$gpu" -F, 'NR == 1 {print $0 ",gpu"; next} {print $0 ",\"" gpu "\""}' \
      "$out/torch_raw.csv" >"$out/torch_moe_block.csv" && rm -f "$out/torch_raw.csv"
    sed 's/^/    /' "$out/torch_moe_block.csv" >>"$summary"
  else
    fail "torch_moe_block.py failed (log.txt)"
  fi
else
  note "not run: no PyTorch with CUDA in python3 (the comparison is optional)"
fi

section "ted_train: tiny-cpu, $steps steps, bf16 on the GPU against fp32 on the CPU"
if [ "$emulated" = 1 ]; then train_gpu="$build/tests/ted_train_emulated"; else train_gpu="$build/apps/ted_train"; fi
"$train_gpu" -c experiments/train/tiny-cpu.yaml --backend cuda --dtype bf16 --steps "$steps" \
  --csv "$out/ted_train_bf16.csv" >"$out/ted_train.txt" 2>&1 || fail "ted_train on the GPU failed (ted_train.txt)"
"$build/apps/ted_train" -c experiments/train/tiny-cpu.yaml --steps "$steps" \
  --csv "$out/ted_train_cpu_fp32.csv" >>"$out/ted_train.txt" 2>&1 || fail "ted_train on the CPU failed (ted_train.txt)"
if verdict=$(python3 - "$out" "$bound" 2>>"$log" <<'PY'
import csv, sys
folder, bound = sys.argv[1], float(sys.argv[2])
gpu = list(csv.DictReader(open(f"{folder}/ted_train_bf16.csv")))
cpu = list(csv.DictReader(open(f"{folder}/ted_train_cpu_fp32.csv")))
g, c = float(gpu[-1]["loss"]), float(cpu[-1]["loss"])
ratio = g / c
print(f"final loss (step {gpu[-1]['step']}): GPU bf16 {g:.4f} ({gpu[-1]['device']}), CPU fp32 {c:.4f}: "
      f"ratio {ratio:.4f}, bound |ratio - 1| <= {bound}")
sys.exit(0 if abs(ratio - 1) <= bound else 1)
PY
); then
  note "$verdict"
else
  note "${verdict:-no loss to compare (see log.txt)}"
  fail "the GPU's bf16 loss is out of bounds against the CPU's fp32 loss"
fi

echo
if [ ${#failures[@]} -eq 0 ]; then
  note "verdict: PASS, every check on $gpu"
  echo "== summary: $summary"
  exit 0
fi
note "verdict: FAIL, ${#failures[@]} check(s): $(printf '%s; ' "${failures[@]}")"
echo "== summary: $summary"
exit 1
