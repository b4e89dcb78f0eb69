# Shared by the scripts: the Debian packages the suite needs, installing the missing ones,
# configuring and building, and the environment mpirun needs on a root machine.
# Sourced, not run.

TED_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TED_BUILD=${TED_BUILD_DIR:-$TED_ROOT/build}

# Everything from Debian; the CUDA toolkit (nvcc, cuBLAS, NCCL, cuDNN) is used when present,
# never installed here: without it the build is CPU only. pip fetches cuDNN's header-only C++
# frontend from PyPI where the toolkit has cuDNN.
TED_PACKAGES=(cmake ninja-build g++ git pkg-config libopenmpi-dev openmpi-bin libopenblas-dev
  libcli11-dev libyaml-cpp-dev catch2 libbenchmark-dev python3-matplotlib python3-pip)

# cuDNN's C++ graph API (cudnn-frontend), header-only, from PyPI's nvidia-cudnn-frontend wheel:
# unpacked into <build>/_deps/cudnn-frontend where nvcc and cudnn.h are found, so the CUDA
# backend's attention is cuDNN's (cmake/TedCuda.cmake). Without it (offline, no cuDNN) the
# build goes on and its summary says so.
TED_CUDNN_FRONTEND_VERSION=1.32.0
ted_fetch_cudnn_frontend() {
  local dir=$TED_BUILD/_deps/cudnn-frontend
  [ -f "$dir/include/cudnn_frontend.h" ] && return 0
  local nvcc
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || return 0
  [ -f "$(dirname "$(dirname "$nvcc")")/include/cudnn.h" ] || [ -f /usr/include/cudnn.h ] ||
    [ -n "${CUDNN_HOME:-}" ] || return 0
  echo "== fetching cuDNN's C++ frontend (nvidia-cudnn-frontend==$TED_CUDNN_FRONTEND_VERSION from PyPI, its headers only)"
  local wheels
  wheels=$(mktemp -d)
  if /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
    "nvidia-cudnn-frontend==$TED_CUDNN_FRONTEND_VERSION" &&
    /usr/bin/python3 - "$wheels" "$dir" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as archive:
    archive.extractall(sys.argv[2], [n for n in archive.namelist() if n.startswith("include/")])
PY
  then
    echo "== cudnn-frontend headers in $dir/include"
  else
    echo "== no cuDNN frontend (pip could not fetch it): the GPU attention will be the materialised one"
    rm -rf "$dir"
  fi
  rm -rf "$wheels"
}

ted_install_missing() {
  local missing=() package
  for package in "${TED_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "error: need root or sudo to install: ${missing[*]}" >&2; return 2; }
    sudo=sudo
  fi
  echo "== installing ${missing[*]}"
  # apt-get waits for the lock too (DPkg::Lock::Timeout), for a lock taken after our wait ends.
  local wait=(-o "DPkg::Lock::Timeout=${TED_PACKAGE_LOCK_WAIT:-1800}")
  ted_wait_for_package_lock &&
    $sudo apt-get "${wait[@]}" update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get "${wait[@]}" install -y -qq \
      --no-install-recommends "${missing[@]}"
}

# The first package lock of TED_PACKAGE_LOCKS held by a process (apt and dpkg take POSIX locks
# on these files; /proc/locks lists every lock by device and inode), or nothing.
TED_PACKAGE_LOCKS=${TED_PACKAGE_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}
ted_package_lock_held() {
  local file inode
  for file in $TED_PACKAGE_LOCKS; do
    inode=$(stat -c %i "$file" 2>/dev/null) || continue
    if awk -v inode="$inode" '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9a-f]+:[0-9a-f]+:[0-9]+$/) {
        n = split($i, id, ":"); if (id[n] == inode) found = 1 } } END { exit !found }' /proc/locks; then
      echo "$file"
      return 0
    fi
  done
  return 1
}

# A fresh machine often runs its own apt-get (unattended upgrades, cloud-init) when we start:
# wait for it, saying so, instead of failing; give up after TED_PACKAGE_LOCK_WAIT seconds (1800).
ted_wait_for_package_lock() {
  local held waited=0 limit=${TED_PACKAGE_LOCK_WAIT:-1800}
  while held=$(ted_package_lock_held); do
    if [ "$waited" -ge "$limit" ]; then
      echo "error: the package lock $held is still held after ${limit}s (another apt-get or dpkg); run again when it is done" >&2
      return 2
    fi
    [ "$waited" = 0 ] &&
      echo "== waiting for the package lock: $held is held by another apt-get or dpkg (up to ${limit}s)"
    sleep 2
    waited=$((waited + 2))
  done
  [ "$waited" = 0 ] || echo "== the package lock is free after ${waited}s"
}

ted_build() {
  ted_fetch_cudnn_frontend
  if [ ! -f "$TED_BUILD/CMakeCache.txt" ]; then
    echo "== configuring $TED_BUILD"
    cmake -S "$TED_ROOT" -B "$TED_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release || return
  fi
  echo "== building"
  cmake --build "$TED_BUILD" -j "$(nproc)"
}

# OpenMPI refuses to start as root unless told; the machines this runs on log in as root.
# OpenMPI 4 prints nothing of its own when a rank exits non-zero (mpirun -q, which OpenMPI 5's
# mpirun lacks: said here in the environment, which OpenMPI 5 ignores).
# The scripts' ranks share this machine: TCP on loopback only (OpenMPI 5 otherwise warns on each
# rank that it found no pairing of the machine's interfaces, as on Debian 13 here).
ted_mpi_env() {
  export OMPI_MCA_orte_execute_quiet=1 OMPI_MCA_btl_tcp_if_include=lo
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
}

# Install, build, and set up mpirun: what both of the README's commands do first.
ted_prepare() {
  cd "$TED_ROOT"
  ted_install_missing
  ted_build
  ted_mpi_env
}

# The experiments' table (experiments/registry.txt): with no argument, the names in its order;
# `ted_experiments <column> <name>` one field of a name's row (plot, check, rows, deepspeed);
# `ted_experiments deepspeed=yes` the names whose column says so.
ted_revision_train() {  # <git revision>: builds that revision's ted_train in a worktree of its own
  # (under <build>/revisions/, git-ignored) unless built already; prints the worktree's path.
  local sha other
  sha=$(git -C "$TED_ROOT" rev-parse --short "$1") || return
  other=$TED_BUILD/revisions/$sha
  if [ ! -x "$other/build/apps/ted_train" ]; then
    echo "== building ted_train of $sha in $other" >&2
    [ -d "$other" ] || git -C "$TED_ROOT" worktree add -q --detach "$other" "$sha" || return
    cmake -S "$other" -B "$other/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTED_BUILD_TESTS=OFF >/dev/null || return
    cmake --build "$other/build" --target ted_train -j "$(nproc)" >/dev/null || return
  fi
  echo "$other"
}

ted_experiments() {
  awk -v want="${1:-}" -v name="${2:-}" '
    BEGIN { split("name plot check rows deepspeed", columns, " "); for (i in columns) at[columns[i]] = i }
    /^[a-z]/ {
      if (want == "") print $1
      else if (index(want, "=")) { split(want, kv, "="); if ($at[kv[1]] == kv[2]) print $1 }
      else if ($1 == name) print $at[want]
    }' "$TED_ROOT/experiments/registry.txt"
}

# Runs one experiment on 4 CPU ranks with experiments/<name>/cpu.yaml and draws its figure; with
# a topology (experiments/emulated/*.yaml) it runs on that emulated cluster instead
# (scripts/emulated_cluster.sh, root only), into results/<name>/emulated_<topology>.csv.
# TED_RESULTS and TED_PLOTS (default results and plots/figures, the committed ones) say where the CSV
# and the figure go; the main job points them at the ignored results/local and plots/local.
ted_run_experiment() {  # <a name of experiments/registry.txt> [topology.yaml]
  local name=$1 topology=${2:-} plot
  plot=$(ted_experiments plot "$name")
  [ -n "$plot" ] || { echo "ted_run_experiment: '$name' is not in experiments/registry.txt" >&2; return 2; }
  local tag=cpu
  [ -n "$topology" ] && tag=emulated_$(basename "$topology" .yaml)
  local results=${TED_RESULTS:-results} plots=${TED_PLOTS:-plots/figures}
  local csv=$results/$name/$tag.csv figure=$plots/${name}_$tag.png
  mkdir -p "$results/$name" "$plots"
  local program=("$TED_BUILD/apps/ted_$name" -c "experiments/$name/cpu.yaml" --csv "$csv")
  if [ -n "$topology" ]; then
    echo "== $name on the emulated cluster $topology"
    scripts/emulated_cluster.sh "$topology" "${program[@]}"
  else
    local cluster=experiments/clusters/cpu.yaml
    if [ "$name" = ablation ]; then  # the model of this machine its figure projects on
      echo "== calibrating the projection's model of this machine"
      cluster=$results/$name/this_machine.yaml
      if ! scripts/calibration/calibrate_cpu.sh "$cluster" >"$cluster.log" 2>&1; then
        echo "   (not calibrated: $(tail -1 "$cluster.log"); projecting on the committed" \
          "experiments/clusters/cpu.yaml instead)"
        cluster=experiments/clusters/cpu.yaml
      fi
      rm -f "$results/$name/this_machine.yaml.log"
    fi
    echo "== $name on 4 ranks (oversubscribed on $(nproc) cores)"
    # One BLAS and one kernel thread per rank: 4 ranks already oversubscribe the cores.
    OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1 mpirun -n 4 --oversubscribe "${program[@]}"
  fi
  # The DeepSpeed baseline's rows (baselines/deepspeed/launch.sh), where measured, beside ours.
  local extra=() deepspeed=$results/$name/deepspeed_$tag.csv
  [ -f "$deepspeed" ] && extra=("$deepspeed")
  # The ablation's figure also shows the same points projected on the model of this machine,
  # calibrated just before (scripts/calibration/calibrate_cpu.sh: seconds; where a busy machine
  # refuses a rate, the committed experiments/clusters/cpu.yaml, said so), and the paper's
  # ablation projected on its cluster (plot_ablation.py).
  if [ "$name" = ablation ] && [ -z "$topology" ]; then
    local here=$results/$name/projected_here_$tag.csv paper=$results/$name/projected_paper.csv
    rm -f "$here" "$paper" "$paper.assumptions.txt"  # regenerated whole: the programs append
    "$TED_BUILD/apps/ted_project" validate -c "experiments/$name/cpu.yaml" \
      --cluster "$cluster" --measured "$csv" --csv "$here"
    "$TED_BUILD/apps/ted_project" experiment -c "experiments/$name/paper.yaml" --csv "$paper" \
      >/dev/null
    extra+=("$here" "$paper")
  fi
  /usr/bin/python3 "$plot" "$csv" "${extra[@]}" "$figure"
  echo "== CSV:    $TED_ROOT/$csv"
  echo "== figure: $TED_ROOT/$figure (and .pdf)"
}
