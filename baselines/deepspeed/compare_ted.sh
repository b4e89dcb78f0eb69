#!/usr/bin/env bash
# Ours against DeepSpeed-TED on the same layout, T > 1, on this machine: ted_ablation's
# ted-baseline and ted+dtd against DeepSpeed's configurations equal to them (run.py --systems:
# tensor-parallel experts without and with its DTD) on experiments/ablation/cpu.yaml (4 ranks,
# T = 2, Ep = 2, D = 1: the same tokens per step on both sides), and ted_train --dtd against
# run.py on experiments/train/tiny-cpu.yaml at T = 2, Ep = 2 (4 ranks, TRAIN_STEPS steps). The
# two sides alternate which goes first, round after round. Every round's rows are kept in
# results/deepspeed/ted_*.csv; compare_ted_report.py writes results/deepspeed/ted_cpu_comparison.md
# (per system the medians, the ratio ours / DeepSpeed per round: median and range, and the p10
# ratio). TED_TIMING_LOCK=<file>: each round runs under an exclusive flock of that file (on a
# machine shared with builds, so none runs while a round is timed).
#   baselines/deepspeed/compare_ted.sh              # 5 rounds
#   ROUNDS=3 TRAIN_STEPS=20 baselines/deepspeed/compare_ted.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
ted_prepare >/dev/null
ROUNDS=${ROUNDS:-5}
TRAIN_STEPS=${TRAIN_STEPS:-30}
out=${TED_RESULTS:-results}/deepspeed
mkdir -p "$out"
rm -f "$out"/ted_ablation_ours.csv "$out"/ted_ablation_deepspeed.csv "$out"/ted_train_*.csv
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 # 4 ranks on this machine's cores: one thread each
ablation=experiments/ablation/cpu.yaml train=experiments/train/tiny-cpu.yaml
systems=ted-baseline,ted+dtd
layout=(--set layout.tp=2 --set layout.ep=2 --set layout.dp=1 --set systems=$systems)
train_layout=(--set parallel.tp=2 --set parallel.ep=2 --set parallel.dtd=true)

ours_ablation() {
  mpirun -n 4 --oversubscribe "$TED_BUILD/apps/ted_ablation" -c "$ablation" "${layout[@]}" \
    --csv "$out/ted_ablation_ours.csv" >/dev/null
}
deepspeed_ablation() {
  baselines/deepspeed/launch.sh -n 4 -c "$ablation" "${layout[@]}" --systems all \
    --csv "$out/ted_ablation_deepspeed.csv" >/dev/null 2>"$out/.stderr" ||
    { tail -20 "$out/.stderr" >&2; return 1; }
}
ours_train() { # <round>
  mpirun -n 4 --oversubscribe "$TED_BUILD/apps/ted_train" -c "$train" "${train_layout[@]}" \
    --steps "$TRAIN_STEPS" --csv "$out/ted_train_ours_round$1.csv" >/dev/null
}
deepspeed_train() { # <round>
  baselines/deepspeed/launch.sh -n 4 -c "$train" "${train_layout[@]}" --steps "$TRAIN_STEPS" \
    --csv "$out/ted_train_deepspeed_round$1.csv" >/dev/null 2>"$out/.stderr" ||
    { tail -20 "$out/.stderr" >&2; return 1; }
}
round() { # <round>
  if [ $(($1 % 2)) -eq 1 ]; then
    ours_ablation && deepspeed_ablation && ours_train "$1" && deepspeed_train "$1"
  else
    deepspeed_ablation && ours_ablation && deepspeed_train "$1" && ours_train "$1"
  fi
}
baselines/deepspeed/setup.sh >/dev/null # the environment first, outside the timed rounds
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r of $ROUNDS"
  if [ -n "${TED_TIMING_LOCK:-}" ]; then
    (
      flock -x 9
      round "$r"
    ) 9>"$TED_TIMING_LOCK" || exit 1
  else
    round "$r" || exit 1
  fi
done
rm -f "$out/.stderr"

venv=$(baselines/deepspeed/setup.sh | tail -1)
versions=$("$venv/bin/python" -c 'import torch, deepspeed
print(f"DeepSpeed {deepspeed.__version__}, torch {torch.__version__}")' 2>/dev/null | tail -1)
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1) (CPU family $(lscpu |
  sed -n 's/^CPU family: *//p' | head -1), model $(lscpu | sed -n 's/^Model: *//p' | head -1))"
/usr/bin/python3 baselines/deepspeed/compare_ted_report.py "$out" "$ROUNDS" "$cpu" "$(nproc)" \
  "$versions" "$(git rev-parse --short=12 HEAD)" "${TED_TIMING_LOCK:+exclusive}" |
  tee "$out/ted_cpu_comparison.md"
