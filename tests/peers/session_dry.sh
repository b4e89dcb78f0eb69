#!/usr/bin/env bash
# scripts/gpu/gpu_session.sh's control flow without a GPU (label peers): --dry-run runs every step on
# the CPU at tiny sizes (the emulated GPU for the checks where the build has CUDA), and then with
# a budget too small for anything but the environment. Holds what it writes to its promises:
# every step in steps.csv with its status, the report with the dry-run banner (never a GPU's
# number), every peer's row and check, both peers' training steps, the three memory figures'
# lines, the projection; with the small budget the steps recorded as skipped (budget), the
# report naming them, and exit 1. Skipped (77) where the peers' environment cannot be made.
#   session_dry.sh <source dir> <build dir> <work dir>
set -uo pipefail
source_dir=$1 build=$2 work=$3
[ -n "${TED_SKIP_PEERS:-}" ] && { echo "SKIPPED: TED_SKIP_PEERS is set"; exit 77; }
rc=0
venv=$("$source_dir/peers/setup.sh" | tail -1) || rc=$?
[ "$rc" = 3 ] && { echo "SKIPPED: no package registry or no Python 3.12 for the peers' environment"; exit 77; }
[ "$rc" = 0 ] || exit "$rc"
if ! ls "$source_dir"/.whl/deepspeed-*.whl >/dev/null 2>&1; then
  rc=0
  "$source_dir/peers/fetch_wheels.sh" "$work/wheels" || rc=$?
  [ "$rc" = 3 ] && { echo "SKIPPED: no package registry to fetch the peers' wheels"; exit 77; }
  [ "$rc" = 0 ] || exit "$rc"
  export TED_PEERS_WHEELS=$work/wheels
fi
rm -rf "$work/full" "$work/small" "$work/report_full" "$work/report_small"
mkdir -p "$work"
export TED_PEERS_PYTHON=$venv/bin/python TED_GPU_BUILD_DIR=$build OMP_NUM_THREADS=1
export TORCH_EXTENSIONS_DIR=$work/torch_extensions
OUT=$work/full "$source_dir/scripts/gpu/gpu_session.sh" --dry-run --budget 1200 --rounds 1 \
  --report-dir "$work/report_full" >"$work/full.log" 2>&1
echo "full dry run: exit $?"
OUT=$work/small "$source_dir/scripts/gpu/gpu_session.sh" --dry-run --budget 45 \
  --report-dir "$work/report_small" >"$work/small.log" 2>&1
small=$?
echo "small budget: exit $small"
"$source_dir/scripts/gpu/gpu_session.sh" --budget x >/dev/null 2>&1
bad=$?
/usr/bin/python3 - "$work" "$small" "$bad" <<'PY'
import csv, sys
from pathlib import Path
work, small, bad = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
results = []
def check(ok, text):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {text}")
full = work / "full"
steps = {r["step"]: r for r in csv.DictReader(open(full / "steps.csv"))}
out = sorted(p.name for p in full.iterdir() if p.is_file())
check(len(out) <= 8 and "gpu_session_raw.tar.gz" in out and "session.log" in out,
      f"$OUT holds at most 8 files, the raw tarball and the log among them ({out})")
for name in ("env", "checks", "step", "block", "peers_step", "rates", "project"):
    check(steps.get(name, {}).get("status") == "passed", f"full: step {name} passed ({steps.get(name)})")
report = next((work / "report_full").glob("*-session.md")).read_text()
check("DRY RUN on the CPU" in report, "the report says it is a dry run")
for system in ("eager", "deepspeed", "megatron", "megatron-sdpa"):
    check(f"| {system} |" in report and "check passed" in report.split(f"| {system} |")[1].split("\n")[0],
          f"block row of {system} with its check passed")
for line in ("| megatron | 0.19", "| deepspeed | 0.19", "the tracking allocator:",
             "the projection's memory model:", "committed cluster file", "measured cluster file",
             "FLOP count:", "verdict" if False else "## Bars"):
    check(line in report, f"the report has '{line}'")
small_steps = {r["step"]: r for r in csv.DictReader(open(work / "small" / "steps.csv"))}
skipped = [n for n, r in small_steps.items() if r["status"] == "skipped (budget)"]
check({"block", "peers_step"} <= set(skipped), f"small budget: block and peers_step skipped ({skipped})")
small_report = next((work / "report_small").glob("*-session.md")).read_text()
check("left out by the budget: " in small_report, "the small run's report names what the budget left out")
check(small == 1, f"the small run exits 1 ({small})")
check(bad == 2, f"a bad --budget exits 2 ({bad})")
failed = results.count(False)
print(f"{results.count(True)} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
