#!/usr/bin/env bash
# What --check tells a login node, and that it runs no MPI there (some sites refuse MPI outside
# srun): every program's --check, with MPI_Init and MPI_Init_thread replaced by a library that
# exits 99 (LD_PRELOAD), passes and ends with the line the Slurm scripts read, "needs: backend=..
# comm=.. ranks=N"; the same library does stop a run that starts MPI. Then, as one plain process:
# the cuda backend or NCCL is what the job needs on a build that has them and refused (exit 2,
# one line) on one that does not; a rank count that leaves a layout no point, or leaves ranks
# idle, and --point beyond the plan or on a point with idle ranks are refused (exit 2, one line).
#   check_without_mpi.sh <build/apps> <repository root> <mpi_init_forbidden library> <cuda ON|OFF>
#                        <nccl ON|OFF>
set -u
apps=$1
root=$2
forbidden=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
[ -f "$forbidden" ] || { echo "FAIL: no $3"; exit 1; }
cuda=$4
nccl=$5
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$root" || exit 1
out=$(mktemp)
trap 'rm -f "$out"' EXIT

passes() {  # <what> <needs line> <command...>: under the library, exit 0 and the needs line last
  local what=$1 needs=$2 rc=0
  shift 2
  LD_PRELOAD=$forbidden "$@" >"$out" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    fail "$what: exit $rc: $(cat "$out")"
  elif [ "$(tail -n 1 "$out")" != "$needs" ]; then
    fail "$what: the last line is not '$needs': $(cat "$out")"
  else
    echo "ok: $what, no MPI: $needs"
  fi
}
refused() {  # <what> <text> <command...>: exit 2, one line on stderr holding <text>, nothing else
  local what=$1 text=$2 rc=0
  shift 2
  LD_PRELOAD=$forbidden "$@" >"$out" 2>&1 || rc=$?
  if [ "$rc" != 2 ] || [ "$(wc -l <"$out")" != 1 ] || ! grep -q -- "$text" "$out"; then
    fail "$what: exit $rc, not 2 with one line holding '$text': $(cat "$out")"
  else
    echo "ok: $what: $(cat "$out")"
  fi
}

cpu4="needs: backend=cpu comm=mpi ranks=4"
for experiment in $(awk '/^[a-z]/ { print $1 }' experiments/registry.txt); do
  passes "ted_$experiment --check" "$cpu4" \
    "$apps/ted_$experiment" -c "experiments/$experiment/cpu.yaml" --check --ranks 4
done
passes "ted_collbench --check" "$cpu4" \
  "$apps/ted_collbench" --comm mpi --op all_to_all --group expert --tp 2 --ep 2 --check --ranks 4
passes "ted_train --check" "needs: backend=cpu comm=mpi ranks=2" \
  "$apps/ted_train" -c experiments/train/tiny-cpu.yaml --check --ranks 2
LD_PRELOAD=$forbidden "$apps/ted_project" experiment -c experiments/ablation/paper.yaml --check \
  >"$out" 2>&1 || fail "ted_project experiment --check: $(cat "$out")"
# The library is in effect: a run starts MPI, and it stops there.
rc=0
LD_PRELOAD=$forbidden "$apps/ted_ablation" -c experiments/ablation/cpu.yaml --iters 0 \
  --csv /dev/null/none.csv >"$out" 2>&1 || rc=$?
[ "$rc" = 99 ] && grep -q "MPI_Init" "$out" ||
  fail "a run under the library: exit $rc, not 99 at MPI_Init: $(cat "$out")"

# The backend the job needs, or a refusal when this build lacks it.
gpu=(--set run.backend=cuda --set run.comm=nccl --check --ranks 4)
if [ "$cuda" = ON ] && [ "$nccl" = ON ]; then
  passes "a cuda/nccl config" "needs: backend=cuda comm=nccl ranks=4" \
    "$apps/ted_ablation" -c experiments/ablation/cpu.yaml "${gpu[@]}"
  passes "ted_collbench --comm nccl" "needs: backend=cuda comm=nccl ranks=4" \
    "$apps/ted_collbench" --comm nccl --check --ranks 4
elif [ "$cuda" = OFF ]; then
  refused "a cuda config on a build without CUDA" "this build has no CUDA backend" \
    "$apps/ted_ablation" -c experiments/ablation/cpu.yaml "${gpu[@]}"
  refused "ted_collbench --comm nccl without CUDA" "this build has no CUDA backend" \
    "$apps/ted_collbench" --comm nccl --check --ranks 4
else
  refused "an nccl config on a build without NCCL" "this build has no NCCL backend" \
    "$apps/ted_ablation" -c experiments/ablation/cpu.yaml "${gpu[@]}"
fi

# No point, idle ranks, --point: the 4-rank ablation layout; the weak-scaling sweep of 1, 2, 4.
ablation=("$apps/ted_ablation" -c experiments/ablation/cpu.yaml --check)
weak=("$apps/ted_weak_scaling" -c experiments/weak_scaling/cpu.yaml --check)
refused "3 ranks for a 4-rank layout" "no point to run on 3 ranks" "${ablation[@]}" --ranks 3
refused "8 ranks for a 4-rank layout" "uses 4 of the 8 ranks: 4 would be idle" \
  "${ablation[@]}" --ranks 8
refused "8 ranks for a sweep of up to 4" "4 would be idle" "${weak[@]}" --ranks 8
refused "--point 6 of 5" "the plan has 5 points" "${ablation[@]}" --ranks 4 --point 6
refused "--point 1 (1 rank) on 4" "(--point 1) uses 1 of the 4 ranks" "${weak[@]}" --ranks 4 --point 1
passes "--point 5 (4 ranks) on 4" "$cpu4" "${weak[@]}" --ranks 4 --point 5
grep -q "1 points" "$out" || fail "--point 5: not one point: $(cat "$out")"
echo "$failures failed"
[ "$failures" = 0 ]
