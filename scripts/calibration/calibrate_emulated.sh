#!/usr/bin/env bash
# Calibrates the projection's description of the emulated cluster
# (experiments/clusters/cpu-emulated_<topology>.yaml): this machine's compute rate from
# experiments/clusters/cpu.yaml (scripts/calibration/calibrate_cpu.sh), and the links from three all-to-all
# curves measured on the emulated nodes with ted_collbench, 1 KiB to 16 MiB per rank: a pair
# inside a node, a pair across the nodes, and the world (scripts/calibration/fit_links.py --all-to-all says
# which sizes give which constant; the world's bandwidth comes from the pair across the nodes).
# The curves are kept in results/collbench/all_to_all_emulated_<topology>.csv, where a test holds
# the all-to-all model to the world's (tests/projection/test_all_to_all_model.cpp). Needs root (scripts/emulated_cluster.sh)
# and a quiet machine: run nothing else meanwhile.
#   ./scripts/calibration/calibrate_emulated.sh [experiments/emulated/2x2-rate.yaml]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ted_prepare
topology=${1:-experiments/emulated/2x2-rate.yaml}
name=$(basename "$topology" .yaml)
nodes=$(sed -n 's/^nodes:[[:space:]]*\([0-9]*\).*/\1/p' "$topology")
per_node=$(sed -n 's/^ranks_per_node:[[:space:]]*\([0-9]*\).*/\1/p' "$topology")
rate=$(sed -n 's/^bandwidth:[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$topology")
[ "$nodes" = 2 ] || { echo "calibrate_emulated: needs a topology of 2 nodes, $topology has $nodes" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
measured=results/collbench/all_to_all_emulated_$name.csv
for pattern in "intra:--group expert --tp 1 --ep 2" "inter:--group expert --tp $per_node --ep 2" \
  "world:--group world"; do
  echo "== all-to-all, ${pattern%%:*} (${pattern#*:})"
  # The link's token bucket fills while a rank waits on a message's latency and starts full, so
  # a timed iteration is in the steady state (the rate, or the latency, whichever is longer) only
  # after enough iterations have drained it: 200 below 512 KiB per rank, where they are cheap.
  # shellcheck disable=SC2086  # the pattern's options are words
  scripts/emulated_cluster.sh "$topology" "$TED_BUILD/apps/ted_collbench" --op all_to_all \
    ${pattern#*:} -b 1K -e 256K -f 2 -w 200 -n 30 --csv "$work/${pattern%%:*}.csv" >/dev/null
  scripts/emulated_cluster.sh "$topology" "$TED_BUILD/apps/ted_collbench" --op all_to_all \
    ${pattern#*:} -b 512K -e 16M -f 2 -w 5 -n 15 --csv "$work/${pattern%%:*}_large.csv" >/dev/null
  tail -n +2 "$work/${pattern%%:*}_large.csv" >>"$work/${pattern%%:*}.csv"
done
mkdir -p "$(dirname "$measured")"
{ cat "$work/intra.csv"; tail -n +2 "$work/inter.csv"; tail -n +2 "$work/world.csv"; } >"$work/all.csv"
mv "$work/all.csv" "$measured"
fit=$(/usr/bin/python3 scripts/calibration/fit_links.py --all-to-all "$measured" "$per_node")
key() { echo "$fit" | sed -n "s/^$1 //p"; }
base=experiments/clusters/cpu.yaml
value() { sed -n "s/^  *$1:[[:space:]]*\([^#[:space:]]*\).*/\1/p; s/^$1:[[:space:]]*\([^#[:space:]]*\).*/\1/p" "$base" | head -1; }
cat >experiments/clusters/cpu-emulated_$name.yaml <<YAML
# The emulated cluster of $topology ($nodes nodes x $per_node ranks, links $rate), measured by
# scripts/calibration/calibrate_emulated.sh: compute from $base, the links fitted to the all-to-alls
# between the emulated ranks in $measured (scripts/calibration/fit_links.py --all-to-all: each constant
# from the sizes where it alone sets the time).
name: cpu-emulated_$name
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
  bandwidth: $(key intra.bandwidth)   # the pair inside a node at 1-16 MiB per rank
  latency: $(key intra.latency)   # the pair inside a node at 1 KiB: a call
  peer_latency: 0   # shared-memory messages cost nothing beyond the call
  peer_overhead: 0
inter:
  bandwidth: $(key inter.bandwidth)   # per node: the pair across nodes at 1-16 MiB per rank ($per_node ranks' messages)
  latency: $(key inter.latency)   # a call, as inside a node
  peer_latency: $(key inter.peer_latency)   # MPI exchanges with its peers in rounds: a message's latency is the rank's own cost
  peer_overhead: $(key inter.peer_overhead)   # per off-node peer: the world at 1 KiB less the call, over its off-node peers
  device_bandwidth: $(key inter.bandwidth)   # one rank can fill its node's link (TCP)
source: measured here by scripts/calibration/calibrate_emulated.sh on $topology ($measured)
YAML
echo "== wrote experiments/clusters/cpu-emulated_$name.yaml and $measured"
cat experiments/clusters/cpu-emulated_$name.yaml
