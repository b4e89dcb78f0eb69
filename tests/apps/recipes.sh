#!/usr/bin/env bash
# The recipes of docs/layout.md ("Adding a kernel-table op, a collective") against the tree:
# each recipe names an existing example (`all_to_all_v`, `layernorm_forward`) and lists the
# files a new one touches. The files of the tree that name the example must be the list's
# files: every file listed without "(when ...)" names it (else the list is stale), and every
# file that names it is listed (else a new switch over it, or a new place, is missing from the
# recipe). Every listed file exists. <op> in a path stands for the example's name.
# The tree is read below its source folders; results/ (data) and build folders are not read,
# nor the recipe and this script, which name the examples themselves.
#   recipes.sh <source root> [<layout.md to read instead of the root's docs/layout.md>]
set -u
root=$(cd "$1" && pwd)
layout=${2:-$root/docs/layout.md}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

[ -f "$layout" ] || {
  echo "FAIL: no $layout"
  exit 1
}

# Where the tree's text lives (results/ and build*/ are left out: data and build products).
sources=(lib apps tests docs scripts plots cmake slurm baselines experiments CMakeLists.txt
  README.md)

# Prints "always <path>" or "when <path>" for each file entry of the recipe whose heading
# contains $1, with <op> replaced by the example; the example is the heading's `...`.
entries() {
  awk -v want="$1" '
    /^### / { inside = index($0, want) > 0; next }
    /^## / { inside = 0 }
    inside && /^- `/ {
      line = $0
      sub(/^- `/, "", line)
      path = line
      sub(/`.*/, "", path)
      rest = substr(line, length(path) + 2)
      print ((rest ~ /^ \(when/) ? "when " : "always ") path
    }' "$layout"
}

# check_recipe <heading text> : the recipe under the "### ..." heading that contains it.
check_recipe() {
  local heading=$1
  local example
  example=$(grep -m1 "^### .*$heading" "$layout" | sed -n 's/.*example: `\([^`]*\)`.*/\1/p')
  if [ -z "$example" ]; then
    fail "docs: no '### ... $heading (example: \`...\`)' heading"
    return
  fi
  local before=$failures listed=() always=() kind path
  while read -r kind path; do
    path=${path//<op>/$example}
    listed+=("$path")
    [ "$kind" = always ] && always+=("$path")
    [ -e "$root/$path" ] || fail "$heading: the recipe lists $path, which does not exist"
  done < <(entries "$heading")
  if [ ${#always[@]} -eq 0 ]; then
    fail "$heading: the recipe lists no files"
    return
  fi

  local present=()
  for source in "${sources[@]}"; do [ -e "$root/$source" ] && present+=("$source"); done
  local naming
  naming=$(cd "$root" && grep -rlF --exclude-dir='build*' -- "$example" "${present[@]}" |
    grep -vx -e 'docs/layout.md' -e 'tests/apps/recipes.sh' | sort)

  local file
  for file in "${always[@]}"; do
    grep -qx -- "$file" <<<"$naming" ||
      fail "$heading: the recipe lists $file, which no longer names $example (a stale list)"
  done
  while read -r file; do
    [ -n "$file" ] || continue
    printf '%s\n' "${listed[@]}" | grep -qx -- "$file" ||
      fail "$heading: $file names $example but is not in the recipe (a place the list misses)"
  done <<<"$naming"
  [ "$failures" -eq "$before" ] || return
  echo "ok: $heading: ${#listed[@]} files listed (${#always[@]} always), $(wc -l <<<"$naming") name $example"
}

check_recipe "A kernel-table op"
check_recipe "A collective"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "Passed: the recipes match the tree"
