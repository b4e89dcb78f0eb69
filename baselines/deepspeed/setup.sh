#!/usr/bin/env bash
# Sets up the DeepSpeed baseline's environment: a Python virtual environment with the pinned
# packages of requirements.txt (PyTorch, DeepSpeed, PyYAML) from the package registry, outside
# the checkout, reused by every later run; no system Python package is touched. Megatron-Core
# and tokenizers are there for the training data (scripts/data/prepare_corpus.sh). Then builds
# (once) the shared-memory collective op DeepSpeed's CPU accelerator compiles at its first start,
# so no run pays for it. Prints the environment's folder on its last line.
#   baselines/deepspeed/setup.sh
# Environment: TED_DEEPSPEED_VENV (default ${XDG_CACHE_HOME:-~/.cache}/ted/deepspeed-venv),
# TED_PYTHON (the Python that makes it, default python3; 3.11 installs the exact lock, another
# the five top-level pins through pip's resolver).
# Exit: 0 ready; 3 the registry cannot be reached (nothing installed; tests report skipped);
# 2 anything else, with one line saying what.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${TED_DEEPSPEED_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ted/deepspeed-venv}
python=${TED_PYTHON:-python3}
lock=$here/requirements.txt
die() {
  echo "deepspeed setup: $*" >&2
  exit 2
}

command -v "$python" >/dev/null || die "no $python (set TED_PYTHON to a Python 3.10 or later)"
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
exact=0
[ "$version" = 3.11 ] && [ "$(uname -m)" = x86_64 ] && exact=1
# The environment is ready when its stamp names this lock and this Python; anything else (a
# half-made one, an older lock) is made again.
stamp="$(sha256sum "$lock" | cut -c1-16) python $version exact $exact"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9 # two runs at once (CTest runs tests in parallel): the second waits, then reuses
if [ "$(cat "$venv/.ted-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$venv"
  exit 0
fi
rm -rf "$venv"
start=$(date +%s)
echo "== making the DeepSpeed environment in $venv (Python $version)" >&2
"$python" -m venv "$venv" ||
  die "$python -m venv failed (on Debian: apt-get install python3-venv)"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir --timeout 30)
# Can the registry be reached? A 50 kB package, with one retry, before gigabytes.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! "${pip[@]}" download -q --no-deps --retries 1 -d "$probe" hjson==3.1.0 >/dev/null 2>&1; then
  rm -rf "$venv"
  echo "deepspeed setup: the package registry (PyPI) cannot be reached from here" >&2
  exit 3
fi
if [ "$exact" = 1 ]; then
  # Every package pinned, no resolver: what this file lists is what runs.
  "${pip[@]}" install -q --no-deps --no-compile -r "$lock" >&2 || die "pip install -r $lock failed"
else
  "${pip[@]}" install -q --no-compile torch==2.15.0 deepspeed==0.19.8 PyYAML==6.0.3 \
    megatron-core==0.16.1 tokenizers==0.23.3 >&2 ||
    die "pip install of torch, deepspeed, PyYAML, megatron-core and tokenizers failed"
fi
export DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=$venv/torch_extensions
"$venv/bin/python" - >&2 <<'PY' || die "DeepSpeed's CPU collective op did not build (needs g++)"
import contextlib, sys
import torch, deepspeed
from deepspeed.accelerator import get_accelerator
with contextlib.redirect_stdout(sys.stderr):
    get_accelerator().create_op_builder("ShareMemCommBuilder").load()
print(f"== torch {torch.__version__}, deepspeed {deepspeed.__version__}: ready", file=sys.stderr)
PY
echo "$stamp" >"$venv/.ted-stamp"
size=$(du -sh "$venv" | cut -f1)
echo "== the DeepSpeed environment took $(($(date +%s) - start)) s ($size)" >&2
echo "$venv"
