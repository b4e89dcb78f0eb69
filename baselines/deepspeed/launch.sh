#!/usr/bin/env bash
# Runs the DeepSpeed baseline (run.py) on local ranks with torchrun, from the repository root,
# after setting up its environment (setup.sh: the first time it installs, later it only checks).
# -n takes one rank count or a list: each count is one launch, running the config's points laid
# out for that many ranks (a sweep's points need one launch per rank count).
#   baselines/deepspeed/launch.sh -n 4 -c experiments/ablation/cpu.yaml
#   baselines/deepspeed/launch.sh -n "1 2 4" -c experiments/weak_scaling/cpu.yaml --iters 0
#   baselines/deepspeed/launch.sh -n 2 -c experiments/train/tiny-cpu.yaml --set parallel.ep=2
# Everything after -n N goes to run.py; `--then` there starts another run in the same launch. Threads per rank: TED_NUM_THREADS (default 1: several
# ranks on this machine's cores, as our mpirun runs use). run.backend cuda: one GPU per rank.
# Exit codes as setup.sh (3: no registry) and run.py (2: bad input).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ "${1:-}" = -n ] && [ $# -ge 2 ] || {
  echo "usage: $0 -n <ranks or \"r1 r2 ...\"> -c <config.yaml> [run.py options]" >&2
  exit 2
}
counts=$2
shift 2
for n in $counts; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || {
    echo "launch.sh: -n needs positive rank counts, not '$n'" >&2
    exit 2
  }
done
venv=$("$root/baselines/deepspeed/setup.sh" | tail -1)
cd "$root"
# The accelerator follows run.backend (run.py sets it); the CPU's collective op was built into
# the environment by setup.sh.
export TORCH_EXTENSIONS_DIR=$venv/torch_extensions
export OMP_NUM_THREADS=${TED_NUM_THREADS:-1} TED_NUM_THREADS=${TED_NUM_THREADS:-1}
for n in $counts; do
  # Bad input is one line and exit 2 from a plain process, before torchrun (which would turn
  # a rank's exit code into its own).
  "$venv/bin/python" baselines/deepspeed/run.py "$@" --check --ranks "$n" >/dev/null
done
for n in $counts; do
  "$venv/bin/python" -m torch.distributed.run --standalone --nproc_per_node "$n" \
    baselines/deepspeed/run.py "$@"
done
