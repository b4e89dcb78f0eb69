#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: install what is missing, build, run CTest.
# GPU tests report "skipped" where there is no GPU. Extra arguments go to ctest (e.g. -L mpi).
# Label distro is left out unless the arguments select tests by label or name.
#   ./scripts/test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The labels distro (the suite again inside another Debian, half an hour) and peers (the GPU
# session's peer systems on the CPU: a Python 3.12 environment of gigabytes, minutes) run only
# when asked for: by label or by name (-L distro, -R debian13, -L peers).
selection=(-LE '^(distro|peers)$')
for arg in "$@"; do
  case $arg in -L | -L?* | --label-regex* | -R | -R?* | --tests-regex*) selection=() ;; esac
done
cd "$TED_ROOT"
ted_install_missing
# The whole suite: the DeepSpeed tests' Python environment (minutes of downloads on a fresh
# machine) is made while the suite builds, not inside the first DeepSpeed test, which would hold
# both of CTest's slots meanwhile. Those tests run the same script, which waits for this one
# (its lock) and reuses what it made, or says why there is none. Not with TED_SKIP_DEEPSPEED
# set (those tests then report skipped).
setup=
if [ $# -eq 0 ] && [ -z "${TED_SKIP_DEEPSPEED:-}" ]; then
  mkdir -p "$TED_BUILD"
  echo "== making the DeepSpeed environment beside the build (log: $TED_BUILD/deepspeed-setup.log)"
  baselines/deepspeed/setup.sh >"$TED_BUILD/deepspeed-setup.log" 2>&1 &
  setup=$!
  # A build that fails leaves it finishing on its own (a later run reuses it).
  trap 'kill -0 "$setup" 2>/dev/null && echo "== the DeepSpeed environment is still being made (pid $setup)"' EXIT
fi
ted_build
ted_mpi_env
echo "== testing"
rc=0
ctest --test-dir "$TED_BUILD" -j "$(nproc)" --output-on-failure "${selection[@]}" "$@" || rc=$?
[ -z "$setup" ] || wait "$setup" || true
exit "$rc"
