#!/usr/bin/env bash
# Measures this machine for the projection and writes experiments/clusters/cpu.yaml: on one
# core, sgemm at a large shape (the peak) and at the CPU experiments' FFN shape (the rate their
# GEMMs run at), and the rate of the suite's own element-wise work in a step shaped as theirs (a
# dense and an MoE block, checkpointed): its time less its GEMMs' time, over the bytes the
# projection counts (bench_machine);
# and the collectives' latency and bandwidth between 4 ranks (ted_collbench all-reduce and
# all-to-all, fitted as time = latency + bus bytes / bandwidth). 4 ranks share the cores.
# Another path for the file: the first argument (the main job writes results/local/clusters/).
#   ./scripts/calibration/calibrate_cpu.sh [cluster.yaml]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ted_prepare
out=${1:-experiments/clusters/cpu.yaml}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== compute: bench_machine, one thread"
OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 "$TED_BUILD/apps/bench_machine" \
  --benchmark_filter='large|cpu_ffn|cpu_block' --benchmark_format=json >"$work/machine.json"
for op in all_reduce all_to_all; do
  echo "== links: $op on 4 ranks"
  OPENBLAS_NUM_THREADS=1 mpirun -n 4 --oversubscribe "$TED_BUILD/apps/ted_collbench" \
    --op "$op" -b 1K -e 4M -f 4 -w 5 -n 30 --csv "$work/$op.csv" >/dev/null
done
rate() {  # rate <benchmark name part> <counter> <scale>
  /usr/bin/python3 -c "import json,sys; b=[x for x in json.load(open(sys.argv[1]))['benchmarks'] if sys.argv[2] in x['name']]; b[0].get(sys.argv[3]) is not None or sys.exit('calibrate_cpu.sh: %s has no %s (%s); run it again on a quieter machine' % (b[0]['name'], sys.argv[3], b[0].get('label', ''))); print('%.4g' % (b[0][sys.argv[3]] * float(sys.argv[4])))" \
    "$work/machine.json" "$@"
}
peak=$(rate large GFLOP/s 1e9)
flops=$(rate cpu_ffn GFLOP/s 1e9)
# The peak is the best rate seen: on a noisy machine the smaller shape can measure faster.
peak=$(/usr/bin/python3 -c "import sys; print('%.4g' % max(float(sys.argv[1]), float(sys.argv[2])))" "$peak" "$flops")
bytes=$(rate cpu_block GB/s 1e9)
read -r bandwidth latency < <(/usr/bin/python3 scripts/calibration/fit_links.py "$work"/all_reduce.csv "$work"/all_to_all.csv)
cat >"$out.tmp" <<YAML
# This machine, measured by scripts/calibration/calibrate_cpu.sh: 4 MPI ranks on $(nproc) cores (one node).
name: $(basename "$out" .yaml)
device: cpu-core
devices_per_node: 4
cores_per_node: $(nproc)
memory_bytes: 24e9
peak_flops: $peak   # sgemm 2048 x 2048 x 512 on one core (bench_machine), or the FFN shape's if faster
sustained_flops: $flops   # sgemm at the CPU experiments' FFN shape, 256 x 512 x 128
memory_bandwidth: $bytes   # the suite's element-wise work in the CPU experiments' block (bench_machine elementwise)
gemm:   # one core: the measured rate is the rate of the experiments' shapes
  units: 1
  tile_m: 1
  tile_n: 1
  k_overhead: 0
intra:
  bandwidth: $bandwidth   # fitted over all-reduce and all-to-all, 1 KiB - 4 MiB
  latency: $latency
  peer_latency: 0   # the fit's latency is per call: MPI's collectives are not rings at small sizes
  peer_overhead: 0
inter:
  bandwidth: $bandwidth   # one node: never used
  latency: $latency
  peer_latency: 0
  peer_overhead: 0
  device_bandwidth: $bandwidth
source: measured here by scripts/calibration/calibrate_cpu.sh
YAML
mv "$out.tmp" "$out"
echo "== wrote $out"
cat "$out"
