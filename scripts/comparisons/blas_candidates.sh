#!/usr/bin/env bash
# The BLAS candidates for the CPU backend side by side on this CPU (docs/benchmarks.md, "The BLAS
# and the kernels it runs"): the block's own GEMM shapes (scripts/comparisons/blas_candidates/shapes.txt) at
# 1 and 2 threads with OpenBLAS as the environment has it run and with its kernels chosen by cpuid,
# oneDNN's dnnl_sgemm, MKL from PyPI and BLIS, rounds alternated (the candidates' order rotated),
# each result checked; a table of the medians over the rounds of each round's median call (ms,
# GFLOP/s) and p10. Installs what it measures: libblis4-pthread and libdnnl-dev (Debian), the
# mkl wheel (PyPI, its libraries unpacked into <build>/_deps/mkl, 655 MB); none of them is a
# dependency of the suite.
#   ./scripts/comparisons/blas_candidates.sh                 # 3 rounds, 1 and 2 threads
#   ROUNDS=1 THREADS=1 ./scripts/comparisons/blas_candidates.sh
# ROUND_WRAPPER: a command each round runs under (e.g. "flock -x /some/lock").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
cd "$TED_ROOT"
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-"1 2"}
ROUND_WRAPPER=${ROUND_WRAPPER:-}
here=scripts/comparisons/blas_candidates
work=$TED_BUILD/blas_candidates
mkdir -p "$work"
TED_PACKAGES=(libblis4-pthread libdnnl-dev g++)
ted_install_missing
mkl=$TED_BUILD/_deps/mkl
if [ ! -f "$mkl/libmkl_rt.so.2" ] && [ ! -f "$mkl/libmkl_rt.so.3" ]; then
  echo "== fetching MKL (the mkl wheel from PyPI, its libraries only)"
  wheels=$(mktemp -d)
  /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" mkl
  /usr/bin/python3 - "$wheels" "$mkl" <<'PY'
import glob, os, shutil, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if "/lib/" in name and ".so" in name:
            os.makedirs(sys.argv[2], exist_ok=True)
            with archive.open(name) as src, open(os.path.join(sys.argv[2], os.path.basename(name)), "wb") as dst:
                shutil.copyfileobj(src, dst)
PY
  rm -rf "$wheels"
fi
mkl_rt=$(ls "$mkl"/libmkl_rt.so.* | head -1)
g++ -O2 -fopenmp "$here/gemm_candidates.cpp" -o "$work/gemm_candidates" -ldl
arch=$(gcc -print-multiarch)
openblas=/usr/lib/$arch/libopenblas.so.0 blis=/usr/lib/$arch/blis-pthread/libblis.so.4
dnnl=/usr/lib/$arch/libdnnl.so.2
# The kernels cpuid chooses here, as the suite does (core/blas_library.hpp).
cpuid=$(TED_BLAS_CORETYPE= OPENBLAS_CORETYPE= "$TED_BUILD/apps/bench_moe_block" \
  --benchmark_filter=sgemm/tiny 2>&1 | awk -F': ' '/^blas_kernel:/ { print $2; exit }')
asis=${OPENBLAS_CORETYPE:-}
candidates=(openblas-as-run "openblas-$cpuid" dnnl mkl blis)
run_one() {  # run_one <candidate> <threads>
  local g=$work/gemm_candidates shapes=$here/shapes.txt
  case $1 in
    openblas-as-run)  # OpenBLAS as it loads here: its own choice, or the environment's
      if [ -n "$asis" ]; then
        env OPENBLAS_CORETYPE="$asis" "$g" cblas "$openblas" "$2" "$shapes" 0.25
      else
        env -u OPENBLAS_CORETYPE "$g" cblas "$openblas" "$2" "$shapes" 0.25
      fi ;;
    openblas-*) env OPENBLAS_CORETYPE="${1#openblas-}" "$g" cblas "$openblas" "$2" "$shapes" 0.25 ;;
    dnnl) env OMP_NUM_THREADS=1 "$g" dnnl "$dnnl" "$2" "$shapes" 0.25 ;;
    mkl) env MKL_THREADING_LAYER=SEQUENTIAL LD_LIBRARY_PATH="$mkl" "$g" cblas "$mkl_rt" "$2" "$shapes" 0.25 ;;
    blis) "$g" cblas "$blis" "$2" "$shapes" 0.05 3 ;;  # its reference kernels are slow
  esac
}
rounds=$work/rounds.txt
: >"$rounds"
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS"
  body="$(declare -f run_one); $(declare -p work here openblas blis dnnl mkl mkl_rt asis)"
  for t in $THREADS; do
    for i in "${!candidates[@]}"; do
      c=${candidates[$(((i + round) % ${#candidates[@]}))]}
      # shellcheck disable=SC2086  # the wrapper is words
      $ROUND_WRAPPER bash -c "$body; run_one $c $t" | sed "s/^/$c round$round /" >>"$rounds"
    done
  done
done
echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1) (family $(lscpu | sed -n \
  's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')); OPENBLAS_CORETYPE as run: \
${asis:-unset}; cpuid's choice: $cpuid"
/usr/bin/python3 - "$rounds" "${candidates[@]}" <<'PY'
import collections, statistics, sys
cells = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    f = line.split()  # candidate round tN op m n k median X ms p10 Y ms G GFLOP/s err E
    shape = (f[2][1:], f[3], int(f[4]), int(f[5]), int(f[6]))
    if shape not in order: order.append(shape)
    cells[shape + (f[0],)].append((float(f[8]), float(f[11]), float(f[16])))
names = sys.argv[2:]
print("| threads | op | m x n x k | " + " | ".join(f"{n}: ms (GFLOP/s), p10 ms" for n in names) + " |")
print("|---|---|---|" + "---|" * len(names))
for shape in order:
    t, op, m, n, k = shape
    row = []
    for name in names:
        v = cells.get(shape + (name,))
        if not v:
            row.append("-")
            continue
        med, p10 = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        row.append(f"{med:.4g} ({2 * m * n * k / med / 1e6:.0f}), {p10:.4g}")
    print(f"| {t} | {op} | {m} x {n} x {k} | " + " | ".join(row) + " |")
print("\nGeometric mean of the GFLOP/s over the shapes:")
for t in sorted({s[0] for s in order}):
    print(f"- {t} thread(s): " + ", ".join(
        f"{name} {statistics.geometric_mean([2 * s[2] * s[3] * s[4] / statistics.median(x[0] for x in cells[s + (name,)]) / 1e6 for s in order if s[0] == t and cells.get(s + (name,))]):.0f}"
        for name in names))
print(f"Largest error of any result: {max(x[2] for v in cells.values() for x in v):.1e} of sqrt(k).")
PY
