#!/usr/bin/env bash
# DeepSpeed-TED (baselines/deepspeed: DeepSpeed's MoE layer with its mpu, the Megatron-style
# tensor-parallel GPT) against ours on 4 CPU ranks, T = 2, Ep = 2: ted_train's tiny config, 3
# steps under a forced routing workload (zipf, capacity factor 4: nothing dropped, so every
# token takes the same path on both sides), once per DeepSpeed configuration:
#   ted        tensor-parallel experts with DeepSpeed's Duplicate Token Dropping = our --dtd
#   ted-nodtd  the same with its token dropping taken out               = our ted-baseline
#   ted-whole  whole experts (each tensor rank 1/T of the capacity)       = --dtd --no-split-experts
#   ted-dropout  ted with model.dropout 0.1: the runner draws our masks (dropout_masks.py), so
#                both sides drop the same elements and it is held to ours as tightly
# check_deepspeed_ted.py then holds each DeepSpeed run to ours: the losses and gradient norms
# of every step and the final fingerprint, the per-expert loads of every step and layer, the
# bytes of every collective per operation and group (as the schedules' designs relate them),
# and the memory DeepSpeed's counting finds where both hold the same (parameters, gradients).
# Then baselines/deepspeed/facts.py checks what the baseline relies on in DeepSpeed itself.
# Skipped (77) as deepspeed_baseline.sh is, without the environment.
#   deepspeed_ted.sh <source dir> <build dir> <work dir> <mpiexec>
set -euo pipefail
source_dir=$1 build=$2 work=$3 mpiexec=$4
start=$(date +%s)
source "$source_dir/tests/apps/deepspeed_env.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$source_dir"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
config=experiments/train/tiny-cpu.yaml
common=(--set parallel.tp=2 --set parallel.ep=2 --steps 3 --set routing.workload=zipf
  --set routing.zipf_s=1.2 --set gating.capacity_factor=4)
declare -A switches=([ted]="--set parallel.dtd=true" [ted-nodtd]=""
  [ted-whole]="--set parallel.dtd=true --set parallel.split_experts=false"
  [ted-dropout]="--set parallel.dtd=true --set model.dropout=0.1")
runs=()  # DeepSpeed's four runs, one launch (run.py --then): PyTorch and DeepSpeed load once
for name in ted ted-nodtd ted-whole ted-dropout; do
  # shellcheck disable=SC2206
  extra=(${switches[$name]})
  "$mpiexec" -n 4 --oversubscribe "$build/apps/ted_train" -c "$config" "${common[@]}" \
    "${extra[@]}" --csv "$work/ours_$name.csv" >/dev/null
  [ ${#runs[@]} -eq 0 ] || runs+=(--then)
  runs+=(-c "$config" "${common[@]}" "${extra[@]}" --csv "$work/deepspeed_$name.csv"
    --loads "$work/deepspeed_loads_$name.csv")
done
echo "# ours ran ($(($(date +%s) - start)) s)"
baselines/deepspeed/launch.sh -n 4 "${runs[@]}" >"$work/deepspeed.log" 2>&1 || {
  tail -30 "$work/deepspeed.log"
  exit 1
}
echo "# DeepSpeed ran its four in one launch ($(($(date +%s) - start)) s)"
# Ours' per-expert loads: the trainer's, over the 2 data-parallel ranks of T = 2, Ep = 2.
"$build/tests/print_workload" loads "$config" 2 training.steps=3 routing.workload=zipf \
  routing.zipf_s=1.2 gating.capacity_factor=4 >"$work/ours_loads.csv"
/usr/bin/python3 "$source_dir/tests/apps/check_deepspeed_ted.py" "$work"
# What the baseline relies on in DeepSpeed, checked on the installed one.
export TORCH_EXTENSIONS_DIR=$venv/torch_extensions DS_ACCELERATOR=cpu OMP_NUM_THREADS=1
"$venv/bin/python" -m torch.distributed.run --standalone --nproc_per_node 4 \
  baselines/deepspeed/facts.py >"$work/facts.log" 2>"$work/facts.err" || {
  cat "$work/facts.log"
  tail -30 "$work/facts.err"
  exit 1
}
grep -v '^#' "$work/facts.log" | sed 's/^confirmed/ok    confirmed/'
echo "# $(($(date +%s) - start)) s in all"
