#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: install what is missing, build, run CTest.
# GPU tests report "skipped" where there is no GPU. Extra arguments go to ctest (e.g. -L mpi).
#   ./scripts/test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ted_prepare
echo "== testing"
ctest --test-dir "$TED_BUILD" -j "$(nproc)" --output-on-failure "$@"
