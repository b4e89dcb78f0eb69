#!/usr/bin/env bash
# The projection's results: the paper's experiments as the paper ran them, projected on its
# machines (weak and strong scaling, the ablation and the largest trainable model on Summit, the
# optimizer spike on ThetaGPU; experiments/*/paper*.yaml, experiments/clusters/), the layout
# search for the ablation's model, and the validation against the CPU experiments measured on
# this machine (results/<experiment>/cpu.csv) and the ablation measured on the emulated clusters
# (results/ablation/emulated_<topology>.csv, against clusters/cpu-emulated_<topology>.yaml). CSVs (with .assumptions.txt sidecars) in
# results/projection/, figures in plots/figures/paper_*.png and plots/figures/projection_*.png.
# Run ./scripts/calibration/calibrate_cpu.sh (and calibrate_emulated.sh) first to measure this machine anew.
#   ./scripts/project.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
project=$TED_BUILD/apps/ted_project
out=results/projection
mkdir -p "$out"
plot() { /usr/bin/python3 plots/plot_paper.py "$@"; }
# Each CSV is regenerated whole: every program appends.
projected() {  # projected <experiment/yaml stem> -> the CSV's path on stdout
  local yaml=experiments/$1.yaml cluster
  cluster=$(sed -n 's/^  cluster: experiments\/clusters\/\([^.]*\)\.yaml.*/\1/p' "$yaml")
  local csv=$out/$(dirname "$1")_$(basename "$1")_$cluster.csv
  rm -f "$csv"
  "$project" experiment -c "$yaml" --csv "$csv" >&2
  echo "$csv"
}
# The paper's five figures in the paper's form (plots/figures/paper_*.png, each with a .json sidecar of
# what it drew: tests/plots/check_paper_figures.py), and the suite's additions to them in figures
# of their own: DeepSpeed-MoE beside TED, every ablation variant (plots/figures/projection_*.png).
weak=$(projected weak_scaling/paper)
strong=$(projected strong_scaling/paper)
strong_fixed=$(projected strong_scaling/paper-6.7B-4E)
ablation=$(projected ablation/paper)
plot weak "$weak" plots/figures/paper_weak_scaling.png
plot strong "$strong" "$strong_fixed" plots/figures/paper_strong_scaling.png
plot ablation "$ablation" plots/figures/paper_ablation.png
plot largest "$(projected memory/paper)" plots/figures/paper_largest_model.png
plot spike "$(projected memory/paper-spike)" plots/figures/paper_optimizer_spike.png
plot weak-systems "$weak" plots/figures/projection_weak_scaling_systems.png
plot strong-systems "$strong" "$strong_fixed" plots/figures/projection_strong_scaling_systems.png
plot ablation-variants "$ablation" plots/figures/projection_ablation_variants.png
# The ablation and weak scaling under every forced routing workload, capacity and dropless
# (docs/projection.md, "Routing workloads"): one CSV per experiment, workload and dropless columns.
workloads() {  # workloads <experiment YAML> <cluster YAML> <out CSV>
  local yaml=$1 cluster=$2 csv=$3 tmp=$out/.workloads parts=() workload dropless
  rm -rf "$tmp" && mkdir -p "$tmp"  # inside the repository: the rows' command names it
  for dropless in false true; do
    for workload in balanced hot_experts hot_rank zipf zero_load rotating; do
      "$project" experiment -c "$yaml" --cluster "$cluster" \
        --set routing.workload=$workload --set gating.dropless=$dropless \
        --csv "$tmp/${workload}_$dropless.csv" >&2
      parts+=("$workload:$([ $dropless = true ] && echo 1 || echo 0):$tmp/${workload}_$dropless.csv")
    done
  done
  /usr/bin/python3 scripts/workload_rows.py "$csv" "${parts[@]}"
  rm -rf "$tmp"
}
for experiment in ablation weak_scaling; do
  workloads "experiments/$experiment/paper.yaml" experiments/clusters/summit.yaml \
    "$out/workloads_${experiment}_summit.csv"
done
/usr/bin/python3 plots/plot_workloads_projected.py "$out/workloads_ablation_summit.csv" \
  "$out/workloads_weak_scaling_summit.csv" plots/figures/paper_workloads.png
search=$out/search_6.7B-16E_summit_128.csv
rm -f "$search" "$out"/validation_cpu.csv
"$project" search -c experiments/ablation/paper.yaml --gpus 128 --top 15 --csv "$search"
for experiment in ablation weak_scaling strong_scaling; do
  "$project" validate -c "experiments/$experiment/cpu.yaml" --cluster experiments/clusters/cpu.yaml \
    --measured "results/$experiment/cpu.csv" --csv "$out/validation_cpu.csv" | tail -1
done
/usr/bin/python3 plots/plot_validation.py "$out/validation_cpu.csv" plots/figures/projection_validation_cpu.png
for topology in 2x2 2x2-slow; do
  rm -f "$out/validation_emulated_$topology.csv"
  "$project" validate -c experiments/ablation/cpu.yaml \
    --cluster "experiments/clusters/cpu-emulated_$topology.yaml" \
    --measured "results/ablation/emulated_$topology.csv" \
    --csv "$out/validation_emulated_$topology.csv" | tail -1
done
# The per-workload ratios against the measured sweep (results/ablation/workloads_cpu.csv, when
# it has been measured: experiments/ablation/workloads-cpu.yaml on 4 CPU ranks).
# The same on the emulated cluster (results/ablation/workloads_emulated_2x2.csv: the sweep run by
# scripts/emulated_cluster.sh experiments/emulated/2x2.yaml, against cpu-emulated_2x2.yaml).
# ted_project reads the sweep's YAML as it is (its sweep.* keys are the measured runs'; each
# projection takes its workload and capacity rule from --set), so the rows name the YAML itself.
yaml=experiments/ablation/workloads-cpu.yaml
for measured in cpu emulated_2x2; do
  [ -f "results/ablation/workloads_$measured.csv" ] || continue
  cluster=experiments/clusters/$([ $measured = cpu ] && echo cpu || echo cpu-emulated_2x2).yaml
  workloads "$yaml" "$cluster" "$out/workloads_ablation_$measured.csv"
  /usr/bin/python3 scripts/validate_workloads.py "results/ablation/workloads_$measured.csv" \
    "$out/workloads_ablation_$measured.csv" "$out/validation_workloads_$measured.csv" | tail -1
done
