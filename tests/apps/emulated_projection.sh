#!/usr/bin/env bash
# The calibrated emulated cluster's projection held to what was measured on that cluster
# (docs/projection.md, "Checked on the emulated cluster"): the committed cluster file
# (scripts/calibration/calibrate_cluster.sh on scripts/emulated_cluster.sh's 2 x 2 ranks) and
# the committed rows measured there right after it: the ablation's 21 layout points, weak and
# strong scaling. Each experiment projected on the file must be within 15% of the measured
# (median over its points) and no point beyond 30%; the search's first layout within 5% of the
# measured fastest. Runs only the projection (seconds): a change to the model that moves these
# points past the limits fails here.
#   emulated_projection.sh <source dir> <build dir> <work dir>
set -euo pipefail
source_dir=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cd "$source_dir"
cluster=experiments/clusters/cpu-emulated_2x2-rate-measured.yaml
check() {  # <experiment> <measured CSV>
  local csv=$work/$1.csv
  "$build/apps/ted_project" validate -c "experiments/$1/cpu.yaml" --cluster "$cluster" \
    --measured "$2" --csv "$csv" | tail -1
  /usr/bin/python3 - "$csv" "$1" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
errors = [abs(float(r["relative_error"])) for r in rows]
median, largest = statistics.median(errors), max(errors)
print(f"{sys.argv[2]}: {len(errors)} points, median {100 * median:.1f}%, largest {100 * largest:.1f}%")
if len(errors) < 6 or median > 0.15 or largest > 0.30:
    sys.exit(f"{sys.argv[2]}: beyond 15% median or 30% at a point")
PY
}
check ablation results/ablation/layouts_emulated_2x2-rate.csv
check weak_scaling results/weak_scaling/emulated_2x2-rate.csv
check strong_scaling results/strong_scaling/emulated_2x2-rate.csv
out=$(/usr/bin/python3 scripts/calibration/validate_search.py --build "$build" \
  -c experiments/ablation/cpu.yaml --cluster "$cluster" --gpus 4 --launch unused \
  --measured results/ablation/layouts_emulated_2x2-rate.csv --reuse)
echo "$out" | tail -2
first=$(echo "$out" | sed -n 's/.*the first is +\{0,1\}\(-\{0,1\}[0-9.]*\)% of it.*/\1/p')

[ -n "$first" ] || { echo "no verdict on the search's first layout"; exit 1; }
awk -v f="$first" 'BEGIN { exit !(f <= 5) }' || { echo "the search's first is +$first% of the fastest"; exit 1; }
echo "emulated projection: within the limits"
