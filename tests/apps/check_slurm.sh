#!/usr/bin/env bash
# Checks every <slurm dir>/*.sbatch and <slurm dir>/submit.sh with stand-ins: `sbatch` and `srun`
# on PATH that log their arguments, and BUILD_DIR pointing at fake programs (apps/ted_*) that log
# theirs and pass, or print one line and exit 2 when given a config named bad.yaml or when
# TED_FAKE_FAIL=1. For each script:
#   - it parses (bash -n);
#   - its #SBATCH lines come before its first command, expand no variable, and give the job
#     name, nodes, tasks per node (= GPUs per node), GPUs per node, time and output file;
#   - outside a job (no SLURM_JOB_ID) it neither submits itself nor runs srun, and fails;
#   - inside a fake 4-node x 8-task job, run as sbatch runs it (a copy in a spool directory,
#     started from elsewhere, only SLURM_SUBMIT_DIR telling where the repository is): it checks
#     every program first (`--check --ranks 32`, a plain process, in the repository root), then
#     runs each with `srun --mpi=pmix` (--mpi=pmi2 with SRUN_MPI=pmi2) and no srun option that
#     sets the job's shape; with a failing check it exits 2 and never calls srun;
#   - slurm/submit.sh (an executable), from another directory: `-N 4 --ntasks-per-node 8 -p gpu -A proj` checks
#     for 32 ranks then calls `sbatch <those options> <script>`; no options checks for the
#     #SBATCH default (nodes x tasks per node); `--nodes=2` for 2 x the default tasks per node;
#     with a failing check it exits 2, prints the program's line and never calls sbatch.
# With a build directory as second argument, also against the real ted_ablation (skipped with a
# line when it does not accept --check): submit.sh slurm/ablation.sbatch with CONFIG set to the
# paper YAML plus an unknown key exits 2 without calling sbatch, and with the paper YAML on the
# script's default shape it calls sbatch.
#   check_slurm.sh <slurm dir> [<build dir>]
set -u
dir=$(cd "$1" && pwd)
repo=$(dirname "$dir")
build=${2:+$(cd "$2" && pwd)}
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
fake=$tmp/fake
mkdir -p "$tmp/bin" "$fake/apps" "$tmp/spool" "$tmp/elsewhere"
for tool in sbatch srun; do
  # shellcheck disable=SC2016  # $* and $TED_TEST_LOG expand in the stand-in
  printf '#!/usr/bin/env bash\necho "%s $*" >>"$TED_TEST_LOG"\n' "$tool" >"$tmp/bin/$tool"
done
for prog in ted_ablation ted_weak_scaling ted_strong_scaling ted_memory ted_train ted_collbench; do
  cat >"$fake/apps/$prog" <<'EOF'
#!/usr/bin/env bash
echo "prog [$PWD] $0 $*" >>"$TED_TEST_LOG"
case " $* " in
  *bad.yaml*) echo "$(basename "$0"): error: bad.yaml: unknown key 'model.hiddn' (fake)" >&2; exit 2 ;;
esac
if [ "${TED_FAKE_FAIL:-0}" = 1 ]; then
  echo "$(basename "$0"): error: does not fit (fake)" >&2
  exit 2
fi
echo "$(basename "$0"): fine (fake)"
EOF
done
chmod +x "$tmp/bin/"* "$fake/apps/"*

fail() { echo "FAIL: $name: $*"; failures=$((failures + 1)); }
# runs <command...> from $tmp/elsewhere with no Slurm, TED or script variables from the caller
# but PATH with the stand-ins first; out: its output, rc: its exit status, the log is fresh
run() {
  local clean=(env) v
  for v in $(compgen -e); do
    case $v in
      SLURM_* | SBATCH_* | SRUN_* | TED_* | CONFIG | BUILD_DIR | TP | EP | OPS | MIN_BYTES | MAX_BYTES)
        clean+=(-u "$v") ;;
    esac
  done
  : >"$log"
  rc=0
  out=$(cd "$tmp/elsewhere" && "${clean[@]}" PATH="$tmp/bin:$PATH" TED_TEST_LOG="$log" "$@" 2>&1) ||
    rc=$?
}
# the #SBATCH value of <long option> (or <short option>) in the header lines read into $header
header_value() {
  local forms="--$1=|--$1[[:space:]]+"
  [ -n "$2" ] && forms+="|$2[[:space:]]*"
  sed -n -E "s/^#SBATCH[[:space:]]+($forms)([^-[:space:]][^[:space:]]*).*/\\2/p" <<<"$header" |
    tail -n 1
}
fail_check() {  # the environment that makes the checks of $script fail
  if grep -q 'CONFIG' "$script"; then echo "CONFIG=$tmp/bad.yaml"; else echo TED_FAKE_FAIL=1; fi
}
# checks the log of an in-job run: all checks (for <ranks>, in the repository root) before the
# first srun, one srun per check running the checked command, srun options <mpi> and nothing
# that sets nodes or tasks
check_job_log() {  # <ranks> <mpi> <what>
  local ranks=$1 mpi=$2 what=$3 checks runs line cmd=()
  checks=$(grep -n '^prog ' "$log")
  runs=$(grep -n '^srun ' "$log")
  [ -n "$checks" ] || { fail "$what: no --check ran"; return; }
  [ -n "$runs" ] || { fail "$what: srun never ran"; return; }
  [ "$(tail -n 1 <<<"$checks" | cut -d: -f1)" -lt "$(head -n 1 <<<"$runs" | cut -d: -f1)" ] ||
    fail "$what: a check ran after srun"
  while IFS= read -r line; do
    [[ "$line" == "prog [$repo] "* ]] || fail "$what: the check did not run in $repo: $line"
    [[ "$line" == *" --check --ranks $ranks" ]] || fail "$what: not --check --ranks $ranks: $line"
  done < <(grep '^prog ' "$log")
  while IFS= read -r line; do
    # shellcheck disable=SC2206
    local words=($line) w in_cmd=0 o=() c=()
    for w in "${words[@]:1}"; do
      [[ "$w" == "$fake/apps/"* ]] && in_cmd=1
      if [ "$in_cmd" = 1 ]; then c+=("$w"); else o+=("$w"); fi
    done
    [[ " ${o[*]} " == *" --mpi=$mpi "* ]] || fail "$what: srun without --mpi=$mpi: $line"
    for w in "${o[@]}"; do
      case $w in
        -N* | --nodes* | -n* | --ntasks* | -w* | --nodelist*)
          fail "$what: srun sets the shape ($w) instead of taking the allocation's: $line" ;;
      esac
    done
    cmd+=("${c[*]}")
  done < <(grep '^srun ' "$log")
  local checked=()
  while IFS= read -r line; do
    line=${line#prog \[*\] }
    checked+=("${line% --check --ranks "$ranks"}")
  done < <(grep '^prog ' "$log")
  [ "${checked[*]}" = "${cmd[*]}" ] ||
    fail "$what: srun did not run the checked commands: checked ${checked[*]}; ran ${cmd[*]}"
}

name=submit.sh
[ -x "$dir/submit.sh" ] || fail "$dir/submit.sh is not an executable"
for script in "$dir"/*.sbatch; do
  name=$(basename "$script")
  before=$failures
  bash -n "$script" || { fail "does not parse"; continue; }

  # the #SBATCH header: before the first command (sbatch ignores later ones), no variables
  header=$(awk '/^#SBATCH/ { print; next } /^[ \t]*(#|$)/ { next } { exit }' "$script")
  [ "$(grep -c '^#SBATCH' "$script")" = "$(grep -c '^#SBATCH' <<<"$header")" ] ||
    fail "#SBATCH lines after the first command (sbatch ignores them)"
  ! grep -q '^#SBATCH.*\$' <<<"$header" || fail "#SBATCH lines cannot expand variables"
  for opt in job-name:-J nodes:-N ntasks-per-node: gpus-per-node: time:-t output:-o; do
    [ -n "$(header_value "${opt%%:*}" "${opt#*:}")" ] || fail "no #SBATCH --${opt%%:*}"
  done
  nodes=$(header_value nodes -N)
  per_node=$(header_value ntasks-per-node '')
  [ "$per_node" = "$(header_value gpus-per-node '')" ] ||
    fail "#SBATCH --ntasks-per-node differs from --gpus-per-node (one rank per GPU)"

  # outside a job: no self-submission, no srun
  run bash "$script"
  if [ "$rc" = 0 ] || grep -q '^sbatch \|^srun ' "$log"; then
    fail "outside a job it should refuse, not submit or run (exit $rc): $(cat "$log") $out"
  fi

  # inside a job, as sbatch runs it: a copy in the spool directory, only SLURM_SUBMIT_DIR set
  cp "$script" "$tmp/spool/slurm_script"
  job=(SLURM_JOB_ID=42 SLURM_JOB_NAME=test SLURM_NTASKS=32 SLURM_NPROCS=32 SLURM_JOB_NUM_NODES=4
    SLURM_NNODES=4 SLURM_NTASKS_PER_NODE=8 SLURM_GPUS_PER_NODE=8 SLURM_SUBMIT_DIR="$repo"
    BUILD_DIR="$fake")
  run "${job[@]}" bash "$tmp/spool/slurm_script"
  [ "$rc" = 0 ] || fail "inside a job: exit $rc: $out"
  check_job_log 32 pmix "inside a job"
  run "${job[@]}" SRUN_MPI=pmi2 bash "$tmp/spool/slurm_script"
  [ "$rc" = 0 ] || fail "inside a job with SRUN_MPI=pmi2: exit $rc: $out"
  check_job_log 32 pmi2 "inside a job with SRUN_MPI=pmi2"
  run "${job[@]}" "$(fail_check)" bash "$tmp/spool/slurm_script"
  [ "$rc" = 2 ] || fail "inside a job with a failing check: exit $rc, not 2: $out"
  ! grep -q '^srun ' "$log" || fail "inside a job with a failing check: srun ran"
  grep -q 'error: .*(fake)' <<<"$out" || fail "inside a job with a failing check: no program line"

  # submit.sh, from another directory
  submit=("$dir/submit.sh" "$script")
  for case in "32|-N 4 --ntasks-per-node 8 -p gpu -A proj" "$((nodes * per_node))|" \
    "$((2 * per_node))|--nodes=2"; do
    ranks=${case%%|*}
    # shellcheck disable=SC2206
    opts=(${case#*|})
    run BUILD_DIR="$fake" bash "${submit[@]}" "${opts[@]}"
    what="submit.sh ${opts[*]}"
    [ "$rc" = 0 ] || fail "$what: exit $rc: $out"
    grep -q '^prog ' "$log" || fail "$what: no --check ran"
    ! grep '^prog ' "$log" | grep -v -q -- " --check --ranks $ranks\$" ||
      fail "$what: not checked with --ranks $ranks: $(grep '^prog ' "$log")"
    [ "$(grep '^sbatch ' "$log")" = "sbatch ${opts[*]:+${opts[*]} }$script" ] ||
      fail "$what: not 'sbatch ${opts[*]:+${opts[*]} }$script' but: $(grep '^sbatch ' "$log")"
    [ "$(tail -n 1 "$log" | cut -c1-7)" = "sbatch " ] || fail "$what: sbatch was not called last"
    ! grep -q '^srun ' "$log" || fail "$what: srun was called"
  done
  run BUILD_DIR="$fake" "$(fail_check)" bash "${submit[@]}" -N 4 --ntasks-per-node 8
  [ "$rc" = 2 ] || fail "submit.sh with a failing check: exit $rc, not 2: $out"
  ! grep -q '^sbatch ' "$log" || fail "submit.sh with a failing check: sbatch was called"
  grep -q 'error: .*(fake)' <<<"$out" || fail "submit.sh with a failing check: no program line"

  [ "$failures" = "$before" ] && echo "ok: $name" || echo "checked $name"
done

if [ -n "$build" ]; then
  name="submit.sh with $build/apps/ted_ablation"
  script=$dir/ablation.sbatch
  if [ ! -x "$build/apps/ted_ablation" ]; then
    fail "no $build/apps/ted_ablation"
  elif ! "$build/apps/ted_ablation" --help 2>&1 | grep -q -- --check; then
    echo "SKIP: $build/apps/ted_ablation does not accept --check yet: the real-program checks"
  else
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    sed '/^model:/a\  hiddn: 4096' "$repo/experiments/ablation/paper.yaml" >"$tmp/typo.yaml"
    run BUILD_DIR="$build" CONFIG="$tmp/typo.yaml" bash "$dir/submit.sh" "$script"
    [ "$rc" = 2 ] || fail "a config with an unknown key: exit $rc, not 2: $out"
    ! grep -q '^sbatch ' "$log" || fail "a config with an unknown key: sbatch was called"
    grep -q 'hiddn' <<<"$out" || fail "a config with an unknown key: no line naming it: $out"
    # The paper's ablation with 8 layers: with 32, this implementation's projected peak (fp32
    # gradients) exceeds a 16 GB V100 (experiments/clusters/summit.yaml), which the check rightly
    # refuses.
    sed 's/^  layers: 32.*/  layers: 8/' "$repo/experiments/ablation/paper.yaml" >"$tmp/fits.yaml"
    run BUILD_DIR="$build" CONFIG="$tmp/fits.yaml" bash "$dir/submit.sh" "$script"
    [ "$rc" = 0 ] || fail "a paper-shaped config that fits, on the default shape: exit $rc: $out"
    grep -q '^sbatch ' "$log" || fail "a paper-shaped config that fits: sbatch not called"
    echo "checked $name"
  fi
fi
echo "$failures failed"
[ "$failures" = 0 ]
