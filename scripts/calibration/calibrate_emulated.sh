#!/usr/bin/env bash
# Calibrates the projection's description of the emulated cluster
# (experiments/clusters/cpu-emulated_<topology>.yaml): this machine's compute rate and shared-memory link
# from experiments/clusters/cpu.yaml (scripts/calibration/calibrate_cpu.sh), and the inter-node link fitted
# to the all-to-all between the emulated nodes (ted_collbench on the expert group of T=2,
# Ep=2, which spans the 2 nodes). Needs root (scripts/emulated_cluster.sh).
#   ./scripts/calibration/calibrate_emulated.sh [experiments/emulated/2x2.yaml]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ted_prepare
topology=${1:-experiments/emulated/2x2.yaml}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/emulated_cluster.sh "$topology" "$TED_BUILD/apps/ted_collbench" --op all_to_all \
  --group expert --tp 2 --ep 2 -b 1K -e 4M -f 4 -w 3 -n 15 --csv "$work/inter.csv" >/dev/null
read -r bandwidth latency < <(/usr/bin/python3 scripts/calibration/fit_links.py "$work/inter.csv")
nodes=$(sed -n 's/^nodes:[[:space:]]*\([0-9]*\).*/\1/p' "$topology")
per_node=$(sed -n 's/^ranks_per_node:[[:space:]]*\([0-9]*\).*/\1/p' "$topology")
rate=$(sed -n 's/^bandwidth:[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$topology")
base=experiments/clusters/cpu.yaml
value() { sed -n "s/^  *$1:[[:space:]]*\([^#[:space:]]*\).*/\1/p; s/^$1:[[:space:]]*\([^#[:space:]]*\).*/\1/p" "$base" | head -1; }
cat >experiments/clusters/cpu-emulated_$(basename "$topology" .yaml).yaml <<YAML
# The emulated cluster of $topology ($nodes nodes x $per_node ranks, links $rate), measured by
# scripts/calibration/calibrate_emulated.sh: compute and the intra-node link from $base, the inter-node
# link fitted to the all-to-all between the emulated nodes.
name: cpu-emulated_$(basename "$topology" .yaml)
device: cpu-core
devices_per_node: $per_node
cores_per_node: $(( $(nproc) / nodes ))   # the emulated nodes share this machine's cores
memory_bytes: 24e9
peak_flops: $(value peak_flops)
sustained_flops: $(value sustained_flops)
memory_bandwidth: $(value memory_bandwidth)
gemm:
  units: 1
  tile_m: 1
  tile_n: 1
  k_overhead: 0
intra:
  bandwidth: $(sed -n '/^intra:/,/^inter:/s/^  bandwidth:[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$base")
  latency: $(sed -n '/^intra:/,/^inter:/s/^  latency:[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$base")
  peer_latency: 0
inter:
  # Per node: the fitted bus bandwidth of the calibration's all-to-all (expert groups of 2, one
  # member per node; bus bytes = half of what a rank sends) carries, on each node, its
  # $per_node ranks' off-node halves: node bandwidth = fitted x $per_node.
  bandwidth: $(/usr/bin/python3 -c "print('%.4g' % ($bandwidth * $per_node))")
  latency: $latency   # fitted, per call (one peer)
  peer_latency: 0
source: measured here by scripts/calibration/calibrate_emulated.sh on $topology
YAML
echo "== wrote experiments/clusters/cpu-emulated_$(basename "$topology" .yaml).yaml"
cat experiments/clusters/cpu-emulated_$(basename "$topology" .yaml).yaml
