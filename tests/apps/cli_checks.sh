# Sourced by the CLI tests: checks that a command given bad input prints exactly one line on
# stderr starting "<program>: error: ", nothing on stdout, exits 2, and neither creates its CSV
# nor touches an existing one (the command gets "--csv <path>" appended).
#   scratch=<dir>; source cli_checks.sh; bad_input "<what>" <program name> <command...>
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

existing="$scratch/existing.csv"
echo "old results" >"$existing"

bad_input() {
  local description=$1 program=$2
  shift 2
  local fresh="$scratch/fresh.csv" csv rc lines
  for csv in "$fresh" "$existing"; do
    "$@" --csv "$csv" >"$scratch/out" 2>"$scratch/err"
    rc=$?
    # Not ours: OpenMPI 5's mpirun boxes in dashes that a rank exited non-zero (4's is kept quiet),
    # its PMIx server may say it could not reach a rank that had already gone, and its libevent
    # may warn of a socket closed under it as the ranks leave ("[warn] Epoll MOD(4) on fd 24
    # failed", seen once in Debian 13's root).
    sed -i -e '/^-\{20,\}$/,/^-\{20,\}$/d' -e '/^\[[^]]*\] PMIX ERROR: PMIX_ERR_UNREACH /d' \
      -e '/^\[warn\] Epoll [A-Z]*([0-9]*) on fd [0-9]* failed/d' "$scratch/err"
    lines=$(wc -l <"$scratch/err")
    [ "$rc" = 2 ] || fail "$description: exit code $rc, expected 2"
    [ "$lines" = 1 ] || fail "$description: $lines lines on stderr, expected 1: $(cat "$scratch/err")"
    [ -s "$scratch/out" ] && fail "$description: printed on stdout: $(head -3 "$scratch/out")"
    grep -q "^$program: error: " "$scratch/err" || fail "$description: no error line"
  done
  [ -e "$fresh" ] && fail "$description: wrote a CSV"
  [ "$(cat "$existing")" = "old results" ] || fail "$description: touched an existing CSV"
  ls "$scratch" | grep -q '\.tmp\.' && fail "$description: left a temporary file"
  echo "ok: $description -> $(cat "$scratch/err")"
}

# The last bad_input's line contains <text> (fixed string).
says() {
  grep -qF -- "$2" "$scratch/err" || fail "$1: expected '$2' in: $(cat "$scratch/err")"
}

finish() {
  echo "$failures failed"
  [ "$failures" = 0 ]
}
