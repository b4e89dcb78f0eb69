#!/usr/bin/env bash
# Fetches what every peer system needs on the GPU machine, as wheels, into .whl/ (git-ignored;
# it travels with the tree when the device call names it in `carry`): that machine has Python
# 3.12, PyTorch 2.11 with CUDA 13, Triton, numpy, einops, msgpack, psutil, py-cpuinfo, tqdm,
# ninja, PyYAML, but no package registry (docs/gpu_peers.md).
#   - DeepSpeed 0.19.8: a source package on PyPI; built here with DS_BUILD_OPS=0 into a pure-Python
#     wheel (its ops stay uncompiled; the MoE layer at expert-parallel size 1 uses none), plus
#     what it imports that the GPU machine lacks: hjson, pydantic 2 with pydantic-core (CPython
#     3.12, manylinux x86_64), annotated-types, typing-inspection, and the typing_extensions
#     pydantic-core needs (>= 4.16, with Sentinel).
#   - Megatron-Core 0.19.2: its CPython 3.12 wheel (needs torch, numpy, packaging: all there).
#   - Tutel: built from source by peers/build_tutel.sh when asked (TED_PEERS_TUTEL=1); optional.
# torch.compile needs nothing carried (Inductor's Triton is on that machine).
#   peers/fetch_wheels.sh [folder]       # default .whl; prints the folder and its size
# Exit: 0 fetched; 3 the registry cannot be reached (nothing changed); 2 anything else.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$(realpath -m "${1:-$root/.whl}")
die() { echo "fetch_wheels: $*" >&2; exit 2; }
# One version of each (two of one package stop the whole --no-deps install there).
binary=(hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
  typing-inspection==0.4.5 typing-extensions==4.16.0 megatron-core==0.19.2)
deepspeed=deepspeed==0.19.8
# The GPU machine's interpreter and platform (pip matches the manylinux tag exactly).
platform=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pip=(python3 -m pip --disable-pip-version-check --timeout 30)
if ! "${pip[@]}" download -q --no-deps --retries 1 -d "$stage/probe" hjson==3.1.0 >/dev/null 2>&1; then
  echo "fetch_wheels: the package registry (PyPI) cannot be reached from here" >&2
  exit 3
fi
mkdir -p "$stage/wheels"
for spec in "${binary[@]}"; do
  "${pip[@]}" download -q --no-deps --only-binary=:all: "${platform[@]}" -d "$stage/wheels" "$spec" ||
    die "no CPython 3.12 manylinux wheel of $spec"
done
# DeepSpeed's setup.py imports torch to look at the CUDA it would build for: build with the
# peers' environment (torch 2.11, as on the GPU machine) or, failing that, any Python with torch.
builder=${TED_WHEEL_PYTHON:-}
if [ -z "$builder" ]; then
  venv=$("$root/peers/setup.sh" | tail -1) || die "no Python with torch to build DeepSpeed's wheel (peers/setup.sh failed)"
  builder=$venv/bin/python
fi
"$builder" -c "import torch" 2>/dev/null || die "$builder has no torch (TED_WHEEL_PYTHON)"
echo "== building $deepspeed's pure-Python wheel (DS_BUILD_OPS=0) with $("$builder" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')" >&2
DS_BUILD_OPS=0 DS_BUILD_STRING="" "$builder" -m pip --disable-pip-version-check wheel -q --no-deps \
  --no-build-isolation --no-binary deepspeed -w "$stage/wheels" "$deepspeed" >"$stage/ds.log" 2>&1 ||
  { tail -20 "$stage/ds.log" >&2; die "building the DeepSpeed wheel failed"; }
if [ "${TED_PEERS_TUTEL:-0}" = 1 ]; then
  "$root/peers/build_tutel.sh" "$stage/wheels" || echo "fetch_wheels: Tutel did not build: carried without it" >&2
fi
for wheel in "$stage"/wheels/*.whl; do  # every one must be for this interpreter or pure Python
  case $(basename "$wheel") in
    *-py3-none-any.whl | *-py2.py3-none-any.whl | *-cp312-cp312-*x86_64*.whl) ;;
    *) die "$(basename "$wheel") is not for CPython 3.12 x86_64" ;;
  esac
done
mkdir -p "$dest"
# Replace only our own wheels: a folder another tool shares keeps its other files.
for wheel in "$stage"/wheels/*.whl; do
  name=$(basename "$wheel" | cut -d- -f1)
  rm -f "$dest/$name"-*.whl
  cp "$wheel" "$dest/"
done
ls -l "$dest"/*.whl | awk '{printf "  %8.2f MiB  %s\n", $5 / 1048576, $NF}'
echo "fetch_wheels: $dest: $(du -cb "$dest"/*.whl | tail -1 | awk '{printf "%.2f MiB", $1 / 1048576}') of wheels"
