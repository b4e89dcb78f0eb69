#!/usr/bin/env bash
# data.source megatron against Megatron-Core itself: datasets written by its IndexedDatasetBuilder
# (uint8, int8, int16, int32, int64, uint16; documents of varied lengths, some of several or empty
# sequences, one empty) and read back by its IndexedDataset; megatron_data_check.py derives each
# sample of the spec (lib/ted/train/megatron_data.hpp: windows, the per-epoch shuffle, the
# document split) from Megatron's reader and holds print_samples' (our C++) to them, sample for
# sample, over several epochs, with valid_fraction and with valid_path. Then ted_train trains two
# steps on one, and refuses bad pairs (a wrong magic, a wrong version, float tokens written by
# Megatron, a truncated .idx, a truncated .bin, a missing .bin, a token id >= model.vocab) with one
# line on stderr and exit 2 (--check does not open the data, so each runs one step).
# Skipped (exit 77, with the reason) when the DeepSpeed environment, which has megatron-core,
# cannot be installed: no registry, or TED_SKIP_DEEPSPEED set.
#   megatron_data.sh <source dir> <build dir> <work dir>
set -u
source_dir=$1 build=$2 work=$3
start=$(date +%s)
source "$source_dir/tests/apps/deepspeed_env.sh"
set -e
rm -rf "$work"
mkdir -p "$work"
python=$venv/bin/python
check=$source_dir/tests/apps/megatron_data_check.py
config=$source_dir/experiments/train/tiny-cpu.yaml
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1

# Megatron-Core's imports talk on stderr (no Transformer Engine, no triton): kept in a file,
# shown when a step fails.
megatron() {
  "$python" "$check" "$@" 2>"$work/python.err" || {
    cat "$work/python.err"
    echo "FAIL  megatron_data_check.py $*"
    exit 1
  }
}
megatron write "$work"
: >"$work/cases.txt"
# <name> <vocab> <seq_len> <seed> <valid_fraction> [<valid name>]: our samples, for the check
samples() {
  local name=$1 vocab=$2 seq_len=$3 seed=$4 fraction=$5 valid=${6:-}
  local keys=(data.source=megatron "data.path=$work/data/$name" "model.vocab=$vocab"
    "model.seq_len=$seq_len" "training.seed=$seed" "data.valid_fraction=$fraction")
  [ -n "$valid" ] && keys+=("data.valid_path=$work/data/$valid")
  local out=$work/samples$(wc -l <"$work/cases.txt").out
  # About 1,500 tokens a dataset: 220 samples run past two epochs at seq_len 16.
  "$build/tests/print_samples" "$config" 220 "${keys[@]}" >"$out"
  echo "$name $out $seq_len $seed $fraction $valid" >>"$work/cases.txt"
}
samples corpus_uint16 5000 16 1234 0
samples corpus_int32 100000 16 1234 0
samples corpus_uint8 256 16 1234 0
samples corpus_int8 128 16 1234 0
samples corpus_int16 30000 16 99 0
samples corpus_int64 100000 16 1234 0
samples corpus_uint16 5000 16 77 0.1
samples corpus_int32 100000 7 5 0.05
samples corpus_uint16 5000 16 1234 0 held_out
megatron check "$work"

# The DeepSpeed runner's source (baselines/deepspeed/gpt_moe.py MegatronSource) on the same
# datasets: the lines our C++ printed, sample for sample; and its own checks against the spec.
: >"$work/python_cases.txt"
while read -r name out seq_len seed fraction valid; do
  line="$out.py data.source=megatron data.path=$work/data/$name model.seq_len=$seq_len"
  line+=" training.seed=$seed data.valid_fraction=$fraction model.vocab=100000"
  [ -n "$valid" ] && line+=" data.valid_path=$work/data/$valid"
  echo "$line" >>"$work/python_cases.txt"
done <"$work/cases.txt"
"$python" "$source_dir/tests/apps/megatron_samples_py.py" print-cases "$config" 220 \
  "$work/python_cases.txt" 2>>"$work/python.err"
while read -r name out seq_len seed fraction valid; do
  if ! diff -q <(grep -v '^#' "$out") <(grep -v '^#' "$out.py") >/dev/null; then
    echo "FAIL  the DeepSpeed runner's samples of $name (seed $seed, fraction $fraction) differ from ours"
    diff <(grep -v '^#' "$out") <(grep -v '^#' "$out.py") | head -4
    exit 1
  fi
done <"$work/cases.txt"
echo "ok    the DeepSpeed runner's Megatron source reads the same samples as ours in all $(wc -l <"$work/cases.txt") cases"
"$python" "$source_dir/tests/apps/megatron_samples_py.py" selftest >"$work/selftest.out" \
  2>>"$work/python.err" || { cat "$work/selftest.out"; echo "FAIL  megatron_samples_py.py selftest"; exit 1; }
echo "ok    megatron_samples_py.py selftest: $(grep -c '^ok' "$work/selftest.out") checks of the runner's source against the spec"

# ted_train on a Megatron dataset: two steps, its data line saying what it reads.
"$build/apps/ted_train" -c "$config" --set data.source=megatron \
  --set "data.path=$work/data/corpus_uint16" --set model.vocab=5000 --set data.valid_fraction=0.1 \
  --steps 2 --csv "$work/train.csv" >"$work/train.out"
grep -q "^# data: megatron dataset $work/data/corpus_uint16 (uint16, 33 documents, " \
  "$work/train.out" || {
  echo "FAIL  ted_train's data line: $(grep '^# data' "$work/train.out")"
  exit 1
}
echo "ok    ted_train trains on it: $(grep '^# data' "$work/train.out")"

# Bad pairs: one line, exit 2, no CSV (cli_checks.sh).
set +e
scratch=$work/cli
mkdir -p "$scratch"
source "$source_dir/tests/apps/cli_checks.sh"
bad() {  # <case> <expected words>
  bad_input "Megatron data: $1" ted_train "$build/apps/ted_train" -c "$config" \
    --set data.source=megatron --set "data.path=$work/bad/$1" --set model.vocab=5000 --steps 1
  says "$1" "$2"
}
bad bad_magic "does not start with Megatron's magic MMIDIDX"
bad bad_version "has version 2; Megatron-Core writes and reads version 1"
bad float "holds float32 tokens (dtype code 7): token ids must be an integer type"
bad truncated_idx "document indices need"
bad truncated_bin "its .idx's last sequence ends at: truncated"
bad missing_bin "the Megatron data '$work/bad/missing_bin.bin' does not exist"
bad big_id "holds token id 5000 at token 40 (sequence 0, document 0), not below model.vocab 5000"
echo "# $(($(date +%s) - start)) s in all"
finish
