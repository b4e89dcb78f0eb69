#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: install what is missing, build, run CTest.
# GPU tests report "skipped" where there is no GPU. Extra arguments go to ctest (e.g. -L mpi).
# Label distro is left out unless the arguments select tests by label or name.
#   ./scripts/test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
echo "== testing"
# The label distro (the suite again inside another Debian, half an hour) runs only when asked
# for: by label or by name (-L distro, -R debian13).
selection=(-LE '^distro$')
for arg in "$@"; do
  case $arg in -L | -L?* | --label-regex* | -R | -R?* | --tests-regex*) selection=() ;; esac
done
ctest --test-dir "$TED_BUILD" -j "$(nproc)" --output-on-failure "${selection[@]}" "$@"
