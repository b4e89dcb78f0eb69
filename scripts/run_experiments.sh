#!/usr/bin/env bash
# All of the paper's experiments on 4 CPU ranks with their small settings
# (experiments/registry.txt; experiments/<name>/cpu.yaml): CSV rows appended under results/<name>/, figures in plots/figures/.
# Takes a minute or two. Give names to run only some: ./scripts/run_experiments.sh memory
# --emulated <topology.yaml> runs them on an emulated multi-node cluster instead (root only):
#   ./scripts/run_experiments.sh --emulated experiments/emulated/2x2.yaml ablation
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
topology=
if [ "${1:-}" = --emulated ]; then
  topology=${2:?--emulated needs a topology YAML}
  shift 2
fi
ted_prepare
for experiment in "${@:-$(ted_experiments)}"; do
  for name in $experiment; do ted_run_experiment "$name" "$topology"; done
done
