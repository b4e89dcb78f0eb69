#!/usr/bin/env bash
# All four of the paper's experiments on 4 CPU ranks with their small settings
# (experiments/<name>/cpu.yaml): CSV rows appended under results/<name>/, figures in plots/.
# Takes a minute or two. Give names to run only some: ./scripts/run_experiments.sh memory
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
for experiment in "${@:-ablation weak_scaling strong_scaling memory}"; do
  for name in $experiment; do ted_run_experiment "$name"; done
done
