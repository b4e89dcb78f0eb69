#!/usr/bin/env bash
# Calibrates a cluster for the projection and writes experiments/clusters/<name>.yaml with every
# value measured on it (docs/projection.md, "Projecting your own cluster"). On the nodes LAUNCH
# starts its ranks on (NODES x PER_NODE ranks, filling a node before the next, as Slurm and
# mpirun place them by default), it measures
#   - one device: the GEMM rate at the CPU experiments' shapes and the rate of the suite's
#     element-wise work (bench_machine, run here, where the script runs: a node of the job);
#     with --compute-from FILE (GPUs: bench_machine measures a CPU core) those keys come from FILE;
#   - every collective (OPS) on every layout the TED groups of NODES x PER_NODE ranks take
#     (members, and how many of them share a node: inside a node, across nodes, the world),
#     each on an expert group of ted_collbench (--tp stride --ep members), all groups at once;
#     the sizes: per peer from MIN_PEER to MAX_PEER (4 KiB to 16 MiB) by FACTOR (4) for the
#     all-to-all, to MAX_PEER_OTHER (1 MiB: past it the time follows the bytes) by FACTOR_OTHER (2)
#     for the others (MPI switches their algorithm by size: the emulated cluster's reduce-scatter
#     of 4 ranks takes 28 MB/s to 2.8 MB and 12 MB/s at 4 MiB, a cliff a factor 4 steps over);
# and writes the file: the links' latency-bandwidth constants fitted to the all-to-alls
# (fit_links.py) and every measured curve (make_cluster.py). Then, for each YAML of MODELS, the
# search's best layouts on the new file (ted_project search, TOP rows).
#   scripts/calibration/calibrate_cluster.sh --name NAME --nodes N --per-node P \
#       [--launch "mpirun -n 4 --oversubscribe"] [--comm mpi|nccl] [--compute-from FILE]
#   e.g. on the emulated cluster (root):
#   scripts/calibration/calibrate_cluster.sh --name cpu-emulated_2x2-rate-measured --nodes 2 \
#       --per-node 2 --launch "scripts/emulated_cluster.sh experiments/emulated/2x2-rate.yaml"
# slurm/calibrate.sbatch runs it with srun. Variables: BUILD_DIR (build), OPS, MIN_PEER,
# MAX_PEER, MAX_PEER_OTHER, FACTOR, FACTOR_OTHER, MODELS, TOP, OUT (the file; default
# experiments/clusters/<name>.yaml), RAW (a folder to keep the ted_collbench CSVs in), CORES_PER_NODE (CPU ranks: the cores a node's ranks share;
# default this machine's, nproc). Where every node runs on this machine's kernel (the emulated
# cluster: one boot_id on every rank), the file says so: host_cores, the cores all nodes share.
# Bad arguments: one line, exit 2, nothing written.
set -euo pipefail
die() { echo "calibrate_cluster: $*" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
name= nodes= per_node= launch= comm=mpi compute_from=
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=${2:-} ;;
    --nodes) nodes=${2:-} ;;
    --per-node) per_node=${2:-} ;;
    --launch) launch=${2:-} ;;
    --comm) comm=${2:-} ;;
    --compute-from) compute_from=${2:-} ;;
    *) die "unknown argument '$1' (see the top of $0)" ;;
  esac
  shift 2 || die "$1 needs a value"
done
[[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--name needs a name of letters, digits, . _ -, not '$name'"
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "--nodes needs a positive count, not '$nodes'"
[[ "$per_node" =~ ^[1-9][0-9]*$ ]] || die "--per-node needs a positive count, not '$per_node'"
[[ "$comm" == mpi || "$comm" == nccl ]] || die "--comm must be mpi or nccl, not '$comm'"
ranks=$((nodes * per_node))
[ -n "$launch" ] || launch="mpirun -n $ranks --oversubscribe"
BUILD_DIR=${BUILD_DIR:-build}
OPS=${OPS:-all_to_all all_reduce all_gather reduce_scatter}
MIN_PEER=${MIN_PEER:-4096}
MAX_PEER=${MAX_PEER:-16777216}
MAX_PEER_OTHER=${MAX_PEER_OTHER:-1048576}
FACTOR=${FACTOR:-4}
FACTOR_OTHER=${FACTOR_OTHER:-2}
[[ "$MIN_PEER" =~ ^[1-9][0-9]*$ && "$MAX_PEER" =~ ^[1-9][0-9]*$ && "$MAX_PEER_OTHER" =~ ^[1-9][0-9]*$ ]] ||
  die "MIN_PEER, MAX_PEER and MAX_PEER_OTHER are byte counts"
[[ "$FACTOR" =~ ^[2-9]$ ]] || die "FACTOR must be 2-9, not '$FACTOR'"
[[ "$FACTOR_OTHER" =~ ^[2-9]$ ]] || die "FACTOR_OTHER must be 2-9, not '$FACTOR_OTHER'"
# The links' bandwidths are fitted at 1 MiB and more per rank: two sizes of a pair there.
((MAX_PEER >= 4194304)) || die "MAX_PEER must be at least 4 MiB (4194304): the bandwidths are fitted from 1 MiB per rank up"
((MAX_PEER_OTHER <= MAX_PEER)) || MAX_PEER_OTHER=$MAX_PEER
MODELS=${MODELS:-experiments/ablation/paper.yaml experiments/ablation/cpu.yaml}
TOP=${TOP:-5}
OUT=${OUT:-experiments/clusters/$name.yaml}
for p in ted_collbench bench_machine ted_project; do
  [ -x "$BUILD_DIR/apps/$p" ] || die "no $BUILD_DIR/apps/$p: build the suite first (or set BUILD_DIR)"
done
[ -z "$compute_from" ] || [ -r "$compute_from" ] || die "--compute-from: cannot read $compute_from"
[ -n "$compute_from" ] || [ "$comm" = mpi ] ||
  die "--comm nccl measures GPUs: bench_machine measures a CPU core; give --compute-from FILE"
for model in $MODELS; do [ -r "$model" ] || die "MODELS: cannot read $model"; done
export OMPI_MCA_orte_execute_quiet=${OMPI_MCA_orte_execute_quiet:-1} OPENBLAS_NUM_THREADS=1 \
  TED_NUM_THREADS=${TED_NUM_THREADS:-1}
# One process here, not a step of the job: the programs take a Slurm job's task count for their
# own world (app_main.cpp), so it is hidden from them.
alone() { env -u SLURM_NTASKS -u SLURM_NPROCS "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS

if [ -z "$compute_from" ]; then
  echo "== one device: bench_machine (GEMMs at the CPU experiments' shapes, element-wise work)"
  alone "$BUILD_DIR/apps/bench_machine" --benchmark_filter='large|cpu_' --benchmark_format=json \
    >"$work/bench_machine.json"
fi

# The group layouts: an expert group of stride s and n members (--tp s --ep n) for every s x n
# dividing the ranks, where a node holds whole strides (s divides P or P divides s); its members
# per node q = min(n, P / s), or 1. One sweep per distinct (n, q).
declare -A seen=()
layouts=()
for ((s = 1; s <= ranks; s++)); do
  for ((n = 2; s * n <= ranks; n++)); do
    ((ranks % (s * n) == 0)) || continue
    if ((per_node % s == 0)); then q=$((per_node / s < n ? per_node / s : n))
    elif ((s % per_node == 0)); then q=1
    else continue; fi
    ((n % q == 0)) || continue
    [ -n "${seen[$n,$q]:-}" ] && continue
    seen[$n,$q]=1
    layouts+=("$s:$n:$q")
  done
done
[ ${#layouts[@]} -gt 0 ] || die "$ranks ranks make no group of 2 or more"
echo "== ${#layouts[@]} group layouts (stride:members:per node): ${layouts[*]}"
sweep() {  # <op> <s> <n> <q>: one curve, small sizes with more warm-up than large ones
  local op=$1 s=$2 n=$3 q=$4 lo hi mid out=$work/${1}_n${3}_q${4}.csv peak=$MAX_PEER_OTHER f=$FACTOR_OTHER
  [ "$op" = all_to_all ] && peak=$MAX_PEER f=$FACTOR
  lo=$((MIN_PEER * n)) hi=$((peak * n)) mid=$((256 * 1024 * n))
  ((mid > hi)) && mid=$hi
  ((mid < lo)) && mid=$lo
  # shellcheck disable=SC2086  # the launcher is words
  $launch "$BUILD_DIR/apps/ted_collbench" --comm "$comm" --op "$op" --group expert --tp "$s" \
    --ep "$n" -b "$lo" -e "$mid" -f "$f" -w 20 -n 20 --csv "$out" >/dev/null
  if ((mid * f <= hi)); then
    # shellcheck disable=SC2086
    $launch "$BUILD_DIR/apps/ted_collbench" --comm "$comm" --op "$op" --group expert --tp "$s" \
      --ep "$n" -b $((mid * f)) -e "$hi" -f "$f" -w 3 -n 10 --csv "$work/large.csv" >/dev/null
    tail -n +2 "$work/large.csv" >>"$out"
    rm -f "$work/large.csv"
  fi
}
for layout in "${layouts[@]}"; do
  IFS=: read -r s n q <<<"$layout"
  for op in $OPS; do
    echo "== $op: $n members, $q per node (--tp $s --ep $n), from $MIN_PEER bytes per peer"
    sweep "$op" "$s" "$n" "$q"
  done
done

# The links' constants from the all-to-alls: a pair inside a node, a pair across nodes, the
# world (fit_links.py --all-to-all reads them by group, T and Ep), where there are both.
pair_in=$work/all_to_all_n2_q2.csv pair_across=$work/all_to_all_n2_q1.csv
world=$work/all_to_all_n${ranks}_q${per_node}.csv
if [ "$nodes" -ge 2 ] && [ "$per_node" -ge 2 ] && [ -f "$pair_in" ] && [ -f "$pair_across" ] &&
  [ -f "$world" ] && ((ranks > 2)); then
  { cat "$pair_in"; tail -n +2 "$pair_across"; tail -n +2 "$world" | sed 's/^all_to_all,expert,/all_to_all,world,/'; } >"$work/fit.csv"
  if ! /usr/bin/python3 scripts/calibration/fit_links.py --all-to-all "$work/fit.csv" "$per_node" \
    >"$work/links.txt" 2>"$work/fit.err"; then
    # A busy machine can time a world's small all-to-all faster than a pair's: no per-peer cost
    # to fit. The links then come from one line through every all-to-all (the curves still hold).
    echo "calibrate_cluster: $(cat "$work/fit.err"); the links: one fit over every all-to-all" >&2
    read -r bandwidth latency < <(/usr/bin/python3 scripts/calibration/fit_links.py "$work"/all_to_all_*.csv)
    printf '%s %s\n' intra.bandwidth "$bandwidth" intra.latency "$latency" inter.bandwidth "$bandwidth" \
      inter.latency "$latency" inter.peer_latency 0 inter.peer_overhead 0 >"$work/links.txt"
    echo "note the per-level fit failed ($(cat "$work/fit.err")): one line through every all-to-all, both levels" >>"$work/links.txt"
  fi
else
  # One node (or one rank a node): one level, fitted over every all-to-all measured.
  read -r bandwidth latency < <(/usr/bin/python3 scripts/calibration/fit_links.py "$work"/all_to_all_*.csv)
  printf '%s %s\n' intra.bandwidth "$bandwidth" intra.latency "$latency" inter.bandwidth "$bandwidth" \
    inter.latency "$latency" inter.peer_latency 0 inter.peer_overhead 0 >"$work/links.txt"
  echo "note one node or one rank a node: one line through every all-to-all, both levels" >>"$work/links.txt"
fi
if [ -n "${RAW:-}" ]; then mkdir -p "$RAW" && cp "$work"/*_n*_q*.csv "$work/links.txt" "$RAW/"; fi
device=cpu-core
[ "$comm" = nccl ] && device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
cores=0 host_cores=0
[ "$comm" = mpi ] && cores=${CORES_PER_NODE:-$(nproc)}
# Nodes that are one machine (one kernel: one boot_id on every rank) share its cores.
# shellcheck disable=SC2086  # the launcher is words
boots=$($launch cat /proc/sys/kernel/random/boot_id | sort -u | wc -l)
[ "$comm" = mpi ] && [ "$nodes" -ge 2 ] && [ "$boots" = 1 ] && host_cores=$(nproc)
mkdir -p "$(dirname "$OUT")"
/usr/bin/python3 scripts/calibration/make_cluster.py "$work/cluster.yaml" --name "$name" --nodes "$nodes" \
  --per-node "$per_node" --device "${device:-gpu}" --cores-per-node "$cores" \
  --host-cores "$host_cores" --curves-ranks "$ranks" \
  --revision "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" \
  --launch "$launch" --work "$work" --seconds $((SECONDS - started)) ${compute_from:+--compute-from "$compute_from"}
# The file as ted_project reads it, before it replaces any file of that name.
alone "$BUILD_DIR/apps/ted_project" search -c "${MODELS%% *}" --cluster "$work/cluster.yaml" \
  --gpus "$ranks" --check >/dev/null
mv "$work/cluster.yaml" "$OUT"
echo "== wrote $OUT in $((SECONDS - started)) s"
for model in $MODELS; do
  echo "== the best layouts of $model on $ranks devices of $name"
  alone "$BUILD_DIR/apps/ted_project" search -c "$model" --cluster "$OUT" --gpus "$ranks" --top "$TOP" |
    grep -v '^# refused' || true
done
