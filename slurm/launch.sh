# shellcheck shell=bash
# Sourced by the sbatch scripts as their last lines: they set TED_REPO (the repository root:
# $TED_REPO, else the directory sbatch ran in, SLURM_SUBMIT_DIR, else the script's ../) and
# define ted_steps (their programs: `ted_experiment <name>` or one `ted_step <program>
# <arguments...>` per srun step, or `ted_resumable_step <program> <arguments...>` for a program
# that saves a checkpoint, exits 75 when a signal stops it and resumes when run again: the job
# requeues itself, below), then call `ted_main <job name> "$@"`, which first changes to
# TED_REPO, then:
#   script --check [--ranks N] [--array-index K]
#                               on any machine, no srun, no MPI: runs each step's program as one
#                               plain process with `--check --ranks N` (N: $SLURM_NTASKS, else
#                               1), as array task K would; exit 0 when all pass, else 2 (the
#                               program's line is on stderr). Each program's last line says
#                               what the job needs (`needs: backend=cuda comm=nccl ranks=N`).
#                               slurm/submit.sh runs this before it calls sbatch.
#   script (inside a job)       the same check for the job's rank count (exit 2 before any srun
#                               on a problem; also when a job that needs GPUs has more tasks on a
#                               node than GPUs), then one srun per step; srun takes the shape
#                               (nodes, tasks, GPUs) from the allocation, and --cpus-per-task
#                               from the job (srun no longer inherits it from sbatch).
# Outside a job without --check it refuses (exit 2): submit with slurm/submit.sh or sbatch.
#
# A resumable step (slurm/train.sbatch; the script calls ted_catch_signals before ted_main) runs
# srun in the background and waits for it, so that the batch shell can act on a signal while the
# step runs (bash runs a trap only between commands: a foreground srun would hold it until the end):
#   SIGUSR1  (sbatch --signal=B:USR1@<seconds>: Slurm's warning before the time limit, sent to the
#            batch shell only; or scancel --batch --signal=USR1) passed on to srun, which passes
#            it to every rank: the ranks agree after the step in progress, save a checkpoint and
#            exit 75 (EX_TEMPFAIL); the script then runs `scontrol requeue $SLURM_JOB_ID`, and the
#            job, the same id, runs again later (SLURM_RESTART_COUNT 1, 2, ...) and resumes.
#   SIGTERM  (scancel, the time limit reached, preemption; then SIGKILL after KillWait) passed on
#            to srun as SIGUSR1: srun answers a SIGTERM of its own by killing the ranks (SIGKILL),
#            USR1 it passes on; the ranks save what they can before the kill. Never requeued: the
#            job is ending (a cancelled job stays cancelled); submit it again to resume.
#   exit 0   the run finished; exit 75 without a SIGTERM (USR1 straight to the ranks, e.g. from
#            --signal=USR1 without B:): requeued as for SIGUSR1; any other exit: the job's.
#
# Variables (export them before submit.sh or sbatch, which hands them to the job; paths are
# relative to the repository root):
#   CONFIG     the experiment YAML, or several separated by spaces: a job runs each in turn (one
#              srun step each); an array job runs entry SLURM_ARRAY_TASK_ID of them (1-based),
#              or, with one YAML, only point SLURM_ARRAY_TASK_ID of its plan (--point)
#   CLUSTER    the cluster YAML the memory check judges by (--set run.cluster=...)
#   CSV        the CSV the rows are appended to (default results/local/slurm/<experiment>_<YAML
#              name>.csv: ignored by git); every row carries the job id (slurm_job)
#   SET        --set overrides, separated by spaces, e.g. "run.iters=2 model.layers=8"
#   BUILD_DIR  where the programs were built (default build)
#   SRUN_MPI   srun's --mpi plugin (default pmix; pmi2 or another your site's MPI was built with)

SRUN_MPI=${SRUN_MPI:-pmix}
BUILD_DIR=${BUILD_DIR:-build}
TED_MODE=check   # ted_step's action: check or run
TED_RANKS=1      # the rank count the steps are checked against and run on
TED_INDEX=       # the array task's index (1-based), empty outside an array
TED_NEEDS_GPU=0  # set by the check when a step runs on the cuda backend
TED_SIGNAL=      # the last signal the batch shell caught (USR1 or TERM; ted_catch_signals)
TED_STEP_PID=    # the srun of the resumable step running in the background, while it runs

ted_die() {  # <message>: one line on stderr, exit 2
  echo "$TED_NAME: $*" >&2
  exit 2
}

ted_step() {  # <program> <arguments...>: check it (plain process) or run it (srun)
  if [ "$TED_MODE" = check ]; then
    [ -x "$1" ] || ted_die "$1 is not an executable (build the suite first, or set BUILD_DIR)"
    local rc=0 out
    out=$("$@" --check --ranks "$TED_RANKS") || rc=$?
    [ -z "$out" ] || echo "$out"
    [ "$rc" = 0 ] || ted_die "the check of $(basename "$1") failed (exit $rc) for $TED_RANKS ranks"
    grep -q '^needs: backend=cuda ' <<<"$out" && TED_NEEDS_GPU=1
    return 0
  fi
  ted_srun
  echo "$TED_NAME: ${TED_SRUN[*]} $*"
  "${TED_SRUN[@]}" "$@"
}

ted_srun() {  # sets TED_SRUN: how a step starts its program on every rank of the job
  TED_SRUN=(srun --mpi="$SRUN_MPI" --cpu-bind=cores)
  [ -n "${SLURM_CPUS_PER_TASK:-}" ] && TED_SRUN+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
  return 0
}

ted_catch_signals() {  # before ted_main: from here on USR1 and TERM no longer end the batch shell
  trap 'ted_on_signal USR1' USR1
  trap 'ted_on_signal TERM' TERM
}

ted_on_signal() {  # <USR1|TERM>: remembered; passed on to the running step as SIGUSR1 (above)
  TED_SIGNAL=$1
  if [ -n "$TED_STEP_PID" ]; then
    echo "$TED_NAME: got SIG$1 at $(date '+%F %T'): passing SIGUSR1 to the step" \
      "(srun $TED_STEP_PID)"
    kill -USR1 "$TED_STEP_PID" 2>/dev/null || true
  else
    echo "$TED_NAME: got SIG$1 at $(date '+%F %T'), no step running"
  fi
}

ted_resumable_step() {  # <program> <arguments...>: ted_step, in the background, requeued on 75
  if [ "$TED_MODE" = check ]; then
    ted_step "$@"
    return 0
  fi
  local rc=0
  if [ -n "$TED_SIGNAL" ]; then
    # nothing started, so nothing to save: what the step would do after this signal
    echo "$TED_NAME: SIG$TED_SIGNAL came before the step started: not starting it"
    rc=75
  else
    ted_srun
    echo "$TED_NAME: ${TED_SRUN[*]} $*"
    "${TED_SRUN[@]}" "$@" &
    TED_STEP_PID=$!
    # wait returns (128 + the signal's number) as soon as a caught signal's trap has run, with
    # the step still running: wait again until it is gone, then take its status (bash keeps it)
    while kill -0 "$TED_STEP_PID" 2>/dev/null; do wait "$TED_STEP_PID" || true; done
    wait "$TED_STEP_PID" || rc=$?
    TED_STEP_PID=
  fi
  [ "$rc" = 0 ] && { echo "$TED_NAME: the step finished (exit 0)"; return 0; }
  [ "$rc" = 75 ] || { echo "$TED_NAME: the step failed (exit $rc)"; exit "$rc"; }
  if [ "$TED_SIGNAL" = TERM ]; then
    echo "$TED_NAME: the step stopped (exit 75) on SIGTERM: the job is ending (scancel, time" \
      "limit, preemption), not requeued; submit it again to resume from its last checkpoint"
    exit 75
  fi
  echo "$TED_NAME: the step stopped with a checkpoint (exit 75): requeueing job $SLURM_JOB_ID"
  trap '' TERM  # the requeue ends this run of the job with a SIGTERM: nothing left to pass on
  if ! scontrol requeue "$SLURM_JOB_ID"; then
    echo "$TED_NAME: scontrol requeue $SLURM_JOB_ID failed (a job submitted with --no-requeue," \
      "or JobRequeue=0 at this site): submit it again to resume from its last checkpoint"
    exit 75
  fi
  exit 0
}

ted_experiment() {  # <experiment>: one step of ted_<experiment> per YAML of CONFIG
  local name=$1 configs config point='' overrides word
  read -r -a configs <<<"${CONFIG:-}"
  [ ${#configs[@]} -gt 0 ] || ted_die "CONFIG names no YAML"
  if [ -n "$TED_INDEX" ]; then
    if [ ${#configs[@]} -gt 1 ]; then
      [ "$TED_INDEX" -ge 1 ] && [ "$TED_INDEX" -le ${#configs[@]} ] || ted_die "array index" \
        "$TED_INDEX: CONFIG lists ${#configs[@]} YAMLs (indices 1-${#configs[@]})"
      configs=("${configs[TED_INDEX - 1]}")
    else
      [ "$TED_INDEX" -ge 1 ] || ted_die "array index $TED_INDEX: plan points are numbered from 1"
      point=$TED_INDEX
    fi
  fi
  for config in "${configs[@]}"; do
    local csv=${CSV:-results/local/slurm/${name}_$(basename "$config" .yaml).csv}
    local args=(-c "$config" --csv "$csv")
    [ -n "${CLUSTER:-}" ] && args+=(--set "run.cluster=$CLUSTER")
    read -r -a overrides <<<"${SET:-}"
    for word in "${overrides[@]}"; do args+=(--set "$word"); done
    [ -n "$point" ] && args+=(--point "$point")
    ted_step "$BUILD_DIR/apps/ted_$name" "${args[@]}"
  done
}

ted_count() {  # <value> <what>: the value when a positive count, else exit 2
  [[ "$1" =~ ^[1-9][0-9]*$ ]] || ted_die "$2 needs a positive count, not '$1'"
  echo "$1"
}

ted_max_tasks_per_node() {  # the most tasks Slurm put on one node: SLURM_TASKS_PER_NODE="4(x2),3"
  local most=0 entry count entries
  IFS=, read -r -a entries <<<"${SLURM_TASKS_PER_NODE:-}"
  for entry in "${entries[@]}"; do
    count=${entry%%(*}
    [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -gt "$most" ] && most=$count
  done
  echo "$most"
}

ted_main() {  # <job name> <the script's arguments...>
  TED_NAME=$1
  shift
  cd "$TED_REPO" || exit 2
  if [ "${1:-}" = --check ]; then
    TED_RANKS=${SLURM_NTASKS:-1}
    shift
    while [ $# -gt 0 ]; do
      case $1 in
        --ranks) TED_RANKS=$(ted_count "${2:-}" --ranks) || exit 2 ;;
        --array-index) TED_INDEX=$(ted_count "${2:-}" --array-index) || exit 2 ;;
        *) ted_die "usage: $(basename "$0") --check [--ranks N] [--array-index K]" ;;
      esac
      shift 2
    done
    TED_RANKS=$(ted_count "$TED_RANKS" --ranks) || exit 2
    ted_steps
    return 0
  fi
  [ -n "${SLURM_JOB_ID:-}" ] ||
    ted_die "not inside a Slurm job: submit it with slurm/submit.sh or sbatch (see its top)"
  [ $# = 0 ] || ted_die "unexpected arguments: $* (inside a job the script takes none)"
  # without -n or --ntasks-per-node, srun starts one task per node
  TED_RANKS=${SLURM_NTASKS:-${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-}}}
  TED_RANKS=$(ted_count "$TED_RANKS" "the job's rank count (SLURM_NTASKS)") || exit 2
  TED_INDEX=${SLURM_ARRAY_TASK_ID:-}
  local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-?}} per_node gpus
  per_node=$(ted_max_tasks_per_node)
  [ "$per_node" -gt 0 ] || per_node=1
  gpus=${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-}}
  gpus=${gpus##*:}  # "a100:8" -> 8
  # SLURM_RESTART_COUNT: set from the first requeue on (the job's Restarts)
  local run="job $SLURM_JOB_ID${TED_INDEX:+ (array task $TED_INDEX)}"
  run+="${SLURM_RESTART_COUNT:+ (restart $SLURM_RESTART_COUNT)}"
  echo "$TED_NAME: $run at $(date '+%F %T'), $TED_RANKS ranks" \
    "on $nodes nodes (${SLURM_TASKS_PER_NODE:-?} per node, ${gpus:-no} GPUs per node," \
    "${SLURM_CPUS_PER_TASK:-1} CPUs per task), srun --mpi=$SRUN_MPI, in $(pwd)"
  TED_MODE=check
  ted_steps
  if [ "$TED_NEEDS_GPU" = 1 ]; then
    if [[ "$gpus" =~ ^[0-9]+$ ]]; then
      [ "$per_node" -le "$gpus" ] || ted_die "$per_node ranks on a node but $gpus GPUs per node" \
        "(one rank per GPU): give sbatch matching -n/--ntasks-per-node and --gpus-per-node"
    else
      echo "$TED_NAME: note: the job runs on GPUs but asked Slurm for none (--gpus-per-node);" \
        "each rank takes a GPU its node shows it"
    fi
  fi
  TED_MODE=run
  ted_steps
}
