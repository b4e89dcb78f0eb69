#!/usr/bin/env bash
# The first thing to run on a machine with an NVIDIA GPU (docs/testing.md): builds for this GPU's
# architecture only, runs every `cuda` test on it, the GPU block benchmark against cuBLAS and
# (where PyTorch with CUDA is installed) PyTorch eager, and a short ted_train in bf16; writes one
# summary and the CSVs, the device's name in every row, into one folder. Meant to finish within
# 10 minutes on a 16-core H100 machine.
#   ./scripts/gpu_check.sh [output folder]     # default results/gpu_check/<gpu>-<date>
# Environment: TED_GPU_BUILD_DIR (default build-gpu). Needs the suite's build dependencies
# (scripts/common.sh lists them); a machine without a package registry can take them as
# Debian packages unpacked into a prefix: TED_DEPS_PREFIX=<dir> (its usr/ is searched).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi lists none); nothing to check here" >&2
  echo "gpu_check: the CUDA sources run on the emulated GPU in the test suite instead (ctest -L cuda_emulated)" >&2
  exit 2
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
slug=$(echo "$gpu" | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
out=${1:-results/gpu_check/${slug}-$(date +%Y%m%d-%H%M)}
build=${TED_GPU_BUILD_DIR:-build-gpu}
mkdir -p "$out"
summary="$out/summary.md"
log="$out/log.txt"
: >"$log"
note() { echo "$*" | tee -a "$summary"; }
{
  echo "# GPU check: $gpu"
  echo
  echo "- driver $driver, compute capability ${cap:0:1}.${cap:1}, $(nvcc --version | grep -o 'release [0-9.]*')"
  echo "- git $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- host: $(nproc) CPU cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
} >"$summary"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -n "${TED_DEPS_PREFIX:-}" ]; then  # unpacked Debian packages: libraries, tools, OpenMPI
  export PATH="$TED_DEPS_PREFIX/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$(find "$TED_DEPS_PREFIX/usr/lib" -maxdepth 2 -name '*.so*' -printf '%h\n' | sort -u | paste -sd:):${LD_LIBRARY_PATH:-}"
  export CMAKE_PREFIX_PATH="$TED_DEPS_PREFIX/usr:${CMAKE_PREFIX_PATH:-}"
  export OPAL_PREFIX="$TED_DEPS_PREFIX/usr/lib/x86_64-linux-gnu/openmpi"
fi

section() { echo -e "\n## $1\n" >>"$summary"; echo "== $1"; }

section "Build (sm_$cap only)"
start=$SECONDS
if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$cap" \
  >>"$log" 2>&1 && cmake --build "$build" -j "$(nproc)" >>"$log" 2>&1; then
  note "built in $((SECONDS - start)) s"
else
  note "**build failed** (see log.txt)"
  exit 1
fi

section "Every cuda test on the GPU"
start=$SECONDS
ctest --test-dir "$build" -L '^cuda$' -j 4 --output-on-failure --output-junit "$root/$out/ctest.xml" \
  >"$out/ctest.txt" 2>&1
status=$?
grep -E "tests passed|Test +#|\*\*\*" "$out/ctest.txt" | sed 's/^/    /' >>"$summary"
note "ctest -L cuda: exit $status in $((SECONDS - start)) s (full output: ctest.txt)"

section "The MoE block against cuBLAS (bench_moe_block_cuda)"
"$build/apps/bench_moe_block_cuda" --benchmark_format=csv --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true >"$out/bench_raw.csv" 2>>"$log"
note "bench_moe_block_cuda: exit $? ($(grep -c median "$out/bench_raw.csv" 2>/dev/null || echo 0) medians)"
# The device's name in every row.
awk -v gpu="$gpu" 'NR == 1 && /^name,/ {print $0 ",device"; next} /^"/ {print $0 ",\"" gpu "\""}' \
  "$out/bench_raw.csv" >"$out/bench_moe_block_cuda.csv" 2>/dev/null && rm -f "$out/bench_raw.csv"
grep median "$out/bench_moe_block_cuda.csv" 2>/dev/null | cut -d, -f1,3,4 | sed 's/^/    /' >>"$summary"

section "PyTorch eager on the same block"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 tests/cuda/torch_moe_block.py >"$out/torch_raw.csv" 2>>"$log"
  note "torch_moe_block.py: exit $?"
  awk -v gpu="$gpu" -F, 'NR == 1 {print $0 ",gpu"; next} {print $0 ",\"" gpu "\""}' \
    "$out/torch_raw.csv" >"$out/torch_moe_block.csv" && rm -f "$out/torch_raw.csv"
  sed 's/^/    /' "$out/torch_moe_block.csv" >>"$summary"
else
  note "skipped: no PyTorch with CUDA in python3"
fi

section "ted_train: tiny-cpu, 50 steps, bf16, on the GPU"
"$build/apps/ted_train" -c experiments/train/tiny-cpu.yaml --backend cuda --dtype bf16 --steps 50 \
  --csv "$out/ted_train_bf16.csv" >"$out/ted_train.txt" 2>&1
note "ted_train: exit $? ($(tail -1 "$out/ted_train.txt"))"
"$build/apps/ted_train" -c experiments/train/tiny-cpu.yaml --steps 50 \
  --csv "$out/ted_train_cpu_fp32.csv" >>"$out/ted_train.txt" 2>&1
python3 - "$out" >>"$summary" 2>>"$log" <<'PY'
import csv, sys
d = sys.argv[1]
gpu = list(csv.DictReader(open(f"{d}/ted_train_bf16.csv")))
cpu = list(csv.DictReader(open(f"{d}/ted_train_cpu_fp32.csv")))
print(f"    final loss: GPU bf16 {float(gpu[-1]['loss']):.4f} ({gpu[-1]['device']}), "
      f"CPU fp32 {float(cpu[-1]['loss']):.4f}: ratio {float(gpu[-1]['loss']) / float(cpu[-1]['loss']):.4f}")
PY

echo
echo "== summary: $root/$summary"
cat "$summary"
