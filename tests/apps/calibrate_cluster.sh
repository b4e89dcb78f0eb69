#!/usr/bin/env bash
# scripts/calibration/calibrate_cluster.sh end to end under plain mpirun (one machine taken as 2
# nodes of 2 ranks; what slurm/calibrate.sbatch runs under srun): a cluster file that ted_project
# reads, every value marked, one curve per collective and group layout (a pair inside a node, a
# pair across, the world: 3 x 2 ops), the search's best layouts last; a layout asked for the
# search shows the refusals' reasons; and bad arguments refused (one line, exit 2, no file).
#   calibrate_cluster.sh <repository root> <build dir> <scratch dir>
set -u
root=$1
build=$(cd "$2" && pwd)
scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
cd "$root" || exit 1
out=$scratch/cal.yaml
BUILD_DIR=$build OUT=$out MAX_PEER=4194304 OPS="all_to_all all_reduce" TOP=2 \
  MODELS=experiments/ablation/cpu.yaml scripts/calibration/calibrate_cluster.sh --name test \
  --nodes 2 --per-node 2 >"$scratch/log" 2>&1 || fail "calibrate_cluster: $(tail -n 5 "$scratch/log")"
[ -f "$out" ] || fail "no cluster file"
"$build/apps/ted_project" search -c experiments/ablation/cpu.yaml --cluster "$out" --gpus 4 \
  --top 1 >"$scratch/search" 2>&1 || fail "ted_project does not read the file: $(cat "$scratch/search")"
[ "$(grep -c '^  - op: ' "$out")" = 6 ] || fail "not 6 curves: $(grep -c '^  - op: ' "$out")"
grep -q '^source: measured .*revision .*2 nodes x 2 cpu-core' "$out" || fail "no measured source line"
grep -q '^sustained_flops: .*# measured' "$out" || fail "sustained_flops not marked measured"
tail -n 3 "$scratch/log" | grep -q '^ *1 ' || fail "the log does not end with the best layouts"
echo "ok: a measured cluster file of 6 curves, read by ted_project, the best layouts last"
"$build/apps/ted_project" search -c experiments/ablation/cpu.yaml --cluster "$out" --gpus 16 \
  --top 1 >"$scratch/search16" 2>&1 || fail "search on 16: $(cat "$scratch/search16")"
grep -q '^# refused: T x Ep x D 16 x 1 x 1 (every system): T = 16 does not divide the 8 heads' \
  "$scratch/search16" || fail "no refusal with its reason: $(grep refused "$scratch/search16" | head -3)"
echo "ok: the search names why a layout is refused"
# A bad curve in the file: one line naming the file, the curve and the rule, exit 2, no CSV.
sed 's/^    seconds: \[\([^,]*\),/    seconds: [-\1,/' "$out" >"$scratch/bad_curve.yaml"
rc=0
msg=$("$build/apps/ted_project" experiment -c experiments/ablation/cpu.yaml \
  --cluster "$scratch/bad_curve.yaml" --csv "$scratch/bad.csv" 2>&1) || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -q "bad_curve.yaml: curves\[0\]: seconds\[0\] must be positive" <<<"$msg" &&
  [ ! -e "$scratch/bad.csv" ] || fail "a negative time in a curve: exit $rc: $msg"
echo "ok: a bad curve refused: $msg"
for bad in "--nodes 0 --per-node 2|--nodes needs a positive count" \
  "--nodes 2 --per-node 2 --comm gloo|--comm must be mpi or nccl" \
  "--nodes 2 --per-node 2 --comm nccl|give --compute-from FILE" \
  "--nodes 2|--per-node needs a positive count"; do
  rc=0
  # shellcheck disable=SC2086
  msg=$(BUILD_DIR=$build OUT=$scratch/bad.yaml scripts/calibration/calibrate_cluster.sh --name bad ${bad%%|*} 2>&1) || rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <<<"$msg")" = 1 ] && grep -q -- "${bad#*|}" <<<"$msg" &&
    [ ! -e "$scratch/bad.yaml" ] || fail "${bad%%|*}: exit $rc: $msg"
done
echo "ok: bad arguments refused"
finish
