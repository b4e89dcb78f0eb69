#!/usr/bin/env bash
# Installs the carried wheels (peers/fetch_wheels.sh) into a folder, with no registry and no
# dependency resolution, exactly as the GPU machine does; the caller puts the folder first on
# PYTHONPATH. The CPU checks (tests/peers/peers_cpu.sh) install them the same way.
#   peers/install_wheels.sh <wheel folder> <target folder> [python]
# Exit: 0 installed; 77 no wheels fetched (the caller skips); 2 pip failed.
set -euo pipefail
wheels=$1 target=$2 python=${3:-python3}
if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
  echo "install_wheels: no wheels in $wheels (run peers/fetch_wheels.sh where a registry is reached)" >&2
  exit 77
fi
rm -rf "$target"
"$python" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
  --no-cache-dir --target "$target" "$wheels"/*.whl >&2 || { echo "install_wheels: pip failed" >&2; exit 2; }
echo "$target"
