#!/usr/bin/env bash
# Walks docs/layout.md's "Adding an experiment" against the tree: every experiment of
# experiments/registry.txt has every file the recipe lists (the DeepSpeed sbatch script exactly
# where the registry says deepspeed yes); every tracked file whose path names a registered
# experiment is one of the recipe's; every experiment program (apps/ted_*.cpp calling
# experiment_main) and every experiments/*/cpu.yaml's `experiment:` is registered; and no file
# outside tests/, docs/ and the recipe's list of those that still name experiments names one
# (names with an underscore only: a plain word like memory is everywhere). Prints each failure.
#   experiment_recipe.sh <repository root>
set -uo pipefail
cd "${1:?repository root}" || exit 1
failures=0
fail() { echo "FAIL  $*"; failures=$((failures + 1)); }
section() {  # the backticked items between <!-- $1 --> and <!-- /$1 --> of docs/layout.md
  awk -v tag="$1" '$0 == "<!-- " tag " -->" { on = 1; next } $0 == "<!-- /" tag " -->" { on = 0 }
    on' docs/layout.md | grep -o '`[^`]*`' | tr -d '`'
}
mapfile -t templates < <(section "experiment files" | grep '<name>')
mapfile -t still < <(section "experiment names" | grep '/')
[ ${#templates[@]} -gt 0 ] || fail "docs/layout.md: no <!-- experiment files --> list"
mapfile -t names < <(awk '/^[a-z]/ { print $1 }' experiments/registry.txt)
deepspeed=" $(awk '/^[a-z]/ && $5 == "yes" { printf "%s ", $1 }' experiments/registry.txt)"
if git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t tracked < <(git ls-files --cached --others --exclude-standard)
else
  mapfile -t tracked < <(find . -type f -not -path './build*' -not -path './.git/*' | sed 's#^\./##')
fi

for name in "${names[@]}"; do
  for template in "${templates[@]}"; do
    file=${template//<name>/$name}
    if [[ $template == baselines/deepspeed/* ]]; then
      want=no
      [[ $deepspeed == *" $name "* ]] && want=yes
      have=no
      [ -f "$file" ] && have=yes
      [ $want = $have ] || fail "$name: $file is there: $have, the registry's deepspeed: $want"
    elif [ ! -f "$file" ]; then
      fail "$name: the recipe's $file is missing"
    fi
  done
  # The files whose path names the experiment where experiments live: each must be the
  # recipe's (results/ and plots/' figures are outputs; lib/ted/*/memory.* is another memory).
  for file in "${tracked[@]}"; do
    case $file in apps/* | experiments/* | slurm/* | baselines/* | scripts/* | plots/*.py) ;; *) continue ;; esac
    [[ /$file/ == */$name/* || $file == */ted_$name.* || $file == */$name.* ]] || continue
    covered=no
    for template in "${templates[@]}"; do
      pattern=${template//<name>/$name}
      [[ $file == "$pattern" ]] && covered=yes
      # A YAML folder covers every YAML in it (paper-6.7B-4E.yaml, overlap.yaml, ...).
      [[ $pattern == experiments/$name/* && $file == experiments/$name/*.yaml ]] && covered=yes
    done
    [ $covered = yes ] || fail "$name: $file names it by its path and is not in the recipe"
  done
done

# Every experiment there is, registered.
for program in apps/ted_*.cpp; do
  grep -q 'experiment_main(' "$program" || continue
  name=$(basename "$program" .cpp)
  name=${name#ted_}
  [[ " ${names[*]} " == *" $name "* ]] || fail "$program: not in experiments/registry.txt"
done
for yaml in experiments/*/cpu.yaml; do
  name=$(awk '$1 == "experiment:" { print $2 }' "$yaml")
  [ -z "$name" ] && continue
  [[ " ${names[*]} " == *" $name "* ]] || fail "$yaml: experiment $name not in experiments/registry.txt"
done

# No list of experiments outside the registry but those the recipe names.
for name in "${names[@]}"; do
  [[ $name == *_* ]] || continue
  for file in "${tracked[@]}"; do
    case $file in tests/* | docs/* | results/* | *.md | *.png | *.pdf | experiments/registry.txt) continue ;; esac
    [[ /$file/ == */$name/* || $file == */ted_$name.* || $file == */$name.* ]] && continue
    [ -f "$file" ] && grep -qw -- "$name" "$file" || continue
    [[ " ${still[*]} " == *" $file "* ]] ||
      fail "$file names $name: read experiments/registry.txt, or add it to the recipe's list"
  done
done

if [ $failures -gt 0 ]; then
  echo "$failures failure(s): docs/layout.md 'Adding an experiment' and the tree differ"
  exit 1
fi
echo "ok    ${#names[@]} experiments, ${#templates[@]} files each, as docs/layout.md's recipe says"
