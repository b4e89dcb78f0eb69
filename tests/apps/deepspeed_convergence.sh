#!/usr/bin/env bash
# The convergence experiment through DeepSpeed (baselines/deepspeed/run.py) against ours
# (ted_convergence) on 4 CPU ranks: experiments/convergence/cpu.yaml, 5 steps, the held-out loss
# at step 5, our dropout masks (dropout 0.1) and our initial weights on both sides.
# check_deepspeed_convergence.py holds DeepSpeed's rows to ours per system (deepspeed-moe =
# DeepSpeed-MoE at T = 1, ted+dtd = DeepSpeed-TED at T = 2 with its DTD; the third system has no
# DeepSpeed equal and no rows): per step loss, lm_loss, aux_loss, grad_norm and valid_loss within
# 1e-5 relative. Capacity factor 4: nothing is dropped, since which tokens a full expert drops
# is DeepSpeed's choice (torch.topk over a 0/1 mask) unless the tokens carry our priorities.
# Also --iters 0 (the correctness-only mode): 2 rows per system, as ted_convergence writes; and
# random token selection at capacity factor 1.0 (tokens dropped): the runner hands DeepSpeed's
# gate our priorities, so the same tokens are kept and the rows agree as tightly.
# Skipped (77) as deepspeed_baseline.sh is, without the environment.
#   deepspeed_convergence.sh <source dir> <build dir> <work dir> <mpiexec>
set -euo pipefail
source_dir=$1 build=$2 work=$3 mpiexec=$4
source "$source_dir/tests/apps/deepspeed_env.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$source_dir"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
config=experiments/convergence/cpu.yaml
check=$source_dir/tests/apps/check_deepspeed_convergence.py

# run <name> <steps> <options...>: ours on the config; DeepSpeed's run joins the one launch
# below (run.py --then: PyTorch and DeepSpeed load once).
names=() steps=() deepspeed=()
run() {
  local name=$1
  names+=("$name") steps+=("$2")
  shift 2
  "$mpiexec" -n 4 --oversubscribe "$build/apps/ted_convergence" -c "$config" "$@" \
    --csv "$work/ours_$name.csv" >/dev/null
  [ ${#deepspeed[@]} -eq 0 ] || deepspeed+=(--then)
  deepspeed+=(-c "$config" "$@" --csv "$work/deepspeed_$name.csv")
}
run nodrop 5 --set training.steps=5 --set training.eval_every=5 --set gating.capacity_factor=4
run iters0 2 --iters 0 --set gating.capacity_factor=4
# Random token selection at the YAML's capacity factor 1.0: tokens are dropped, and the runner hands
# DeepSpeed's gate our priorities (routing_probe.py), so it keeps the tokens ours keeps.
run rts 5 --set training.steps=5 --set training.eval_every=5 \
  --set gating.random_token_selection=true
baselines/deepspeed/launch.sh -n 4 "${deepspeed[@]}" >"$work/deepspeed.log"
# Each run says it skips the third system.
skips=$(grep -c "^# skipping ted+dtd+cac+rs+tile+bf16 at layout.\*: DeepSpeed has no reduce-scatter" \
  "$work/deepspeed.log" || true)
[ "$skips" = "${#names[@]}" ] || { echo "$skips skip lines for the third system, not ${#names[@]}" >&2; exit 1; }
for i in "${!names[@]}"; do
  /usr/bin/python3 "$check" "$work/ours_${names[i]}.csv" "$work/deepspeed_${names[i]}.csv" \
    "${steps[i]}" "${TOL:-1e-5}"
done
/usr/bin/python3 - "$work/ours_rts.csv" <<'PY'
import csv, sys
dropped = sum(int(r["dropped"]) for r in csv.DictReader(open(sys.argv[1])))
assert dropped > 0, "random token selection at capacity factor 1.0 dropped nothing: no test"
print(f"ok    random token selection, capacity factor 1.0: {dropped} choices dropped, the same")
PY
