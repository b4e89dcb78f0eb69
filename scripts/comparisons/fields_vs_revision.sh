#!/usr/bin/env bash
# What ted_train computes, this checkout against another git revision, field for field: that
# revision's ted_train is built in a worktree of its own (under <build>/revisions/, git-ignored),
# then both train experiments/train/tiny-cpu.yaml (each its own revision's copy) for STEPS steps
# on six layouts and precisions (1 rank; T=2 Ep=2 with DTD; T=4; Ep=2 D=2 with CAC; T=2 in bf16
# and in fp16), and every CSV field but the timings, the revision and the command must be equal,
# and the final "# fingerprint" line too. Arguments go to this checkout's ted_train only: a switch
# that must reproduce the older model when set one way, e.g. after the tied embedding and dropout:
#   ./scripts/comparisons/fields_vs_revision.sh 4626c5a --set model.tie_embeddings=false --set model.dropout=0
# Prints one line per layout; exits 1 when any field differs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TED_ROOT"
revision=${1:?usage: $0 <git revision> [ted_train arguments for this checkout]}
shift
extra=("$@")
STEPS=${STEPS:-20}

ted_prepare >/dev/null
other=$(ted_revision_train "$revision")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
layouts=(
  "t1|1|"
  "t2_e2_dtd|4|--set parallel.tp=2 --set parallel.ep=2 --set parallel.dtd=true"
  "t4|4|--set parallel.tp=4"
  "e2_d2_cac|4|--set parallel.ep=2 --set model.checkpoint=true --set parallel.cac=true"
  "t2_bf16|2|--set parallel.tp=2 --set run.dtype=bf16"
  "t2_fp16|2|--set parallel.tp=2 --set run.dtype=fp16"
)
status=0
for layout in "${layouts[@]}"; do
  IFS='|' read -r name ranks args <<<"$layout"
  read -ra args <<<"$args"
  for side in other this; do
    if [ "$side" = other ]; then
      program=("$other/build/apps/ted_train" -c "$other/experiments/train/tiny-cpu.yaml")
    else
      program=("$TED_BUILD/apps/ted_train" -c experiments/train/tiny-cpu.yaml "${extra[@]}")
    fi
    OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 mpirun -n "$ranks" --oversubscribe "${program[@]}" \
      --set training.steps="$STEPS" "${args[@]}" --csv "$work/$name.$side.csv" \
      >"$work/$name.$side.out" 2>&1 || {
      echo "$name: the $side side failed:"
      tail -5 "$work/$name.$side.out"
      exit 1
    }
  done
  /usr/bin/python3 - "$work" "$name" <<'PY' || status=1
import csv, sys
work, name = sys.argv[1:]
rows = {s: list(csv.DictReader(open(f"{work}/{name}.{s}.csv"))) for s in ("other", "this")}
varying = {"seconds", "tokens_per_s", "gflops_per_s", "git_revision", "command", "run_id", "threads"}
differ, compared = set(), 0
if len(rows["other"]) != len(rows["this"]):
    differ.add("rows")
for old, new in zip(rows["other"], rows["this"]):
    for key, value in old.items():
        if key in varying or key.endswith("_ms"):
            continue
        compared += 1
        if new.get(key) != value:
            differ.add(key)
prints = {s: [l.strip() for l in open(f"{work}/{name}.{s}.out") if l.startswith("# fingerprint")]
          for s in ("other", "this")}
if prints["other"] != prints["this"] or not prints["this"]:
    differ.add("fingerprint")
print(f"{name}: {len(rows['this'])} steps, {compared} fields compared, "
      f"{'differ: ' + ', '.join(sorted(differ)) if differ else 'all equal'}; "
      f"{prints['this'][0] if prints['this'] else 'no fingerprint'}")
sys.exit(1 if differ else 0)
PY
done
exit $status
