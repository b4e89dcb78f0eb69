#!/usr/bin/env bash
# Interleaved rounds and the disturbance flag (lib/ted/experiments/rounds.hpp, disturbance.hpp),
# and the main job's three-panel ablation figure (plots/plot_ablation.py) read back from its
# sidecar (tests/plots/check_ablation_figure.py):
#   - a run of 3 systems in 3 rounds on 2 ranks: each round times every system once, the order
#     rotated by one each round; a summary row per system pools its rounds;
#   - the same run while a busy loop takes one of the cores: flagged disturbed, in the CSV and
#     in the figure's title and sidecar;
#   - a quiet run is not flagged (up to three tries: a fresh machine may be busy for a moment;
#     one quiet run in three shows the flag is not raised by our own ranks);
#   - the figure's panels: measured here, projected here (the model calibrated on this machine,
#     with its error), the paper's ablation projected on Summit.
# Skipped (77) where /proc/stat cannot be read.
#   rounds_disturbance.sh <build/apps> <source dir> <scratch dir> <mpiexec>
set -euo pipefail
apps=$1 source_dir=$2 scratch=$3 mpiexec=$4
[ -r /proc/stat ] || { echo "no /proc/stat: skipped"; exit 77; }
rm -rf "$scratch" && mkdir -p "$scratch"
cd "$source_dir"
config=experiments/ablation/cpu.yaml
# Two cores, the ranks and the busy loop on them whatever the machine has: the loop on one of
# the cores the ranks may use, which are the cores the watch counts.
read -r first second < <(/usr/bin/python3 -c "import os; c = sorted(os.sched_getaffinity(0)); print(c[0], c[-1] if len(c) < 2 else c[1])")
[ "$first" != "$second" ] || { echo "one core: nothing to compare: skipped"; exit 77; }
ablation() {  # ablation <csv>: 3 systems, 3 rounds of 1 warm-up + 3 timed steps, 2 ranks
  taskset -c "$first,$second" "$mpiexec" -n 2 --oversubscribe --bind-to none \
    "$apps/ted_ablation" -c "$config" --csv "$1" \
    --set layout.ep=1 --set model.layers=2 --set systems=ted-baseline,ted+dtd,ted+dtd+cac \
    --iters 3 --rounds 3 | grep "^# \(round\|over\|machine\)"
}
verdict() {  # verdict <csv>: the summary rows' disturbed column, once
  /usr/bin/python3 -c "import csv,sys; print(*sorted({r['disturbed'] for r in csv.DictReader(open(sys.argv[1])) if not r['round']}))" "$1"
}
echo "== quiet"
quiet=""
for try in 1 2 3; do
  ablation "$scratch/quiet.csv"
  [ "$(verdict "$scratch/quiet.csv")" = 0 ] && { quiet=yes; break; }
  echo "(the machine was busy during try $try: again)"
  rm -f "$scratch/quiet.csv"
done
[ -n "$quiet" ] || { echo "FAILED: three quiet runs in a row flagged disturbed"; exit 1; }
echo "== with a busy loop on one core"
# Bounded: if the test is killed before its trap runs, the loop still ends.
taskset -c "$first" timeout 300 bash -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null || true' EXIT
ablation "$scratch/busy.csv"
kill $busy
wait $busy 2>/dev/null || true
trap - EXIT
"$apps/ted_project" experiment -c experiments/ablation/paper.yaml --csv "$scratch/paper.csv" \
  >/dev/null
for run in quiet busy; do
  "$apps/ted_project" validate -c "$config" --cluster experiments/clusters/cpu.yaml \
    --measured "$scratch/$run.csv" --csv "$scratch/$run-here.csv" >/dev/null
  /usr/bin/python3 plots/plot_ablation.py "$scratch/$run.csv" "$scratch/$run-here.csv" \
    "$scratch/paper.csv" "$scratch/$run.png" >/dev/null
done
/usr/bin/python3 tests/plots/check_ablation_figure.py "$scratch"
