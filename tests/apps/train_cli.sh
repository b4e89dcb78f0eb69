#!/usr/bin/env bash
# ted_train's handling of bad configs: unknown key, wrong type, experts = 0, top-k > experts,
# heads not dividing hidden, a missing data file, a missing config file, an unknown option, an
# unknown backend or dtype, NCCL on the CPU, the CUDA backend without a GPU;
# on several ranks: a layout that does not match them, experts or heads that do not split over
# the groups, switches that need each other.
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
printf 'model:\n  hidden: 32\n  attention_dropout: 0.1\n' >"$scratch/unknown_key.yaml"
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
bad_input "unknown backend" ted_train "$train" -c "$config" --backend tpu
bad_input "unknown gradient type" ted_train "$train" -c "$config" --set training.grad_dtype=fp8
bad_input "16-bit gradients of fp32 weights" ted_train "$train" -c "$config" \
  --set training.grad_dtype=bf16
bad_input "a gradient type other than the weights'" ted_train "$train" -c "$config" --dtype fp16 \
  --set training.grad_dtype=bf16
bad_input "unknown dtype" ted_train "$train" -c "$config" --dtype fp8
bad_input "NCCL with the CPU backend" ted_train "$train" -c "$config" --comm nccl
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  bad_input "the CUDA backend without a GPU" ted_train "$train" -c "$config" --backend cuda
fi
# On several ranks: one line from rank 0, exit code 2 from every rank, no hang.
ranks() {  # <count> <args...>
  local count=$1
  shift
  "$mpirun" -n "$count" --oversubscribe "$train" -c "$config" "$@"
}
bad_input "layout not matching the ranks" ted_train ranks 4 --tp 3
bad_input "layout multiplying to more ranks" ted_train ranks 4 --tp 2 --ep 2 --dp 2
bad_input "experts not divisible by Ep" ted_train ranks 4 --ep 4 --set model.experts=6
bad_input "heads not divisible by T" ted_train ranks 3 --tp 3
bad_input "CAC without checkpointing" ted_train ranks 2 --ep 2 --cac
bad_input "reduce-scatter without DTD" ted_train ranks 2 --tp 2 --reduce-scatter

# A good run on 4 ranks (T=2, Ep=2, DTD) equals the single-process run of the same global
# batch: same fingerprint.
fingerprint() { sed -n 's/^# fingerprint //p' "$1"; }
"$train" -c "$config" --steps 3 --set data.micro_batches=4 --csv "$scratch/one.csv" >"$scratch/one.out" 2>&1 ||
  fail "single-process run: $(cat "$scratch/one.out")"
ranks 4 --tp 2 --ep 2 --dtd --steps 3 --csv "$scratch/four.csv" >"$scratch/four.out" 2>&1 ||
  fail "4-rank run: $(cat "$scratch/four.out")"
one=$(fingerprint "$scratch/one.out")
four=$(fingerprint "$scratch/four.out")
/usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))" \
  "$one" "$four" || fail "fingerprints differ: $one (1 rank) vs $four (4 ranks)"
echo "ok: fingerprint $one on 1 rank, $four on 4 ranks"

# Mixed precision on CPU ranks: bf16 and fp16 runs train, and their rows say so (fp16 with
# 16-bit gradients, training.grad_dtype, as DeepSpeed's fp16 ZeRO-1).
for dtype in bf16 fp16; do
  grads=fp32
  [ "$dtype" = fp16 ] && grads=fp16
  ranks 2 --ep 2 --dtype "$dtype" --set training.grad_dtype=$grads --steps 3 \
    --csv "$scratch/$dtype.csv" >"$scratch/$dtype.out" 2>&1 ||
    fail "$dtype run: $(cat "$scratch/$dtype.out")"
  /usr/bin/python3 - "$scratch/$dtype.csv" "$dtype" "$grads" <<'PY' || fail "$dtype run: CSV rows"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 3, rows
assert all((r["backend"], r["dtype"], r["grad_dtype"], r["comm"], r["device"]) ==
           ("cpu", sys.argv[2], sys.argv[3], "mpi", "cpu") for r in rows), rows[0]
assert float(rows[-1]["loss"]) < float(rows[0]["loss"]), [r["loss"] for r in rows]
PY
  echo "ok: a $dtype run on 2 ranks, $grads gradients"
done

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
