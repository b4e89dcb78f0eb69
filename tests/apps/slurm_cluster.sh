#!/usr/bin/env bash
# Every sbatch script in slurm/ under a real Slurm. Installs slurmctld, slurmd, the Slurm client
# and munge from Debian's packages where missing, starts munged, slurmctld and two slurmd (nodes
# ted1 and ted2 of 2 CPUs each, on this machine, with their own ports, sockets and folders in a
# scratch folder), and checks:
#   1. each experiment's script (experiments/registry.txt) with its CPU config (run.iters=0: one
#      untimed step per point, two training steps a system for the convergence; the memory
#      experiment with two family models), and the collective benchmark's, once through
#      slurm/submit.sh -N 2 --ntasks-per-node=2 and once through plain sbatch -n 4 (the two jobs
#      append to one CSV), ends COMPLETED, its log in slurm/logs/, and the rows of each job equal
#      an mpirun run of the same config in every deterministic column, each row with its job id
#      and, with one CPU per task, one kernel thread (the convergence's rows, ted_train's columns,
#      carry neither: each of its jobs writes a CSV of its own);
#   2. refused before sbatch (exit 2, no job in the queue): a config with an unknown key, 3 ranks
#      (no point of the layout fits), 8 ranks (4 would be idle), more tasks on a node than GPUs,
#      an array index beyond CONFIG's YAMLs, an array of sweep points with idle ranks. Through
#      plain sbatch, 3 ranks: the job's check fails before any srun (FAILED, exit 2);
#   3. an array job over two YAMLs (2 ranks each, so both run at once) appending to one CSV: all
#      rows of both, with <job>_<index>, each equal to its YAML's mpirun run; an array over sweep
#      points: task K runs point K;
#   4. -c 2: srun gets --cpus-per-task, so each rank runs 2 kernel threads;
#   5. scancel of a job half-way: CANCELLED, its CSV only whole rows (at least one);
#   6. slurm/train.sbatch (ted_train, 2 ranks, 600 steps) stopped half-way by SIGUSR1 to its batch
#      shell (scancel --batch --signal=USR1, as --signal=B:USR1@120 sends it before the time
#      limit): a checkpoint, exit 75, the job requeued by its script (Restarts=1, "(restart 1)"
#      in its log, appended to), resumed from that checkpoint ("resumed from ...: K steps done"),
#      COMPLETED, and its CSV's 600 rows equal an uninterrupted mpirun run's in every
#      deterministic column (loss, its parts, learning rate, gradient norm, the fingerprint...).
# Stops every daemon it started, by process id. SKIPPED (exit 77), with the reason, where it
# cannot run: not root (the daemons and apt-get need it), or no apt-get. TED_SLURM_KEEP=1 keeps
# the scratch folder (configuration, daemons' logs, CSVs) for a look after a failure.
#   slurm_cluster.sh <repository root> <build dir>
set -u
root=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
keep=${TED_SLURM_KEEP:-}  # read before the TED_* variables are cleared, below
started=$SECONDS
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root: installing Slurm and running slurmd need root"
command -v apt-get >/dev/null && command -v dpkg-query >/dev/null ||
  skip "no apt-get: Slurm and munge come from Debian's packages"
# the experiments (their programs ted_<name>, slurm/<name>.sbatch), then the other scripts'
mapfile -t experiments < <(awk '/^[a-z]/ { print $1 }' "$root/experiments/registry.txt")
for program in "${experiments[@]/#/ted_}" ted_collbench ted_train; do
  [ -x "$build/apps/$program" ] || { echo "FAIL: no $build/apps/$program"; exit 1; }
done

# --- Slurm and munge from Debian, without letting the packages start their own daemons
packages=(slurmctld slurmd slurm-client munge)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
  fi
  rc=0
  { apt-get -o DPkg::Lock::Timeout=600 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends "${missing[@]}"; } >/dev/null || rc=$?
  [ -n "$policy" ] && rm -f "$policy"
  [ "$rc" = 0 ] || { echo "FAIL: apt-get install ${missing[*]}: exit $rc"; exit 1; }
fi
for tool in munged munge slurmctld slurmd sbatch srun squeue scontrol scancel sinfo; do
  command -v "$tool" >/dev/null || { echo "FAIL: no $tool after installing ${packages[*]}"; exit 1; }
done

# --- the cluster, in a scratch folder (munged wants its socket's folders searchable)
tmp=$(mktemp -d /tmp/ted-slurm.XXXXXX)
chmod 711 "$tmp"
mkdir -p "$tmp/state" "$tmp/log" "$tmp/csv" "$tmp/ref"
for node in ted1 ted2; do mkdir -p "$tmp/spool/$node" "$tmp/tmpfs/$node" "$tmp/shm/$node"; done
pids=()     # the daemons started here, stopped by process id
our_jobs=() # their logs in slurm/logs/ are removed at the end
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
cleanup() {
  set +e
  if [ ${#pids[@]} -gt 0 ]; then
    local ids
    ids=$(squeue -h -o %A 2>/dev/null | sort -u)
    [ -n "$ids" ] && scancel $ids 2>/dev/null
    for _ in $(seq 30); do
      [ -z "$(squeue -h 2>/dev/null)" ] && break
      sleep 1
    done
    # every job of this cluster, array tasks included (each logs under its own id)
    our_jobs+=($(scontrol -o show jobs 2>/dev/null | sed -n 's/^JobId=\([0-9]*\) .*/\1/p'))
  fi
  local i pid
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do  # slurmd, slurmctld, then munged
    pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 20); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -0 "$pid" 2>/dev/null && { echo "daemon $pid ignored TERM: KILL"; kill -KILL "$pid"; }
    wait "$pid" 2>/dev/null
  done
  for id in "${our_jobs[@]}"; do rm -f "$root"/slurm/logs/ted-*-"$id".out; done
  if [ "$failures" != 0 ]; then
    echo "== the daemons' logs (last lines)"
    tail -n 15 "$tmp"/log/*.log 2>/dev/null
  fi
  [ -n "$keep" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
# Everything else from here talks to this cluster only.
for variable in $(compgen -e); do
  case $variable in SLURM_* | SBATCH_* | SRUN_* | TED_* | CONFIG | CLUSTER | CSV | SET | BUILD_DIR) unset "$variable" ;; esac
done
export SLURM_CONF=$tmp/slurm.conf BUILD_DIR=$build OPENBLAS_NUM_THREADS=1
read -r ctld_port node1_port node2_port < <(/usr/bin/python3 -c '
import socket
held = [socket.socket() for _ in range(3)]
for s in held: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))')
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none && chmod 400 "$tmp/munge.key"
# Open MPI's shared memory in a folder per node and TCP on loopback only (both "nodes" are this
# machine); yield when idle, since the jobs share the cores. MPI_Init keeps Open MPI's default
# modex (a PMIx fence that hands every rank its peers' endpoints, then a closing barrier). Skipping
# that fence (pmix_base_async_modex=1 with pmix_base_collect_data=0, set here before), a mode Open
# MPI 4.1 does not support reliably, did not help: in 4-rank srun steps (2 ranks a node) of a
# program that only starts MPI, exchanges in a ring and ends, 4 of 610 steps failed in MPI_Init
# with "PML add procs failed: Not found (-13)", against 9 of 1300 with the fence, each a SIGSEGV at
# address 0: a rank still in the modex fence (its PML has no message handlers yet) got an MPI
# message over TCP from a peer already past MPI_Init's closing barrier. The fences as a ring
# (mpi.conf, below) avoid that.
cat >"$tmp/task_prolog.sh" <<EOF
#!/bin/sh
echo "export OMPI_MCA_btl_vader_backing_directory=$tmp/shm/\$SLURMD_NODENAME"
echo "export OMPI_MCA_btl_tcp_if_include=lo"
echo "export OMPI_MCA_oob_tcp_if_include=lo"
echo "export OMPI_MCA_mpi_yield_when_idle=1"
EOF
chmod 755 "$tmp/task_prolog.sh"
host=$(hostname -s)
# job ids far from a real cluster's few first, since the logs land in slurm/logs/
first_job=$((60000000 + RANDOM % 1000 * 1000))
# cred_expire: how long a job credential is valid, and also how long a requeued job waits before it
# may start again (its BeginTime: cred_expire + 1 s; the default, 120 s, would make the requeue
# check the longest part of this test); then it starts at the next full scheduling pass, every
# sched_interval (default 60 s: measured here, 56 s after its BeginTime on an idle cluster).
cat >"$SLURM_CONF" <<EOF
ClusterName=tedtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.socket,cred_expire=30
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd-%n.log
TmpFS=$tmp/tmpfs/%n
ProctrackType=proctrack/pgid
TaskPlugin=task/affinity
TaskProlog=$tmp/task_prolog.sh
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=3600
FirstJobId=$first_job
KillWait=5
SchedulerParameters=sched_interval=5
MailProg=/bin/true
NodeName=ted1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$node1_port CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=2000
NodeName=ted2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$node2_port CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=2000
PartitionName=debug Nodes=ted1,ted2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2
EOF
# Slurm's pmix plugin runs the PMIx fences of a step across nodes as a ring: with its default
# algorithm a rank here was at times still in MPI_Init's first fence when a peer had already left
# its closing barrier (above); in the 4-rank steps run side by side, 3 of 160 crashed so against 0 of
# 171 with the ring (and 0 of 300 more with it).
echo "PMIxCollFence=ring" >"$tmp/mpi.conf"
echo "== starting munged, slurmctld and two slurmd (ports $ctld_port, $node1_port, $node2_port)"
munged -F --socket="$tmp/munge.socket" --key-file="$tmp/munge.key" --pid-file="$tmp/munged.pid" \
  --log-file="$tmp/log/munged.log" --seed-file="$tmp/munged.seed" >"$tmp/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  [ -S "$tmp/munge.socket" ] && break
  sleep 0.2
done
munge -S "$tmp/munge.socket" -n >/dev/null || { fail "munged did not start"; exit 1; }
slurmctld -D -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
for node in ted1 ted2; do
  slurmd -D -N "$node" -f "$SLURM_CONF" >"$tmp/log/slurmd-$node.out" 2>&1 &
  pids+=($!)
done
up=0
for _ in $(seq 60); do
  [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$')" = 2 ] && { up=1; break; }
  sleep 1
done
[ "$up" = 1 ] || { fail "the two nodes did not come up idle: $(sinfo -N 2>&1)"; exit 1; }
echo "== cluster up after $((SECONDS - started)) s: $(sinfo -h -N -o '%N %t %c' | tr '\n' ' ')"

# --- helpers
cd "$root" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
job_ids() { sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' <<<"$1"; }
states() { scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | sort -u | cut -d= -f2 | tr '\n' ' '; }
wait_jobs() {  # <seconds> <job ids...>: until none of them is pending or running
  local deadline=$((SECONDS + $1)) id busy
  shift
  while [ $SECONDS -lt "$deadline" ]; do
    busy=0
    for id; do
      case " $(states "$id")" in *" PENDING "* | *" RUNNING "* | *" COMPLETING "* | *" CONFIGURING "* | \
        *" REQUEUED "* | " ") busy=1 ;; esac
    done
    [ "$busy" = 0 ] && return 0
    sleep 1
  done
  return 1
}
submit() {  # <what> <expected: ok|refused> <command...>: out, id
  local what=$1 expect=$2 rc=0
  shift 2
  out=$("$@" 2>&1) || rc=$?
  id=$(job_ids "$out")
  if [ "$expect" = ok ]; then
    if [ "$rc" != 0 ] || [ -z "$id" ]; then
      fail "$what: exit $rc, no job: $out"
      id=
    else
      our_jobs+=("$id")
    fi
  else
    [ "$rc" = 2 ] || fail "$what: exit $rc, not 2: $out"
    [ -z "$id" ] || { fail "$what: submitted job $id"; our_jobs+=("$id"); }
  fi
}
rows() { /usr/bin/python3 "$root/tests/apps/slurm_rows.py" "$@"; }
# The reference run, with the kernel threads the job's ranks will have (the thread count splits
# some sums, and so moves the last bits of the loss).
mpirun_ref() {  # <ranks> <threads> <csv> <program> <arguments...>
  local ranks=$1 threads=$2 csv=$3 program=$4
  shift 4
  TED_NUM_THREADS=$threads mpirun -n "$ranks" --oversubscribe "$build/apps/$program" "$@" \
    --csv "$csv" >/dev/null || fail "mpirun reference $program $*"
}
zero_iters=(run.iters=0 run.warmup=0)
declare -A sets=(
  [ablation]="${zero_iters[*]}"
  [weak_scaling]="${zero_iters[*]}"
  [strong_scaling]="${zero_iters[*]}"
  [memory]="${zero_iters[*]} family.hidden=64,128 family.heads=4,8 family.layers=4,4"
  [convergence]="run.iters=0"
)
# Experiments whose rows have ted_train's columns, without slurm_job and threads: each job writes
# a CSV of its own, compared whole.
declare -A own_csv=([convergence]=1)
set_args() {  # <SET words>: as launch.sh passes them
  local word
  for word in $1; do printf -- '--set\n%s\n' "$word"; done
}
coll_env=(COMM=mpi TP=2 EP=2 MIN_BYTES=1K MAX_BYTES=64K WARMUP=0 ITERS=0)
coll_ops=(all_to_all:expert all_gather:tensor all_reduce:tensor reduce_scatter:nonexpert_data)
for name in "${experiments[@]}"; do
  [ -n "${sets[$name]+set}" ] || fail "experiment $name: no SET for it in this test"
done
for script in slurm/*.sbatch; do
  name=$(basename "$script" .sbatch)
  [[ " ${experiments[*]} collbench train calibrate " == *" $name "* ]] || fail "$script: not known to this test"
done

# --- 2. refused before sbatch: nothing reaches the queue
ablation_cpu=experiments/ablation/cpu.yaml
sed '/^model:/a\  hiddn: 64' "$ablation_cpu" >"$tmp/typo.yaml"
sed 's/^  ep: 2/  ep: 1/' "$ablation_cpu" >"$tmp/ablation_t2.yaml"   # 2 ranks: T=2
sed 's/^  tp: 2/  tp: 1/' "$ablation_cpu" >"$tmp/ablation_e2.yaml"   # 2 ranks: Ep=2
abl=(env CONFIG=$ablation_cpu "SET=${sets[ablation]}")
submit "a config with an unknown key" refused env CONFIG="$tmp/typo.yaml" slurm/submit.sh slurm/ablation.sbatch -n 4
grep -q hiddn <<<"$out" || fail "the unknown key is not named: $out"
submit "3 ranks for a 4-rank layout" refused "${abl[@]}" slurm/submit.sh slurm/ablation.sbatch -n 3
grep -q "no point to run on 3 ranks" <<<"$out" || fail "3 ranks: $out"
submit "8 ranks for a 4-rank layout" refused "${abl[@]}" slurm/submit.sh slurm/ablation.sbatch -N 2 --ntasks-per-node=4
grep -q "4 would be idle" <<<"$out" || fail "8 ranks: $out"
submit "4 tasks on a node with 2 GPUs" refused "${abl[@]}" slurm/submit.sh slurm/ablation.sbatch -N 1 -n 4 --gpus-per-node=2
grep -q "4 tasks on a node but 2 GPUs per node" <<<"$out" || fail "tasks/GPUs: $out"
submit "array index 3 of two YAMLs" refused env CONFIG="$tmp/ablation_t2.yaml $tmp/ablation_e2.yaml" \
  "SET=${sets[ablation]}" slurm/submit.sh slurm/ablation.sbatch -n 2 --array=1-3
grep -q "array index 3: CONFIG lists 2 YAMLs" <<<"$out" || fail "array index: $out"
submit "an array of sweep points with idle ranks" refused env CONFIG=experiments/weak_scaling/cpu.yaml \
  "SET=${sets[weak_scaling]}" slurm/submit.sh slurm/weak_scaling.sbatch -n 4 --array=1-6
grep -q "would be idle" <<<"$out" || fail "sweep-point array: $out"
queued=$(scontrol -o show jobs 2>/dev/null | grep -c '^JobId=')
[ "$queued" = 0 ] || fail "the refused submissions left $queued job(s) in Slurm"
echo "== refusals checked after $((SECONDS - started)) s"

# --- 1. every script through submit.sh and plain sbatch; 3.-5. arrays, -c 2, a failing job
declare -A submitted plain
csv_of() {  # <experiment> <submitted|plain>: the CSV its job appends to
  if [ -n "${own_csv[$1]:-}" ]; then echo "$tmp/csv/${1}_$2.csv"; else echo "$tmp/csv/$1.csv"; fi
}
for name in "${experiments[@]}"; do
  run=(env CONFIG="experiments/$name/cpu.yaml" "SET=${sets[$name]}")
  submit "submit.sh $name" ok "${run[@]}" CSV="$(csv_of "$name" submitted)" slurm/submit.sh \
    "slurm/$name.sbatch" -N 2 --ntasks-per-node=2
  submitted[$name]=$id
  submit "sbatch $name" ok "${run[@]}" CSV="$(csv_of "$name" plain)" sbatch -n 4 "slurm/$name.sbatch"
  plain[$name]=$id
done
submit "submit.sh collbench" ok env "${coll_env[@]}" CSV_DIR="$tmp/csv/coll_submit" \
  slurm/submit.sh slurm/collbench.sbatch -N 2 --ntasks-per-node=2
submitted[collbench]=$id
submit "sbatch collbench" ok env "${coll_env[@]}" CSV_DIR="$tmp/csv/coll_plain" \
  sbatch -n 4 slurm/collbench.sbatch
plain[collbench]=$id
# The calibration on the two nodes (small sizes: the curves' form, not their rates), its cluster
# file read by ted_project, its last lines the search's best layouts.
submit "sbatch calibrate" ok env NAME=slurm-test OUT="$tmp/csv/calibrated.yaml" MAX_PEER=4194304 \
  OPS="all_to_all all_reduce" MODELS=experiments/ablation/cpu.yaml TOP=2 \
  sbatch -N 2 --ntasks-per-node=2 slurm/calibrate.sbatch
calibrate_job=$id
submit "an array over two YAMLs" ok env CONFIG="$tmp/ablation_t2.yaml $tmp/ablation_e2.yaml" \
  "SET=${sets[ablation]} systems=ted-baseline,ted" CSV="$tmp/csv/array.csv" \
  slurm/submit.sh slurm/ablation.sbatch -n 2 --array=1-2
array_configs=$id
submit "an array over sweep points" ok env CONFIG=experiments/weak_scaling/cpu.yaml \
  "SET=${sets[weak_scaling]}" CSV="$tmp/csv/points.csv" sbatch -n 4 --array=5-6 slurm/weak_scaling.sbatch
array_points=$id
submit "-c 2" ok env CONFIG="$tmp/ablation_t2.yaml" "SET=${sets[ablation]} systems=ted-baseline,ted" \
  CSV="$tmp/csv/cpus.csv" sbatch -n 2 -c 2 slurm/ablation.sbatch
cpus_job=$id
submit "sbatch with 3 ranks" ok "${abl[@]}" CSV="$tmp/csv/three.csv" sbatch -n 3 slurm/ablation.sbatch
three_job=$id
# --- references: each config under mpirun, as the jobs run it (while they run)
for name in "${experiments[@]}"; do
  mapfile -t extra < <(set_args "${sets[$name]}")
  mpirun_ref 4 1 "$tmp/ref/$name.csv" "ted_$name" -c "experiments/$name/cpu.yaml" "${extra[@]}"
done
mapfile -t extra < <(set_args "${sets[ablation]} systems=ted-baseline,ted")
for layout in t2 e2; do
  mpirun_ref 2 1 "$tmp/ref/ablation_$layout.csv" ted_ablation -c "$tmp/ablation_$layout.yaml" \
    "${extra[@]}"
done
mpirun_ref 2 2 "$tmp/ref/ablation_t2_c2.csv" ted_ablation -c "$tmp/ablation_t2.yaml" "${extra[@]}"
for entry in "${coll_ops[@]}"; do
  mpirun_ref 4 1 "$tmp/ref/coll_${entry%%:*}.csv" ted_collbench --comm mpi --op "${entry%%:*}" \
    --group "${entry##*:}" --tp 2 --ep 2 -b 1K -e 64K -f 2 -w 0 -n 0
done
echo "== mpirun references after $((SECONDS - started)) s"

# long enough to cancel half-way: 10 timed steps a point
submit "a job to cancel" ok env CONFIG=$ablation_cpu "SET=run.iters=10 run.warmup=0" \
  CSV="$tmp/csv/cancel.csv" sbatch -n 4 slurm/ablation.sbatch
cancel_job=$id
# long enough to stop half-way: 600 steps of the tiny model on 2 ranks, 15 to 40 s here
train_steps=600
train_sets=(training.steps=$train_steps training.log_every=10)
submit "a training job to requeue" ok env CONFIG=experiments/train/tiny-cpu.yaml \
  "SET=${train_sets[*]}" CSV="$tmp/csv/train.csv" SAVE_DIR="$tmp/checkpoints" \
  sbatch -n 2 slurm/train.sbatch
train_job=$id

# The scripts log to slurm/logs/%x-%j.out: %j is the job id, for an array task its own (the id
# sbatch printed is the array's, which Slurm gives to one of the tasks only).
log_of() { ls "$root"/slurm/logs/ted-*-"$1".out 2>/dev/null | head -n 1; }
last_step() {  # <job>: the last step its ted_train logged, 0 before the first
  local log step
  log=$(log_of "$1")
  [ -n "$log" ] && step=$(sed -n 's#^step *\([0-9]*\)/.*#\1#p' "$log" | tail -n 1)
  echo "${step:-0}"
}
# 5. scancel once the first row is in; 6. SIGUSR1 to the training job's batch shell once it has
# made 50 steps (--batch: the batch shell only, as --signal=B:USR1 at the time limit)
cancelled=${cancel_job:+no} signalled=${train_job:+no}
deadline=$((SECONDS + 400))
while [ "$cancelled" = no ] || [ "$signalled" = no ]; do
  if [ "$cancelled" = no ] && [ -s "$tmp/csv/cancel.csv" ] &&
    [ "$(wc -l <"$tmp/csv/cancel.csv")" -ge 2 ]; then
    scancel "$cancel_job"
    cancelled=yes
  fi
  if [ "$signalled" = no ] && [ "$(last_step "$train_job")" -ge 50 ]; then
    scancel --batch --signal=USR1 "$train_job" || fail "scancel --batch --signal=USR1 $train_job"
    signalled=yes
    echo "== SIGUSR1 to the training job's batch shell after $((SECONDS - started)) s, at step" \
      "$(last_step "$train_job") of $train_steps"
  fi
  if [ $SECONDS -ge $deadline ]; then
    [ "$cancelled" = no ] && fail "the job to cancel wrote no row in 400 s"
    [ "$signalled" = no ] &&
      fail "the training job made no 50 steps in 400 s: $(states "$train_job")"
    break
  fi
  sleep 0.5
done
[ "$cancelled" = no ] && scancel "$cancel_job"
# the uninterrupted run, while the training job waits to start again
if [ -n "$train_job" ]; then
  mapfile -t extra < <(set_args "${train_sets[*]}")
  mpirun_ref 2 1 "$tmp/ref/train.csv" ted_train -c experiments/train/tiny-cpu.yaml "${extra[@]}"
fi
all=(${submitted[@]} ${plain[@]} $array_configs $array_points $cpus_job $three_job $cancel_job
  $train_job)
wait_jobs 600 "${all[@]}" || fail "jobs still running after 600 s: $(squeue 2>&1)"
echo "== all jobs ended after $((SECONDS - started)) s"
for job in "${all[@]}"; do
  scontrol -o show job "$job" | sed -n 's/^JobId=\([0-9]*\).* JobName=\([^ ]*\).*JobState=\([A-Z]*\).*RunTime=\([0-9:]*\).*/job \1 \2: \3 in \4/p'
done

expect_state() {  # <what> <job> <state>: every task of an array; else the log of each task not in it
  local got line task state
  got=$(states "$2")
  [ "$got" = "$3 " ] && return 0
  fail "$1 (job $2): state '$got', not $3"
  while read -r line; do
    state=$(grep -o 'JobState=[A-Z_]*' <<<"$line" | cut -d= -f2)
    [ "$state" = "$3" ] && continue
    task=$(sed -n 's/^JobId=\([0-9]*\) .*/\1/p' <<<"$line")
    echo "job $task$(grep -o ' ArrayTaskId=[0-9]*' <<<"$line"): $state; its log:"
    tail -n 40 "$(log_of "$task")" 2>/dev/null
  done < <(scontrol -o show job "$2" 2>/dev/null)
}
for name in "${experiments[@]}"; do
  for how in submitted plain; do
    unset -n jobs
    declare -n jobs=$how
    job=${jobs[$name]:-}
    [ -n "$job" ] || continue
    expect_state "$how $name" "$job" COMPLETED
    [ -n "$(log_of "$job")" ] || fail "$how $name: no log slurm/logs/ted-$name-$job.out"
    if [ -n "${own_csv[$name]:-}" ]; then
      rows same "$tmp/ref/$name.csv" "$(csv_of "$name" "$how")" - || failures=$((failures + 1))
    else
      rows same "$tmp/ref/$name.csv" "$(csv_of "$name" "$how")" "$job" threads=1 ||
        failures=$((failures + 1))
    fi
  done
done
for how in submitted plain; do
  unset -n jobs
  declare -n jobs=$how
  job=${jobs[collbench]:-}
  [ -n "$job" ] || continue
  expect_state "$how collbench" "$job" COMPLETED
  dir=$tmp/csv/coll_$([ "$how" = submitted ] && echo submit || echo plain)
  for entry in "${coll_ops[@]}"; do
    rows same "$tmp/ref/coll_${entry%%:*}.csv" "$dir/${entry%%:*}_${entry##*:}_mpi_G4.csv" "$job" wrong=0 ||
      failures=$((failures + 1))
  done
done
if [ -n "$calibrate_job" ]; then
  expect_state "sbatch calibrate" "$calibrate_job" COMPLETED
  log=$(log_of "$calibrate_job")
  if ! "$build/apps/ted_project" search -c experiments/ablation/cpu.yaml --gpus 4 \
    --cluster "$tmp/csv/calibrated.yaml" --check >/dev/null; then
    fail "calibrate: ted_project does not read its cluster file"
  elif [ "$(grep -c '^  - op: ' "$tmp/csv/calibrated.yaml")" != 6 ]; then
    fail "calibrate: not 6 curves (2 ops x 3 group layouts) in $tmp/csv/calibrated.yaml"
  elif ! tail -n 4 "$log" | grep -q '^ *1 '; then
    fail "calibrate: its log does not end with the search's best layouts: $(tail -n 6 "$log")"
  else
    echo "ok: calibrate: a cluster file of 6 measured curves, the best layouts last in its log"
  fi
fi
rows whole "$tmp/csv/ablation.csv" 10 10 >/dev/null || fail "two jobs into one CSV: not 10 whole rows"
if [ -n "$array_configs" ]; then
  expect_state "the array over two YAMLs" "$array_configs" COMPLETED
  rows same "$tmp/ref/ablation_t2.csv" "$tmp/csv/array.csv" "${array_configs}_1" T=2 Ep=1 || failures=$((failures + 1))
  rows same "$tmp/ref/ablation_e2.csv" "$tmp/csv/array.csv" "${array_configs}_2" T=1 Ep=2 || failures=$((failures + 1))
  rows whole "$tmp/csv/array.csv" 4 4 >/dev/null || fail "the array's CSV: not 4 whole rows"
fi
if [ -n "$array_points" ]; then
  expect_state "the array over sweep points" "$array_points" COMPLETED
  rows same "$tmp/ref/weak_scaling.csv" "$tmp/csv/points.csv" "${array_points}_5" row=5 G=4 || failures=$((failures + 1))
  rows same "$tmp/ref/weak_scaling.csv" "$tmp/csv/points.csv" "${array_points}_6" row=6 G=4 || failures=$((failures + 1))
fi
if [ -n "$cpus_job" ]; then
  expect_state "-c 2" "$cpus_job" COMPLETED
  grep -q -- "--cpus-per-task=2" "$(log_of "$cpus_job")" || fail "-c 2: srun without --cpus-per-task=2"
  rows same "$tmp/ref/ablation_t2_c2.csv" "$tmp/csv/cpus.csv" "$cpus_job" threads=2 || failures=$((failures + 1))
fi
if [ -n "$three_job" ]; then
  expect_state "sbatch with 3 ranks" "$three_job" FAILED
  scontrol -o show job "$three_job" | grep -q 'ExitCode=2:0' || fail "3 ranks: not exit 2"
  log=$(log_of "$three_job")
  grep -q "no point to run on 3 ranks" "$log" || fail "3 ranks: the log does not say why"
  ! grep -q "^ted-ablation: srun " "$log" || fail "3 ranks: srun ran after a failed check"
  [ ! -e "$tmp/csv/three.csv" ] || fail "3 ranks: a CSV was written"
fi
if [ -n "$cancel_job" ]; then
  expect_state "scancel half-way" "$cancel_job" CANCELLED
  kept=$(rows whole "$tmp/csv/cancel.csv" 1 4) || fail "scancel half-way: $kept"
  echo "ok: scancel half-way kept $kept whole row(s)"
fi
if [ -n "$train_job" ]; then
  before=$failures
  expect_state "the training job stopped by SIGUSR1" "$train_job" COMPLETED
  log=$(log_of "$train_job")
  restarts=$(scontrol -o show job "$train_job" | grep -o 'Restarts=[0-9]*')
  [ "$restarts" = Restarts=1 ] || fail "the training job: '$restarts', not Restarts=1"
  stopped=$(sed -n 's/^# stopped by SIGUSR1 after step \([0-9]*\) of .*/\1/p' "$log")
  resumed=$(sed -n 's/^# resumed from .*: \([0-9]*\) steps done .*/\1/p' "$log")
  signal_at=$(sed -n 's/^ted-train: got SIGUSR1 at \(.*\): passing SIGUSR1 .*/\1/p' "$log")
  restart_at=$(sed -n "s/^ted-train: job $train_job (restart 1) at \([-0-9]* [0-9:]*\), .*/\1/p" \
    "$log")
  if [ -z "$stopped" ] || [ "$stopped" -lt 1 ] || [ "$stopped" -ge "$train_steps" ]; then
    fail "the training job: not stopped half-way by SIGUSR1: '$stopped'"
  elif ! grep -q "requeueing job $train_job" "$log" || [ -z "$restart_at" ]; then
    fail "the training job: its log shows no requeue and no second run (restart 1)"
  elif [ "$resumed" != "$stopped" ]; then
    fail "the training job: stopped after step $stopped, resumed after '$resumed'"
  elif [ ! -d "$tmp/checkpoints/step_$(printf %08d "$stopped")" ]; then
    fail "the training job: no checkpoint step_$(printf %08d "$stopped")"
  elif rows same "$tmp/ref/train.csv" "$tmp/csv/train.csv" -; then
    echo "ok: the training job: SIGUSR1 at $signal_at, stopped after step $stopped with a" \
      "checkpoint, requeued ($restarts), started again at $restart_at and resumed from step" \
      "$stopped, COMPLETED, every step equal to an uninterrupted mpirun run's"
  else
    failures=$((failures + 1))
  fi
  [ "$failures" = "$before" ] || grep -v '^step ' "$log" | tail -n 40
fi
echo "== checked after $((SECONDS - started)) s"
echo "$failures failed"
[ "$failures" = 0 ]
