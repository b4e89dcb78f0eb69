#!/usr/bin/env bash
# The GPU's numbers in one run, side by side, on one NVIDIA GPU: the paper's MoE block (h 4096,
# 32 heads, 8 experts, top-2, 4 x 2048 tokens, forward + backward, bf16) as ours runs it (the
# attention model.attention = auto picks, cuBLASLt epilogues), ours with the epilogues as
# separate passes (TED_CUBLASLT=0) and with the materialised attention; PyTorch eager on the same
# block with materialised attention and with F.scaled_dot_product_attention; the bf16 GEMM rate
# at the experts' shape (cuBLAS, and torch.matmul); a one-GPU ted_train of a 1.3B-parameter MoE
# GPT (experiments/train/gpu-1b.yaml: tokens/s, and MFU over the dense peak of NVIDIA's datasheet
# and over that GEMM rate, each labelled); and Nsight Compute's per-kernel times of one of our block's steps. Ours and PyTorch
# alternate, round by round. scripts/gpu/gpu_report.py writes the report: the rows, the top 15
# kernels, the device, the revision, which attention ran, and the issue's three bars (the block at
# or under PyTorch's SDPA time, at least 50% of the GEMM rate, the training step at MFU >= 40%).
#
#   scripts/gpu/gpu_bench.sh [report folder]      # default results/gpu; raw outputs in $OUT or a
#                                             # temporary folder
# Environment: TED_GPU_BUILD_DIR (default build-gpu, a build with CUDA for this GPU), ROUNDS (2).
# Exit: 0 when every bar was met, 1 when a bar was not met or a step failed (the report says which,
# and lists what is missing), 2 without a GPU or a build.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${TED_GPU_BUILD_DIR:-build-gpu}
report_dir=${1:-results/gpu}
rounds=${ROUNDS:-2}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_bench: no NVIDIA GPU visible (nvidia-smi lists none); nothing to measure here" >&2
  exit 2
fi
[ -x "$build/apps/bench_moe_block_cuda" ] ||
  { echo "gpu_bench: $build/apps/bench_moe_block_cuda not built (TED_GPU_BUILD_DIR)" >&2; exit 2; }
raw=${OUT:-$(mktemp -d)}/gpu_bench
mkdir -p "$raw" "$report_dir"
failed=0
stamp() { echo "== [$SECONDS s] $*"; }
bench=("$build/apps/bench_moe_block_cuda" --benchmark_format=csv --benchmark_min_time=1)
paper='^(moe_block_bf16|cublas_gemm_bf16)/paper_h4096_E8_top2_8192tok(_materialized)?(/|$)'

nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm \
  --format=csv,noheader >"$raw/device.txt"
cat "$raw/device.txt"
for round in $(seq 1 "$rounds"); do
  stamp "round $round: ours (bench_moe_block_cuda)"
  "${bench[@]}" --benchmark_filter="$paper" >"$raw/ours_$round.csv" 2>"$raw/ours_$round.log" ||
    failed=1
  grep -E '^#|moe_block|cublas' "$raw/ours_$round.csv" | cut -c1-200
  if [ "$round" = 1 ]; then
    stamp "round $round: ours with the GEMM epilogues as separate passes (TED_CUBLASLT=0)"
    TED_CUBLASLT=0 "${bench[@]}" --benchmark_filter='^moe_block_bf16/paper_h4096_E8_top2_8192tok(/|$)' \
      >"$raw/ours_passes.csv" 2>"$raw/ours_passes.log" || failed=1
  fi
  stamp "round $round: PyTorch eager (tests/cuda/torch_moe_block.py)"
  python3 tests/cuda/torch_moe_block.py --rounds 1 >"$raw/torch_$round.csv" 2>"$raw/torch_$round.log" ||
    failed=1
  cat "$raw/torch_$round.csv"
done

stamp "ted_train: experiments/train/gpu-1b.yaml on this GPU"
"$build/apps/ted_train" -c experiments/train/gpu-1b.yaml --csv "$raw/train_1b.csv" \
  >"$raw/train_1b.log" 2>&1 || failed=1
grep -E '^# (model|backend)|^step' "$raw/train_1b.log" | tail -5

stamp "per-kernel times of one block step (Nsight Compute)"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$ncu" ]; then
  timeout 300 "$ncu" --profile-from-start off --clock-control none --replay-mode application \
    --metrics gpu__time_duration.sum --csv --page raw --print-units base \
    "$build/apps/bench_moe_block_cuda" --profile-step=paper_h4096_E8_top2_8192tok \
    >"$raw/ncu.csv" 2>"$raw/ncu.log" || { echo "ncu failed (ncu.log)"; tail -3 "$raw/ncu.log"; }
else
  echo "ncu not found: no per-kernel table" | tee "$raw/ncu.log"
fi

stamp "report"
python3 scripts/gpu/gpu_report.py "$raw" "$report_dir" || failed=1
stamp "done (raw outputs in $raw)"
exit "$failed"
