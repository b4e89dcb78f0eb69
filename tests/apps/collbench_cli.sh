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
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
run() {  # <ranks> <args...>
  local ranks=$1
  shift
  "$mpirun" -n "$ranks" --oversubscribe "$bench" "$@"
}

bad_input "unknown option" ted_collbench run 2 --frobnicate 3
bad_input "layout not dividing the ranks" ted_collbench run 4 --tp 3
bad_input "layout not multiplying to the ranks" ted_collbench run 4 --tp 2 --ep 2 --dp 2
bad_input "zero tensor size" ted_collbench run 2 --tp 0
bad_input "size range -b > -e" ted_collbench run 2 -b 16M -e 1K
bad_input "size that is not a size" ted_collbench run 2 -b 12Q
bad_input "unknown collective" ted_collbench run 2 --op all_to_some
bad_input "unknown group" ted_collbench run 2 --group pipeline
bad_input "unknown data type" ted_collbench run 2 -d float8
bad_input "step factor below 2" ted_collbench run 2 -f 1
bad_input "negative iterations" ted_collbench run 2 -n -1
bad_input "broadcast root outside the group" ted_collbench run 4 --op broadcast --group tensor --tp 2 --root 2
bad_input "plain-MPI comparison on NCCL" ted_collbench run 2 --comm nccl --compare-mpi
bad_input "unknown communicator" ted_collbench run 2 --comm gloo
bad_input "back to back with the plain-MPI comparison" ted_collbench run 2 --back-to-back --compare-mpi
# The old spelling of --comm: refused, pointing to the new one.
bad_input "the old spelling --backend" ted_collbench run 2 --backend mpi
grep -q -- "renamed; use --comm mpi|nccl" "$scratch/err" ||
  fail "the old spelling --backend: no pointer to --comm: $(cat "$scratch/err")"

# A good run: exit 0, a CSV with a header and one row per size, no wrong elements, and the
# ledger's bytes per call equal to the formula (all_to_all on 4 ranks: send = recv = bytes).
good="$scratch/good.csv"
if "$mpirun" -n 4 --oversubscribe "$bench" --op all_to_all -b 1K -e 64K -f 4 -n 2 -w 1 \
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

# Back to back (no barrier between the calls): the same rows, checked, each with a time.
b2b="$scratch/b2b.csv"
if "$mpirun" -n 4 --oversubscribe "$bench" --op all_to_all -b 1K -e 64K -f 4 -n 3 -w 1 \
  --back-to-back --csv "$b2b" >"$scratch/out" 2>"$scratch/err"; then
  grep -q "(back to back)" "$scratch/out" || fail "back to back: the header does not say so"
  rows=$(($(wc -l <"$b2b") - 1))
  [ "$rows" = 4 ] || fail "back to back: $rows rows, expected 4 (1K 4K 16K 64K)"
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["wrong"] != 0 || !($col["time_us_median"] > 0) || !($col["time_us_p10"] > 0) {
      print "FAIL: back to back at " $col["bytes"] ": wrong " $col["wrong"] ", time " \
        $col["time_us_median"]; bad = 1 }
    index($col["command"], "--back-to-back") == 0 { print "FAIL: command without the mode"; bad = 1 }
    END { exit bad }' "$b2b" || failures=$((failures + 1))
  echo "ok: back-to-back run wrote $rows rows"
else
  fail "back-to-back run exited $?: $(cat "$scratch/err")"
fi

finish
