#!/usr/bin/env bash
# The CPU test suite on Debian 13 (trixie): GCC 14, CMake 3.31, Catch2 3, yaml-cpp 0.8, OpenMPI 5,
# Python 3.13. Makes a Debian 13 root with debootstrap from deb.debian.org (once; kept in
# TED_DEBIAN13_ROOT, default /var/cache/ted/debian13), installs the packages of
# scripts/common.sh in it with the same ted_install_missing the test command uses, copies the
# working tree in (git's files, tracked and new), builds it there from scratch without CUDA and
# runs the test command's CTest selection. Exits non-zero if the root cannot be made, the build
# fails or a test fails; 77 (skipped) without root, debootstrap or the Debian mirror.
# Left out in the root, each for its reason (docs/testing.md, "Debian 13"): deepspeed_baseline_*
# (a 4.3 GB Python environment from PyPI, not Debian's packages; TED_SKIP_DEEPSPEED=1 reports it
# skipped) and the tests TED_DEBIAN13_EXCLUDE names (a CTest -E regex; by default slurm_cluster,
# whose two slurmd never come up in the root).
# Times: docs/testing.md, "Debian 13".
#   sudo ./scripts/checks/debian13_check.sh              # TED_DEBIAN13_FRESH=1 makes the root again,
#                                                 # TED_DEBIAN13_KEEP_BUILD=1 keeps the build
# The whole script is one block, read before it runs: editing the file cannot change a run.
{
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
target=${TED_DEBIAN13_ROOT:-/var/cache/ted/debian13}
mirror=${TED_DEBIAN_MIRROR:-http://deb.debian.org/debian}
exclude=${TED_DEBIAN13_EXCLUDE-^slurm_cluster$}
started=$SECONDS
skip() {
  echo "SKIPPED: $*"
  exit 77
}
stage() {  # the time so far, then what comes next
  printf '== [%4ds] %s\n' $((SECONDS - started)) "$*"
}

[ "$(id -u)" = 0 ] || skip "not root: debootstrap, chroot and the mounts need root"
if ! command -v debootstrap >/dev/null; then
  command -v apt-get >/dev/null || skip "no debootstrap, and no apt-get to install it"
  saved=("${TED_PACKAGES[@]}")
  TED_PACKAGES=(debootstrap)
  ted_install_missing >/dev/null || skip "debootstrap is missing and apt-get could not install it"
  TED_PACKAGES=("${saved[@]}")
fi
[ -f /usr/share/debootstrap/scripts/trixie ] ||
  skip "this debootstrap does not know trixie (Debian 12's 1.0.128 or newer does)"
# The mirror's release file: without it neither debootstrap nor apt-get can work.
/usr/bin/python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20)" \
  "$mirror/dists/trixie/Release" 2>/dev/null || skip "cannot reach $mirror (no network)"

# --- the mounts a build and mpirun need, taken down on every way out
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"
  done
  mounted=()
}
trap unmount_all EXIT
trap 'exit 130' INT TERM
mount_in() {  # <mount arguments...> <point inside the root>
  local point=$target${*: -1}
  mkdir -p "$point"
  mountpoint -q "$point" && { echo "error: $point is already mounted (another run?)" >&2; exit 2; }
  mount "${@:1:$#-1}" "$point" || { echo "error: mount ${*:1:$#-1} $point" >&2; exit 2; }
  mounted+=("$point")
}
in_root() {
  chroot "$target" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM="${TERM:-dumb}" "$@"
}

# --- the root, made once
if [ "${TED_DEBIAN13_FRESH:-0}" = 1 ] && [ -d "$target" ]; then
  stage "removing $target (TED_DEBIAN13_FRESH=1)"
  for point in $(awk -v t="$target" 'index($2, t) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount -l "$point"
  done
  rm -rf --one-file-system "$target"
fi
if [ ! -f "$target/.ted-debootstrap-done" ]; then
  stage "debootstrap trixie into $target from $mirror"
  rm -rf --one-file-system "$target"
  mkdir -p "$target"
  debootstrap --variant=minbase trixie "$target" "$mirror" >"$target.debootstrap.log" 2>&1 ||
    { echo "error: debootstrap failed: $target.debootstrap.log (tail below)" >&2
      tail -20 "$target.debootstrap.log" >&2; exit 2; }
  touch "$target/.ted-debootstrap-done"
fi
cp /etc/resolv.conf "$target/etc/resolv.conf"
grep -q localhost "$target/etc/hosts" 2>/dev/null || echo "127.0.0.1 localhost" >>"$target/etc/hosts"

# The root a mount point of its own, as / is: ip netns (the emulated cluster) remounts / as a slave.
mount_in --bind "$target" /
mount_in -t proc proc /proc
mount_in -t sysfs sysfs /sys
mount_in --bind /dev /dev
mount_in -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount_in -t tmpfs -o mode=1777 tmpfs /dev/shm  # OpenMPI's shared-memory transport lives here
mount_in -t tmpfs -o mode=1777 tmpfs /tmp

# --- the tree: git's files, tracked and new, into a fresh folder; a fresh build folder, or with
# TED_DEBIAN13_KEEP_BUILD=1 the last one (the files keep their times: only what changed rebuilds)
stage "copying the working tree to $target/ted/src"
if [ "${TED_DEBIAN13_KEEP_BUILD:-0}" = 1 ]; then
  rm -rf "$target/ted/src"
else
  rm -rf "$target/ted"
fi
mkdir -p "$target/ted/src"
git -C "$TED_ROOT" ls-files -co --exclude-standard -z |
  tar -C "$TED_ROOT" --null -T - -cf - | tar -C "$target/ted/src" -xf -
# A repository of its own (no commits), so that git check-ignore reads the .gitignore files.
git init -q "$target/ted/src"

# iproute2 too, which a minimal root lacks: the emulated cluster's test needs ip and tc.
stage "installing the packages of scripts/common.sh and iproute2 in the root (those missing)"
in_root bash -c 'source /ted/src/scripts/common.sh && TED_PACKAGES+=(iproute2) && ted_install_missing' >"$target.apt.log" 2>&1 ||
  { tail -20 "$target.apt.log"; echo "error: installing the packages in the root failed ($target.apt.log)" >&2
    exit 2; }
in_root bash -c 'printf "%s\n" "$(. /etc/os-release; echo "$PRETTY_NAME")" "$(g++ --version | head -1)" \
  "$(cmake --version | head -1)" "$(mpirun --version 2>&1 | head -1)" "$(python3 --version)" &&
  dpkg-query -W -f="\${Package} \${Version}\n" catch2 libyaml-cpp-dev libcli11-dev libbenchmark-dev python3-matplotlib' |
  sed 's/^/   /'

stage "configuring (TED_ENABLE_CUDA=OFF) and building in the root"
in_root cmake -S /ted/src -B /ted/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTED_ENABLE_CUDA=OFF \
  >"$target/ted/configure.log" 2>&1 ||
  { tail -40 "$target/ted/configure.log"; echo "FAILED: configure ($target/ted/configure.log)"; exit 1; }
in_root cmake --build /ted/build -j "$(nproc)" >"$target/ted/build.log" 2>&1 ||
  { grep -B2 -A12 -m5 "error:\|FAILED:" "$target/ted/build.log" | head -80
    echo "FAILED: build ($target/ted/build.log)"; exit 1; }

stage "testing in the root: scripts/test.sh${exclude:+ -E '$exclude'}"
args=()
[ -n "$exclude" ] && args=(-E "$exclude")
in_root env TED_BUILD_DIR=/ted/build TED_SKIP_DEEPSPEED=1 bash /ted/src/scripts/test.sh "${args[@]}" \
  2>&1 | tee "$target/ted/test.log" | grep --line-buffered -v "^== building\|^\[[0-9]*/[0-9]*\]\|^ninja: no work"
rc=${PIPESTATUS[0]}
stage "done: $( [ "$rc" = 0 ] && echo "PASSED" || echo "FAILED (exit $rc)" ) (log: $target/ted/test.log)"
exit "$rc"
}
