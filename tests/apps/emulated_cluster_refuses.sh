#!/usr/bin/env bash
# Without its tools (here: an empty PATH) the launcher refuses with one line that says how to
# run without it, and exit code 2.
#   emulated_cluster_refuses.sh <repository root>
root=$1
out=$(env PATH=/nonexistent /bin/bash "$root/scripts/emulated_cluster.sh" \
  "$root/experiments/emulated/2x2.yaml" true 2>&1)
rc=$?
echo "$out"
[ "$rc" = 2 ] || { echo "FAIL: exit code $rc, expected 2"; exit 1; }
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || { echo "FAIL: more than one line"; exit 1; }
printf '%s\n' "$out" | grep -q "plain mpirun" || { echo "FAIL: no way to run without it"; exit 1; }
echo "ok"
