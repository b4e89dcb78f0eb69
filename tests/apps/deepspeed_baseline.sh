#!/usr/bin/env bash
# The DeepSpeed baseline against ours on N CPU ranks: the tiny ablation-shaped config
# (deepspeed_tiny.yaml) through ted_ablation (deepspeed-moe and ted, one untimed step) and
# through baselines/deepspeed/run.py (one timed step), and ted_train's tiny config through both
# (5 steps, Ep = 2); check_deepspeed.py then holds the rows to each other: the same schema,
# finite losses, step-0 losses within 5% of ln(vocab) on both sides, the same tokens per step
# and parameters as our deepspeed-moe, the same expert all-to-alls. Then a forced routing
# workload (2 ranks: hot_rank, top-1; 4 ranks: zipf, top-2 with second-choice noise) through
# both, 3 steps: DeepSpeed's per-expert loads of every step and layer equal ours (print_workload
# loads, from our trainer), its dropped choices equal ted_train's at every step, and the
# baseline's Python port of the workloads gives our C++'s experts for every workload. On 2 ranks,
# dropout 0.1 under a forced workload without drops: DeepSpeed, drawing our masks, within 1e-5 of
# ours at every step (losses, gradient norm).
# Skipped (exit 77, with the reason) when the environment cannot be installed: no registry,
# or TED_SKIP_DEEPSPEED set.
#   deepspeed_baseline.sh <source dir> <build dir> <work dir> <mpiexec> <ranks>
set -euo pipefail
source_dir=$1 build=$2 work=$3 mpiexec=$4 ranks=$5
start=$(date +%s)
source "$source_dir/tests/apps/deepspeed_env.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$source_dir"
tp=1 dp=1
[ "$ranks" -ge 4 ] && tp=2 dp=$((ranks / 4))
layout=(--set layout.tp=$tp --set layout.ep=2 --set layout.dp=$dp)
config=tests/apps/deepspeed_tiny.yaml
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
# Ours runs each; DeepSpeed's runs are collected here and made in one launch (run.py --then:
# PyTorch and DeepSpeed load once).
"$mpiexec" -n "$ranks" --oversubscribe "$build/apps/ted_ablation" -c "$config" "${layout[@]}" \
  --iters 0 --csv "$work/ours.csv"
deepspeed=(-c "$config" "${layout[@]}" --csv "$work/deepspeed.csv")
"$mpiexec" -n "$ranks" --oversubscribe "$build/apps/ted_train" \
  -c experiments/train/tiny-cpu.yaml --ep 2 --steps 5 --csv "$work/ours_train.csv" >/dev/null
deepspeed+=(--then -c experiments/train/tiny-cpu.yaml --set parallel.ep=2 --steps 5
  --csv "$work/deepspeed_train.csv")
if [ "$ranks" = 2 ]; then
  # Dropout (model.dropout, the paper YAMLs' 0.1): the runner draws our masks
  # (baselines/deepspeed/dropout_masks.py), so both sides drop the same elements. Under a forced
  # workload at capacity factor 4 no token is dropped either (which tokens a full expert drops is
  # DeepSpeed's), so the two train alike step by step: the tolerance of the runs without dropout
  # (check_deepspeed_ted.py). DeepSpeed's losses must differ from ours' without dropout (the
  # masks are applied).
  same=(-c experiments/train/tiny-cpu.yaml --steps 5 --set parallel.ep=2
    --set routing.workload=zipf --set routing.zipf_s=1.2 --set gating.capacity_factor=4)
  "$mpiexec" -n "$ranks" --oversubscribe "$build/apps/ted_train" "${same[@]}" \
    --set model.dropout=0.1 --csv "$work/ours_dropout.csv" >/dev/null
  "$mpiexec" -n "$ranks" --oversubscribe "$build/apps/ted_train" "${same[@]}" \
    --csv "$work/ours_no_dropout.csv" >/dev/null
  deepspeed+=(--then "${same[@]}" --set model.dropout=0.1 --csv "$work/deepspeed_dropout.csv")
fi
if [ "$ranks" -ge 4 ]; then
  workload=(--set routing.workload=zipf --set routing.zipf_s=1.2 --set gating.top_k=2
    --set gating.second_choice_noise=true --set gating.capacity_factor=1.25)
else
  workload=(--set routing.workload=hot_rank --set routing.hot_share=0.8)
fi
"$mpiexec" -n "$ranks" --oversubscribe "$build/apps/ted_train" \
  -c experiments/train/tiny-cpu.yaml --ep 2 --steps 3 "${workload[@]}" \
  --csv "$work/ours_workload.csv" >/dev/null
deepspeed+=(--then -c experiments/train/tiny-cpu.yaml --set parallel.ep=2 --steps 3
  "${workload[@]}" --csv "$work/deepspeed_workload.csv" --loads "$work/deepspeed_loads.csv")
baselines/deepspeed/launch.sh -n "$ranks" "${deepspeed[@]}" >"$work/deepspeed.log" 2>&1 || {
  tail -30 "$work/deepspeed.log"
  exit 1
}
echo "# DeepSpeed's runs, one launch: $(($(date +%s) - start)) s so far; its output: $work/deepspeed.log"
if [ "$ranks" = 2 ]; then
  /usr/bin/python3 - "$work" <<'PY'
import csv, sys
def rows(name):
    return list(csv.DictReader(open(f"{sys.argv[1]}/{name}.csv")))
ours, theirs, plain = rows("ours_dropout"), rows("deepspeed_dropout"), rows("ours_no_dropout")
assert len(ours) == len(theirs) == 5, (len(ours), len(theirs))
assert all(a["loss"] != b["loss"] for a, b in zip(theirs, plain)), \
    f"dropout 0.1 changed no loss: {[r['loss'] for r in theirs]}"
assert theirs[0]["attention"] == "materialized", theirs[0]["attention"]
worst = {}
for a, b in zip(ours, theirs):
    for key in ("loss", "lm_loss", "aux_loss", "grad_norm"):
        worst[key] = max(worst.get(key, 0.0), abs(float(b[key]) / float(a[key]) - 1))
        assert worst[key] <= 1e-5, f"dropout 0.1, step {a['step']}: {key} DeepSpeed {b[key]}, " \
            f"ours {a[key]}"
    assert a["dropped"] == b["dropped"] == "0", (a["dropped"], b["dropped"])
fingerprint = abs(float(theirs[-1]["fingerprint"]) / float(ours[-1]["fingerprint"]) - 1)
assert fingerprint <= 1e-6, (theirs[-1]["fingerprint"], ours[-1]["fingerprint"])
print("ok    dropout 0.1, our masks on both sides: every step's loss, lm_loss, aux_loss and "
      "grad_norm within 1e-5 of ours (worst " +
      ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) +
      f"), the fingerprint within {fingerprint:.1e}; each loss unlike ours without dropout")
PY
fi
"$build/tests/print_workload" loads experiments/train/tiny-cpu.yaml "$ranks" training.steps=3 \
  $(printf '%s\n' "${workload[@]}" | grep -v -- --set) >"$work/ours_loads.csv"
/usr/bin/python3 "$source_dir/tests/apps/check_deepspeed.py" "$work" "$ranks" \
  "$build/tests/print_workload"
# The sbatch scripts' check mode (no Slurm needed): the paper YAMLs at the paper's rank counts
# pass; a config with an unknown key is refused with one line and exit 2.
# Those experiments/registry.txt says the baseline runs.
for script in $(awk '/^[a-z]/ && $5 == "yes" { print $1 }' experiments/registry.txt); do
  bash "baselines/deepspeed/slurm/$script.sbatch" --check --ranks 256 >/dev/null
done
echo "ok    sbatch --check passes the paper YAMLs"
printf 'experiment: ablation\nmodel:\n  bogus: 1\n' >"$work/bad.yaml"
rc=0
CONFIG=$work/bad.yaml bash baselines/deepspeed/slurm/ablation.sbatch --check --ranks 4 \
  2>"$work/bad.err" || rc=$?
[ "$rc" = 2 ] && grep -q "unknown key 'model.bogus'" "$work/bad.err" || {
  echo "FAIL  a bad config: exit $rc, $(cat "$work/bad.err")"
  exit 1
}
echo "ok    sbatch --check refuses a bad config: $(head -1 "$work/bad.err")"
# Runs joined by --then are all checked before the first starts: a bad key in the second, or two
# backends, is one line and exit 2, through launch.sh and from run.py itself, and no CSV is made.
tiny=(-c experiments/train/tiny-cpu.yaml --steps 1)
for case in "launch.sh:--set model.bogus=1:unknown key 'model.bogus'" \
  "run.py:--set model.bogus=1:unknown key 'model.bogus'" \
  "run.py:--set run.backend=cuda:the runs of one launch need one run.backend"; do
  IFS=: read -r how bad want <<<"$case"
  rm -f "$work"/then_*.csv
  # shellcheck disable=SC2206
  joined=("${tiny[@]}" --csv "$work/then_a.csv" --then "${tiny[@]}" $bad --csv "$work/then_b.csv")
  rc=0
  if [ "$how" = launch.sh ]; then
    baselines/deepspeed/launch.sh -n "$ranks" "${joined[@]}" >/dev/null 2>"$work/then.err" || rc=$?
  else
    "$venv/bin/python" baselines/deepspeed/run.py "${joined[@]}" >/dev/null 2>"$work/then.err" ||
      rc=$?
  fi
  [ "$rc" = 2 ] && [ "$(wc -l <"$work/then.err")" = 1 ] && grep -q "$want" "$work/then.err" &&
    ! ls "$work"/then_*.csv >/dev/null 2>&1 || {
    echo "FAIL  --then with '$bad' in the second run ($how): exit $rc, $(cat "$work/then.err")"
    exit 1
  }
  echo "ok    $how refuses --then with '$bad' in the second run before any: $(cat "$work/then.err")"
done
echo "# $(($(date +%s) - start)) s in all"
