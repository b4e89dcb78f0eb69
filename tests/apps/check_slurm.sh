#!/usr/bin/env bash
# The sbatch scripts and slurm/submit.sh against stand-ins, for what a real Slurm on this machine
# cannot show (GPU nodes, large jobs): `sbatch`, `srun` and `scontrol` on PATH that log their
# arguments (srun also waits for a signal, or exits with a code, as FAKE_STEP says), and
# BUILD_DIR pointing at fake programs (apps/ted_*: every experiment of experiments/registry.txt,
# ted_collbench and ted_train) that log theirs and, with --check, print the
# needs line (backend cuda with FAKE_BACKEND=cuda or --comm nccl) or print one line and exit 2
# (a config named bad.yaml, or TED_FAKE_FAIL=1). For each script:
#   - it parses; its #SBATCH lines come before its first command, expand no variable, give the
#     job name, time and a log under slurm/logs/ (ignored by git), and no shape: no nodes, tasks
#     or GPUs (a CPU cluster has no GPU gres; -n and -N mean what they mean to Slurm); a script
#     that requeues itself (--requeue) signals its batch shell before the time limit
#     (--signal=B:...) and appends to its log (--open-mode=append);
#   - outside a job it neither submits itself nor runs srun, and fails;
#   - inside a fake job, run as sbatch runs it (a copy in a spool folder, started elsewhere):
#     every program checked first (`--check --ranks 32`, in the repository root), then each run
#     with `srun --mpi=pmix` (pmi2 with SRUN_MPI=pmi2), --cpus-per-task from the job, nothing
#     that sets the shape; a failing check, or a GPU job with more tasks on a node than GPUs:
#     exit 2 and no srun; the variables (CONFIG lists, CLUSTER, CSV, SET) reach the programs; an
#     array task runs its entry of CONFIG (or OPS), or its point of a single YAML (--point);
#   - slurm/submit.sh works out the ranks as Slurm would (-n alone, -N with --ntasks-per-node,
#     -N with -n), checks for them, and calls sbatch with the options; refuses (exit 2, no
#     sbatch) more tasks on a node than GPUs and a failing check; adds --gpus-per-node (one per
#     rank of a node) for a job on the cuda backend that asked for none, and nothing for a CPU
#     job; checks every index of an --array;
#   - slurm/train.sbatch: ted_train with --save-dir (SAVE_DIR, default by job and YAML name) and
#     --resume, one YAML a job (an array task: its entry of CONFIG), the restart count in its
#     log; SIGUSR1 to the batch shell while the step runs reaches srun, and after the step's exit
#     75 the job is requeued (scontrol requeue <job>, exit 0); SIGTERM reaches srun as SIGUSR1
#     (srun kills the ranks on a SIGTERM of its own) and is not requeued (exit 75); exit 75
#     without a signal is requeued, 0 and any other code are not; a failing requeue: exit 75.
# With a build folder as second argument, also the real ted_ablation: a config with an unknown
# key is refused before sbatch; the paper's config on 16 x 8 ranks is refused when judged by
# Summit's 16 GB and submitted, with one GPU per rank, when judged by CLUSTER=dgx-a100 (on a
# build without CUDA and NCCL the check refuses it: one line, exit 2).
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
# shellcheck disable=SC2016  # $* and $TED_TEST_LOG expand in the stand-in
printf '#!/usr/bin/env bash\necho "sbatch $*" >>"$TED_TEST_LOG"\n' >"$tmp/bin/sbatch"
cat >"$tmp/bin/srun" <<'EOF'
#!/usr/bin/env bash
echo "srun $*" >>"$TED_TEST_LOG"
case ${FAKE_STEP:-} in
  wait)  # until a signal: a step that saves and exits 75 on either
    trap 'echo "srun got USR1" >>"$TED_TEST_LOG"; exit 75' USR1
    trap 'echo "srun got TERM" >>"$TED_TEST_LOG"; exit 75' TERM
    echo "srun waiting" >>"$TED_TEST_LOG"
    for _ in $(seq 600); do sleep 0.1; done
    exit 1 ;;
  exit=*) exit "${FAKE_STEP#exit=}" ;;
esac
EOF
cat >"$tmp/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
echo "scontrol $*" >>"$TED_TEST_LOG"
exit "${FAKE_SCONTROL_RC:-0}"
EOF
mapfile -t experiments < <(awk '/^[a-z]/ { print $1 }' "$repo/experiments/registry.txt")
for prog in "${experiments[@]/#/ted_}" ted_collbench ted_train; do
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
backend=${FAKE_BACKEND:-cpu}
case " $* " in *" --comm nccl "*) backend=cuda ;; esac
echo "$(basename "$0"): fine (fake)"
if [ "${*: -3:1}" = --check ]; then echo "needs: backend=$backend comm=mpi ranks=${*: -1}"; fi
EOF
done
chmod +x "$tmp/bin/"* "$fake/apps/"*

fail() { echo "FAIL: $name: $*"; failures=$((failures + 1)); }
# runs <command...> from $tmp/elsewhere with no Slurm, TED or script variables from the caller
# but PATH with the stand-ins first; out: its output, rc: its exit status, the log is fresh
clean_env() {  # sets clean: `env` that unsets those variables
  local v
  clean=(env)
  for v in $(compgen -e); do
    case $v in
      SLURM_* | SBATCH_* | SRUN_* | TED_* | CONFIG | CLUSTER | CSV | CSV_DIR | SET | BUILD_DIR | \
        BACKEND | COMM | TP | EP | OPS | MIN_BYTES | MAX_BYTES | WARMUP | ITERS | FAKE_* | SAVE_DIR)
        clean+=(-u "$v") ;;
    esac
  done
}
run() {
  local clean
  clean_env
  : >"$log"
  rc=0
  out=$(cd "$tmp/elsewhere" && "${clean[@]}" PATH="$tmp/bin:$PATH" TED_TEST_LOG="$log" "$@" 2>&1) ||
    rc=$?
}
fail_check() {  # the environment that makes the checks of $script fail
  if grep -q 'CONFIG' "$script"; then echo "CONFIG=$tmp/bad.yaml"; else echo TED_FAKE_FAIL=1; fi
}
checks() { grep '^prog ' "$log"; }
sbatch_line() { grep '^sbatch ' "$log"; }
# the log of an in-job run: all checks (for <ranks>, in the repository root) before the first
# srun, one srun per check running the checked command, srun options <srun options> and nothing
# that sets nodes or tasks
check_job_log() {  # <ranks> <srun options> <what>
  local ranks=$1 options=$2 what=$3 runs line cmd=() checked=()
  runs=$(grep -n '^srun ' "$log")
  [ -n "$(checks)" ] || { fail "$what: no --check ran"; return; }
  [ -n "$runs" ] || { fail "$what: srun never ran"; return; }
  [ "$(grep -n '^prog ' "$log" | tail -n 1 | cut -d: -f1)" -lt "$(head -n 1 <<<"$runs" | cut -d: -f1)" ] ||
    fail "$what: a check ran after srun"
  while IFS= read -r line; do
    [[ "$line" == "prog [$repo] "* ]] || fail "$what: the check did not run in $repo: $line"
    [[ "$line" == *" --check --ranks $ranks" ]] || fail "$what: not --check --ranks $ranks: $line"
    line=${line#prog \[*\] }
    checked+=("${line% --check --ranks "$ranks"}")
  done < <(checks)
  while IFS= read -r line; do
    # shellcheck disable=SC2206
    local words=($line) w in_cmd=0 o=() c=()
    for w in "${words[@]:1}"; do
      [[ "$w" == "$fake/apps/"* ]] && in_cmd=1
      if [ "$in_cmd" = 1 ]; then c+=("$w"); else o+=("$w"); fi
    done
    [ "${o[*]}" = "$options" ] || fail "$what: srun options '${o[*]}', not '$options'"
    cmd+=("${c[*]}")
  done < <(grep '^srun ' "$log")
  [ "${checked[*]}" = "${cmd[*]}" ] ||
    fail "$what: srun did not run the checked commands: checked ${checked[*]}; ran ${cmd[*]}"
}

name=submit.sh
[ -x "$dir/submit.sh" ] || fail "$dir/submit.sh is not an executable"
[ -f "$dir/logs/.gitignore" ] && git -C "$repo" check-ignore -q slurm/logs/ted-x-1.out ||
  fail "slurm/logs/ is not there, or not ignored by git"
job=(SLURM_JOB_ID=42 SLURM_JOB_NAME=test SLURM_NTASKS=32 SLURM_NPROCS=32 SLURM_JOB_NUM_NODES=4
  SLURM_NNODES=4 SLURM_TASKS_PER_NODE="8(x4)" SLURM_SUBMIT_DIR="$repo" BUILD_DIR="$fake")
for script in "$dir"/*.sbatch; do
  name=$(basename "$script")
  before=$failures
  bash -n "$script" || { fail "does not parse"; continue; }

  # the #SBATCH header: before the first command (sbatch ignores later ones), no variables
  header=$(awk '/^#SBATCH/ { print; next } /^[ \t]*(#|$)/ { next } { exit }' "$script")
  [ "$(grep -c '^#SBATCH' "$script")" = "$(grep -c '^#SBATCH' <<<"$header")" ] ||
    fail "#SBATCH lines after the first command (sbatch ignores them)"
  ! grep -q '^#SBATCH.*\$' <<<"$header" || fail "#SBATCH lines cannot expand variables"
  for option in job-name time output=slurm/logs/; do
    grep -q -- "^#SBATCH --$option" <<<"$header" || fail "no #SBATCH --$option"
  done
  ! grep -q -E -- '^#SBATCH +(-N|-n|-G|--nodes|--ntasks|--gpus|--gres)' <<<"$header" ||
    fail "the #SBATCH lines set a shape or GPUs: $header"
  if grep -q -- '^#SBATCH --requeue' <<<"$header"; then
    # its later runs append to the log, and the batch shell hears of the time limit before it
    grep -q -- '^#SBATCH --open-mode=append' <<<"$header" || fail "--requeue without --open-mode=append"
    grep -q -E -- '^#SBATCH --signal=B:[A-Z0-9]+@[0-9]+$' <<<"$header" ||
      fail "--requeue without --signal=B:<signal>@<seconds>"
  fi

  # outside a job: no self-submission, no srun
  run bash "$script"
  if [ "$rc" = 0 ] || grep -q '^sbatch \|^srun ' "$log"; then
    fail "outside a job it should refuse, not submit or run (exit $rc): $(cat "$log") $out"
  fi

  # slurm/calibrate.sbatch runs no experiment step of launch.sh's: one calibration script over
  # srun (tests/apps/slurm_cluster.sh runs it under a real Slurm); here what fake programs show.
  if [ "$name" = calibrate.sbatch ]; then
    run BUILD_DIR="$fake" bash "$script" --check
    [ "$rc" = 2 ] && grep -q 'bench_machine is not an executable' <<<"$out" ||
      fail "--check without bench_machine: exit $rc, not 2: $out"
    cp "$script" "$tmp/spool/slurm_script"
    run "${job[@]}" SLURM_TASKS_PER_NODE="8,7,8(x2)" SLURM_NTASKS=31 bash "$tmp/spool/slurm_script"
    [ "$rc" = 2 ] && grep -q 'give every node as many' <<<"$out" && ! grep -q '^srun ' "$log" ||
      fail "inside a job of uneven nodes: exit $rc, not 2: $out"
    [ "$failures" = "$before" ] && echo "ok: $name" || echo "checked $name"
    continue
  fi

  # inside a job, as sbatch runs it: a copy in the spool folder, only SLURM_SUBMIT_DIR set
  cp "$script" "$tmp/spool/slurm_script"
  run "${job[@]}" bash "$tmp/spool/slurm_script"
  [ "$rc" = 0 ] || fail "inside a job: exit $rc: $out"
  check_job_log 32 "--mpi=pmix --cpu-bind=cores" "inside a job"
  run "${job[@]}" SRUN_MPI=pmi2 SLURM_CPUS_PER_TASK=4 bash "$tmp/spool/slurm_script"
  [ "$rc" = 0 ] || fail "inside a job with SRUN_MPI=pmi2, -c 4: exit $rc: $out"
  check_job_log 32 "--mpi=pmi2 --cpu-bind=cores --cpus-per-task=4" "inside a job with pmi2, -c 4"
  run "${job[@]}" "$(fail_check)" bash "$tmp/spool/slurm_script"
  [ "$rc" = 2 ] || fail "inside a job with a failing check: exit $rc, not 2: $out"
  ! grep -q '^srun ' "$log" || fail "inside a job with a failing check: srun ran"
  grep -q 'error: .*(fake)' <<<"$out" || fail "inside a job with a failing check: no program line"
  gpu_job=("${job[@]}" FAKE_BACKEND=cuda COMM=nccl)
  run "${gpu_job[@]}" SLURM_GPUS_ON_NODE=4 bash "$tmp/spool/slurm_script"
  [ "$rc" = 2 ] && grep -q "8 ranks on a node but 4 GPUs per node" <<<"$out" ||
    fail "a GPU job with 8 tasks on a node of 4 GPUs: exit $rc: $out"
  ! grep -q '^srun ' "$log" || fail "a GPU job with 8 tasks on a node of 4 GPUs: srun ran"
  run "${gpu_job[@]}" SLURM_GPUS_ON_NODE=8 bash "$tmp/spool/slurm_script"
  [ "$rc" = 0 ] && grep -q '^srun ' "$log" || fail "a GPU job with 8 GPUs a node: exit $rc: $out"

  # submit.sh, from another folder: the ranks it checks for, and what it passes to sbatch
  submit=("$dir/submit.sh" "$script")
  for case in "32|-N 4 --ntasks-per-node 8 -p gpu -A proj|" "1||" "6|-n 6|" "6|-N 2 -n6|" \
    "16|--nodes=2 --ntasks-per-node=8|" "4|-N1 -n4 --gpus-per-node=4|" \
    "32|-N 4 --ntasks-per-node=8|--gpus-per-node=8 |cuda" "6|-N 2 -n 6|--gpus-per-node=3 --ntasks-per-node=3 |cuda" \
    "4|-N1 -n4 --gpus-per-node=4||cuda" "8|-n 8 --ntasks-per-node=4|--gpus-per-node=4 |cuda"; do
    IFS='|' read -r ranks options added backend <<<"$case"
    # shellcheck disable=SC2206
    opts=($options)
    comm=mpi
    [ -n "$backend" ] && comm=nccl
    run BUILD_DIR="$fake" FAKE_BACKEND="${backend:-cpu}" COMM=$comm bash "${submit[@]}" "${opts[@]}"
    what="submit.sh ${opts[*]}${backend:+ (cuda)}"
    [ "$rc" = 0 ] || fail "$what: exit $rc: $out"
    [ -n "$(checks)" ] || fail "$what: no --check ran"
    ! checks | grep -v -q -- " --check --ranks $ranks\$" ||
      fail "$what: not checked with --ranks $ranks: $(checks)"
    [ "$(sbatch_line)" = "sbatch $added${opts[*]:+${opts[*]} }$script" ] ||
      fail "$what: not 'sbatch $added${opts[*]:+${opts[*]} }$script' but: $(sbatch_line)"
    [ "$(tail -n 1 "$log" | cut -c1-7)" = "sbatch " ] || fail "$what: sbatch was not called last"
    ! grep -q '^srun ' "$log" || fail "$what: srun was called"
  done
  for case in "-N 1 -n 4 --gpus-per-node=2|4 tasks on a node but 2 GPUs" \
    "-N 2 --ntasks-per-node=8 --gres=gpu:a100:4|8 tasks on a node but 4 GPUs" \
    "-n 8 --ntasks-per-node=8 --gpus-per-node=4|--ntasks-per-node=8 but 4 GPUs" \
    "-n 8 -G 4|8 ranks but 4 GPUs"; do
    # shellcheck disable=SC2086
    run BUILD_DIR="$fake" COMM=mpi bash "${submit[@]}" ${case%%|*}
    [ "$rc" = 2 ] && grep -q -- "${case#*|}" <<<"$out" && [ -z "$(sbatch_line)" ] ||
      fail "submit.sh ${case%%|*}: exit $rc, sbatch '$(sbatch_line)': $out"
  done
  run BUILD_DIR="$fake" FAKE_BACKEND=cuda COMM=nccl bash "${submit[@]}" -n 8
  [ "$rc" = 2 ] && grep -q "cannot tell the tasks per node" <<<"$out" && [ -z "$(sbatch_line)" ] ||
    fail "submit.sh -n 8 for a GPU job: exit $rc: $out"
  run BUILD_DIR="$fake" COMM=mpi "$(fail_check)" bash "${submit[@]}" -N 4 --ntasks-per-node 8
  [ "$rc" = 2 ] || fail "submit.sh with a failing check: exit $rc, not 2: $out"
  [ -z "$(sbatch_line)" ] || fail "submit.sh with a failing check: sbatch was called"
  grep -q 'error: .*(fake)' <<<"$out" || fail "submit.sh with a failing check: no program line"
  array_env=()  # a training job has no points: its array tasks take CONFIG's YAMLs
  [ "$name" = train.sbatch ] && array_env=(CONFIG="a.yaml b.yaml c.yaml")
  run BUILD_DIR="$fake" COMM=mpi "${array_env[@]}" bash "${submit[@]}" -n 4 --array=1-3
  [ "$rc" = 0 ] && [ "$(checks | wc -l)" -ge 3 ] || fail "submit.sh --array=1-3: exit $rc: $out"

  [ "$failures" = "$before" ] && echo "ok: $name" || echo "checked $name"
done

# The variables reach the programs; an array task picks its YAML, its point or its sweep.
name=variables
script=$dir/ablation.sbatch
cp "$script" "$tmp/spool/slurm_script"
run "${job[@]}" CONFIG="a.yaml b.yaml" CLUSTER=c.yaml CSV=out.csv SET="x.y=1 z=2" \
  bash "$tmp/spool/slurm_script"
expected="-c a.yaml --csv out.csv --set run.cluster=c.yaml --set x.y=1 --set z=2"
[ "$rc" = 0 ] && [ "$(grep -c "^srun .*ted_ablation $expected" "$log")" = 1 ] &&
  [ "$(grep -c "^srun .*ted_ablation ${expected/a.yaml/b.yaml}" "$log")" = 1 ] ||
  fail "CONFIG of two YAMLs, CLUSTER, CSV, SET: exit $rc: $(grep '^srun ' "$log")"
run "${job[@]}" CONFIG="a.yaml b.yaml" SLURM_ARRAY_JOB_ID=41 SLURM_ARRAY_TASK_ID=2 \
  bash "$tmp/spool/slurm_script"
[ "$rc" = 0 ] && [ "$(grep '^srun ' "$log" | grep -c -- '-c b.yaml --csv results/local/slurm/ablation_b.csv$')" = 1 ] &&
  [ "$(grep -c '^srun ' "$log")" = 1 ] || fail "array task 2 of two YAMLs: $(grep '^srun ' "$log")"
run "${job[@]}" CONFIG="a.yaml b.yaml" SLURM_ARRAY_TASK_ID=3 bash "$tmp/spool/slurm_script"
[ "$rc" = 2 ] && grep -q "array index 3: CONFIG lists 2 YAMLs" <<<"$out" ||
  fail "array task 3 of two YAMLs: exit $rc: $out"
run "${job[@]}" CONFIG=a.yaml SLURM_ARRAY_TASK_ID=5 bash "$tmp/spool/slurm_script"
[ "$rc" = 0 ] && grep -q "^srun .* -c a.yaml .* --point 5$" "$log" ||
  fail "array task 5 of one YAML: not --point 5: $(grep '^srun ' "$log")"
cp "$dir/collbench.sbatch" "$tmp/spool/slurm_script"
run "${job[@]}" OPS="all_reduce:tensor all_gather:tensor" SLURM_ARRAY_TASK_ID=2 CSV_DIR=cd \
  bash "$tmp/spool/slurm_script"
[ "$rc" = 0 ] && [ "$(grep -c '^srun ' "$log")" = 1 ] &&
  grep -q "^srun .*--op all_gather --group tensor .*--csv cd/all_gather_tensor_nccl_G32.csv$" "$log" ||
  fail "collbench array task 2: $(grep '^srun ' "$log")"
run "${job[@]}" BACKEND=mpi bash "$tmp/spool/slurm_script"
[ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "BACKEND=mpi: renamed; use COMM=mpi|nccl" <<<"$out" &&
  ! grep -q '^srun ' "$log" || fail "collbench with the old BACKEND=: exit $rc: $out"
run COMM=mpi BACKEND=mpi bash "$dir/submit.sh" "$dir/collbench.sbatch" -n 4
[ "$rc" = 2 ] && [ -z "$(sbatch_line)" ] || fail "submit.sh collbench with the old BACKEND=: exit $rc: $out"
[ "$failures" = 0 ] && echo "ok: $name"

# slurm/train.sbatch: its step, the signals of its batch shell and the requeue.
name=train.sbatch
cp "$dir/train.sbatch" "$tmp/spool/slurm_script"
# the script in the fake job with srun waiting for a signal, sent to the batch shell alone (as
# --signal=B: does) once srun waits; out, rc
run_signalled() {  # <signal> [VAR=value...]
  local signal=$1 clean pid
  shift
  clean_env
  : >"$log"
  (cd "$tmp/elsewhere" && exec "${clean[@]}" PATH="$tmp/bin:$PATH" TED_TEST_LOG="$log" FAKE_STEP=wait \
    "${job[@]}" "$@" bash "$tmp/spool/slurm_script") >"$tmp/out" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    grep -q '^srun waiting' "$log" && break
    sleep 0.1
  done
  kill -"$signal" "$pid"
  rc=0
  wait "$pid" || rc=$?
  out=$(cat "$tmp/out")
}
run "${job[@]}" bash "$tmp/spool/slurm_script"
defaults="-c experiments/train/tiny-cpu.yaml --csv results/local/slurm/train_tiny-cpu.csv"
defaults+=" --save-dir results/local/slurm/checkpoints/test_tiny-cpu --resume"  # job name test
[ "$rc" = 0 ] && grep -q -- "^srun .*ted_train $defaults$" "$log" &&
  ! grep -q '^scontrol' "$log" || fail "the defaults: exit $rc: $(grep '^srun\|^scontrol' "$log")"
run "${job[@]}" SAVE_DIR=ck CSV=t.csv CONFIG="a.yaml b.yaml" SLURM_ARRAY_TASK_ID=2 SET="x=1" \
  SLURM_RESTART_COUNT=2 bash "$tmp/spool/slurm_script"
[ "$rc" = 0 ] && grep -q -- "^srun .*ted_train -c b.yaml --csv t.csv --save-dir ck --resume --set x=1$" \
  "$log" &&
  grep -q "^ted-train: job 42 (array task 2) (restart 2) at " <<<"$out" ||
  fail "SAVE_DIR, CSV, array task 2 of two YAMLs, SET, a restart: exit $rc: $out"
for case in "a.yaml b.yaml||CONFIG lists 2 YAMLs: a job trains one" \
  "a.yaml|2|array index 2: CONFIG lists 1 YAMLs"; do
  IFS='|' read -r configs index message <<<"$case"
  run "${job[@]}" CONFIG="$configs" ${index:+SLURM_ARRAY_TASK_ID=$index} bash "$tmp/spool/slurm_script"
  [ "$rc" = 2 ] && grep -q "$message" <<<"$out" && ! grep -q '^srun' "$log" ||
    fail "CONFIG='$configs'${index:+, array task $index}: exit $rc: $out"
done
run_signalled USR1
[ "$rc" = 0 ] && grep -q '^srun got USR1' "$log" && grep -q '^scontrol requeue 42$' "$log" &&
  grep -q "requeueing job 42" <<<"$out" || fail "SIGUSR1 while the step runs: exit $rc: $(cat "$log") $out"
run_signalled TERM
[ "$rc" = 75 ] && grep -q '^srun got USR1' "$log" && ! grep -q '^scontrol' "$log" ||
  fail "SIGTERM while the step runs: exit $rc: $(cat "$log") $out"
for case in "exit=75|0|scontrol requeue 42" "exit=0|0|" "exit=3|3|" "exit=75|75|scontrol requeue 42|1"; do
  IFS='|' read -r step expect_rc expect_scontrol scontrol_rc <<<"$case"
  run "${job[@]}" FAKE_STEP="$step" FAKE_SCONTROL_RC="${scontrol_rc:-0}" bash "$tmp/spool/slurm_script"
  [ "$rc" = "$expect_rc" ] && [ "$(grep '^scontrol' "$log")" = "$expect_scontrol" ] ||
    fail "a step's $step${scontrol_rc:+, scontrol failing}: exit $rc, not $expect_rc;" \
      "'$(grep '^scontrol' "$log")': $out"
done
[ "$failures" = 0 ] && echo "ok: $name: its step, SIGUSR1 and SIGTERM, the requeue"

if [ -n "$build" ]; then
  name="submit.sh with $build/apps/ted_ablation"
  script=$dir/ablation.sbatch
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  paper=$repo/experiments/ablation/paper.yaml
  sed '/^model:/a\  hiddn: 4096' "$paper" >"$tmp/typo.yaml"
  run BUILD_DIR="$build" CONFIG="$tmp/typo.yaml" bash "$dir/submit.sh" "$script" -N 16 --ntasks-per-node=8
  [ "$rc" = 2 ] && grep -q 'hiddn' <<<"$out" && [ -z "$(sbatch_line)" ] ||
    fail "a config with an unknown key: exit $rc, sbatch '$(sbatch_line)': $out"
  # The paper's ablation as the paper ran it: 128 V100-16GB of Summit (6 a node), 16-bit
  # gradients (training.grad_dtype) as DeepSpeed's fp16 ZeRO-1: every point fits. With fp32
  # gradients it does not (18.9 GB a rank, over 16 GB): refused, nothing submitted.
  for cluster in summit dgx-a100; do
    gpus=6
    [ "$cluster" = dgx-a100 ] && gpus=8
    run BUILD_DIR="$build" CLUSTER=experiments/clusters/$cluster.yaml bash "$dir/submit.sh" \
      "$script" -n 128 --ntasks-per-node=$gpus
    if grep -q "this build has no" <<<"$out"; then
      [ "$rc" = 2 ] && [ -z "$(sbatch_line)" ] || fail "the paper's ablation, no CUDA build: exit $rc"
    else
      [ "$rc" = 0 ] && grep -q "judged against cluster $cluster" <<<"$out" &&
        grep -q '5 points (0 over memory)' <<<"$out" &&
        [ "$(sbatch_line)" = "sbatch --gpus-per-node=$gpus -n 128 --ntasks-per-node=$gpus $script" ] ||
        fail "the paper's ablation judged by $cluster: exit $rc, '$(sbatch_line)': $out"
    fi
  done
  run BUILD_DIR="$build" SET=training.grad_dtype=fp32 bash "$dir/submit.sh" "$script" -n 128 \
    --ntasks-per-node=6
  [ "$rc" = 2 ] && grep -q 'no point fits in memory on 128 ranks' <<<"$out" &&
    [ -z "$(sbatch_line)" ] ||
    fail "the paper's ablation with fp32 gradients judged by Summit: exit $rc: $out"
  [ "$failures" = 0 ] && echo "ok: $name"
fi
echo "$failures failed"
[ "$failures" = 0 ]
