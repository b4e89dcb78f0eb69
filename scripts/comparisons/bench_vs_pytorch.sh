#!/usr/bin/env bash
# The one-block MoE model of apps/bench_moe_block.cpp side by side with the same model in
# PyTorch eager (tests/cuda/torch_moe_block.py --shape: same embeddings, block, LM head, loss
# and FLOPs; fp32 on the CPU), run alternately for several rounds, so that whatever else the
# machine does falls on all sides. Ours runs twice per round: as it runs by default (the experts
# leave the empty capacity slots out) and with every slot computed (TED_FULL_CAPACITY=1, the
# work PyTorch's block and DeepSpeed-MoE do). Prints per shape and thread count the times and
# the ratios ours / PyTorch: medians over the rounds and their ranges, and how far the rounds
# stray from their median.
#
# The report goes to <OUT_DIR>/<cpu>.txt, named after the CPU it ran on (model, family/model,
# vector width, cores): one file per CPU model measured. OUT_DIR defaults to the ignored
# results/local/bench_vs_pytorch; OUT_DIR=results/bench_vs_pytorch writes the committed one.
# PyTorch is installed from the package registry into a virtual environment of its own (a
# build folder, git-ignored); nothing else in the project needs it.
#   ./scripts/comparisons/bench_vs_pytorch.sh                       # 5 rounds, h512 and h1024, top-1/2, 1/2 threads
#   ROUNDS=3 SHAPES="h512_top1" THREADS="1" ./scripts/comparisons/bench_vs_pytorch.sh
# Environment: TED_BUILD_DIR (default build), TED_TORCH_VENV (default <build>/torch-venv),
# ROUNDS, SHAPES (of h512_top1 h512_top2 h1024_top1 h1024_top2), THREADS, TORCH_ITERS (timed
# PyTorch iterations per round, after one warm-up; bench_moe_block times >= 2 s per round,
# after one warm-up step), OUT_DIR, MAX_RATIO and MAX_STRAY (below). FORCED_CORETYPE (an
# OpenBLAS core type, e.g. Haswell or Prescott): ours also runs with its BLAS kernels forced to it
# (TED_BLAS_CORETYPE), in the same rounds: what a BLAS that does not know this CPU's model number
# runs (Debian 12's OpenBLAS 0.3.21 picks Prescott on an Intel Xeon of family 6 model 207), or
# what an OPENBLAS_CORETYPE set for a whole machine asks for; reported as its own column,
# outside the verdict. ROUND_WRAPPER: a command each shape and thread count's
# turn runs under (e.g. "flock -x /some/lock").
#
# The verdict: it exits 1 (after writing the report) unless, for every shape and thread count,
# the median over the rounds of ours / PyTorch is at most MAX_RATIO (default 0.85) and, with 2
# or more threads, every round of ours lies within MAX_STRAY % (default 10) of its median.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TED_ROOT"
ROUNDS=${ROUNDS:-5}
SHAPES=${SHAPES:-"h512_top1 h512_top2 h1024_top1 h1024_top2"}
THREADS=${THREADS:-"1 2"}
TORCH_ITERS=${TORCH_ITERS:-3}
VENV=${TED_TORCH_VENV:-$TED_BUILD/torch-venv}
OUT_DIR=${OUT_DIR:-results/local/bench_vs_pytorch}
MAX_RATIO=${MAX_RATIO:-0.85}
MAX_STRAY=${MAX_STRAY:-10}
FORCED_CORETYPE=${FORCED_CORETYPE:-}
ROUND_WRAPPER=${ROUND_WRAPPER:-}

if [ ! -x "$TED_BUILD/apps/bench_moe_block" ]; then
  ted_install_missing
  if [ ! -f "$TED_BUILD/CMakeCache.txt" ]; then
    cmake -S "$TED_ROOT" -B "$TED_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$TED_BUILD" --target bench_moe_block -j "$(nproc)"
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "== installing PyTorch into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch
fi

# The CPU, as the file name and the report's first lines give it. A VM may hide the marketing
# name ("AMD EPYC"), so the family and model numbers and the widest vector unit come with it.
cpu_field() { lscpu | awk -F: -v key="$1" '$1 == key { sub(/^[ \t]+/, "", $2); print $2; exit }'; }
cpu_model=$(cpu_field "Model name")
cpu_family=$(cpu_field "CPU family")
cpu_number=$(cpu_field "Model")
if grep -qw avx512f /proc/cpuinfo; then vector=avx512; elif grep -qw avx2 /proc/cpuinfo; then
  vector=avx2; else vector=sse; fi
slug=$(echo "$cpu_model family$cpu_family model$cpu_number $vector $(nproc)cores" |
  tr 'A-Z' 'a-z' | sed -e 's/([^)]*)//g' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
mkdir -p "$OUT_DIR"
report=$OUT_DIR/$slug.txt
exec > >(tee "$report.tmp") 2>&1

blas=$("$TED_BUILD/apps/bench_moe_block" --benchmark_filter=sgemm/tiny 2>&1 |
  awk -F': ' '/^blas:/ { print $2; exit }')
echo "== CPU: $cpu_model (family $cpu_family, model $cpu_number), $vector, $(nproc) cores"
echo "== ours: $blas; git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$FORCED_CORETYPE" ]; then
  echo "== ours, forced: $(TED_BLAS_CORETYPE=$FORCED_CORETYPE "$TED_BUILD/apps/bench_moe_block" \
    --benchmark_filter=sgemm/tiny 2>&1 | awk -F': ' '/^blas:/ { print $2; exit }')"
fi
echo "== $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__, "with",
  "MKL" if torch.backends.mkl.is_available() else "no MKL")' 2>/dev/null)"

# name: the torch script's --shape (h,heads,experts,top_k,sequences,seq) and the benchmark's name
declare -A torch_shape=([h512_top1]=512,8,8,1,8,256 [h512_top2]=512,8,8,2,8,256
  [h1024_top1]=1024,16,8,1,8,256 [h1024_top2]=1024,16,8,2,8,256)
declare -A ours_name=([h512_top1]=h512_tokens2048_e8_top1 [h512_top2]=h512_tokens2048_e8_top2
  [h1024_top1]=h1024_tokens2048_e8_top1 [h1024_top2]=h1024_tokens2048_e8_top2)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT  # a run that stops keeps its rounds in <report>.tmp
ours() {  # ours <shape> <threads> <full> [core type]: ms per iteration (bench_moe_block's mean over >= 2 s)
  local forced=()
  [ -n "${4:-}" ] && forced=(TED_BLAS_CORETYPE="$4")
  env "${forced[@]}" TED_FULL_CAPACITY="$3" TED_NUM_THREADS="$2" "$TED_BUILD/apps/bench_moe_block" \
    --benchmark_filter="^moe_block/${ours_name[$1]}/" --benchmark_format=csv 2>/dev/null |
    awk -F, '/^"moe_block/ { print $3 }'
}
torch_ms() {  # torch_ms <shape> <threads>: the median of TORCH_ITERS iterations after a warm-up
  OMP_NUM_THREADS=$2 MKL_NUM_THREADS=$2 "$VENV/bin/python" -W ignore::UserWarning tests/cuda/torch_moe_block.py \
    --shape "${torch_shape[$1]}" --threads "$2" --warmup 1 --iters "$TORCH_ITERS" |
    awk '/^ms / { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
# The CPU time the hypervisor gave to others (steal, /proc/stat) in % of the wall time of a
# measurement: a virtual machine's CPUs are shared, and a round that ran while the host was busy
# shows it here (its times are slower on every side).
ticks() { awk '/^cpu / { print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
turns=3
[ -n "$FORCED_CORETYPE" ] && turns=4
one_turn() {  # one_turn <round> <shape> <threads>: every side once, the order rotated by round
  local round=$1 shape=$2 t=$3 a full b forced=- steal0 total0 steal1 total1 steal turn
  read -r steal0 total0 < <(ticks)
  # Rotate which side goes first, so no side always runs on a machine another warmed.
  for turn in $(seq 0 $((turns - 1))); do
    case $(((round + turn) % turns)) in
      0) a=$(ours "$shape" "$t" 0) ;;
      1) full=$(ours "$shape" "$t" 1) ;;
      2) b=$(torch_ms "$shape" "$t") ;;
      3) forced=$(ours "$shape" "$t" 0 "$FORCED_CORETYPE") ;;
    esac
  done
  read -r steal1 total1 < <(ticks)
  steal=$(awk -v s="$((steal1 - steal0))" -v t="$((total1 - total0))" \
    'BEGIN { print (t > 0 ? 100 * s / t : 0) }')
  echo "$shape $t $a $full $b $steal $forced" >>"$work/rounds.txt"
  printf 'round %d  %-11s %d thread(s): ours %7.1f ms  every slot %7.1f ms  PyTorch %7.1f ms  ratio %.3f (every slot %.3f)  steal %.1f%%' \
    "$round" "$shape" "$t" "$a" "$full" "$b" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')" \
    "$(awk -v a="$full" -v b="$b" 'BEGIN { print a / b }')" "$steal"
  [ "$forced" != - ] && printf '  forced %s %7.1f ms ratio %.3f' "$FORCED_CORETYPE" "$forced" \
    "$(awk -v a="$forced" -v b="$b" 'BEGIN { print a / b }')"
  printf '\n'
}
for round in $(seq 1 "$ROUNDS"); do
  for shape in $SHAPES; do
    for t in $THREADS; do
      if [ -n "$ROUND_WRAPPER" ]; then
        # shellcheck disable=SC2086  # the wrapper is words
        $ROUND_WRAPPER bash -c "$(declare -f one_turn ours torch_ms ticks)
          $(declare -p torch_shape ours_name turns work TED_BUILD VENV TORCH_ITERS FORCED_CORETYPE)
          one_turn $round $shape $t"
      else
        one_turn "$round" "$shape" "$t"
      fi
    done
  done
done
echo
verdict=0
/usr/bin/python3 - "$work/rounds.txt" "$MAX_RATIO" "$MAX_STRAY" "$FORCED_CORETYPE" <<'PY' || verdict=$?
import statistics, sys
max_ratio, max_stray, forced = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rows, steals, failed = {}, [], []
for line in open(sys.argv[1]):
    shape, threads, ours, full, torch, steal, kept = line.split()
    row = (float(ours), float(full), float(torch)) + ((float(kept),) if forced else ())
    rows.setdefault((shape, int(threads)), []).append(row)
    steals.append(float(steal))
print("ours: the experts leave the empty capacity slots out (the default); every slot: "
      "TED_FULL_CAPACITY=1, the work PyTorch's block does.")
print("stray: the largest distance of a round of ours from its median, in % of the median.")
if forced:
    print(f"forced: ours with TED_BLAS_CORETYPE={forced} (its BLAS kernels forced to those), in "
          "the same rounds; outside the verdict.")
print(f"steal (CPU time the hypervisor gave to others, % of wall time per measurement): "
      f"median {statistics.median(steals):.1f}%, largest {max(steals):.1f}%.")
print()
extra = f" forced {forced} ms | forced / PyTorch (range) |" if forced else ""
print("| shape | threads | ours ms | every slot ms | PyTorch ms | ours / PyTorch (range) "
      "| every slot / PyTorch (range) | stray ours, every slot | rounds |" + extra)
print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if forced else ""))
for (shape, threads), values in rows.items():
    columns = list(zip(*values))
    medians = [statistics.median(c) for c in columns]
    def ratio(i):
        r = [v[i] / v[2] for v in values]
        return f"{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})"
    def stray(i):
        return max(abs(x - medians[i]) for x in columns[i]) / medians[i] * 100
    extra = f" {medians[3]:.1f} | {ratio(3)} |" if forced else ""
    print(f"| {shape} | {threads} | {medians[0]:.1f} | {medians[1]:.1f} | {medians[2]:.1f} | "
          f"{ratio(0)} | {ratio(1)} | {stray(0):.1f}%, {stray(1):.1f}% | {len(values)} |" + extra)
    median_ratio = statistics.median(v[0] / v[2] for v in values)
    if median_ratio > max_ratio:
        failed.append(f"{shape} {threads} thread(s): ours / PyTorch {median_ratio:.3f} > {max_ratio}")
    if threads > 1 and stray(0) > max_stray:
        failed.append(f"{shape} {threads} thread(s): a round of ours {stray(0):.1f}% from its "
                      f"median > {max_stray}%")
print()
for line in failed:
    print(f"FAIL  {line}")
if not failed:
    print(f"PASS  every median ours / PyTorch at most {max_ratio}, every multi-thread round of "
          f"ours within {max_stray}% of its median")
sys.exit(1 if failed else 0)
PY
mv "$report.tmp" "$report"
echo
echo "== report: $(realpath "$report")"
exit "$verdict"
