#!/usr/bin/env bash
# Measures this machine for the projection and writes experiments/clusters/cpu.yaml: the MoE
# block's GEMM rate on one core (bench_moe_block at the CPU experiments' shape, one thread),
# and the collectives' latency and bandwidth between 4 ranks (ted_collbench all-reduce and
# all-to-all, fitted as time = latency + bus bytes / bandwidth). 4 ranks share the cores.
#   ./scripts/calibrate_cpu.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== compute: bench_moe_block, one thread"
OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 "$TED_BUILD/apps/bench_moe_block" \
  --benchmark_filter=h128_tokens256 --benchmark_format=json >"$work/block.json"
for op in all_reduce all_to_all; do
  echo "== links: $op on 4 ranks"
  OPENBLAS_NUM_THREADS=1 mpirun -n 4 --oversubscribe -q "$TED_BUILD/apps/ted_collbench" \
    --op "$op" -b 1K -e 4M -f 4 -w 5 -n 30 --csv "$work/$op.csv" >/dev/null
done
/usr/bin/python3 - "$work" "$(nproc)" >experiments/clusters/cpu.yaml <<'PY'
import csv, json, sys
work, cores = sys.argv[1], int(sys.argv[2])
bench = json.load(open(f"{work}/block.json"))["benchmarks"][0]
flops = float(bench["GFLOP/s"]) * 1e9
points = []  # (bus bytes per call, seconds)
for op in ("all_reduce", "all_to_all"):
    for row in csv.DictReader(open(f"{work}/{op}.csv")):
        seconds = float(row["time_us_median"]) * 1e-6
        points.append((float(row["busbw_GBps"]) * 1e9 * seconds, seconds))
n = len(points)
mean_x = sum(x for x, _ in points) / n
mean_y = sum(y for _, y in points) / n
slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
# A negative intercept (noise at small sizes) falls back to the smallest message's time.
latency = mean_y - slope * mean_x
if latency <= 0:
    latency = min(y for _, y in points)
bandwidth = 1.0 / slope
print(f"""# This machine, measured by scripts/calibrate_cpu.sh: 4 MPI ranks on {cores} cores (one node).
name: cpu
device: cpu-core
devices_per_node: 4
cores_per_node: {cores}
memory_bytes: 24e9
sustained_flops: {flops:.4g}   # the MoE block's GEMM FLOPs per second on one core (bench_moe_block)
intra:
  bandwidth: {bandwidth:.4g}   # fitted over all-reduce and all-to-all, 1 KiB - 4 MiB
  latency: {latency:.4g}
inter:
  bandwidth: {bandwidth:.4g}   # one node: never used
  latency: {latency:.4g}
source: measured here by scripts/calibrate_cpu.sh ({bench['name']})
""")
PY
echo "== wrote experiments/clusters/cpu.yaml"
cat experiments/clusters/cpu.yaml
