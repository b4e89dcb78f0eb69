#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what is missing, build, calibrate the
# projection's model of this machine (results/local/ablation/this_machine.yaml, seconds), run the
# paper's ablation (TED-baseline, +DTD, +CAC, +both, +reduce-scatter) on 4 CPU ranks with the
# small settings in interleaved rounds, appending to results/local/ablation/cpu.csv and drawing
# plots/local/ablation_cpu.png (and .pdf, .json): measured here, projected here, and the paper's
# ablation projected on Summit; the title says whether the machine disturbed the run. Both
# folders are ignored by git: the job leaves the tree clean (./scripts/run_experiments.sh
# regenerates the committed results/ and plots/figures/).
# Idempotent: a second run installs and rebuilds nothing, measures again and appends its rows.
#   ./scripts/main.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
TED_RESULTS=results/local TED_PLOTS=plots/local ted_run_experiment ablation
