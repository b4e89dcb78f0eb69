#!/usr/bin/env bash
# The paper's validation by training, on real text, on this machine: prepares the King James
# Bible as Megatron's indexed dataset (scripts/data/prepare_corpus.sh), trains ours
# (ted_convergence: DeepSpeed-MoE's layout, TED's, TED with every switch on) and DeepSpeed itself
# (baselines/deepspeed: DeepSpeed-MoE and DeepSpeed-TED) on experiments/convergence/kjv.yaml on 8
# CPU ranks from the same weights on the same tokens, and draws the curves in the paper's form.
# About 15 minutes on 2 cores. Writes results/convergence/kjv.csv, deepspeed_kjv.csv and
# kjv_corpus.json (the corpus summary: its unigram entropy is the figure's reference line), and
# plots/figures/convergence_kjv.png (with its PDF and sidecar); the CSVs are replaced, not
# appended to, so the figure is one run's.
#   ./scripts/convergence_on_text.sh              # all of it
#   ./scripts/convergence_on_text.sh ours         # only ours (or: deepspeed, plot)
#   STEPS=50 ./scripts/convergence_on_text.sh     # shorter (training.steps)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
config=experiments/convergence/kjv.yaml
results=${TED_RESULTS:-results}/convergence
figure=${TED_PLOTS:-plots/figures}/convergence_kjv.png
mkdir -p "$results"
parts=("${@:-ours deepspeed plot}")
read -r -a parts <<<"${parts[*]}"
overrides=()
[ -n "${STEPS:-}" ] && overrides=(--set "training.steps=$STEPS")
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1

venv=$(baselines/deepspeed/setup.sh | tail -1)
TED_DATA_PYTHON=$venv/bin/python scripts/data/prepare_corpus.sh
cp results/local/data/kjv/summary.json "$results/kjv_corpus.json"

for part in "${parts[@]}"; do
  case $part in
    ours)
      echo "== ours on 8 ranks (oversubscribed on $(nproc) cores)"
      rm -f "$results/kjv.csv"
      start=$(date +%s)
      mpirun -n 8 --oversubscribe build/apps/ted_convergence -c "$config" "${overrides[@]}" \
        --csv "$results/kjv.csv"
      echo "== ours: $(($(date +%s) - start)) s"
      ;;
    deepspeed)
      echo "== DeepSpeed on 8 ranks"
      rm -f "$results/deepspeed_kjv.csv"
      start=$(date +%s)
      baselines/deepspeed/launch.sh -n 8 -c "$config" "${overrides[@]}" \
        --csv "$results/deepspeed_kjv.csv"
      echo "== DeepSpeed: $(($(date +%s) - start)) s"
      ;;
    plot)
      inputs=("$results/kjv.csv")
      [ -f "$results/deepspeed_kjv.csv" ] && inputs+=("$results/deepspeed_kjv.csv")
      /usr/bin/python3 plots/plot_convergence.py "${inputs[@]}" "$results/kjv_corpus.json" \
        "$figure"
      ;;
    *)
      echo "convergence_on_text.sh: unknown part '$part' (ours, deepspeed, plot)" >&2
      exit 2
      ;;
  esac
done
