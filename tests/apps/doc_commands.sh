#!/usr/bin/env bash
# Every command in the code blocks of README.md and docs/*.md runs as written, in a smoke mode:
# each is taken from its block (continuation lines joined, comments dropped) and run from a
# sandbox of the repository (its folders linked, results/ copied, plots/ and results/local/
# fresh), so nothing lands in the checkout. How each kind runs:
#   mpirun -n N ... build/apps/ted_X ARGS    ted_X ARGS --check --ranks N (the whole command
#                                            line, config and layout judged, no MPI)
#   build/apps/ted_X ARGS                    as written, with --check --ranks 1 unless it is
#                                            there or it is ted_project
#   build/apps/bench_X ARGS                  as written with a tiny filter or --help; else ARGS
#                                            --benchmark_list_tests (the filter must match)
#   python3 plots/X.py IN... OUT             as written, but the inputs under results/local/ that a
#                                            run would make are read from the committed results/
#                                            (DeepSpeed's: results/deepspeed/, compare.sh's run)
#   slurm/submit.sh, sbatch                  submit.sh with a logging stand-in for sbatch (the
#                                            real checks of the real programs); plain sbatch:
#                                            the script's own --check for the job's ranks
#   baselines/deepspeed/launch.sh -n N ARGS  run.py ARGS --check --ranks N where its
#                                            environment exists, else a syntax check
#   ctest ...                                with -N (lists the tests it would run)
#   scripts, setup.sh, compare.sh, cmake,    syntax and existence only: they are the quick start
#   python3 tests/...                        (CI runs it), take minutes, or need a GPU or torch
# A command that needs CUDA passes with its one-line refusal on a build without it (exit 2) and
# with exit 77 (skipped) without a GPU. A command no rule knows fails the test.
#   doc_commands.sh <repository root> <build dir> <ON|OFF: the build has CUDA>
set -u
repo=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
cuda=${3:-OFF}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 ran=0 syntax=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The sandbox: what the commands read, linked; what they write, fresh.
box=$tmp/repo
mkdir -p "$box/plots/local" "$tmp/bin"
for entry in "$repo"/* "$repo"/.ci; do
  case $(basename "$entry") in results | plots | build) ;; *) ln -s "$entry" "$box/" ;; esac
done
cp -r "$repo/results" "$box/results"
rm -rf "$box/results/local"
ln -s "$repo"/plots/*.py "$box/plots/"
ln -s "$build" "$box/build"
printf '#!/usr/bin/env bash\necho "sbatch $*" >>"%s/sbatch.log"\necho "Submitted batch job 1"\n' \
  "$tmp" >"$tmp/bin/sbatch"
chmod +x "$tmp/bin/sbatch"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
venv=${TED_DEEPSPEED_VENV:-$HOME/.cache/ted/deepspeed-venv}

# The commands: one per line, from the unlabelled code blocks (a labelled one, ```yaml, is
# text), "\" continuations joined.
commands() {
  awk 'FNR == 1 { block = 0 }
       /^```/ { if (block) { block = 0; next } block = $0 == "```" ? 1 : 2; next }
       block == 1 { line = line $0
               if (line ~ /\\$/) { sub(/\\$/, "", line); next }
               print FILENAME "\t" line; line = "" }' "$repo/README.md" "$repo"/docs/*.md |
    sed -E 's/[[:space:]]+#.*$//' | awk -F'\t' '$2 !~ /^[[:space:]]*(#|$)/'
}

# runs <command words...> in the sandbox; out, rc
run() {
  rc=0
  out=$(cd "$box" && PATH="$tmp/bin:$PATH" timeout 120 "$@" 2>&1) || rc=$?
}
# rc 0, or the refusal of a build without CUDA, or a skip without a GPU
accept() {  # <what>
  if [ "$rc" = 0 ]; then echo "ok: $1"; return 0; fi
  if [ "$rc" = 2 ] && grep -q "this build has no \(CUDA\|NCCL\)" <<<"$out"; then
    echo "ok (refused: no CUDA in this build): $1"
    return 0
  fi
  if [ "$rc" = 77 ]; then echo "ok (skipped: no GPU): $1"; return 0; fi
  fail "$1: exit $rc: $(tail -n 3 <<<"$out")"
  return 1
}
syntax_only() {  # <what> <file>
  local file=$2
  [ -e "$box/$file" ] || { fail "$1: no $file"; return; }
  case $file in
    *.py) python3 -m py_compile "$box/$file" 2>/dev/null || python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$box/$file" || fail "$1: $file does not parse" ;;
    *.sh | *.sbatch) bash -n "$box/$file" || fail "$1: $file does not parse" ;;
  esac
  syntax=$((syntax + 1))
  echo "syntax: $1"
}

while IFS=$'\t' read -r doc line; do
  what="${doc#"$repo"/}: $line"
  if [[ "$line" == "cmake "* ]]; then
    command -v cmake >/dev/null || fail "$what: no cmake"
    syntax=$((syntax + 1))
    echo "syntax: $what (the build itself: CI builds with scripts/test.sh)"
    continue
  fi
  # The words as the shell splits them (quotes: "1 2 4", '^cuda$'); VAR=value words first are
  # the command's environment.
  eval "words=($line)" 2>/dev/null || { fail "$what: cannot split"; continue; }
  env=()
  while [[ "${words[0]}" =~ ^[A-Z_]+= ]]; do
    env+=("${words[0]}")
    words=("${words[@]:1}")
  done
  program=${words[0]}
  case $program in
    mpirun)
      ranks=${words[2]}
      rest=("${words[@]:3}")
      [ "${rest[0]}" = --oversubscribe ] && rest=("${rest[@]:1}")
      run env "${env[@]}" "${rest[@]}" --check --ranks "$ranks"
      accept "$what" && ran=$((ran + 1)) ;;
    build/apps/ted_project)
      run env "${env[@]}" "${words[@]}"
      accept "$what" && ran=$((ran + 1)) ;;
    build/apps/ted_*)
      extra=(--check --ranks 1)
      [[ " ${words[*]} " == *" --check "* ]] && extra=()
      run env "${env[@]}" "${words[@]}" "${extra[@]}"
      accept "$what" && ran=$((ran + 1)) ;;
    build/apps/bench_moe_block_cuda) ;&
    build/apps/bench_*)
      if [ "$program" = build/apps/bench_moe_block_cuda ] && [ "$cuda" != ON ]; then
        echo "ok (not built: no CUDA in this build): $what"
        continue
      fi
      if [[ " ${words[*]} " == *" --help "* || " ${words[*]} " == *"=tiny "* ]]; then
        run env "${env[@]}" "${words[@]}"
      else
        run env "${env[@]}" "${words[@]}" --benchmark_list_tests
        [ "$rc" = 0 ] && [ -z "$out" ] && { rc=1 out="the filter matches no benchmark"; }
      fi
      accept "$what" && ran=$((ran + 1)) ;;
    /usr/bin/python3 | python3)
      script=${words[1]}
      if [[ "$script" == plots/*.py ]]; then
        args=()
        for word in "${words[@]:2}"; do
          if [[ "$word" =~ ^results/local/([a-z_]+)/deepspeed_cpu.csv$ ]]; then
            word=results/deepspeed/${BASH_REMATCH[1]}_deepspeed.csv  # compare.sh's run
          elif [[ "$word" == results/local/* ]]; then
            word=results/${word#results/local/}
          fi
          args+=("$word")
        done
        rm -f "$box/${args[-1]}"
        run "${words[0]}" "$script" "${args[@]}"
        if [ "$rc" = 0 ] && [ ! -s "$box/${args[-1]}" ]; then rc=1 out="no ${args[-1]} written"; fi
        accept "$what" && ran=$((ran + 1))
      else
        syntax_only "$what" "$script"
      fi ;;
    slurm/submit.sh)
      run env "${env[@]}" bash "${words[@]}"
      accept "$what" && ran=$((ran + 1)) ;;
    sbatch)
      script=${words[-1]} n=1 nodes=1 per_node=0
      for ((i = 1; i < ${#words[@]} - 1; i++)); do
        case ${words[i]} in
          -n) n=${words[i + 1]} ;;
          -N) nodes=${words[i + 1]} ;;
          --ntasks-per-node=*) per_node=${words[i]#*=} ;;
        esac
      done
      [ "$per_node" -gt 0 ] && n=$((nodes * per_node))
      run env "${env[@]}" bash "$script" --check --ranks "$n"
      accept "$what" && ran=$((ran + 1)) ;;
    bash)
      run env "${env[@]}" "${words[@]}"
      accept "$what" && ran=$((ran + 1)) ;;
    baselines/deepspeed/launch.sh)
      if [ -x "$venv/bin/python" ]; then
        run env "${env[@]}" "$venv/bin/python" baselines/deepspeed/run.py "${words[@]:3}" --check --ranks "${words[2]%% *}"
        accept "$what" && ran=$((ran + 1))
      else
        syntax_only "$what" "$program"
      fi ;;
    ctest)
      run "${words[@]}" -N
      accept "$what" && ran=$((ran + 1)) ;;
    ./scripts/* | scripts/* | baselines/* | peers/*)
      syntax_only "$what" "${program#./}"
      [ -x "$box/${program#./}" ] || fail "$what: not executable" ;;
    *)
      fail "$what: no rule runs this command (tests/apps/doc_commands.sh)" ;;
  esac
done < <(commands)

echo "$ran commands ran, $syntax checked for syntax only, $failures failed"
[ "$ran" -ge 20 ] || fail "only $ran commands ran: the extraction found too few"
[ "$failures" = 0 ]
