#!/usr/bin/env bash
# The projection's results: the paper's ablation and memory experiment projected on 128 V100s,
# the layout search for the 6.7B-base 16-expert model there, and the validation against the
# CPU experiments measured on this machine (results/<experiment>/cpu.csv). CSVs (with
# .assumptions.txt sidecars) in results/projection/, figures in plots/projection_*.png.
# Run ./scripts/calibrate_cpu.sh first to measure this machine anew.
#   ./scripts/project.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
project=$TED_BUILD/apps/ted_project
out=results/projection
mkdir -p "$out"
rm -f "$out"/ablation_paper_v100.csv "$out"/memory_paper_v100.csv "$out"/validation_cpu.csv \
  "$out"/search_6.7B-16E_v100_128.csv  # regenerated whole: every program appends
for experiment in ablation memory; do
  "$project" experiment -c "experiments/$experiment/paper.yaml" \
    --cluster experiments/clusters/v100.yaml --csv "$out/${experiment}_paper_v100.csv"
done
/usr/bin/python3 plots/plot_ablation.py "$out/ablation_paper_v100.csv" plots/projection_ablation_v100.png
/usr/bin/python3 plots/plot_memory.py "$out/memory_paper_v100.csv" plots/projection_memory_v100.png
"$project" search -c experiments/ablation/paper.yaml --cluster experiments/clusters/v100.yaml \
  --gpus 128 --top 15 --csv "$out/search_6.7B-16E_v100_128.csv"
for experiment in ablation weak_scaling strong_scaling; do
  "$project" validate -c "experiments/$experiment/cpu.yaml" --cluster experiments/clusters/cpu.yaml \
    --measured "results/$experiment/cpu.csv" --csv "$out/validation_cpu.csv" | tail -1
done
/usr/bin/python3 plots/plot_validation.py "$out/validation_cpu.csv" plots/projection_validation_cpu.png
