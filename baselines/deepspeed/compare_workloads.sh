#!/usr/bin/env bash
# Ours and DeepSpeed under the forced routing workloads on 4 CPU ranks: ted_train's tiny config
# (experiments/train/tiny-cpu.yaml, Ep = 4: one expert per rank, so hot_rank's hot expert is one
# rank's) for STEPS steps per workload (WORKLOADS: balanced, hot_rank, zipf), with capacity and
# with dropless routing. Kept in results/deepspeed/workloads/: each side's per-step rows in
# ted_train's schema (<workload>_<routing>_{ours,deepspeed}.csv: dropped, seconds, ...) and its
# per-expert loads (<workload>_<routing>_{ours,deepspeed}_loads.csv: print_workload loads from
# our trainer, run.py --loads); the summary results/deepspeed/workloads_cpu.csv has per workload,
# routing and side the median step time (steps after the first), the dropped choices per step,
# the busiest expert's load over the mean, and whether DeepSpeed's loads equal ours.
#   baselines/deepspeed/compare_workloads.sh                 # about 6 minutes here
#   STEPS=5 WORKLOADS="hot_rank" baselines/deepspeed/compare_workloads.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
ted_prepare >/dev/null
STEPS=${STEPS:-10}
WORKLOADS=${WORKLOADS:-balanced hot_rank zipf}
out=${TED_RESULTS:-results}/deepspeed
mkdir -p "$out/workloads"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 # 4 ranks on 2 cores: one thread each
config=experiments/train/tiny-cpu.yaml
for workload in $WORKLOADS; do
  for dropless in false true; do
    routing=$([ "$dropless" = true ] && echo dropless || echo capacity)
    name="$out/workloads/${workload}_$routing"
    sets=(--set "routing.workload=$workload" --set "gating.dropless=$dropless")
    echo "== $workload, $routing"
    mpirun -n 4 --oversubscribe "$TED_BUILD/apps/ted_train" -c "$config" --ep 4 \
      --steps "$STEPS" "${sets[@]}" --csv "${name}_ours.csv" >/dev/null
    "$TED_BUILD/tests/print_workload" loads "$config" 4 "training.steps=$STEPS" \
      "routing.workload=$workload" "gating.dropless=$dropless" >"${name}_ours_loads.csv"
    baselines/deepspeed/launch.sh -n 4 -c "$config" --set parallel.ep=4 --steps "$STEPS" \
      "${sets[@]}" --csv "${name}_deepspeed.csv" --loads "${name}_deepspeed_loads.csv" \
      >/dev/null 2>"$out/.stderr" || { cat "$out/.stderr" >&2; exit 1; }
  done
done
rm -f "$out/.stderr"
/usr/bin/python3 - "$out" $WORKLOADS <<'EOF'
import csv
import statistics
import sys
from pathlib import Path

out, workloads = Path(sys.argv[1]), sys.argv[2:]
rows = []
for workload in workloads:
    for routing in ("capacity", "dropless"):
        name = out / "workloads" / f"{workload}_{routing}"
        ours_loads = Path(f"{name}_ours_loads.csv").read_text()
        equal = Path(f"{name}_deepspeed_loads.csv").read_text() == ours_loads
        per_step = {}
        for line in ours_loads.splitlines()[1:-1]:
            step, layer, _, load = map(int, line.split(","))
            per_step.setdefault((step, layer), []).append(load)
        skew = statistics.mean(max(v) / statistics.mean(v) for v in per_step.values())
        for side in ("ours", "deepspeed"):
            with open(f"{name}_{side}.csv", newline="") as handle:
                steps = list(csv.DictReader(handle))
            median = statistics.median(float(r["seconds"]) for r in steps[1:])
            dropped = statistics.mean(int(r["dropped"]) for r in steps)
            rows.append({"workload": workload, "routing": routing, "system": side,
                         "steps": len(steps), "time_ms_median": f"{median * 1e3:.3f}",
                         "dropped_per_step": f"{dropped:.1f}",
                         "max_over_mean_load": f"{skew:.3f}",
                         "loads_equal_ours": "yes" if equal else "no"})
with open(out / "workloads_cpu.csv", "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
for r in rows:
    print(" ".join(f"{k}={v}" for k, v in r.items()))
EOF
