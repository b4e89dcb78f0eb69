#!/usr/bin/env bash
# Runs the command when a GPU is visible; otherwise says why and exits 77, which CTest reports
# as skipped (never as passed).
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIPPED: no GPU visible (nvidia-smi lists none)"
  exit 77
fi
exec "$@"
