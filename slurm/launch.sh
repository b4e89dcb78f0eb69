# Sourced by the sbatch scripts after they set their variables (NODES, GPUS_PER_NODE,
# PARTITION, ACCOUNT, TIME, SCRIPT). Outside a job, ted_slurm submits the calling script with
# those settings; inside the job it runs the command with srun, one rank per GPU, from the
# repository root.
ted_slurm() {  # <job name> <command...>
  local name=$1
  shift
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    local account=()
    [ -n "$ACCOUNT" ] && account=(--account="$ACCOUNT")
    export TED_REPO=${TED_REPO:-$(pwd)}
    exec sbatch --job-name="$name" --nodes="$NODES" --ntasks-per-node="$GPUS_PER_NODE" \
      --gpus-per-node="$GPUS_PER_NODE" --partition="$PARTITION" --time="$TIME" "${account[@]}" \
      --output="slurm-$name-%j.out" --export=ALL "$SCRIPT"
  fi
  cd "${TED_REPO:-${SLURM_SUBMIT_DIR:-.}}"
  echo "$name: $((NODES * GPUS_PER_NODE)) ranks on $NODES nodes, job $SLURM_JOB_ID"
  srun --nodes="$NODES" --ntasks-per-node="$GPUS_PER_NODE" --gpus-per-node="$GPUS_PER_NODE" \
    --cpu-bind=cores "$@"
}
