#!/usr/bin/env bash
# Overlap measured: the ablation's model (experiments/ablation/overlap.yaml) on an emulated
# cluster (default the 2 x 2 one at 250 Mbit/s), ted against ted+overlap2 and ted+overlap4, in
# ROUNDS rounds (default 5) that alternate the order of the systems, so that drift of this
# shared machine falls on all of them. Rows go to results/ablation/overlap_emulated_<topology>.csv
# (appended); then the projection's prediction for the same points
# (results/projection/validation_overlap_<topology>.csv) and the figure
# plots/figures/ablation_overlap_<topology>.png. Needs root (scripts/emulated_cluster.sh).
#   ./scripts/comparisons/measure_overlap.sh [experiments/emulated/2x2-slow.yaml]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ted_prepare
topology=${1:-experiments/emulated/2x2-slow.yaml}
tag=$(basename "$topology" .yaml)
config=experiments/ablation/overlap.yaml
csv=results/ablation/overlap_emulated_$tag.csv
systems=(ted ted+overlap2 ted+overlap4)
for round in $(seq 1 "${ROUNDS:-5}"); do
  order=("${systems[@]}")
  if [ $((round % 2)) -eq 0 ]; then order=(ted+overlap4 ted+overlap2 ted); fi
  echo "== round $round: ${order[*]}"
  for system in "${order[@]}"; do
    scripts/emulated_cluster.sh "$topology" "$TED_BUILD/apps/ted_ablation" -c "$config" \
      --set "systems=$system" --csv "$csv" | grep -E '^\[' || true
  done
done
out=results/projection/validation_overlap_$tag.csv
rm -f "$out"
"$TED_BUILD/apps/ted_project" validate -c "$config" \
  --cluster "experiments/clusters/cpu-emulated_$tag.yaml" --measured "$csv" --csv "$out" | tail -1
/usr/bin/python3 plots/plot_overlap.py "$csv" "$out" "plots/figures/ablation_overlap_$tag.png"
