# Sourced by the DeepSpeed baseline's sbatch scripts (beside it) as their last lines, as
# slurm/launch.sh is by ours: they set TED_REPO and CONFIG, then call `ds_main <job name> "$@"`,
# which changes to TED_REPO and then:
#   script --check [--ranks N]  on any machine, no srun: the environment is set up
#                               (baselines/deepspeed/setup.sh) and run.py checks the config for
#                               N ranks (default $SLURM_NTASKS, else 1); exit 0, else 2.
#   script (inside a job)       the same check for the job's rank count, then one srun step per
#                               rank count the config's points need (a sweep's points, up to
#                               the job's ranks), each task one rank of run.py; torch.distributed
#                               meets at the job's first node (MASTER_ADDR, MASTER_PORT).
# Environment: CONFIG, TED_DEEPSPEED_VENV (the environment setup.sh made; on a cluster make it
# on the login node once, on a shared file system), MASTER_PORT (default 29500).

ds_die() {  # <message>: one line on stderr, exit 2
  echo "$DS_NAME: $*" >&2
  exit 2
}

ds_main() {  # <job name> <the script's arguments...>
  DS_NAME=$1
  shift
  cd "$TED_REPO" || exit 2
  local ranks=${SLURM_NTASKS:-1} inside=1
  if [ "${1:-}" = --check ]; then
    inside=0
    if [ $# = 3 ] && [ "$2" = --ranks ]; then
      ranks=$3
    elif [ $# != 1 ]; then
      ds_die "usage: $(basename "$0") --check [--ranks N]"
    fi
    [[ "$ranks" =~ ^[1-9][0-9]*$ ]] || ds_die "--ranks needs a positive count, not '$ranks'"
  else
    [ -n "${SLURM_JOB_ID:-}" ] ||
      ds_die "not inside a Slurm job: submit it with sbatch (see its top)"
    [ $# = 0 ] || ds_die "unexpected arguments: $* (inside a job the script takes none)"
  fi
  local venv rc=0
  venv=$(baselines/deepspeed/setup.sh | tail -1) || rc=$?
  [ "$rc" = 0 ] || ds_die "baselines/deepspeed/setup.sh failed (exit $rc)"
  local python=$venv/bin/python counts
  # The rank counts of the config's points that fit the job; each is one launch.
  counts=$("$python" baselines/deepspeed/run.py -c "$CONFIG" --list-ranks --ranks "$ranks") ||
    ds_die "the check of $CONFIG failed for $ranks ranks"
  local n
  for n in $counts; do
    "$python" baselines/deepspeed/run.py -c "$CONFIG" --check --ranks "$n" ||
      ds_die "the check of $CONFIG failed for $n ranks"
  done
  [ "$inside" = 1 ] || return 0
  export MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)}
  export MASTER_PORT=${MASTER_PORT:-29500} TORCH_EXTENSIONS_DIR=$venv/torch_extensions
  echo "$DS_NAME: job $SLURM_JOB_ID, $ranks ranks, rank counts: $counts, rendezvous at" \
    "$MASTER_ADDR:$MASTER_PORT, in $(pwd)"
  for n in $counts; do
    srun --ntasks="$n" --cpu-bind=cores "$python" baselines/deepspeed/run.py -c "$CONFIG"
  done
}
