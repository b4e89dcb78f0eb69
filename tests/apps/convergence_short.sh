#!/usr/bin/env bash
# The real-text convergence experiment, short: the corpus prepared by scripts/data/prepare_corpus.sh
# (Megatron-Core's writer, a tokenizer trained by Hugging Face tokenizers) into a scratch folder,
# ted_convergence on experiments/convergence/kjv.yaml on 8 ranks for 6 steps a system with the
# held-out loss at steps 3 and 6, the figure drawn, and check_convergence.py on the rows and the
# sidecar (the same first loss everywhere, the first steps together, the held-out loss falling).
# Skipped (77) where the DeepSpeed environment (megatron-core, tokenizers) cannot be installed.
#   convergence_short.sh <source dir> <build dir> <work dir> <mpiexec>
set -euo pipefail
source_dir=$1 build=$2 work=$3 mpiexec=$4
source "$source_dir/tests/apps/deepspeed_env.sh"
rm -rf "$work"
mkdir -p "$work"
cd "$source_dir"
start=$(date +%s)
TED_DATA_PYTHON=$venv/bin/python scripts/data/prepare_corpus.sh --out "$work/kjv" >"$work/corpus.log"
tail -3 "$work/corpus.log"
echo "# corpus in $(($(date +%s) - start)) s"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
"$mpiexec" -n 8 --oversubscribe "$build/apps/ted_convergence" -c experiments/convergence/kjv.yaml \
  --set "data.path=$work/kjv/kjv_text_document" --set training.steps=6 \
  --set training.eval_every=3 --set training.eval_batches=1 --csv "$work/kjv.csv" >"$work/run.log"
grep '^#' "$work/run.log" | tail -4
/usr/bin/python3 plots/plot_convergence.py "$work/kjv.csv" "$work/kjv/summary.json" \
  "$work/convergence.png"
/usr/bin/python3 tests/plots/check_convergence.py "$work/kjv.csv" --figure "$work/convergence.json"
echo "# $(($(date +%s) - start)) s in all"
