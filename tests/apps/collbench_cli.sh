#!/usr/bin/env bash
# ted_collbench's handling of input: every bad input gives exactly one line on stderr, exit
# code 2 from mpirun (so from every rank), and neither creates a CSV nor touches an existing
# one. Then a good correctness-only run writes its CSV with the ledger's byte counts.
#   collbench_cli.sh <ted_collbench> <mpirun> <scratch dir>
set -u
bench=$1
mpirun=$2
scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

existing="$scratch/existing.csv"
echo "old results" >"$existing"

bad_input() {  # <ranks> <description> <args...>
  local ranks=$1 description=$2
  shift 2
  local fresh="$scratch/fresh.csv"
  for csv in "$fresh" "$existing"; do
    "$mpirun" -n "$ranks" --oversubscribe -q "$bench" "$@" --csv "$csv" \
      >"$scratch/out" 2>"$scratch/err"
    local rc=$? lines
    lines=$(wc -l <"$scratch/err")
    [ "$rc" = 2 ] || fail "$description: exit code $rc, expected 2"
    [ "$lines" = 1 ] || fail "$description: $lines lines on stderr, expected 1: $(cat "$scratch/err")"
    [ -s "$scratch/out" ] && fail "$description: printed on stdout: $(cat "$scratch/out")"
    grep -q "^ted_collbench: error: " "$scratch/err" || fail "$description: no error line"
  done
  [ -e "$fresh" ] && fail "$description: wrote a CSV"
  [ "$(cat "$existing")" = "old results" ] || fail "$description: touched an existing CSV"
  ls "$scratch" | grep -q '\.tmp\.' && fail "$description: left a temporary file"
  echo "ok: $description -> $(cat "$scratch/err")"
}

bad_input 2 "unknown option" --frobnicate 3
bad_input 4 "layout not dividing the ranks" --tp 3
bad_input 4 "layout not multiplying to the ranks" --tp 2 --ep 2 --dp 2
bad_input 2 "zero tensor size" --tp 0
bad_input 2 "size range -b > -e" -b 16M -e 1K
bad_input 2 "size that is not a size" -b 12Q
bad_input 2 "unknown collective" --op all_to_some
bad_input 2 "unknown group" --group pipeline
bad_input 2 "unknown data type" -d float8
bad_input 2 "step factor below 2" -f 1
bad_input 2 "negative iterations" -n -1
bad_input 4 "broadcast root outside the group" --op broadcast --group tensor --tp 2 --root 2
bad_input 2 "plain-MPI comparison on NCCL" --backend nccl --compare-mpi
bad_input 2 "unknown backend" --backend gloo

# A good run: exit 0, a CSV with a header and one row per size, no wrong elements, and the
# ledger's bytes per call equal to the formula (all_to_all on 4 ranks: send = recv = bytes).
good="$scratch/good.csv"
if "$mpirun" -n 4 --oversubscribe -q "$bench" --op all_to_all -b 1K -e 64K -f 4 -n 2 -w 1 \
  --compare-mpi --csv "$good" >"$scratch/out" 2>"$scratch/err"; then
  rows=$(($(wc -l <"$good") - 1))
  [ "$rows" = 4 ] || fail "good run: $rows rows, expected 4 (1K 4K 16K 64K)"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["wrong"] != 0 { print "FAIL: wrong elements at " $col["bytes"]; bad = 1 }
    $col["ledger_bytes_sent"] != $col["bytes"] || $col["ledger_bytes_recv"] != $col["bytes"] {
      print "FAIL: ledger bytes " $col["ledger_bytes_sent"] "/" $col["ledger_bytes_recv"] \
        " for size " $col["bytes"]; bad = 1 }
    $col["G"] != 4 || $col["backend"] != "mpi" || $col["git_revision"] == "" { print "FAIL: context"; bad = 1 }
    $col["busbw_ratio_vs_mpi"] <= 0 { print "FAIL: no comparison with MPI"; bad = 1 }
    END { exit bad }' "$good" || failures=$((failures + 1))
  echo "ok: good run wrote $rows rows"
else
  fail "good run exited $?: $(cat "$scratch/err")"
fi

echo "$failures failed"
[ "$failures" = 0 ]
