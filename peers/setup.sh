#!/usr/bin/env bash
# The peers' Python environment for their CPU checks: a virtual environment of Python 3.12 with
# the PyTorch the GPU machine has (2.11.0, PyPI's build) and the packages that machine already
# holds (numpy, packaging, einops, msgpack, psutil, py-cpuinfo, tqdm, ninja, PyYAML,
# nvidia-ml-py), outside the checkout, reused by every later run. The peers themselves
# (DeepSpeed, Megatron-Core, their pydantic and hjson, Tutel) are NOT installed here: the checks
# install the carried wheels of peers/fetch_wheels.sh with peers/install_wheels.sh, exactly as
# the GPU machine does. Prints the environment's folder on its last line.
#   peers/setup.sh
# Environment: TED_PEERS_VENV (default ${XDG_CACHE_HOME:-~/.cache}/ted/peers-venv), TED_PYTHON312
# (a Python 3.12; default: python3.12 on PATH or under pyenv).
# Exit: 0 ready; 3 no registry or no Python 3.12 (nothing installed; tests report skipped);
# 2 anything else, with one line saying what.
set -euo pipefail
venv=${TED_PEERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ted/peers-venv}
die() { echo "peers setup: $*" >&2; exit 2; }
python=${TED_PYTHON312:-}
if [ -z "$python" ]; then  # the first that runs (a pyenv shim on PATH may not)
  for candidate in $(command -v python3.12 2>/dev/null) \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null); do
    "$candidate" -V >/dev/null 2>&1 && { python=$candidate; break; }
  done
fi
if [ -z "$python" ] || ! "$python" -V >/dev/null 2>&1; then
  echo "peers setup: no Python 3.12 here (Megatron-Core 0.19 needs >= 3.12, the GPU machine has 3.12): set TED_PYTHON312" >&2
  exit 3
fi
# The GPU machine's versions where they matter (docs/gpu_peers.md): torch as there.
packages=(torch==2.11.0 numpy packaging einops msgpack psutil py-cpuinfo tqdm ninja PyYAML nvidia-ml-py)
stamp="$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16) $("$python" -V 2>&1)"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9 # two at once: the second waits, then reuses
if [ "$(cat "$venv/.ted-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$venv"
  exit 0
fi
rm -rf "$venv"
start=$(date +%s)
echo "== making the peers' environment in $venv ($("$python" -V 2>&1))" >&2
"$python" -m venv "$venv" || die "$python -m venv failed"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir --timeout 30)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! "${pip[@]}" download -q --no-deps --retries 1 -d "$probe" hjson==3.1.0 >/dev/null 2>&1; then
  rm -rf "$venv"
  echo "peers setup: the package registry (PyPI) cannot be reached from here" >&2
  exit 3
fi
"${pip[@]}" install -q --no-compile "${packages[@]}" >&2 || die "pip install ${packages[*]} failed"
echo "$stamp" >"$venv/.ted-stamp"
echo "== the peers' environment took $(($(date +%s) - start)) s ($(du -sh "$venv" | cut -f1))" >&2
echo "$venv"
