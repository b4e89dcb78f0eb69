#!/usr/bin/env bash
# A multi-rank training step of this checkout against another git revision: that revision's
# ted_train is built in a worktree of its own (under <build>/revisions/, git-ignored), then the
# two run the same command alternately for several rounds, so that whatever else the machine does
# falls on both. Prints per round and side the median seconds per step (after the first steps,
# which warm up), then the medians over the rounds and the ratio this / other.
#   ./scripts/comparisons/train_vs_revision.sh HEAD~3
#   ROUNDS=7 RANKS=4 ./scripts/comparisons/train_vs_revision.sh d3dc314 --tp 2 --ep 2 --dtd
# Arguments after the revision go to ted_train (default: the layout T=2 Ep=2 with DTD on a
# model the size of the CPU experiments' block). Environment: ROUNDS (5), RANKS (4), STEPS (40),
# SKIP (5, steps left out of each run's median), THREAD_ENV (default "TED_NUM_THREADS=1
# OPENBLAS_NUM_THREADS=1", as the experiments run; THREAD_ENV= leaves each side its defaults),
# MAX_RATIO (default 1.0): it exits 1 when the median ratio this / other is above it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TED_ROOT"
revision=${1:?usage: $0 <git revision> [ted_train arguments]}
shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--tp 2 --ep 2 --dtd --set model.hidden=128 --set model.seq_len=64
  --set model.experts=8)
ROUNDS=${ROUNDS:-5}
RANKS=${RANKS:-4}
STEPS=${STEPS:-40}
SKIP=${SKIP:-5}
THREAD_ENV=${THREAD_ENV-"TED_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"}
MAX_RATIO=${MAX_RATIO:-1.0}

ted_prepare >/dev/null
sha=$(git rev-parse --short "$revision")
other=$(ted_revision_train "$revision")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step_seconds() {  # step_seconds <ted_train>: the median seconds per step of one run
  env $THREAD_ENV mpirun -n "$RANKS" --oversubscribe "$1" -c experiments/train/tiny-cpu.yaml \
    --steps "$STEPS" --csv "$work/run.csv" "${args[@]}" >/dev/null
  /usr/bin/python3 - "$work/run.csv" "$SKIP" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))[int(sys.argv[2]):]
print(f"{statistics.median(float(r['seconds']) for r in rows):.6f}")
PY
}
echo "== this checkout ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ", with changes")) against $sha, $RANKS ranks on $(nproc) cores, $STEPS steps per run"
echo "== ted_train -c experiments/train/tiny-cpu.yaml ${args[*]}; ${THREAD_ENV:-default threads}"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then
    this=$(step_seconds "$TED_BUILD/apps/ted_train")
    that=$(step_seconds "$other/build/apps/ted_train")
  else
    that=$(step_seconds "$other/build/apps/ted_train")
    this=$(step_seconds "$TED_BUILD/apps/ted_train")
  fi
  echo "$this $that" >>"$work/rounds.txt"
  printf 'round %d: this %.2f ms  %s %.2f ms  ratio %.3f\n' "$round" \
    "$(awk -v x="$this" 'BEGIN { print x * 1e3 }')" "$sha" \
    "$(awk -v x="$that" 'BEGIN { print x * 1e3 }')" "$(awk -v a="$this" -v b="$that" 'BEGIN { print a / b }')"
done
/usr/bin/python3 - "$work/rounds.txt" "$sha" "$MAX_RATIO" <<'PY'
import statistics, sys
rounds = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
this = statistics.median(r[0] for r in rounds)
that = statistics.median(r[1] for r in rounds)
ratios = [a / b for a, b in rounds]
print(f"median step: this {this * 1e3:.2f} ms, {sys.argv[2]} {that * 1e3:.2f} ms; "
      f"this / {sys.argv[2]}: median {statistics.median(ratios):.3f} "
      f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(rounds)} rounds)")
ratio, limit = statistics.median(ratios), float(sys.argv[3])
print(f"PASS  median ratio {ratio:.3f} <= MAX_RATIO {limit}" if ratio <= limit else
      f"FAIL  median ratio {ratio:.3f} > MAX_RATIO {limit}")
sys.exit(ratio > limit)
PY
