#!/usr/bin/env bash
# DeepSpeed-TED's other forms on CPU ranks: (1) an experiment's YAML at T = 2 (the tiny ablation
# config, layout T = 2, Ep = 2 on 4 ranks) through ted_ablation (ted-baseline, ted+dtd, ted) and
# through run.py --systems all: our experiments' schema, one row per DeepSpeed configuration
# (ted's CAC has none: skipped with a line), the same layout, parameters and expert
# all-to-alls, and the tensor all-reduces and gathers of ours; (2) the vocabulary-parallel tied
# embedding (model.tie_embeddings, which ours does not have yet): DeepSpeed-TED at T = 2 on 4
# ranks against the same model at T = 1 on 2 ranks (the same data-parallel micro-batches):
# the same losses, gradient norms and fingerprint.
#   deepspeed_ted_forms.sh <source dir> <build dir> <work dir> <mpiexec>
set -euo pipefail
source_dir=$1 build=$2 work=$3 mpiexec=$4
start=$(date +%s)
source "$source_dir/tests/apps/deepspeed_env.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$source_dir"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
config=tests/apps/deepspeed_tiny.yaml
layout=(--set layout.tp=2 --set layout.ep=2 --set layout.dp=1
  --set systems=ted-baseline,ted+dtd,ted)
tied=(--set parallel.ep=2 --set parallel.dtd=true --set model.tie_embeddings=true --steps 3
  --set gating.capacity_factor=4)
"$mpiexec" -n 4 --oversubscribe "$build/apps/ted_ablation" -c "$config" "${layout[@]}" \
  --iters 0 --csv "$work/ours.csv" >/dev/null
# The ablation and the tied embedding at T = 2 in one launch of 4 ranks (run.py --then); T = 1
# on 2 ranks.
baselines/deepspeed/launch.sh -n 4 -c "$config" "${layout[@]}" --systems all \
  --csv "$work/deepspeed.csv" --then -c experiments/train/tiny-cpu.yaml --set parallel.tp=2 \
  "${tied[@]}" --csv "$work/tied_t2.csv" >"$work/deepspeed.log" 2>"$work/deepspeed.err" || {
  tail -30 "$work/deepspeed.err"
  exit 1
}
grep -q "skipping ted at layout.\*: DeepSpeed runs it as the ted row" "$work/deepspeed.log" || {
  echo "FAIL  run.py did not say that it runs ours' ted as its ted row (no CAC)"
  exit 1
}
echo "ok    run.py runs ours' ted (DTD + CAC) as its ted row, with a line saying so"
baselines/deepspeed/launch.sh -n 2 -c experiments/train/tiny-cpu.yaml --set parallel.tp=1 \
  "${tied[@]}" --csv "$work/tied_t1.csv" >"$work/tied_t1.log" 2>&1 || {
  tail -30 "$work/tied_t1.log"
  exit 1
}
echo "# the ablation and the tied embedding at T = 1 and 2 ran ($(($(date +%s) - start)) s)"
/usr/bin/python3 "$source_dir/tests/apps/check_deepspeed_ted.py" "$work" forms
echo "# $(($(date +%s) - start)) s in all"
