#!/usr/bin/env bash
# NCCL is found where users have it (cmake/TedNccl.cmake), in its order, and the configure says
# which one was taken: NCCL_HOME, the CUDA toolkit, the system's libnccl-dev, and the PyPI wheel
# (libnccl.so.2 only). Each place is a fake layout in a scratch folder (an empty nccl.h with a
# version, an empty library file), so the test runs anywhere; where a real nvidia-nccl wheel is
# installed for some python3 (TED_NCCL_WHEEL_PYTHON), it is found too.
#   nccl_discovery.sh <source root> <scratch folder> [CMake generator, as the build's]
set -uo pipefail
root=$1
scratch=$2
generator=${3:-Ninja}  # a machine may have ninja and no make (Debian 13's root here)
rm -rf "$scratch" && mkdir -p "$scratch"
failures=0
fake() {  # <prefix> <library dir under it> <library file name> <minor version>
  mkdir -p "$1/include" "$1/$2"
  printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR %s\n#define NCCL_PATCH 1\n' "$4" >"$1/include/nccl.h"
  : >"$1/$2/$3"
}
fake "$scratch/home" lib libnccl.so 91
fake "$scratch/toolkit" lib libnccl.so 92
fake "$scratch/system/usr" lib/x86_64-linux-gnu libnccl.so 93
fake "$scratch/site/nvidia/nccl" lib libnccl.so.2 94
mkdir -p "$scratch/empty/include" "$scratch/empty/lib" "$scratch/nosystem"
python=$(command -v python3)
run() {  # <what> <expected line, grep -E> [NCCL_HOME] <toolkit> <system prefix> [PYTHONPATH]
  local what=$1 want=$2 home=$3 toolkit=$4 system=$5 pythonpath=${6:-}
  local out
  out=$(env -u NCCL_HOME ${home:+NCCL_HOME=$home} PYTHONPATH="$pythonpath" \
    cmake -G "$generator" -S "$root/tests/cmake/nccl_discovery" -B "$scratch/build-$RANDOM" \
    -DCUDAToolkit_INCLUDE_DIRS="$toolkit/include" -DCUDAToolkit_LIBRARY_DIR="$toolkit/lib" \
    -DCUDAToolkit_LIBRARY_ROOT="$toolkit" -DTED_NCCL_SYSTEM_PREFIXES="$system" \
    -DTED_NCCL_PYTHON="${TED_NCCL_PYTHON:-$python}" 2>&1 | grep -E "NCCL|Warning" | head -5)
  if echo "$out" | grep -Eq -- "$want"; then
    echo "ok: $what: $(echo "$out" | grep 'NCCL:')"
  else
    echo "FAILED: $what: expected /$want/, configure said:"
    echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
e=$scratch/empty s=$scratch/system/usr
run "NCCL_HOME first" "NCCL: 2\.91\.1 from NCCL_HOME=.*/home: .*home/lib/libnccl\.so$" \
  "$scratch/home" "$scratch/toolkit" "$s" "$scratch/site"
run "the CUDA toolkit without NCCL_HOME" "NCCL: 2\.92\.1 from the CUDA toolkit: .*toolkit/lib/libnccl\.so$" \
  "" "$scratch/toolkit" "$s" "$scratch/site"
run "a wrong NCCL_HOME: warned, the toolkit's taken" "NCCL_HOME=.*empty has no nccl.h" \
  "$e" "$scratch/toolkit" "$s" "$scratch/site"
run "the system's libnccl-dev" "NCCL: 2\.93\.1 from the system \(libnccl-dev\): .*/lib/x86_64-linux-gnu/libnccl\.so$" \
  "" "$e" "$s" "$scratch/site"
run "the wheel, libnccl.so.2 only" "NCCL: 2\.94\.1 from the PyPI wheel nvidia-nccl \(.*site/nvidia/nccl\): .*libnccl\.so\.2$" \
  "" "$e" "$scratch/nosystem" "$scratch/site"
run "none of them" "NCCL: not found" "" "$e" "$scratch/nosystem" "$scratch/nowhere"
if [ -n "${TED_NCCL_WHEEL_PYTHON:-}" ]; then
  TED_NCCL_PYTHON=$TED_NCCL_WHEEL_PYTHON run "a real nvidia-nccl wheel ($TED_NCCL_WHEEL_PYTHON)" \
    "NCCL: 2\.[0-9]+\.[0-9]+ from the PyPI wheel nvidia-nccl .*libnccl\.so\.2$" "" "$e" "$scratch/nosystem"
fi
[ "$failures" -eq 0 ] && echo "nccl_discovery: every place found in order"
exit $((failures > 0))
