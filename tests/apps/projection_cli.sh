#!/usr/bin/env bash
# ted_project end to end: the paper's ablation projected on 128 V100s (5 rows, an assumptions
# sidecar), the layout search (the experiment's columns, every layout at the global batch, a
# layout that does not fit never ranked above one that does, its top equal to `experiment` on
# that layout), the validation against the committed CPU measurements (the latest row of each
# point, or --run ID, and how many rows it used), and a bad cluster YAML (one line, exit 2, no
# CSV).
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
  --csv "$scratch/search.csv" >"$scratch/search.out" 2>&1 || fail "search: $(cat "$scratch/search.out")"
top=$(/usr/bin/python3 - "$scratch/search.csv" "$scratch/ablation.csv" <<'PY'

import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
experiment = next(csv.DictReader(open(sys.argv[2])))
assert list(rows[0].keys()) == list(experiment.keys()), "search's CSV has not experiment's columns"
fits = [r["fits"] == "1" for r in rows]
assert rows and any(fits), "the search should list fitting layouts"
first_unfit = fits.index(False) if False in fits else len(rows)
assert all(not f for f in fits[first_unfit:]), "a layout that does not fit ranked above one that does"
times = [float(r["time_ms_median"]) for r in rows[:first_unfit]]
assert times == sorted(times), "fitting layouts not fastest first"
# The same sequences per step in every layout: data.global_batch 1024.
batches = {int(r["micro_batch"]) * int(r["micro_batches"]) * int(r["Ep"]) * int(r["D"]) for r in rows}
assert batches == {1024}, f"layouts at different global batches: {batches}"
print(f"ok: search ranked {len(rows)} layouts at a global batch of 1024, {first_unfit} fit",
      file=sys.stderr)
t = rows[0]
switches = "".join(f"+{name}" for name, column in (("dtd", "dtd"), ("cac", "cac"), ("rs", "reduce_scatter"))
                   if t[column] == "1")
print(t["T"], t["Ep"], t["D"], "ted" + switches if switches else "ted-baseline")
PY
) || fail "search ranking"
read -r tp ep dp system <<<"$top"
# The top of the search is what `experiment` projects for that layout and system.
"$project" experiment -c "$root/experiments/ablation/paper.yaml" --cluster "$cluster" \
  --set layout.tp="$tp" --set layout.ep="$ep" --set layout.dp="$dp" --set systems="$system" \
  --csv "$scratch/top.csv" >"$scratch/out" 2>&1 || fail "experiment on the top layout: $(cat "$scratch/out")"
/usr/bin/python3 - "$scratch/search.csv" "$scratch/top.csv" <<'PY' || fail "search's top differs from experiment"
import csv, sys
top = next(csv.DictReader(open(sys.argv[1])))
same = next(csv.DictReader(open(sys.argv[2])))
for column in ("G", "T", "Ep", "D", "micro_batches", "dtd", "cac", "reduce_scatter",
               "time_ms_median", "compute_ms", "comm_ms", "all_to_all_ms", "peak_total_bytes", "fits"):
    assert top[column] == same[column], f"{column}: search {top[column]}, experiment {same[column]}"
print(f"ok: search's top ({same['system']} T={top['T']} Ep={top['Ep']} D={top['D']}) "
      f"{float(top['time_ms_median']):.1f} ms = experiment's on that layout")
PY

# validate: the latest row of each point, or one run. Two runs in one CSV: run B as measured,
# run A (appended first) 3x slower; the latest rows (B's) must give B's error alone.
measured="$root/results/ablation/cpu.csv"
/usr/bin/python3 - "$measured" "$scratch" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
# The committed CSV's latest run, its summary rows (a run in rounds has a row per round too).
if any(r.get("round") for r in rows):
    rows = [r for r in rows if r.get("run_id") == rows[-1].get("run_id") and not r.get("round")]
columns = list(rows[0].keys()) + [c for c in ("ranks_per_core", "run_id") if c not in rows[0]]
def write(path, runs):
    with open(path, "w", newline="") as handle:
        out = csv.DictWriter(handle, columns)
        out.writeheader()
        for run, factor in runs:
            for row in rows:
                out.writerow(dict(row, run_id=run, time_ms_median=float(row["time_ms_median"]) * factor))
write(sys.argv[2] + "/run_b.csv", [("B", 1.0)])
write(sys.argv[2] + "/two_runs.csv", [("A", 3.0), ("B", 1.0)])
PY
validate() {  # <measured csv> <out> [--run ID]
  local csv=$1 out=$2
  shift 2
  "$project" validate -c "$root/experiments/ablation/cpu.yaml" \
    --cluster "$root/experiments/clusters/cpu.yaml" --measured "$csv" "$@" \
    --csv "$scratch/validation.csv" >"$out" 2>&1 || fail "validate $csv $*: $(cat "$out")"
}
validate "$scratch/run_b.csv" "$scratch/b.out"
validate "$scratch/two_runs.csv" "$scratch/two.out"
validate "$scratch/two_runs.csv" "$scratch/two_b.out" --run B
validate "$scratch/two_runs.csv" "$scratch/two_a.out" --run A
alone=$(grep "^# median |error|" "$scratch/b.out" | cut -d';' -f1)
for out in two two_b; do
  [ "$(grep "^# median |error|" "$scratch/$out.out" | cut -d';' -f1)" = "$alone" ] ||
    fail "validate ($out): $(grep '^# median' "$scratch/$out.out"), run B alone: $alone"
done
[ "$(grep "^# median |error|" "$scratch/two_a.out" | cut -d';' -f1)" != "$alone" ] ||
  fail "validate --run A gave run B's error"
grep -q "10 rows, 10 timed, 2 runs; using the latest row of each of 5 points (5 older rows" \
  "$scratch/two.out" || fail "validate did not say which rows it used: $(head -1 "$scratch/two.out")"
grep -q "using run B: 5 rows" "$scratch/two_b.out" || fail "validate --run B: $(head -1 "$scratch/two_b.out")"
echo "ok: validate, two runs in one CSV: latest rows and --run B give run B's $alone"
bad_input "unknown run id" ted_project "$project" validate -c "$root/experiments/ablation/cpu.yaml" \
  --cluster "$root/experiments/clusters/cpu.yaml" --measured "$scratch/two_runs.csv" --run Z
grep -q "no timed row of run 'Z' (its runs: A, B)" "$scratch/err" || fail "--run Z: $(cat "$scratch/err")"

"$project" validate -c "$root/experiments/ablation/cpu.yaml" \
  --cluster "$root/experiments/clusters/cpu.yaml" --measured "$measured" \
  --csv "$scratch/validation.csv" >"$scratch/out" 2>&1 || fail "validate: $(cat "$scratch/out")"
grep -q "^# median |error|" "$scratch/out" || fail "validate printed no median error"
echo "ok: $(tail -1 "$scratch/out")"

printf 'name: bad\ndevices_per_node: 8\nmemory_bytes: lots\n' >"$scratch/bad_cluster.yaml"
bad_input "bad cluster YAML" ted_project "$project" experiment \
  -c "$root/experiments/ablation/paper.yaml" --cluster "$scratch/bad_cluster.yaml"
finish
