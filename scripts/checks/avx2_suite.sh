#!/usr/bin/env bash
# The test command as an AVX2-only x86 CPU runs it, on an AVX-512 one: a build without the
# AVX-512 copy of the CPU loops (TED_AVX512_CLONES=OFF, so the loader picks the AVX2 copy),
# OpenBLAS told to run its Haswell (AVX2) kernels, glibc's string and maths routines kept off
# AVX-512, and PyTorch, MKL and oneDNN (the DeepSpeed baseline's) capped at AVX2. What it cannot
# change is the CPU itself: its clock, caches and the width of its vector units.
# Left out: blas_kernel and blas_kernel_mpi_np2, which fail by design when the BLAS kernels are
# narrower than the CPU (docs/testing.md, blas_kernel).
# Prints the whole run's time last. Times: docs/testing.md, "How long the quick start takes".
#   ./scripts/checks/avx2_suite.sh [ctest options]     # build in TED_BUILD_DIR (default build-avx2)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TED_BUILD_DIR=${TED_BUILD_DIR:-$root/build-avx2}
started=$SECONDS
if [ ! -f "$TED_BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$TED_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTED_AVX512_CLONES=OFF
elif ! grep -q '^TED_AVX512_CLONES:BOOL=OFF$' "$TED_BUILD_DIR/CMakeCache.txt"; then
  echo "avx2_suite.sh: $TED_BUILD_DIR was configured with the AVX-512 loops; give an empty" \
    "or new TED_BUILD_DIR" >&2
  exit 2
fi
export TED_BLAS_CORETYPE=Haswell
export GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD
export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
rc=0
"$root/scripts/test.sh" -E '^blas_kernel(_mpi_np2)?$' "$@" || rc=$?
echo "== avx2_suite.sh: $((SECONDS - started)) s in all (build and tests), exit $rc"
exit "$rc"
