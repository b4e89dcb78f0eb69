# Sourced by the sbatch scripts as their last lines: they set TED_REPO (the repository root:
# $TED_REPO, else the directory sbatch ran in, SLURM_SUBMIT_DIR, else the script's ../) and
# define ted_steps (their programs, one `ted_step <program> <arguments...>` per srun step), then
# call `ted_main <job name> "$@"`, which first changes to TED_REPO, then:
#   script --check [--ranks N]  on any machine, no srun: runs each step's program as one plain
#                               process with `--check --ranks N` (N: $SLURM_NTASKS, else 1);
#                               exit 0 when all pass, else 2 (the program's line is on stderr).
#                               slurm/submit.sh runs this before it calls sbatch.
#   script (inside a job)       the same check for the job's rank count (exit 2 before any srun
#                               on a problem), then one `srun --mpi=$SRUN_MPI` per step; srun
#                               takes the shape (nodes, tasks, GPUs) from the allocation.
# Outside a job without --check it refuses (exit 2): submit with slurm/submit.sh or sbatch.
# SRUN_MPI: srun's --mpi plugin (default pmix; pmi2 or another your site's MPI was built with).

SRUN_MPI=${SRUN_MPI:-pmix}
TED_MODE=check   # ted_step's action: check or run
TED_RANKS=1      # the rank count the steps are checked against and run on

ted_die() {  # <message>: one line on stderr, exit 2
  echo "$TED_NAME: $*" >&2
  exit 2
}

ted_step() {  # <program> <arguments...>: check it (plain process) or run it (srun)
  if [ "$TED_MODE" = check ]; then
    [ -x "$1" ] || ted_die "$1 is not an executable (build the suite first, or set BUILD_DIR)"
    local rc=0
    "$@" --check --ranks "$TED_RANKS" || rc=$?
    [ "$rc" = 0 ] || ted_die "the check of $(basename "$1") failed (exit $rc) for $TED_RANKS ranks"
  else
    srun --mpi="$SRUN_MPI" --cpu-bind=cores "$@"
  fi
}

ted_job_ranks() {  # the job's rank count, from the allocation
  local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-}} per_node=${SLURM_NTASKS_PER_NODE:-}
  if [ -n "${SLURM_NTASKS:-}" ]; then
    echo "$SLURM_NTASKS"
  elif [[ "$nodes" =~ ^[0-9]+$ && "$per_node" =~ ^[0-9]+$ ]]; then
    echo $((nodes * per_node))
  else
    ted_die "cannot tell the job's rank count (SLURM_NTASKS unset); give sbatch --ntasks-per-node"
  fi
}

ted_main() {  # <job name> <the script's arguments...>
  TED_NAME=$1
  shift
  cd "$TED_REPO" || exit 2
  if [ "${1:-}" = --check ]; then
    TED_RANKS=${SLURM_NTASKS:-1}
    if [ $# = 3 ] && [ "$2" = --ranks ]; then
      TED_RANKS=$3
    elif [ $# != 1 ]; then
      ted_die "usage: $(basename "$0") --check [--ranks N]"
    fi
    [[ "$TED_RANKS" =~ ^[1-9][0-9]*$ ]] || ted_die "--ranks needs a positive count, not '$TED_RANKS'"
    ted_steps
    return 0
  fi
  [ -n "${SLURM_JOB_ID:-}" ] ||
    ted_die "not inside a Slurm job: submit it with slurm/submit.sh or sbatch (see its top)"
  [ $# = 0 ] || ted_die "unexpected arguments: $* (inside a job the script takes none)"
  TED_RANKS=$(ted_job_ranks) || exit 2
  local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-?}} per_node=${SLURM_NTASKS_PER_NODE:-?}
  local gpus=${SLURM_GPUS_PER_NODE:-?}
  gpus=${gpus##*:}  # "a100:8" -> 8
  if [[ "$per_node" =~ ^[0-9]+$ && "$gpus" =~ ^[0-9]+$ ]] && [ "$per_node" -gt "$gpus" ]; then
    ted_die "$per_node ranks per node but $gpus GPUs per node (one rank per GPU): give sbatch" \
      "matching --ntasks-per-node and --gpus-per-node"
  fi
  echo "$TED_NAME: job $SLURM_JOB_ID, $TED_RANKS ranks on $nodes nodes ($per_node per node," \
    "$gpus GPUs per node), srun --mpi=$SRUN_MPI, in $(pwd)"
  TED_MODE=check
  ted_steps
  TED_MODE=run
  ted_steps
}
