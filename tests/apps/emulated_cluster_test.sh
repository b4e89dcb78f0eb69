#!/usr/bin/env bash
# The emulated cluster end to end: the collective benchmark (all-to-all across 2 nodes x 2 ranks
# on the bucket-shaped and the paced links, all-gather in the tensor group inside a node) with its
# data checked, then nothing left behind: no namespaces, links or processes of the run.
# Skipped (exit 77) without root or ip/tc.
#   emulated_cluster_test.sh <repository root> <ted_collbench>
set -u
root=$1
bench=$2
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "SKIPPED: needs root and iproute2 (ip, tc) for network namespaces"
  exit 77
fi
if ! ip netns add ted-probe-$$ 2>/dev/null; then
  echo "SKIPPED: this machine does not allow network namespaces"
  exit 77
fi
ip netns del ted-probe-$$
failures=0
# The first topology's tbf bucket, and the paced link (an htb class sorting onto tbf with a peak
# rate, its queue a pfifo under tbf): each must carry the all-to-all's data intact.
for run in "2x2:--op all_to_all --group world" "2x2:--op all_gather --group tensor --tp 2" \
  "2x2-paced:--op all_to_all --group world"; do
  topology=${run%%:*}
  args=${run#*:}
  if out=$("$root/scripts/emulated_cluster.sh" "$root/experiments/emulated/$topology.yaml" "$bench" \
    $args -b 1K -e 1M -f 8 -n 0 -w 0 --csv "$(mktemp -u)" 2>&1); then
    echo "$out" | grep -q "# Passed: 0 wrong elements" || { echo "FAIL: $run: $out"; failures=1; }
    echo "ok: $run"
  else
    echo "FAIL: $run exited non-zero: $out"
    failures=1
  fi
done
# The launcher's names: ted<pid>n<i> namespaces, ted<pid>br / v<i> / p<i> links. The kernel
# removes a veth shortly after its namespace, so give the teardown a moment.
namespaces() { ip netns list | grep -E '^ted[0-9]+n[0-9]+' || true; }
links() { ip -o link show | grep -E ': ted[0-9]+(br|v[0-9]+|p[0-9]+)[@:]' || true; }
for _ in 1 2 3 4 5; do [ -z "$(namespaces)$(links)" ] && break; sleep 1; done
[ -z "$(namespaces)" ] || { echo "FAIL: namespaces left behind: $(namespaces)"; failures=1; }
[ -z "$(links)" ] || { echo "FAIL: links left behind: $(links)"; failures=1; }
# Live processes of the run (zombies, already dead and waiting for init to reap them, aside);
# OpenMPI 4 names its daemon orted, 5 prted.
live() { ps -eo stat=,comm= | awk '$1 !~ /^Z/ && ($2 == "orted" || $2 == "prted" || $2 == "ted_collbench")'; }
for _ in 1 2 3 4 5; do [ -z "$(live)" ] && break; sleep 1; done
[ -z "$(live)" ] || { echo "FAIL: processes left behind: $(live)"; failures=1; }
echo "$failures failed"
[ "$failures" = 0 ]
