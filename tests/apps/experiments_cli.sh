#!/usr/bin/env bash
# The experiment programs' handling of input: bad YAML (unknown key, wrong type, a layout that
# does not divide the ranks, the wrong experiment, a list of the wrong length) gives one line
# naming the file and key, exit 2 and no CSV; the paper YAMLs stay valid (with the CPU backend
# forced, every point needs more ranks than launched and is skipped with a line).
#   experiments_cli.sh <build/apps> <repository root> <scratch dir> <mpirun>
set -u
apps=$1
root=$2
scratch=$3
mpirun=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
ablation="$root/experiments/ablation/cpu.yaml"
ranks() {  # <count> <program> <args...>
  local count=$1 program=$2
  shift 2
  "$mpirun" -n "$count" --oversubscribe -q "$apps/$program" "$@"
}
sed 's/^  tp: 2/  tpp: 2/' "$ablation" >"$scratch/unknown_key.yaml"
sed 's/^  iters: 5/  iters: five/' "$ablation" >"$scratch/wrong_type.yaml"
sed 's/^  tp: 2/  tp: 3/; s/^  dp: 1/  dp: 0/' "$ablation" >"$scratch/bad_layout.yaml"
bad_input "unknown key" ted_ablation ranks 2 ted_ablation -c "$scratch/unknown_key.yaml"
bad_input "wrong type" ted_ablation ranks 2 ted_ablation -c "$scratch/wrong_type.yaml"
bad_input "layout not dividing the ranks" ted_ablation ranks 4 ted_ablation -c "$scratch/bad_layout.yaml"
bad_input "another experiment's YAML" ted_memory ranks 2 ted_memory -c "$ablation"
bad_input "sweep lists of different lengths" ted_weak_scaling ranks 2 ted_weak_scaling \
  -c "$root/experiments/weak_scaling/cpu.yaml" --set sweep.tp=1,2
bad_input "unknown system" ted_ablation ranks 2 ted_ablation -c "$ablation" --set systems=ted+xyz
bad_input "a backend this build lacks" ted_ablation ranks 2 ted_ablation -c "$ablation" \
  --set run.backend=cuda
for experiment in ablation weak_scaling strong_scaling memory; do
  out="$scratch/paper_$experiment.out"
  if "$apps/ted_$experiment" -c "$root/experiments/$experiment/paper.yaml" --set run.backend=cpu \
    --set run.dtype=fp32 --iters 0 --csv "$scratch/paper.csv" >"$out" 2>&1; then
    grep -q "^# skipping" "$out" || fail "paper $experiment: no skipped points: $(cat "$out")"
    [ -e "$scratch/paper.csv" ] && fail "paper $experiment: wrote a CSV with nothing measured"
    echo "ok: experiments/$experiment/paper.yaml is valid"
  else
    fail "paper $experiment: $(cat "$out")"
  fi
done
finish
