#!/usr/bin/env bash
# Every program against each class of bad input a new user types (numbers out of range,
# non-finite floats, sizes that overflow or do not fit, paths that are directories or missing,
# duplicate YAML keys, incomplete cluster files, a wrong Slurm launch): one line on stderr
# naming the key, value or file, exit 2, no CSV created or touched (cli_checks.sh). Then what a
# run must keep or say: --check, CSVs appended (never replaced), a point that does not fit is a
# row, a run killed half-way keeps its rows, and a rank's threads follow its affinity mask.
#   input_classes.sh <build/apps> <repository root> <scratch dir>
set -u
apps=$1
root=$2
scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
train=(ted_train "$apps/ted_train" -c "$root/experiments/train/tiny-cpu.yaml")
ablation=(ted_ablation "$apps/ted_ablation" -c "$root/experiments/ablation/cpu.yaml")
weak=(ted_weak_scaling "$apps/ted_weak_scaling" -c "$root/experiments/weak_scaling/cpu.yaml")
memory=(ted_memory "$apps/ted_memory" -c "$root/experiments/memory/cpu.yaml")
collbench=(ted_collbench "$apps/ted_collbench")
paper="$root/experiments/ablation/paper.yaml"
cluster="$root/experiments/clusters/summit.yaml"
project() { "$apps/ted_project" "$@"; }
# The message must also name what was wrong.
named() {  # <text> <description> <program> <command...>
  local text=$1
  shift
  bad_input "$@"
  grep -qF -- "$text" "$scratch/err" || fail "$1: the line does not name '$text'"
}

echo "## numbers out of range, on the command line and in YAML"
named training.steps "--steps -3" "${train[@]}" --steps -3
named training.steps "--steps 0" "${train[@]}" --steps 0
named parallel.tp "--tp -1" "${train[@]}" --tp -1
named parallel.ep "--ep 0" "${train[@]}" --ep 0
named parallel.dp "--dp -1" "${train[@]}" --dp -1
named parallel.tile_elems "--tile -5" "${train[@]}" --tile -5
named run.iters "--iters -1" "${ablation[@]}" --iters -1
named run.warmup "run.warmup -2" "${ablation[@]}" --set run.warmup=-2
named layout.tp "layout.tp 0" "${ablation[@]}" --set layout.tp=0
named sweep "a sweep with 0 ranks" "${weak[@]}" --set sweep.ranks=0,0,0
named sweep "a sweep with negative ranks" "${weak[@]}" --set sweep.ranks=-4,2,4
named memory.budget_bytes "a negative budget" "${memory[@]}" --set memory.budget_bytes=-1
named iters "collbench -n -1" "${collbench[@]}" -n -1
named "tensor size T" "collbench --tp 0" "${collbench[@]}" --tp 0
named --ranks "--check --ranks 0" "${train[@]}" --check --ranks 0
named --gpus "search --gpus 0" ted_project project search -c "$paper" --cluster "$cluster" --gpus 0
named --top "search --top 0" ted_project project search -c "$paper" --cluster "$cluster" --gpus 8 --top 0

echo "## non-finite and absurd floats"
named gating.capacity_factor "capacity factor inf" "${train[@]}" --set gating.capacity_factor=inf
named gating.capacity_factor "capacity factor 1e300" "${train[@]}" --set gating.capacity_factor=1e300
named optimizer.lr "learning rate inf" "${train[@]}" --set optimizer.lr=inf
named optimizer.lr "learning rate 1e300" "${train[@]}" --set optimizer.lr=1e300
named model.init_std "init scale nan" "${train[@]}" --set model.init_std=nan
named model.init_std "init scale 1e30" "${train[@]}" --set model.init_std=1e30
named data.noise "noise nan" "${train[@]}" --set data.noise=nan
named run.loss_scale "loss scale -inf" "${ablation[@]}" --set run.loss_scale=-inf
printf 'experiment: ablation\ngating:\n  capacity_factor: .nan\nsystems: [ted]\n' >"$scratch/nan.yaml"
named gating.capacity_factor "YAML .nan" ted_ablation "$apps/ted_ablation" -c "$scratch/nan.yaml"
sed 's/^sustained_flops:.*/sustained_flops: .inf/' "$cluster" >"$scratch/inf_cluster.yaml"
named sustained_flops "a cluster rate .inf" ted_project project experiment -c "$paper" \
  --cluster "$scratch/inf_cluster.yaml"

echo "## sizes that overflow or do not fit"
named model.hidden "hidden 600000000" "${train[@]}" --set model.hidden=600000000
named model.vocab "vocab 10^8" "${train[@]}" --set model.vocab=100000000
named "one tensor" "hidden 65536 (a 2^34-element tensor)" "${train[@]}" --set model.hidden=65536
named data.micro_batch "micro-batch 10^8" "${train[@]}" --set data.micro_batch=100000000
named "does not fit" "a model larger than this machine" "${train[@]}" --set model.hidden=16384 \
  --set model.heads=128 --set model.layers=400 --set model.experts=64
# An allocation that fails though the projection fits (here: a 1.5 GB address-space limit):
# one line naming the bytes and what they were for, not MPI's abort banner.
limited() { (ulimit -v 1500000 && exec "$@"); }
named "cannot allocate 3224944640 bytes" "a failed allocation" ted_train limited "${train[@]:1}" \
  --set model.hidden=2048 --set model.heads=16 --set model.layers=8 --set model.vocab=256
named maxbytes "collbench -b 64G -e 64G" "${collbench[@]}" -b 64G -e 64G
named maxbytes "collbench -e 16E" "${collbench[@]}" -e 99999999999G

echo "## files"
named "is a directory" "-c a directory" ted_train "$apps/ted_train" -c "$root/experiments"
named "is a directory" "-c a directory (experiment)" ted_ablation "$apps/ted_ablation" -c "$root"
named "does not exist" "-c a missing file" ted_ablation "$apps/ted_ablation" -c "$scratch/none.yaml"
named data.path "data.path a directory" "${train[@]}" --set data.source=file --set data.path="$root"
named run.cluster "run.cluster missing" "${ablation[@]}" --set run.cluster="$scratch/none.yaml"
printf 'model:\n  hidden: 32\n  hidden: 64\n' >"$scratch/duplicate.yaml"
named "'model.hidden' appears twice" "a key given twice" ted_train "$apps/ted_train" -c "$scratch/duplicate.yaml"
printf 'model:\n  hidden: 32\ndata:\n  noise: 0.1\nmodel:\n  layers: 2\n' >"$scratch/duplicate_section.yaml"
named "'model' appears twice" "a section given twice" ted_train "$apps/ted_train" -c "$scratch/duplicate_section.yaml"
named "is a directory" "--cluster a directory" ted_project project experiment -c "$paper" --cluster "$root"
grep -v '^sustained_flops' "$cluster" >"$scratch/partial_cluster.yaml"
named "is missing" "a cluster file without its rates" ted_project project experiment -c "$paper" \
  --cluster "$scratch/partial_cluster.yaml"
named "is a directory" "--measured a directory" ted_project project validate -c "$paper" \
  --cluster "$cluster" --measured "$root/results"
printf 'a,b\n1,2\n' >"$scratch/other.csv"
named "has no column" "--measured a CSV of another kind" ted_project project validate -c "$paper" \
  --cluster "$cluster" --measured "$scratch/other.csv"
named "unknown subcommand 'foo'" "an unknown subcommand" ted_project project foo
mkdir -p "$scratch/a_folder.csv"
for program in train ablation; do
  declare -n command=$program
  extra=(--iters 0)
  [ "$program" = train ] && extra=(--steps 1)
  "${command[@]:1}" --csv "$scratch/a_folder.csv" "${extra[@]}" >/dev/null 2>"$scratch/err" </dev/null
  rc=$?
  [ "$rc" = 2 ] && grep -q "is a directory" "$scratch/err" && [ "$(wc -l <"$scratch/err")" = 1 ] ||
    fail "$program --csv a directory: exit $rc: $(cat "$scratch/err")"
done 2>/dev/null
echo "ok: --csv a directory"

echo "## Slurm: a world that does not match SLURM_NTASKS (a wrong srun --mpi plugin)"
named SLURM_NTASKS "SLURM_NTASKS=4, one rank" ted_train env SLURM_NTASKS=4 "${train[@]:1}"

echo "## --check: validates, prints one line, writes nothing"
out=$("${train[@]:1}" --check --ranks 8 --tp 2 --ep 2 --csv "$scratch/check.csv" 2>&1)
[ $? = 0 ] && grep -q "^ted_train: check passed: .* on 8 ranks as T=2 Ep=2 D=2" <<<"$out" &&
  [ ! -e "$scratch/check.csv" ] || fail "--check of a good config: $out"
named "does not divide" "--check of a layout not dividing the ranks" "${train[@]}" --check --ranks 6 --tp 4
named "divisible by Ep" "--check of experts not splitting over Ep" "${train[@]}" --check --ranks 4 \
  --ep 4 --set model.experts=6
named "divisible by T" "--check of an experiment whose heads do not split over T" ted_ablation \
  "$apps/ted_ablation" -c "$paper" --check --ranks 128 --set model.heads=2
out=$(SLURM_NTASKS=128 "$apps/ted_ablation" -c "$paper" --set model.layers=8 --check \
  --csv "$scratch/check.csv" 2>&1)
rc=$?
# The paper's config runs on CUDA: a build without it refuses in one line, exit 2.
if [ "$rc" = 2 ] && grep -q "this build has no CUDA backend" <<<"$out"; then
  [ ! -e "$scratch/check.csv" ] || fail "--check of the paper's ablation wrote a CSV"
  echo "ok (refused: this build has no CUDA): --check of the paper's ablation on 128 ranks"
elif ! { [ "$rc" = 0 ] && grep -q "on 128 ranks: 5 points .*judged against cluster summit" <<<"$out" &&
  [ ! -e "$scratch/check.csv" ]; }; then
  fail "--check of the paper's ablation on 128 ranks: $out"
fi
named "no point fits" "--check of a model no GPU holds" ted_ablation "$apps/ted_ablation" -c "$paper" \
  --check --ranks 128 --set model.layers=400
echo "ok: --check"

echo "## CSVs are appended to, never replaced"
rows() { echo $(($(wc -l <"$1") - 1)); }
for i in 1 2; do
  project search -c "$paper" --cluster "$cluster" --gpus 16 --top 1 --csv "$scratch/search.csv" >/dev/null ||
    fail "search run $i"
  project validate -c "$root/experiments/ablation/cpu.yaml" --cluster "$root/experiments/clusters/cpu.yaml" \
    --measured "$root/results/ablation/cpu.csv" --csv "$scratch/validate.csv" >/dev/null || fail "validate run $i"
done
search_rows=$(rows "$scratch/search.csv")
[ "$search_rows" -gt 0 ] && [ $((search_rows % 2)) = 0 ] && [ "$(grep -c '^experiment,system,' "$scratch/search.csv")" = 1 ] ||
  fail "search twice: $search_rows rows"
[ "$(rows "$scratch/validate.csv")" = 10 ] || fail "validate twice: $(rows "$scratch/validate.csv") rows, expected 10"
echo "ok: search and validate append"

echo "## the memory experiment: a point that does not fit is a row saying so"
one_rank=(--set sweep.ranks=1 --set sweep.tp=1 --set sweep.ep=1 --set layout.tp=1 --set layout.ep=1
  --set systems=ted --iters 0)
"${memory[@]:1}" "${one_rank[@]}" --set family.hidden=64,16384 --set family.heads=4,128 \
  --set family.layers=4,400 --csv "$scratch/memory.csv" >"$scratch/out" 2>&1 ||
  fail "memory experiment with a model that does not fit: $(tail -3 "$scratch/out")"
/usr/bin/python3 - "$scratch/memory.csv" <<'PY' || fail "memory experiment rows"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["model"] for r in rows] == ["h128-L4-E8", "h64-L4-E8", "h16384-L400-E8"], rows
assert [r["status"] for r in rows[:2]] == ["measured", "measured"], rows
assert rows[2]["status"].startswith("not run: does not fit"), rows[2]["status"]
assert rows[2]["fits"] == "0" and rows[1]["fits"] == "1", (rows[1]["fits"], rows[2]["fits"])
PY
echo "ok: memory experiment row 3: $(tail -1 "$scratch/memory.csv" | grep -o 'not run[^,]*' | head -1)"

echo "## a run killed half-way keeps the rows it measured"
partial="$scratch/partial.csv"
"${ablation[@]:1}" --set layout.tp=1 --set layout.ep=1 --iters 2 --csv "$partial" >"$scratch/out" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q '^\[1/5\]' "$scratch/out" && break; sleep 0.1; done
kill -9 "$job" 2>/dev/null
wait "$job" 2>/dev/null
if grep -q '^\[2/5\]\|^\[5/5\]' "$scratch/out"; then
  echo "note: the run got past point 1 before the kill"
fi
[ -f "$partial" ] && [ "$(rows "$partial")" -ge 1 ] ||
  fail "killed after point 1: $( [ -f "$partial" ] && rows "$partial" || echo no) rows kept"
/usr/bin/python3 -c "
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
assert all(len(r) == len(rows[0]) for r in rows), 'a short row'" "$partial" || fail "killed run: a broken row"
echo "ok: killed after point 1, $(rows "$partial") row(s) kept"

echo "## a rank's CPU threads follow its affinity mask"
if command -v taskset >/dev/null && [ "$(nproc --all)" -gt 1 ]; then
  out=$(taskset -c 0 "${train[@]:1}" --steps 1 --csv "$scratch/threads.csv" 2>&1)
  grep -q "cpu threads per rank: 1 " <<<"$out" || fail "taskset -c 0: $(grep threads <<<"$out")"
  out=$("${train[@]:1}" --steps 1 --csv "$scratch/threads.csv" 2>&1)
  grep -q "cpu threads per rank: $(nproc) " <<<"$out" || fail "no mask: $(grep threads <<<"$out")"
  echo "ok: threads follow the mask"
else
  echo "note: one CPU or no taskset: the affinity check did not run"
fi
finish
