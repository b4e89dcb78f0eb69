#!/usr/bin/env bash
# Runs an MPI program on an emulated multi-node cluster on this one machine: every node is a
# Linux network namespace with its own hostname, the nodes hang off a bridge by veth pairs whose
# bandwidth (and latency, where the kernel has netem) tc shapes. Ranks inside a node talk through
# MPI's shared memory, ranks on different nodes through TCP over the shaped links, so the
# all-to-all crossing nodes is slow while the tensor group inside a node stays fast.
# Everything is torn down on exit, Ctrl-C or failure: no namespaces, links or processes remain.
#   scripts/emulated_cluster.sh experiments/emulated/2x2.yaml build/apps/ted_collbench --op all_to_all
# It needs root and iproute2 (ip, tc); without them, run the same program with plain mpirun
# (mpirun -n 4 --oversubscribe <program> ...): one node, no shaped links.
set -euo pipefail
die() { echo "emulated_cluster: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: $0 <topology.yaml> <program> [arguments...]"
[ "$EUID" = 0 ] || die "needs root for network namespaces and tc; without it run the program with plain mpirun: mpirun -n <ranks> --oversubscribe <program> ..."
for tool in ip tc unshare mpirun; do
  command -v "$tool" >/dev/null || die "needs '$tool' (apt-get install iproute2 util-linux openmpi-bin); without it run the program with plain mpirun"
done
topology=$1
shift
[ -r "$topology" ] || die "cannot read $topology"
key() {  # key <name> [default]
  local value
  value=$(sed -n "s/^$1:[[:space:]]*\([^#[:space:]]*\).*/\1/p" "$topology" | head -1)
  [ -n "$value" ] || value=${2:-}
  [ -n "$value" ] || die "$topology: key '$1' is missing"
  echo "$value"
}
nodes=$(key nodes)
per_node=$(key ranks_per_node)
rate=$(key bandwidth)
delay=$(key latency)
# tc tbf's token bucket and queue: what may leave at memory speed after an idle spell, and how
# long a packet may wait before it is dropped (the defaults are the first topologies' shaping).
burst=$(key burst 256kb)
queue=$(key queue 100ms)
# shaping: bucket (default) is tc tbf with the burst and queue above. rate is a plain full-duplex
# link at the rate: TCP's segments cut to the MTU (gso_max_size) so the shaper sees packets, not
# 64 KB bursts; packets under 128 bytes (TCP's bare acknowledgements) leave at once instead of
# waiting behind the data going out; the data's queue never drops (an htb class at the rate over
# a pfifo of 100000 packets); TCP's buffers grow to 32 MB and MPI's TCP transport sends every
# message of up to 32 MB at once (eagerly), so that a message of MBs is in the kernel's hands and
# not waiting for its rank to be scheduled: MPI's rendezvous for larger messages needs every rank's
# progress, which four ranks on two cores do not give it promptly, and held an all-to-all of four
# ranks to 60-70% of the link from 256 KiB per rank. InfiniBand neither drops nor queues its flow
# control behind data.
# paced is rate with the data's htb class replaced by tc tbf with a peak rate: tbf's second bucket
# holds one packet and refills at the peak rate, 1% above the rate, so however long the link was
# idle (the ranks waiting in a barrier) its packets leave no faster than the peak rate, where
# rate's htb class sends what its bucket banked meanwhile at once (a real link loses its idle
# time). Over more than the burst the rate bucket holds it to the rate.
shaping=$(key shaping bucket)
[[ "$shaping" == bucket || "$shaping" == rate || "$shaping" == paced ]] ||
  die "$topology: shaping must be bucket, rate or paced"
mpi_rate=()
[ "$shaping" != bucket ] && mpi_rate=(--mca btl_tcp_eager_limit 33554432 --mca btl_tcp_rndv_eager_limit
  33554432 --mca btl_tcp_max_send_size 33554432)
if [ "$shaping" = paced ]; then
  # tbf needs a peak rate above the rate; in bit/s, so tc reads it whatever the rate's unit.
  peak=$(awk -v r="$rate" 'BEGIN {
    n = r + 0; u = tolower(substr(r, length(n "") + 1))
    if (u == "bit") m = 1; else if (u == "kbit") m = 1e3; else if (u == "mbit") m = 1e6
    else if (u == "gbit") m = 1e9; else exit 1
    if (n <= 0) exit 1
    printf "%.0f", n * m * 1.01 }') ||
    die "$topology: bandwidth must be a number with unit bit, kbit, mbit or gbit for shaping: paced"
  # What the peak bucket holds beyond one frame, as time at the peak rate: the packet's timer
  # fires late on a busy machine, and without slack every late packet's delay is lost from the
  # rate; with it the next packet makes it up. It is also the most idle time the link banks.
  slack=$(key peak_slack 0us)
  [[ "$slack" =~ ^([0-9]+)us$ ]] || die "$topology: peak_slack must be whole microseconds (e.g. 10us)"
  slack=${BASH_REMATCH[1]}
fi
[[ "$nodes" =~ ^[1-9][0-9]*$ && "$per_node" =~ ^[1-9][0-9]*$ ]] ||
  die "$topology: nodes and ranks_per_node must be positive integers"

prefix=ted$$                              # names unique to this run
subnet=10.$((200 + $$ % 50)).$(($$ / 50 % 250))
bridge=${prefix}br
work=$(mktemp -d)
cleanup() {
  local i ns
  for ((i = 0; i < nodes; i++)); do
    ns=${prefix}n$i
    if ip netns list | grep -qw "$ns"; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link add "$bridge" type bridge
ip addr add "$subnet.254/24" dev "$bridge"
ip link set "$bridge" up
: >"$work/hosts"
for ((i = 0; i < nodes; i++)); do
  ns=${prefix}n$i
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  ip link add "${prefix}v$i" type veth peer name "${prefix}p$i"
  ip link set "${prefix}p$i" netns "$ns"
  ip link set "${prefix}v$i" master "$bridge" up
  ip netns exec "$ns" ip addr add "$subnet.$((i + 1))/24" dev "${prefix}p$i"
  ip netns exec "$ns" ip link set "${prefix}p$i" up
  if [ "$delay" != 0 ]; then
    ip netns exec "$ns" tc qdisc add dev "${prefix}p$i" root netem delay "$delay" rate "$rate" ||
      die "latency needs the netem qdisc (sch_netem), which this kernel lacks; set latency: 0"
  elif [ "$shaping" = rate ] || [ "$shaping" = paced ]; then
    dev=${prefix}p$i
    ip netns exec "$ns" ip link set "$dev" gso_max_size 1500
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_wmem="4096 1048576 33554432" \
      net.ipv4.tcp_rmem="4096 1048576 33554432"
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: htb default 10 2>/dev/null
    if [ "$shaping" = rate ]; then
      ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:10 htb rate "$rate" \
        ceil "$rate" burst "$burst" cburst "$burst" 2>/dev/null
      ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:20 htb rate 100gbit 2>/dev/null
      ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:10 handle 10: pfifo limit 100000
    else
      # The data's class only sorts (100gbit); tbf under it shapes. Its peak bucket (mtu) holds
      # one frame (the MTU and the Ethernet header) plus what the peak rate sends in the slack
      # and two microseconds (tc rounds the bucket's time down to one): a frame larger than the
      # bucket would be dropped.
      frame=$(($(ip netns exec "$ns" cat "/sys/class/net/$dev/mtu") + 14 +
        ((slack + 2) * peak + 7999999) / 8000000))
      ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:10 htb rate 100gbit 2>/dev/null
      ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:20 htb rate 100gbit 2>/dev/null
      ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:10 handle 10: tbf rate "$rate" \
        burst "$burst" peakrate "${peak}bit" mtu "$frame" limit 200mb
      ip netns exec "$ns" tc qdisc add dev "$dev" parent 10:1 handle 11: pfifo limit 100000
    fi
    ip netns exec "$ns" tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 \
      match u16 0x0000 0xff80 at 2 flowid 1:20  # IPv4 total length under 128 bytes
  else
    ip netns exec "$ns" tc qdisc add dev "${prefix}p$i" root tbf rate "$rate" burst "$burst" latency "$queue"
  fi
  echo "$subnet.$((i + 1)) slots=$per_node" >>"$work/hosts"
done

# OpenMPI starts a daemon per node through this stand-in for rsh: it enters the node's
# namespace under a hostname of its own (shared-memory segments are named after the host).
cat >"$work/rsh" <<AGENT
#!/usr/bin/env bash
host=\$1
shift
node=\$(( \${host##*.} - 1 ))
exec ip netns exec ${prefix}n\$node unshare --uts /bin/bash -c 'hostname "\$0"; eval "\$*"' "${prefix}-node\$node" "\$@"
AGENT
chmod +x "$work/rsh"

echo "emulated_cluster: $nodes nodes x $per_node ranks, links $rate (latency $delay)" >&2
status=0
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_orte_execute_quiet=1 \
  mpirun --hostfile "$work/hosts" \
  -n $((nodes * per_node)) --mca plm_rsh_agent "$work/rsh" --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include "$subnet.0/24" --mca btl_tcp_if_include "$subnet.0/24" \
  --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 "${mpi_rate[@]}" -x PATH \
  -x TED_TOPOLOGY="emulated ${nodes}x${per_node} @${rate}" \
  -x OPENBLAS_NUM_THREADS=1 -x TED_NUM_THREADS=1 "$@" || status=$?
exit $status
