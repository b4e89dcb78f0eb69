#!/usr/bin/env bash
# Submits a TED sbatch script from the login node after checking its config for the rank count
# the job will have, so a bad config never waits in the queue or burns an allocation.
#   slurm/submit.sh <script.sbatch> [sbatch options...]
# e.g. slurm/submit.sh slurm/ablation.sbatch -N 32 -p gpu -A proj
# The rank count: -n/--ntasks when given, else nodes (-N/--nodes) x --ntasks-per-node (default
# 1), each taken from the options given here, else from the script's #SBATCH lines. The check,
# `bash <script> --check --ranks N`, runs each of the script's programs with --check --ranks N
# as one plain process (no srun). When it passes: `sbatch [options] <script>` (exit: sbatch's);
# otherwise the program's line and exit 2, nothing submitted. Both run in the repository root
# (TED_REPO, default this script's ../; exported, so the job finds it too): CONFIG and
# BUILD_DIR are relative to it, and the job's log lands there.
set -euo pipefail

die() {  # <message>: one line on stderr, exit 2
  echo "submit.sh: $*" >&2
  exit 2
}

if [ $# = 0 ] || [ ! -f "$1" ]; then
  die "usage: slurm/submit.sh <script.sbatch> [sbatch options...]"
fi
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
export TED_REPO=${TED_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

nodes=1 per_node=1 ntasks=
take() {  # <sbatch options...>: the ones that set the rank count (later ones win)
  while [ $# -gt 0 ]; do
    case $1 in
      -N | --nodes) nodes=${2:-} ;;
      -n | --ntasks) ntasks=${2:-} ;;
      --ntasks-per-node) per_node=${2:-} ;;
      -N*) nodes=${1#-N} ;;
      -n*) ntasks=${1#-n} ;;
      --nodes=*) nodes=${1#*=} ;;
      --ntasks=*) ntasks=${1#*=} ;;
      --ntasks-per-node=*) per_node=${1#*=} ;;
    esac
    case $1 in
      -N | --nodes | -n | --ntasks | --ntasks-per-node) [ $# -ge 2 ] && shift ;;
    esac
    shift
  done
}
# the script's #SBATCH lines (sbatch reads them up to the first command), then the options here
set -f  # split the #SBATCH lines into words, without globbing
# shellcheck disable=SC2046
take $(awk '/^#SBATCH/ { $1 = ""; print; next } /^[ \t]*(#|$)/ { next } { exit }' "$script")
set +f
take "$@"
if [[ "$nodes" =~ ^[1-9][0-9]*-[0-9]+$ ]]; then
  echo "submit.sh: node range $nodes: checking for the smallest, ${nodes%%-*}" >&2
  nodes=${nodes%%-*}
fi
if [ -n "$ntasks" ]; then
  ranks=$ntasks
else
  [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || die "cannot tell the node count from '$nodes'"
  [[ "$per_node" =~ ^[1-9][0-9]*$ ]] || die "cannot tell the tasks per node from '$per_node'"
  ranks=$((nodes * per_node))
fi
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || die "cannot tell the rank count from '$ranks'"

cd "$TED_REPO"
echo "submit.sh: checking $(basename "$script") for $ranks ranks"
rc=0
bash "$script" --check --ranks "$ranks" || rc=$?
[ "$rc" = 0 ] || die "$(basename "$script") not submitted: its check failed for $ranks ranks"
exec sbatch "$@" "$script"
