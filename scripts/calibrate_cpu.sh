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
flops=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['benchmarks'][0]['GFLOP/s'] * 1e9)" "$work/block.json")
read -r bandwidth latency < <(/usr/bin/python3 scripts/fit_links.py "$work"/all_reduce.csv "$work"/all_to_all.csv)
cat >experiments/clusters/cpu.yaml <<YAML
# This machine, measured by scripts/calibrate_cpu.sh: 4 MPI ranks on $(nproc) cores (one node).
name: cpu
device: cpu-core
devices_per_node: 4
cores_per_node: $(nproc)
memory_bytes: 24e9
sustained_flops: $flops   # the MoE block's GEMM FLOPs per second on one core (bench_moe_block)
intra:
  bandwidth: $bandwidth   # fitted over all-reduce and all-to-all, 1 KiB - 4 MiB
  latency: $latency
inter:
  bandwidth: $bandwidth   # one node: never used
  latency: $latency
source: measured here by scripts/calibrate_cpu.sh
YAML
echo "== wrote experiments/clusters/cpu.yaml"
cat experiments/clusters/cpu.yaml
