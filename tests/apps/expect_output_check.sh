#!/usr/bin/env bash
# The wrapper that tests with an expected line go through (expect_output.sh) fails a run that
# printed the line and then crashed, or exited as expected without the line; and no test of the
# tree uses CTest's PASS_REGULAR_EXPRESSION, which ignores the exit code.
#   expect_output_check.sh <source root>
set -uo pipefail
root=$1
expect="$root/tests/apps/expect_output.sh"
failures=0
check() {  # <wanted exit code of the wrapper> <what> <wrapper arguments...>
  local want=$1 what=$2
  shift 2
  bash "$expect" "$@" >/dev/null 2>&1
  local status=$?
  if [ "$status" -ne "$want" ]; then
    echo "FAILED: $what: the wrapper exited $status, expected $want"
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}
check 1 "the line, then a crash (SIGSEGV)" 0 "^Passed" bash -c 'echo Passed; kill -SEGV $$'
check 1 "the line, then exit 3" 0 "^Passed" bash -c 'echo Passed; exit 3'
check 1 "exit 0 without the line" 0 "^Passed" bash -c 'echo Failed'
check 1 "exit 77 where 0 is expected" 0 "^SKIPPED" bash -c 'echo SKIPPED; exit 77'
check 0 "the line and exit 0" 0 "^Passed" bash -c 'echo Passed'
check 0 "the line and the expected exit 77" 77 "^SKIPPED: why" bash -c 'echo "SKIPPED: why"; exit 77'
if grep -rn --include=CMakeLists.txt --include='*.cmake' "PASS_REGULAR_EXPRESSION" "$root/CMakeLists.txt" \
  "$root/cmake" "$root/tests" "$root/apps" "$root/lib" 2>/dev/null | grep -v ':[0-9]*: *#'; then
  echo "FAILED: a test above uses PASS_REGULAR_EXPRESSION (use TED_EXPECT: it checks the exit code too)"
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] && echo "expect_output: every check passed"
exit $((failures > 0))
