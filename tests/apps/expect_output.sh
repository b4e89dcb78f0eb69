#!/usr/bin/env bash
# Runs a command and passes only when it exits with the expected code AND prints a line that
# matches the expected pattern (grep -E). CTest's PASS_REGULAR_EXPRESSION alone ignores the exit
# code, so a crash after rank 0 printed the line would pass; this wrapper does not.
#   expect_output.sh <exit code> <pattern> <command> [args...]
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: expect_output.sh <exit code> <pattern> <command> [args...]" >&2
  exit 2
fi
want=$1 pattern=$2
shift 2
output=$(mktemp)
trap 'rm -f "$output"' EXIT
"$@" 2>&1 | tee "$output"
status=${PIPESTATUS[0]}
if [ "$status" -ne "$want" ]; then
  echo "expect_output: '$1' exited $status, expected $want"
  exit 1
fi
if ! grep -Eq -- "$pattern" "$output"; then
  echo "expect_output: '$1' printed no line matching: $pattern"
  exit 1
fi
echo "expect_output: exit $status and a line matching: $pattern"
