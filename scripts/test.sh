#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: install what is missing, build, run CTest.
# GPU tests report "skipped" where there is no GPU. Extra arguments go to ctest (e.g. -L mpi).
# Label distro is left out unless the arguments select tests by label or name.
#   ./scripts/test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
echo "== testing"
# The labels distro (the suite again inside another Debian, half an hour) and peers (the GPU
# session's peer systems on the CPU: a Python 3.12 environment of gigabytes, minutes) run only
# when asked for: by label or by name (-L distro, -R debian13, -L peers).
selection=(-LE '^(distro|peers)$')
for arg in "$@"; do
  case $arg in -L | -L?* | --label-regex* | -R | -R?* | --tests-regex*) selection=() ;; esac
done
ctest --test-dir "$TED_BUILD" -j "$(nproc)" --output-on-failure "${selection[@]}" "$@"
