#!/usr/bin/env bash
# Submits a TED sbatch script from the login node after checking everything it can, so a bad
# job never waits in the queue or burns an allocation.
#   slurm/submit.sh <script.sbatch> [sbatch options...]
# e.g. slurm/submit.sh slurm/ablation.sbatch -N 16 -p gpu -A proj
#      CONFIG=experiments/ablation/cpu.yaml slurm/submit.sh slurm/ablation.sbatch -n 4
# The job's shape as sbatch will make it, from the script's #SBATCH lines and then these options
# (later ones win): ranks = -n/--ntasks, else nodes (-N/--nodes, default 1) x --ntasks-per-node
# (default 1); GPUs per node from --gpus-per-node, --gres=gpu:N or -G/--gpus over the nodes.
# Refused (one line, exit 2, nothing submitted) when:
#   - the rank count cannot be told, or more tasks land on a node than it has GPUs (one rank per
#     GPU), when GPUs are asked for;
#   - the check fails: `bash <script> --check --ranks N` (for each index of an --array), which
#     runs each of the script's programs with --check as one plain process, no srun, no MPI: a
#     bad config, a layout that does not fit N ranks, no point to run or idle ranks, a memory
#     peak over the cluster's, a backend this build lacks.
# Then, when the programs say they run on the cuda backend and no GPU was asked for, it adds
# --gpus-per-node (one per rank of a node) and caps --ntasks-per-node to it; a CPU job asks for
# no GPU. Last `sbatch [added options] [options] <script>` (exit: sbatch's). Both run in the
# repository root (TED_REPO, default this script's ../; exported, so the job finds it too): the
# variables (CONFIG, CLUSTER, CSV, SET, BUILD_DIR: slurm/launch.sh) are relative to it, and so
# is the log (slurm/logs/).
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

nodes='' per_node='' ntasks='' gpus_per_node='' gpus='' array=''
take() {  # <sbatch options...>: the ones that shape the job (later ones win)
  local option value
  while [ $# -gt 0 ]; do
    option=$1 value=
    case $option in
      --*=*) value=${option#*=} option=${option%%=*} ;;
      -[NnGa]?*) value=${option:2} option=${option:0:2} ;;
      -N | -n | -G | -a | --nodes | --ntasks | --ntasks-per-node | --gpus-per-node | --gpus | \
        --gres | --array)
        value=${2:-}
        shift
        ;;
    esac
    case $option in
      -N | --nodes) nodes=$value ;;
      -n | --ntasks) ntasks=$value ;;
      --ntasks-per-node) per_node=$value ;;
      --gpus-per-node) gpus_per_node=${value##*:} ;;  # [type:]count
      -G | --gpus) gpus=${value##*:} ;;
      --gres)  # gpu:[type:]count among other resources
        [[ "$value" =~ (^|,)gpu(:[^:,]+)?:([0-9]+)(,|$) ]] && gpus_per_node=${BASH_REMATCH[3]}
        ;;
      -a | --array) array=$value ;;
    esac
    shift
  done
}
count() {  # <value> <what>: exit 2 unless a positive count
  [[ "$1" =~ ^[1-9][0-9]*$ ]] || die "cannot tell $2 from '$1'"
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
[ -z "$nodes" ] || count "$nodes" "the node count"
[ -z "$per_node" ] || count "$per_node" "the tasks per node"
# ranks, and the tasks on the busiest node: at least `least`, at most `most`
if [ -n "$ntasks" ]; then
  count "$ntasks" "the rank count"
  ranks=$ntasks least=1 most=$ntasks
  if [ -n "$nodes" ]; then
    least=$(((ntasks + nodes - 1) / nodes)) most=$((ntasks - nodes + 1))
  fi
  [ -n "$per_node" ] && [ "$per_node" -lt "$most" ] && most=$per_node
  [ "$most" -ge "$least" ] ||
    die "-n $ntasks does not fit on $nodes nodes of at most $per_node tasks"
else
  ranks=$((${nodes:-1} * ${per_node:-1})) least=${per_node:-1} most=${per_node:-1}
fi
if [ -z "$gpus_per_node" ] && [ -n "$gpus" ]; then
  count "$gpus" "the GPU count"
  if [ -n "$nodes" ] && [ $((gpus % nodes)) = 0 ]; then gpus_per_node=$((gpus / nodes)); fi
  [ "$gpus" -ge "$ranks" ] || die "$ranks ranks but $gpus GPUs (one rank per GPU)"
fi
added=()
if [ -n "$gpus_per_node" ] && [ "$gpus_per_node" != 0 ]; then
  count "$gpus_per_node" "the GPUs per node"
  [ "$least" -le "$gpus_per_node" ] || die "$least tasks on a node but $gpus_per_node GPUs per" \
    "node (one rank per GPU): give matching -n/-N/--ntasks-per-node and --gpus-per-node"
  if [ "$most" -gt "$gpus_per_node" ]; then
    [ -z "$per_node" ] || die "--ntasks-per-node=$per_node but $gpus_per_node GPUs per node" \
      "(one rank per GPU)"
    added+=(--ntasks-per-node="$gpus_per_node")  # -n spreads at most one rank per GPU
    most=$gpus_per_node
  fi
fi

# the array's indices: 1-3, 1,4,7, 0-9:3, with an optional %throttle
indices=()
if [ -n "$array" ]; then
  spec=${array%%\%*}
  IFS=, read -r -a parts <<<"$spec"
  for part in "${parts[@]}"; do
    if [[ "$part" =~ ^([0-9]+)(-([0-9]+)(:([1-9][0-9]*))?)?$ ]]; then
      first=${BASH_REMATCH[1]} last=${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}
      step=${BASH_REMATCH[5]:-1}
      for ((i = first; i <= last; i += step)); do indices+=("$i"); done
    else
      die "cannot read the array '$array'"
    fi
  done
  [ ${#indices[@]} -le 1000 ] || die "the array has ${#indices[@]} tasks: at most 1000 checked"
fi

cd "$TED_REPO"
name=$(basename "$script")
needs=
for index in "${indices[@]:-}"; do
  echo "submit.sh: checking $name for $ranks ranks${index:+ as array task $index}"
  rc=0
  out=$(bash "$script" --check --ranks "$ranks" ${index:+--array-index "$index"}) || rc=$?
  [ -z "$out" ] || echo "$out"
  [ "$rc" = 0 ] ||
    die "$name not submitted: its check failed for $ranks ranks${index:+ as array task $index}"
  needs+=$(grep '^needs: ' <<<"$out" || true)$'\n'
done
if grep -q 'backend=cuda' <<<"$needs"; then
  if [ "$gpus_per_node" = 0 ]; then
    die "$name runs on the cuda backend but --gpus-per-node=0"
  elif [ -z "$gpus_per_node" ] && [ -z "$gpus" ]; then
    # one GPU per rank of the busiest node: -n over -N nodes spreads evenly
    if [ -n "$ntasks" ] && [ -n "$nodes" ]; then
      fill=$least
    elif [ -n "$ntasks" ]; then
      [ -n "$per_node" ] || die "$name runs on GPUs: with -n alone it cannot tell the tasks per" \
        "node; give -N, --ntasks-per-node (one per GPU) or --gpus-per-node"
      fill=$most
    else
      fill=${per_node:-1}
    fi
    added+=(--gpus-per-node="$fill")
    [ "${per_node:-}" = "$fill" ] || added+=(--ntasks-per-node="$fill")
  fi
elif [ -n "$gpus_per_node$gpus" ] && [ "$gpus_per_node" != 0 ]; then
  echo "submit.sh: note: GPUs asked for, but $name runs on the CPU: they stay idle" >&2
fi
# repeated options: sbatch takes the last, so the user's own come after the added ones
[ ${#added[@]} = 0 ] || echo "submit.sh: adding ${added[*]}"
mkdir -p slurm/logs
exec sbatch "${added[@]}" "$@" "$script"
