#!/usr/bin/env bash
# Checks every slurm/*.sbatch: it parses (bash -n), and a dry run with `sbatch` and `srun`
# replaced by functions that print their arguments succeeds under `set -u` both outside a job
# (it resubmits itself) and inside one (it calls srun), so no variable is used unset.
#   check_slurm.sh <slurm dir>
set -u
failures=0
shims=$(mktemp -d)
trap 'rm -rf "$shims"' EXIT
for tool in sbatch srun; do
  printf '#!/usr/bin/env bash\necho "%s $*"\n' "$tool" >"$shims/$tool"
  chmod +x "$shims/$tool"
done
dir=$(cd "$1" && pwd)
for script in "$dir"/*.sbatch; do
  name=$(basename "$script")
  bash -n "$script" || { echo "FAIL: $name does not parse"; failures=$((failures + 1)); continue; }
  out=$(env -u SLURM_JOB_ID -u TED_REPO PATH="$shims:$PATH" bash "$script" 2>&1) &&
    grep -q '^sbatch ' <<<"$out" || { echo "FAIL: $name outside a job: $out"; failures=$((failures + 1)); }
  out=$(cd "$shims" && SLURM_JOB_ID=1 SLURM_SUBMIT_DIR="$shims" TED_REPO="$(dirname "$dir")" \
    PATH="$shims:$PATH" bash "$script" 2>&1) &&
    grep -q '^srun ' <<<"$out" || { echo "FAIL: $name inside a job: $out"; failures=$((failures + 1)); }
  echo "checked $name"
done
echo "$failures failed"
[ "$failures" = 0 ]
