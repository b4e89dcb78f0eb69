#!/usr/bin/env bash
# The one-block MoE model of apps/bench_moe_block.cpp side by side with the same model in
# PyTorch eager (tests/cuda/torch_moe_block.py --shape: same embeddings, block, LM head, loss
# and FLOPs; fp32 on the CPU), run alternately for several rounds, so that whatever else the
# machine does falls on both. Prints per shape and thread count our ms, PyTorch's ms and the
# ratio ours / PyTorch: median over the rounds and its range.
#
# PyTorch is installed from the package registry into a virtual environment of its own (a
# build folder, git-ignored); nothing else in the project needs it.
#   ./scripts/bench_vs_pytorch.sh                       # 5 rounds, h512 and h1024, top-1/2, 1/2 threads
#   ROUNDS=3 SHAPES="h512_top1" THREADS="1" ./scripts/bench_vs_pytorch.sh
# Environment: TED_BUILD_DIR (default build), TED_TORCH_VENV (default <build>/torch-venv),
# ROUNDS, SHAPES (of h512_top1 h512_top2 h1024_top1 h1024_top2), THREADS, TORCH_ITERS (timed
# PyTorch iterations per round, after one warm-up; bench_moe_block times >= 2 s per round).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$TED_ROOT"
ROUNDS=${ROUNDS:-5}
SHAPES=${SHAPES:-"h512_top1 h512_top2 h1024_top1 h1024_top2"}
THREADS=${THREADS:-"1 2"}
TORCH_ITERS=${TORCH_ITERS:-3}
VENV=${TED_TORCH_VENV:-$TED_BUILD/torch-venv}

if [ ! -x "$TED_BUILD/apps/bench_moe_block" ]; then
  ted_install_missing
  if [ ! -f "$TED_BUILD/CMakeCache.txt" ]; then
    cmake -S "$TED_ROOT" -B "$TED_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$TED_BUILD" --target bench_moe_block -j "$(nproc)"
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "== installing PyTorch into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch
fi
echo "== $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'), $(nproc) cores"

# name: the torch script's --shape (h,heads,experts,top_k,sequences,seq) and the benchmark's name
declare -A torch_shape=([h512_top1]=512,8,8,1,8,256 [h512_top2]=512,8,8,2,8,256
  [h1024_top1]=1024,16,8,1,8,256 [h1024_top2]=1024,16,8,2,8,256)
declare -A ours_name=([h512_top1]=h512_tokens2048_e8_top1 [h512_top2]=h512_tokens2048_e8_top2
  [h1024_top1]=h1024_tokens2048_e8_top1 [h1024_top2]=h1024_tokens2048_e8_top2)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ours() {  # ours <shape> <threads>: ms per iteration (bench_moe_block's mean over >= 2 s)
  OPENBLAS_NUM_THREADS=$2 TED_NUM_THREADS=$2 "$TED_BUILD/apps/bench_moe_block" \
    --benchmark_filter="^moe_block/${ours_name[$1]}/" --benchmark_format=csv 2>/dev/null |
    awk -F, '/^"moe_block/ { print $3 }'
}
torch_ms() {  # torch_ms <shape> <threads>: the median of TORCH_ITERS iterations after a warm-up
  OMP_NUM_THREADS=$2 MKL_NUM_THREADS=$2 "$VENV/bin/python" tests/cuda/torch_moe_block.py \
    --shape "${torch_shape[$1]}" --threads "$2" --warmup 1 --iters "$TORCH_ITERS" |
    awk '/^ms / { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
for round in $(seq 1 "$ROUNDS"); do
  for shape in $SHAPES; do
    for t in $THREADS; do
      # Alternate which side goes first, so neither always runs on a machine the other warmed.
      if [ $((round % 2)) -eq 1 ]; then
        a=$(ours "$shape" "$t")
        b=$(torch_ms "$shape" "$t")
      else
        b=$(torch_ms "$shape" "$t")
        a=$(ours "$shape" "$t")
      fi
      echo "$shape $t $a $b" >>"$work/rounds.txt"
      printf 'round %d  %-11s %d thread(s): ours %8.1f ms  PyTorch %8.1f ms  ratio %.3f\n' \
        "$round" "$shape" "$t" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
    done
  done
done
echo
/usr/bin/python3 - "$work/rounds.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    shape, threads, ours, torch = line.split()
    rows.setdefault((shape, int(threads)), []).append((float(ours), float(torch)))
print("| shape | threads | ours ms (median) | PyTorch ms (median) | ours / PyTorch: median | range | rounds |")
print("|---|---|---|---|---|---|---|")
for (shape, threads), values in rows.items():
    ratios = [a / b for a, b in values]
    print(f"| {shape} | {threads} | {statistics.median(a for a, _ in values):.1f} | "
          f"{statistics.median(b for _, b in values):.1f} | {statistics.median(ratios):.3f} | "
          f"{min(ratios):.3f}-{max(ratios):.3f} | {len(values)} |")
PY
