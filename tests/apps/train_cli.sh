#!/usr/bin/env bash
# ted_train's handling of bad configs: unknown key, wrong type, experts = 0, top-k > experts,
# heads not dividing hidden, a missing data file, a missing config file, an unknown option,
# several MPI ranks.
# Each gives one line, exit 2 and no CSV. Then a short good run writes one CSV row per step.
#   train_cli.sh <ted_train> <repository root> <scratch dir> <mpirun>
set -u
train=$1
root=$2
scratch=$3
mpirun=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
config="$root/experiments/train/tiny-cpu.yaml"
printf 'model:\n  hidden: 32\n  dropout: 0.1\n' >"$scratch/unknown_key.yaml"
printf 'model:\n  hidden: 32\noptimizer:\n  lr: fast\n' >"$scratch/wrong_type.yaml"

bad_input "unknown key in YAML" ted_train "$train" -c "$scratch/unknown_key.yaml"
bad_input "wrong type in YAML" ted_train "$train" -c "$scratch/wrong_type.yaml"
bad_input "unknown key in --set" ted_train "$train" -c "$config" --set model.hiden=8
bad_input "experts = 0" ted_train "$train" -c "$config" --set model.experts=0
bad_input "top-k > experts" ted_train "$train" -c "$config" --set model.experts=1 --set gating.top_k=2
bad_input "heads not dividing hidden" ted_train "$train" -c "$config" --set model.heads=5
bad_input "missing data file" ted_train "$train" -c "$config" --set data.source=file \
  --set data.path="$scratch/no_such_tokens.bin"
bad_input "missing config file" ted_train "$train" -c "$scratch/no_such.yaml"
bad_input "unknown option" ted_train "$train" -c "$config" --learning-rate 3
bad_input "started on several ranks" ted_train "$mpirun" -n 2 --oversubscribe -q "$train" -c "$config"

good="$scratch/good.csv"
if "$train" -c "$config" --steps 5 --csv "$good" >"$scratch/out" 2>"$scratch/err"; then
  rows=$(($(wc -l <"$good") - 1))
  [ "$rows" = 5 ] || fail "good run: $rows rows, expected 5"
  grep -q "^step     5/5 \[####################\] loss" "$scratch/out" ||
    fail "good run: no progress line for step 5: $(cat "$scratch/out")"
  echo "ok: good run wrote $rows rows"
else
  fail "good run exited $?: $(cat "$scratch/err")"
fi
finish
