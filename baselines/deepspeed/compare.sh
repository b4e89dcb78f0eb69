#!/usr/bin/env bash
# The measured comparison on this machine: our deepspeed-moe, ted-baseline and ted systems
# (ted_ablation, experiments/ablation/cpu.yaml, 4 ranks) and ted_train (tiny-cpu.yaml, 2 ranks,
# Ep = 2) against DeepSpeed on the same configs (baselines/deepspeed/launch.sh), the two sides
# alternating which goes first, for several rounds, so that whatever else the machine does falls
# on both. Prints, and writes to results/deepspeed/cpu_comparison.md, per system the median
# time per step of each side and the ratio ours / DeepSpeed: median over the rounds and range.
# Every round's rows are kept in results/deepspeed/ (CSV). Then weak and strong scaling once on
# both sides, and the figures plots/deepspeed_{ablation,weak_scaling,strong_scaling}_cpu.png.
#   baselines/deepspeed/compare.sh            # 5 rounds (about 20 minutes here)
#   ROUNDS=3 TRAIN_STEPS=30 baselines/deepspeed/compare.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
ted_prepare >/dev/null
ROUNDS=${ROUNDS:-5}
TRAIN_STEPS=${TRAIN_STEPS:-30}
out=${TED_RESULTS:-results}/deepspeed
mkdir -p "$out"
rm -f "$out"/ablation_ours.csv "$out"/ablation_deepspeed.csv "$out"/train_*.csv
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1  # 4 ranks on 2 cores: one thread each
ablation=experiments/ablation/cpu.yaml train=experiments/train/tiny-cpu.yaml

ours_ablation() {
  mpirun -n 4 --oversubscribe "$TED_BUILD/apps/ted_ablation" -c "$ablation" \
    --set systems=deepspeed-moe,ted-baseline,ted --csv "$out/ablation_ours.csv" >/dev/null
}
deepspeed_ablation() {
  baselines/deepspeed/launch.sh -n 4 -c "$ablation" --csv "$out/ablation_deepspeed.csv" \
    >/dev/null 2>"$out/.stderr" || { cat "$out/.stderr" >&2; return 1; }
}
ours_train() {  # <round>
  mpirun -n 2 --oversubscribe "$TED_BUILD/apps/ted_train" -c "$train" --ep 2 \
    --steps "$TRAIN_STEPS" --csv "$out/train_ours_round$1.csv" >/dev/null
}
deepspeed_train() {  # <round>
  baselines/deepspeed/launch.sh -n 2 -c "$train" --set parallel.ep=2 --steps "$TRAIN_STEPS" \
    --csv "$out/train_deepspeed_round$1.csv" >/dev/null 2>"$out/.stderr" ||
    { cat "$out/.stderr" >&2; return 1; }
}
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS"
  if [ $((round % 2)) -eq 1 ]; then
    ours_ablation && deepspeed_ablation && ours_train "$round" && deepspeed_train "$round" ||
      exit 1
  else
    deepspeed_ablation && ours_ablation && deepspeed_train "$round" && ours_train "$round" ||
      exit 1
  fi
done

# The figures: the ablation of the last round, and weak and strong scaling measured now on both
# sides (one run each, ours first), DeepSpeed's rows beside ours.
plots=${TED_PLOTS:-plots/figures}
for experiment in weak_scaling strong_scaling; do
  echo "== $experiment"
  rm -f "$out/${experiment}_ours.csv" "$out/${experiment}_deepspeed.csv"
  mpirun -n 4 --oversubscribe "$TED_BUILD/apps/ted_$experiment" \
    -c "experiments/$experiment/cpu.yaml" --csv "$out/${experiment}_ours.csv" >/dev/null
  baselines/deepspeed/launch.sh -n "1 2 4" -c "experiments/$experiment/cpu.yaml" \
    --csv "$out/${experiment}_deepspeed.csv" >/dev/null 2>"$out/.stderr" ||
    { cat "$out/.stderr" >&2; exit 1; }
  /usr/bin/python3 plots/plot_scaling.py "$out/${experiment}_ours.csv" \
    "$out/${experiment}_deepspeed.csv" "$plots/deepspeed_${experiment}_cpu.png"
done
/usr/bin/python3 plots/plot_ablation.py "$out/ablation_ours.csv" "$out/ablation_deepspeed.csv" \
  "$plots/deepspeed_ablation_cpu.png"
rm -f "$out/.stderr"

venv=$(baselines/deepspeed/setup.sh | tail -1)
versions=$("$venv/bin/python" -c 'import torch, deepspeed
print(f"DeepSpeed {deepspeed.__version__}, torch {torch.__version__}")' 2>/dev/null | tail -1)
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1) (CPU family $(lscpu |
  sed -n 's/^CPU family: *//p' | head -1), model $(lscpu | sed -n 's/^Model: *//p' | head -1))"
/usr/bin/python3 baselines/deepspeed/compare_report.py "$out" "$ROUNDS" "$cpu" "$(nproc)" \
  "$versions" "$(git rev-parse --short=12 HEAD)" | tee "$out/cpu_comparison.md"
