#!/usr/bin/env bash
# ted_project end to end: the paper's ablation projected on 128 V100s (5 rows, an assumptions
# sidecar), the layout search (a layout that does not fit never ranked above one that does),
# the validation against the committed CPU measurements, and a bad cluster YAML (one line,
# exit 2, no CSV).
#   projection_cli.sh <ted_project> <repository root> <scratch dir>
set -u
project=$1
root=$2
scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
cluster="$root/experiments/clusters/summit.yaml"

"$project" experiment -c "$root/experiments/ablation/paper.yaml" --cluster "$cluster" \
  --csv "$scratch/ablation.csv" >"$scratch/out" 2>&1 || fail "experiment: $(cat "$scratch/out")"
rows=$(($(wc -l <"$scratch/ablation.csv") - 1))
[ "$rows" = 5 ] || fail "experiment: $rows rows, expected 5"
grep -q "Cluster summit" "$scratch/ablation.csv.assumptions.txt" || fail "no assumptions sidecar"
grep -q ",projected:summit," "$scratch/ablation.csv" || fail "rows not marked projected"
echo "ok: ablation projected, $rows rows"

"$project" search -c "$root/experiments/ablation/paper.yaml" --cluster "$cluster" --gpus 128 \
  --csv "$scratch/search.csv" >"$scratch/out" 2>&1 || fail "search: $(cat "$scratch/out")"
/usr/bin/python3 - "$scratch/search.csv" <<'PY' || fail "search ranking"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
fits = [r["fits"] == "1" for r in rows]
assert rows and any(fits) and not all(fits), "the search should list fitting and unfitting layouts"
first_unfit = fits.index(False)
assert all(not f for f in fits[first_unfit:]), "a layout that does not fit ranked above one that does"
times = [float(r["time_ms"]) for r in rows[:first_unfit]]
assert times == sorted(times), "fitting layouts not fastest first"
print(f"ok: search ranked {len(rows)} layouts, {first_unfit} fit")
PY

"$project" validate -c "$root/experiments/ablation/cpu.yaml" \
  --cluster "$root/experiments/clusters/cpu.yaml" --measured "$root/results/ablation/cpu.csv" \
  --csv "$scratch/validation.csv" >"$scratch/out" 2>&1 || fail "validate: $(cat "$scratch/out")"
grep -q "^# median |error|" "$scratch/out" || fail "validate printed no median error"
echo "ok: $(tail -1 "$scratch/out")"

printf 'name: bad\ndevices_per_node: 8\nmemory_bytes: lots\n' >"$scratch/bad_cluster.yaml"
bad_input "bad cluster YAML" ted_project "$project" experiment \
  -c "$root/experiments/ablation/paper.yaml" --cluster "$scratch/bad_cluster.yaml"
finish
