#!/usr/bin/env bash
# The experiment programs' handling of input: bad YAML (unknown key, wrong type, a layout that
# does not divide the ranks, the wrong experiment, a list of the wrong length, an unknown dtype,
# NCCL on the CPU, the CUDA backend without a GPU, ranks that give the plan no point or leave
# ranks idle, --point beyond the plan) gives one line naming the file and key, exit 2 and no
# CSV; --point K runs only point K; the paper YAMLs as they are stop with one line on a machine
# without a GPU, and stay valid (on the CPU backend every point needs more ranks than launched:
# one line naming them, exit 2); two timed steps whose time columns (and the straggler's) add up;
# a routing sweep naming an unknown workload or a dropless that is not true or false.
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
  "$mpirun" -n "$count" --oversubscribe "$apps/$program" "$@"
}
sed 's/^  tp: 2/  tpp: 2/' "$ablation" >"$scratch/unknown_key.yaml"
sed 's/^  iters: 5/  iters: five/' "$ablation" >"$scratch/wrong_type.yaml"
sed 's/^  tp: 2/  tp: 3/; s/^  dp: 1/  dp: 0/' "$ablation" >"$scratch/bad_layout.yaml"
bad_input "unknown key" ted_ablation ranks 2 ted_ablation -c "$scratch/unknown_key.yaml"
bad_input "wrong type" ted_ablation ranks 2 ted_ablation -c "$scratch/wrong_type.yaml"
bad_input "layout not dividing the ranks" ted_ablation ranks 4 ted_ablation -c "$scratch/bad_layout.yaml"
says "the file's mistake is the file's, though --csv was given" "error: $scratch/bad_layout.yaml: "
bad_input "a list value below 1" ted_ablation ranks 2 ted_ablation -c "$ablation" --set sweep.ranks=1,0,4
says "it names the key and the command line's value" \
  "the command line's sweep.ranks=1,0,4: key 'sweep.ranks' lists positive numbers, got 0"
bad_input "another experiment's YAML" ted_memory ranks 2 ted_memory -c "$ablation"
bad_input "sweep lists of different lengths" ted_weak_scaling ranks 2 ted_weak_scaling \
  -c "$root/experiments/weak_scaling/cpu.yaml" --set sweep.tp=1,2
bad_input "an unknown workload in sweep.workloads" ted_ablation ranks 2 ted_ablation -c "$ablation" \
  --set sweep.workloads=balanced,hot
says "it names the key and the workloads" "key 'sweep.workloads' lists routing workloads"
bad_input "sweep.dropless not true or false" ted_ablation ranks 2 ted_ablation -c "$ablation" \
  --set sweep.dropless=false,yes
bad_input "unknown system" ted_ablation ranks 2 ted_ablation -c "$ablation" --set systems=ted+xyz
bad_input "an unknown dtype" ted_ablation ranks 2 ted_ablation -c "$ablation" --set run.dtype=fp8
bad_input "an unknown --dtype" ted_ablation ranks 2 ted_ablation -c "$ablation" --dtype fp8
bad_input "an unknown gradient type" ted_ablation ranks 2 ted_ablation -c "$ablation" \
  --set training.grad_dtype=fp8
bad_input "16-bit gradients of fp32 weights" ted_ablation ranks 2 ted_ablation -c "$ablation" \
  --set training.grad_dtype=fp16
bad_input "an unknown --backend" ted_ablation ranks 2 ted_ablation -c "$ablation" --backend tpu
bad_input "NCCL on the CPU backend" ted_ablation ranks 2 ted_ablation -c "$ablation" --comm nccl
bad_input "3 ranks for a 4-rank layout (no point)" ted_ablation ranks 3 ted_ablation -c "$ablation"
bad_input "8 ranks for a 4-rank layout (4 idle)" ted_ablation ranks 8 ted_ablation -c "$ablation"
bad_input "--point beyond the plan" ted_ablation ranks 4 ted_ablation -c "$ablation" --point 6
if ranks 4 ted_ablation -c "$ablation" --point 2 --iters 0 --csv "$scratch/point.csv" \
  >"$scratch/point.out" 2>&1 && [ "$(cut -d, -f2 "$scratch/point.csv" | tail -n +2)" = ted+dtd ]; then
  echo "ok: --point 2 runs only the second point (ted+dtd)"
else
  fail "--point 2: $(cat "$scratch/point.out" "$scratch/point.csv" 2>&1)"
fi
has_gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && has_gpu=1
if [ "$has_gpu" = 0 ]; then
  bad_input "the CUDA backend without a GPU" ted_ablation ranks 2 ted_ablation -c "$ablation" \
    --set run.backend=cuda
fi
for experiment in $(awk '/^[a-z]/ { print $1 }' "$root/experiments/registry.txt"); do
  out="$scratch/paper_$experiment.out"
  paper="$root/experiments/$experiment/paper.yaml"
  # As it is: a GPU cluster's config. Without a GPU (or a CUDA build): one line, exit 2.
  "$apps/ted_$experiment" -c "$paper" --iters 0 --csv "$scratch/paper.csv" >"$out" 2>&1
  rc=$?
  if [ "$has_gpu" = 0 ]; then
    [ "$rc" = 2 ] && [ "$(wc -l <"$out")" = 1 ] && grep -q "run.backend" "$out" ||
      fail "paper $experiment without a GPU: exit $rc: $(cat "$out")"
  fi
  [ -e "$scratch/paper.csv" ] && fail "paper $experiment: wrote a CSV with nothing measured"
  # On the CPU backend (fp16 as the paper: mixed precision runs on the CPU too) every point
  # needs more ranks than launched: one line naming them, exit 2.
  "$apps/ted_$experiment" -c "$paper" --set run.backend=cpu --set run.comm=mpi --iters 0 \
    --csv "$scratch/paper.csv" >"$out" 2>&1
  rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <"$out")" = 1 ] && grep -q "no point to run on 1 rank: skipping" "$out"; then
    echo "ok: experiments/$experiment/paper.yaml is valid (every point needs more than 1 rank)"
  else
    fail "paper $experiment: exit $rc: $(cat "$out")"
  fi
  [ -e "$scratch/paper.csv" ] && fail "paper $experiment: wrote a CSV with nothing measured"
done
# 16-bit on CPU ranks: one bf16 point of the ablation with 16-bit gradients, its row naming
# backend, dtype, gradient type, comm.
if ranks 4 ted_ablation -c "$ablation" --set systems=ted --dtype bf16 --iters 0 \
  --set training.grad_dtype=bf16 --csv "$scratch/bf16.csv" >"$scratch/bf16.out" 2>&1 &&
  /usr/bin/python3 - "$scratch/bf16.csv" <<'PY'; then
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1, rows
r = rows[0]
assert (r["backend"], r["dtype"], r["grad_dtype"], r["comm"], r["device"]) == \
    ("cpu", "bf16", "bf16", "mpi", "cpu"), r
assert float(r["final_loss"]) > 0, r
PY
  echo "ok: a bf16 ablation point (bf16 gradients) on 4 CPU ranks, its row names backend, dtype, grad_dtype, comm and device"
else
  fail "bf16 ablation: $(cat "$scratch/bf16.out")"
fi
# Two timed steps of two systems: the time columns add up (compute + comm = the median; the four
# kinds + other_ms = the median; other_ms - compute_ms = comm_ms - the kinds), every row names
# the ranks per core of this launch and one run id, and an oversubscribed launch says so; the
# straggler's columns add up.
if ranks 4 ted_ablation -c "$ablation" --set systems=ted-baseline,ted --set run.warmup=0 \
  --iters 2 --rounds 2 --csv "$scratch/timed.csv" >"$scratch/timed.out" 2>&1 &&
  /usr/bin/python3 - "$scratch/timed.csv" "$scratch/timed.out" <<'PY'; then
import csv, os, sys
rows = list(csv.DictReader(open(sys.argv[1])))
out = open(sys.argv[2]).read()
# two rounds of the two systems, then a summary row each (the split of the pooled rows adds up too)
assert len(rows) == 6 and [r["round"] for r in rows] == ["1", "1", "2", "2", "", ""], rows
assert len({r["run_id"] for r in rows}) == 1 and rows[0]["run_id"], [r["run_id"] for r in rows]
per_core = 4 / len(os.sched_getaffinity(0))  # all 4 ranks run on this node
for r in rows:
    f = {k: float(r[k]) for k in ("time_ms_median", "compute_ms", "comm_ms", "all_reduce_ms",
                                  "all_to_all_ms", "all_gather_ms", "reduce_scatter_ms", "other_ms")}
    kinds = f["all_reduce_ms"] + f["all_to_all_ms"] + f["all_gather_ms"] + f["reduce_scatter_ms"]
    eps = 1e-6 * f["time_ms_median"]
    assert f["time_ms_median"] > 0 and f["comm_ms"] > 0, r
    assert abs(f["compute_ms"] + f["comm_ms"] - f["time_ms_median"]) < eps, f
    assert abs(kinds + f["other_ms"] - f["time_ms_median"]) < eps, f
    assert kinds <= f["comm_ms"] + eps and f["other_ms"] >= f["compute_ms"] - eps, f
    assert abs(float(r["ranks_per_core"]) - per_core) < 1e-9, (r["ranks_per_core"], per_core)
    # The straggler (the rank with the most time outside collectives) of the median
    # iteration: its time adds up, lies within the step's, and its compute is the most.
    s = {k: float(r[k]) for k in ("straggler_time_ms", "straggler_compute_ms",
                                  "straggler_comm_ms", "rank_compute_ms_mean")}
    assert 0 <= int(r["straggler_rank"]) < int(r["G"]), r["straggler_rank"]
    assert abs(s["straggler_compute_ms"] + s["straggler_comm_ms"] - s["straggler_time_ms"]) < eps, s
    assert s["straggler_time_ms"] <= f["time_ms_median"] + eps, (s, f)
    assert s["rank_compute_ms_mean"] <= s["straggler_compute_ms"] + eps, s
    assert (r["workload"], r["dropless"]) == ("learned", "0"), r  # the YAML's routing
assert (per_core > 1) == ("ranks per core (oversubscribed)" in out), out
PY
  echo "ok: timed ablation rows: time columns add up, ranks per core, run id and straggler recorded"
else
  fail "timed ablation: $(cat "$scratch/timed.out")"
fi
finish
