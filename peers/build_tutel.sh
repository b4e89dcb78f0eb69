#!/usr/bin/env bash
# Builds Tutel (not on PyPI) from a source checkout into a CPython 3.12 wheel against the GPU
# machine's PyTorch (2.11, CUDA 13: the peers' environment of peers/setup.sh) with this
# machine's nvcc, for sm_90; peers/fetch_wheels.sh calls it with TED_PEERS_TUTEL=1.
#   TED_TUTEL_SRC=<checkout of github.com/microsoft/tutel> peers/build_tutel.sh <wheel folder>
# Built here at its revision 82af7aa (version 0.3): a 4.4 MiB wheel. Its extension links
# libcuda.so.1 (the driver), libnvrtc.so.13 and libnccl.so.2, so it imports only where a driver
# is: on a machine without one it reports 'not loaded' (docs/gpu_peers.md).
# Exit: 0 built; 2 no source, no nvcc or the build failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$(realpath -m "${1:?usage: TED_TUTEL_SRC=<checkout> peers/build_tutel.sh <wheel folder>}")
src=${TED_TUTEL_SRC:-}
[ -f "$src/setup.py" ] || { echo "build_tutel: TED_TUTEL_SRC must name a Tutel checkout (has setup.py)" >&2; exit 2; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "build_tutel: no nvcc (the CUDA toolkit) here" >&2; exit 2; }
venv=$("$root/peers/setup.sh" | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$src/." "$work/"  # its setup.py writes into the tree
mkdir -p "$dest"
(cd "$work" && PATH=$(dirname "$nvcc"):$PATH TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=${MAX_JOBS:-2} \
  "$venv/bin/python" -m pip --disable-pip-version-check wheel -q --no-build-isolation --no-deps \
  -w "$dest" .) || { echo "build_tutel: the build failed" >&2; exit 2; }
ls "$dest"/tutel-*.whl
