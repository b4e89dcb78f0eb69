#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what is missing, build, and run the
# collective benchmark (all-to-all, 1 KiB to 16 MiB) on 4 CPU ranks next to plain MPI_Alltoall,
# writing results/collbench/all_to_all_world_mpi_G4.csv and its figure in plots/.
# Idempotent: a second run installs and rebuilds nothing and only re-measures.
#   ./scripts/main.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare

csv=results/collbench/all_to_all_world_mpi_G4.csv
figure=plots/collbench_all_to_all_world_mpi_G4.png
echo "== all-to-all on 4 ranks (oversubscribed on $(nproc) cores)"
mpirun -n 4 --oversubscribe -q "$TED_BUILD/apps/ted_collbench" --op all_to_all -b 1K -e 16M -f 2 \
  -w 10 -n 100 --compare-mpi --csv "$csv"
/usr/bin/python3 plots/plot_collbench.py "$csv" "$figure"
echo "== CSV:    $TED_ROOT/$csv"
echo "== figure: $TED_ROOT/$figure (and .pdf)"
