#!/usr/bin/env bash
# One training step on 4 CPU ranks, ours against DeepSpeed's fastest variant, alternated: the
# ablation's model (experiments/ablation/cpu.yaml) laid out as DeepSpeed-MoE lays it (T=1, Ep=2,
# D=2, ZeRO-1; our system deepspeed-moe) in ted_ablation, against DeepSpeed on the same YAML
# (baselines/deepspeed/launch.sh) in each of its variants: PyTorch's fused attention (SDPA, its
# default here) and the materialised one (model.attention). Per round the faster DeepSpeed variant
# is the reference. The sides' order rotates every round, so that whatever else the machine does
# falls on all of them. With FORCED_CORETYPE (an OpenBLAS core type, e.g. Haswell or Prescott:
# what a BLAS that does not know the CPU's model picks, or an OPENBLAS_CORETYPE set for a whole
# machine) ours also runs with its BLAS kernels forced to it (TED_BLAS_CORETYPE), in the same
# rounds: the suite before and after it chose its kernels by cpuid.
# Prints, and writes to <OUT_DIR>/step_<cpu>.md, per side the medians over the rounds of each
# round's median and p10 step time, and the ratios ours / DeepSpeed (median and range over the
# rounds); the rows in <OUT_DIR>/step_<cpu>/ (CSV).
#   baselines/deepspeed/compare_step.sh                      # 5 rounds, into results/local/deepspeed
#   ROUNDS=3 FORCED_CORETYPE=Haswell OUT_DIR=results/deepspeed baselines/deepspeed/compare_step.sh
# ROUND_WRAPPER: a command each round runs under (e.g. "flock -x /some/lock", so that nothing
# else of yours runs during a round). Exit 1 (after the report) when the median ratio against
# DeepSpeed's fastest variant is above MAX_RATIO (default 0.45).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
ted_prepare >/dev/null
ROUNDS=${ROUNDS:-5}
OUT_DIR=${OUT_DIR:-results/local/deepspeed}
MAX_RATIO=${MAX_RATIO:-0.45}
FORCED_CORETYPE=${FORCED_CORETYPE:-}
ROUND_WRAPPER=${ROUND_WRAPPER:-}
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1  # 4 ranks on the cores: one thread each
config=experiments/ablation/cpu.yaml

cpu_field() { lscpu | awk -F: -v key="$1" '$1 == key { sub(/^[ \t]+/, "", $2); print $2; exit }'; }
cpu="$(cpu_field "Model name") (family $(cpu_field "CPU family"), model $(cpu_field Model))"
slug=$(echo "$cpu $(nproc)cores" | tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')
mkdir -p "$OUT_DIR/step_$slug"
rows=$OUT_DIR/step_$slug
rm -f "$rows"/*.csv

sides=(ours deepspeed_sdpa deepspeed_materialized)
[ -n "$FORCED_CORETYPE" ] && sides+=(ours_forced)
side() {  # side <name>: one run, its row appended to <rows>/<name>.csv
  case $1 in
    ours | ours_forced)
      local forced=()
      [ "$1" = ours_forced ] && forced=(-x "TED_BLAS_CORETYPE=$FORCED_CORETYPE")
      mpirun -n 4 --oversubscribe "${forced[@]}" "$TED_BUILD/apps/ted_ablation" -c "$config" \
        --set systems=deepspeed-moe --csv "$rows/$1.csv" >"$rows/.out" 2>&1 ||
        { cat "$rows/.out" >&2; return 1; } ;;
    deepspeed_sdpa | deepspeed_materialized)
      local attention=auto
      [ "$1" = deepspeed_materialized ] && attention=materialized
      baselines/deepspeed/launch.sh -n 4 -c "$config" --set "model.attention=$attention" \
        --csv "$rows/$1.csv" >"$rows/.out" 2>&1 || { cat "$rows/.out" >&2; return 1; } ;;
  esac
}
for round in $(seq 1 "$ROUNDS"); do
  order=()
  for i in "${!sides[@]}"; do order+=("${sides[$(((i + round) % ${#sides[@]}))]}"); done
  echo "== round $round of $ROUNDS: ${order[*]}"
  if [ -n "$ROUND_WRAPPER" ]; then
    # shellcheck disable=SC2086  # the wrapper is words
    $ROUND_WRAPPER bash -c "$(declare -f side); $(declare -p rows config FORCED_CORETYPE TED_BUILD)
      for s in ${order[*]}; do side \$s || exit 1; done"
  else
    for s in "${order[@]}"; do side "$s"; done
  fi
done
rm -f "$rows/.out"

venv=$(baselines/deepspeed/setup.sh | tail -1)
versions=$("$venv/bin/python" -c 'import torch, deepspeed
print(f"DeepSpeed {deepspeed.__version__}, torch {torch.__version__}")' 2>/dev/null | tail -1)
report=$OUT_DIR/step_$slug.md
verdict=0
/usr/bin/python3 - "$rows" "$cpu" "$(nproc)" "$versions" "$(git rev-parse --short=12 HEAD)" \
  "$FORCED_CORETYPE" "$MAX_RATIO" >"$report.tmp" <<'PY' || verdict=$?
import csv, os, statistics, sys
rows, cpu, cores, versions, revision, forced, max_ratio = sys.argv[1:]
def read(side):
    path = os.path.join(rows, side + ".csv")
    return list(csv.DictReader(open(path))) if os.path.exists(path) else []
sides = {s: read(s) for s in ("ours", "ours_forced", "deepspeed_sdpa", "deepspeed_materialized")}
n = len(sides["ours"])
assert n > 0 and all(len(v) in (0, n) for v in sides.values()), "one row per side and round"
def col(side, key): return [float(r[key]) for r in sides[side]]
fastest = [min(a, b) for a, b in zip(col("deepspeed_sdpa", "time_ms_median"),
                                      col("deepspeed_materialized", "time_ms_median"))]
fastest_p10 = [min(a, b) for a, b in zip(col("deepspeed_sdpa", "time_ms_p10"),
                                         col("deepspeed_materialized", "time_ms_p10"))]
def spread(v): return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
r0 = sides["ours"][0]
print("# One training step on 4 CPU ranks: ours against DeepSpeed's fastest variant\n")
print(f"CPU: {cpu}, {cores} cores. {versions}. Revision {revision}. {n} rounds, the sides' order "
      "rotated every round. experiments/ablation/cpu.yaml (hidden 128, 4 layers, 8 experts "
      "every 2nd, top-1, 2048 tokens per step), T=1 Ep=2 D=2, ZeRO-1, fp32, one thread per "
      "rank, 4 ranks. Step time: each round's median (and 10th percentile) over the YAML's 5 "
      "timed steps after 1 warm-up. DeepSpeed's fastest variant: per round the faster of its "
      "fused (SDPA) and materialised attention. Ratios below 1: ours takes less time.\n")
print(f"Ours: {r0['blas']}, {r0['blas_kernel']} kernels (the BLAS and kernels the CSV rows name).")
if forced:
    print(f"Ours, forced: the same with TED_BLAS_CORETYPE={forced} "
          f"({sides['ours_forced'][0]['blas_kernel']} kernels ran): the suite before it chose "
          "its kernels by cpuid, where the BLAS ran those (picked by a BLAS that does not know "
          "the CPU's model, or set by OPENBLAS_CORETYPE in the environment).")
print("\n| side | step ms: median of the rounds' medians | p10 ms | ours / DeepSpeed's fastest: "
      "median (range) | p10 ratio: median (range) |")
print("|---|---|---|---|---|")
failed = []
for side in ("ours", "ours_forced", "deepspeed_sdpa", "deepspeed_materialized"):
    if not sides[side]:
        continue
    t, p = col(side, "time_ms_median"), col(side, "time_ms_p10")
    ratio = quiet = "-"
    if side.startswith("ours"):
        ratios = [a / b for a, b in zip(t, fastest)]
        ratio, quiet = spread(ratios), spread([a / b for a, b in zip(p, fastest_p10)])
        if side == "ours" and statistics.median(ratios) > float(max_ratio):
            failed.append(f"ours / DeepSpeed's fastest {statistics.median(ratios):.3f} > {max_ratio}")
    print(f"| {side} | {statistics.median(t):.1f} | {statistics.median(p):.1f} | {ratio} | {quiet} |")
print(f"| DeepSpeed's fastest | {statistics.median(fastest):.1f} | "
      f"{statistics.median(fastest_p10):.1f} | - | - |")
print("\n## Each round (step ms, medians)\n")
names = [s for s in sides if sides[s]]
print("| round | " + " | ".join(names) + " |")
print("|---" * (len(names) + 1) + "|")
for i in range(n):
    print(f"| {i + 1} | " + " | ".join(f"{float(sides[s][i]['time_ms_median']):.1f}"
                                        for s in names) + " |")
losses = {s: statistics.median(float(r["final_loss"]) for r in sides[s]) for s in names}
print("\nLoss after the steps (medians): " +
      ", ".join(f"{s} {v:.4f}" for s, v in losses.items()) + ".")
print()
print("\n".join(f"FAIL  {f}" for f in failed) if failed else
      f"PASS  ours / DeepSpeed's fastest variant at most {max_ratio}")
sys.exit(1 if failed else 0)
PY
mv "$report.tmp" "$report"
cat "$report"
echo "== report: $report"
exit "$verdict"
