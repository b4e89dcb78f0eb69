#!/usr/bin/env bash
# The one prepared run for a session that is lent an NVIDIA GPU (docs/gpu_peers.md): the checks
# still owed to a GPU first, then ours against the systems a user would pick instead, all within
# a time budget, everything written under $OUT and one report under results/gpu/.
#   1. env        the device, the revision, every system's version; the carried peers' wheels
#                 (.whl/, peers/fetch_wheels.sh) installed into a folder on PYTHONPATH
#   2. checks     scripts/gpu/gpu_check.sh on the packed build (TED_GPU_CHECK_PREBUILT): every `cuda`
#                 CTest at 16 jobs with --output-on-failure, ted_cuda_staged_np4_bf16 (the one
#                 that failed once) scheduled first, ending in its verdict; bounded so that the
#                 measurements after it keep their time
#   3. step       ted_train of experiments/train/gpu-1b.yaml (the 1.35B MoE GPT): tokens/s, its
#                 peak memory by the tracking allocator, by the CUDA driver (nvidia-smi's
#                 memory.used polled during the run, less the idle count) and by the
#                 projection's memory model
#   4. block      the paper's block: ours (bench_moe_block_cuda, with its self-check) and the
#                 peers in one process (peers/moe_block.py: eager, compile, deepspeed, megatron,
#                 megatron-sdpa, tutel where carried, each checked against our block first),
#                 ours and the peers alternating round by round
#   5. peers_step the same training step in Megatron-Core (SDPA core attention) and DeepSpeed-MoE
#                 (peers/train_step.py)
#   6. rates      the GPU's bf16 GEMM rate and copy bandwidth (peers/device_rates.py), written
#                 into a measured copy of the cluster file (gpu_cluster.yaml)
#   7. project    ted_project's time and memory for the step, with the committed cluster file
#                 and with the measured copy
#   8. extra      second rounds of the block and of our step, then Nsight Compute's per-kernel
#                 table of our block, only while the budget lasts
#   9. report     scripts/gpu/gpu_report.py: results/gpu/<device>-<revision>.md and .csv
# A step runs only when the budget still holds its planned time; one that cannot is recorded as
# skipped (budget) in steps.csv and in the report, and what ran is kept. Measured timings never
# overlap: the checks (correctness only) run before any of them.
#
#   bash .gpu/run.sh -- scripts/gpu/gpu_session.sh --budget 540     # on the GPU machine (the pack
#                                                                # of shared/gpu; docs/gpu_peers.md)
#   scripts/gpu/gpu_session.sh --dry-run --report-dir /tmp/r        # no GPU: the same control flow
#                                 # on the CPU at tiny sizes (what CTest gpu_session_dry runs)
# Options: --budget SECONDS (default 540), --dry-run, --report-dir DIR (default results/gpu; a
# dry run writes nowhere in the tree unless told), --only STEP,STEP (e.g. checks), --rounds N
# (block rounds, default 2).
# Environment: OUT (raw outputs; default a temporary folder), TED_GPU_BUILD_DIR (build-gpu; dry:
# build), TED_PEERS_WHEELS (.whl), TED_PEERS_PYTHON (python3; dry: peers/setup.sh's).
# Exit: 0 every step that ran passed and the report's bars were met; 1 otherwise (the report
# says which); 2 bad arguments, or no GPU without --dry-run.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
budget=540 dry=0 report_dir="" only="" rounds=2
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=${2:-}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --report-dir) report_dir=${2:-}; shift 2 ;;
    --only) only=${2:-}; shift 2 ;;
    --rounds) rounds=${2:-}; shift 2 ;;
    *) echo "gpu_session: unknown argument '$1' (--budget S, --dry-run, --report-dir D, --only S, --rounds N)" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu_session: --budget needs whole seconds, not '$budget'" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_session: --rounds needs a positive count, not '$rounds'" >&2; exit 2; }
for s in ${only//,/ }; do
  case $s in env | checks | step | block | peers_step | rates | project | extra | report) ;;
    *) echo "gpu_session: --only: no step '$s'" >&2; exit 2 ;; esac
done
if [ "$dry" = 0 ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
  echo "gpu_session: no NVIDIA GPU visible (nvidia-smi lists none); --dry-run runs the control flow on the CPU" >&2
  exit 2
fi
t0=$SECONDS
# The raw outputs in a folder of their own; $OUT gets few files at the end (the device's tool
# returns at most 8): the report, steps.csv, session.log and a tarball of everything.
raw=$(mktemp -d -t ted-session.XXXXXX)
[ -z "$report_dir" ] && { [ "$dry" = 1 ] && report_dir=$raw/report || report_dir=results/gpu; }
exec > >(tee -a "$raw/session.log") 2>&1
reserve=20  # kept for the report at the end
stamp() { echo "== [$((SECONDS - t0)) s of $budget] $*"; }
left() { echo $((budget - (SECONDS - t0))); }
echo "step,planned_s,seconds,exit,status" >"$raw/steps.csv"
failed=0
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
# run STEP PLANNED CAP command...: runs when the budget holds PLANNED seconds more (besides the
# report's reserve), bounded by min(CAP, what is left); records its time and exit.
run() {
  local name=$1 planned=$2 cap=$3
  shift 3
  local have=$(($(left) - reserve))
  if [ "$have" -lt "$planned" ]; then
    stamp "$name: skipped (budget: $have s left, $planned s planned)"
    echo "$name,$planned,0,,skipped (budget)" >>"$raw/steps.csv"
    return 0
  fi
  local limit=$((have < cap ? have : cap)) start=$SECONDS rc
  stamp "$name (planned $planned s, at most $limit s)"
  rm -f "$raw/.timed_out"
  # The step in a process group of its own, so that the bound ends everything it started; a
  # watchdog that leaves within a second of the step.
  set -m
  ("$@") &
  local pid=$!
  set +m
  (for ((i = 0; i < limit; i++)); do sleep 1; kill -0 "$pid" 2>/dev/null || exit 0; done
    touch "$raw/.timed_out"; kill -TERM -- -"$pid"; sleep 10; kill -KILL -- -"$pid") >/dev/null 2>&1 &
  local watchdog=$!
  wait "$pid"
  rc=$?
  wait "$watchdog" 2>/dev/null
  local status=passed
  [ -e "$raw/.timed_out" ] && status="timed out"
  [ "$rc" -ne 0 ] && [ "$status" = passed ] && status=failed
  [ "$rc" -ne 0 ] && failed=1
  echo "$name,$planned,$((SECONDS - start)),$rc,$status" >>"$raw/steps.csv"
  stamp "$name: exit $rc ($status) in $((SECONDS - start)) s"
  return 0
}

# The machine's and the dry run's differences, set once.
if [ "$dry" = 1 ]; then
  build=${TED_GPU_BUILD_DIR:-build}
  python=${TED_PEERS_PYTHON:-$("$root/peers/setup.sh" | tail -1)/bin/python}
  device_arg=(--device cpu --dtype fp32)
  tiny=(--set model.hidden=64 --set model.heads=4 --set model.vocab=256 --set model.seq_len=64
    --set model.layers=4 --set data.micro_batch=2)
  train_args=(--backend cpu --dtype fp32 "${tiny[@]}")
  peers_systems=eager,deepspeed,megatron,megatron-sdpa,tutel
  peers_extra=(--tiny --warmup 1 --iters 2)
  cluster=experiments/clusters/h100-sxm-1gpu.yaml
  ours_block=("$build/apps/bench_moe_block" --benchmark_format=csv --benchmark_filter='^moe_block/tiny/')
  block_name="moe_block/tiny"
  echo "cpu (dry run: no GPU; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))" >"$raw/device.txt"
else
  build=${TED_GPU_BUILD_DIR:-build-gpu}
  python=${TED_PEERS_PYTHON:-python3}
  device_arg=()
  tiny=()
  train_args=()
  peers_systems=eager,compile,deepspeed,megatron,megatron-sdpa,tutel
  peers_extra=()
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  case $name in *H200*) cluster=experiments/clusters/h200-sxm-1gpu.yaml ;;
    *) cluster=experiments/clusters/h100-sxm-1gpu.yaml ;; esac
  ours_block=("$build/apps/bench_moe_block_cuda" --benchmark_format=csv --benchmark_min_time=1
    --benchmark_filter='^(moe_block_bf16|cublas_gemm_bf16)/paper_h4096_E8_top2_8192tok(/|$)')
  block_name="moe_block_bf16/paper_h4096_E8_top2_8192tok"
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm \
    --format=csv,noheader >"$raw/device.txt"
fi
# NO_VCS_VERSION: Megatron-Core's version would carry the hash of a git tree it sits in.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1 NO_VCS_VERSION=1
{
  echo "budget=$budget"
  echo "dry=$dry"
  echo "block_name=$block_name"
  echo "cluster=$cluster"
} >"$raw/session.env"

# 1. env: versions, the carried wheels (installed into a temporary folder, removed at the end).
site=$(mktemp -d -t ted-peers-site.XXXXXX)
trap 'rm -rf "$site"' EXIT
env_step() {
  cat "$raw/device.txt"
  peers/install_wheels.sh "${TED_PEERS_WHEELS:-$root/.whl}" "$site" "$python" >/dev/null
  local rc=$?
  [ "$rc" = 77 ] && echo "no carried wheels: the peers that need them will say 'not loaded'"
  PYTHONPATH=$site "$python" - >"$raw/versions.txt" 2>>"$raw/env.log" <<'PY'
import contextlib, importlib, platform, sys
found = [("python", platform.python_version())]
with contextlib.redirect_stdout(sys.stderr):  # the libraries' own prints stay out of the file
    for name in ("torch", "triton", "deepspeed", "megatron.core", "tutel", "pydantic"):
        try:
            module = importlib.import_module(name)
            version = getattr(module, "__version__", "?")
        except Exception as error:  # absent or broken: said, not fatal
            version = f"not loaded ({type(error).__name__})"
        found.append((name, version))
    import torch
    found.append(("torch.cuda", torch.version.cuda))
for name, version in found:
    print(f"{name},{version}")
PY
  cat "$raw/versions.txt"
  [ "$rc" = 0 ] || [ "$rc" = 77 ]
}
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# Tutel's extension links libnvrtc and libnccl by name: those of PyTorch's own CUDA wheels.
nvidia_libs=$("$python" -c "import glob, os, nvidia; print(':'.join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(os.path.join(d, '*', 'lib', 'lib*.so*'))})))" 2>/dev/null)
[ -n "$nvidia_libs" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nvidia_libs"
wanted env && run env 20 60 env_step

# 2. checks: gpu_check.sh on the packed build; the measurements after it keep their planned time.
core=$((40 + 150 + 80 + 80 + 15 + 5))  # step, block round 1, the two peers' steps, rates, project
checks_step() {
  if [ "$dry" = 1 ]; then  # the emulated GPU: a build without CUDA has nothing to check (exit 2)
    TED_GPU_CHECK_EMULATED=1 TED_GPU_CHECK_BENCH=0 TED_GPU_CHECK_STEPS=3 \
      TED_GPU_CHECK_TESTS=${TED_SESSION_DRY_TESTS:-'^cuda_kernels_emulated$'} \
      TED_GPU_BUILD_DIR=$build scripts/gpu/gpu_check.sh "$raw/checks"
    local rc=$?
    [ "$rc" = 2 ] && echo "dry run: gpu_check.sh had nothing to check here (exit 2: a build without CUDA)" && return 0
    return $rc
  else
    TED_GPU_CHECK_PREBUILT=1 TED_GPU_CHECK_BENCH=0 TED_GPU_CHECK_JOBS=16 \
      TED_GPU_BUILD_DIR=$build scripts/gpu/gpu_check.sh "$raw/checks"
  fi
}
if wanted checks; then
  cap=$(($(left) - reserve - core))
  [ -n "$only" ] && cap=$(($(left) - reserve))
  [ "$cap" -lt 60 ] && cap=60
  run checks 60 "$cap" checks_step
fi

# 3. step: our 1.35B step, its memory three ways.
step_ours() {  # $1: tag
  local poll=""
  if [ "$dry" = 0 ]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 >"$raw/memory_idle_$1.txt"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$raw/memory_poll_$1.txt" &
    poll=$!
  fi
  "$build/apps/ted_train" -c experiments/train/gpu-1b.yaml "${train_args[@]}" --steps 8 \
    --csv "$raw/train_ours_$1.csv" >"$raw/train_ours_$1.log" 2>&1
  local rc=$?
  [ -n "$poll" ] && kill "$poll" 2>/dev/null
  grep -E '^# (ted_train|model|peak)|^step' "$raw/train_ours_$1.log" | tail -6
  return $rc
}
wanted step && run step 40 120 step_ours 1

# 4. block: ours and the peers alternating, round by round.
block_round() {  # $1: round
  "${ours_block[@]}" >"$raw/ours_$1.csv" 2>"$raw/ours_$1.log"
  local rc=$?
  grep -vE '^#' "$raw/ours_$1.csv" | cut -c1-160 | head -4
  "$python" peers/moe_block.py --systems "$peers_systems" "${device_arg[@]}" "${peers_extra[@]}" \
    --rounds 2 >"$raw/peers_$1.csv" 2>"$raw/peers_$1.log" || rc=1
  cat "$raw/peers_$1.csv"
  return $rc
}
wanted block && run block 150 300 block_round 1

# 5. peers_step: Megatron-Core (SDPA core attention) and DeepSpeed-MoE on the same step.
peers_step() {
  local rc=0
  # Megatron with SDPA as its core attention: the fused attention a user gets from Transformer
  # Engine, which is not carried (its unfused local attention is in the block's comparison).
  "$python" peers/train_step.py --system megatron --sdpa -c experiments/train/gpu-1b.yaml "${tiny[@]}" \
    "${device_arg[@]}" --steps 8 --csv "$raw/train_megatron.csv" >"$raw/train_megatron.log" 2>&1 || rc=1
  tail -3 "$raw/train_megatron.log"
  "$python" peers/train_step.py --system deepspeed -c experiments/train/gpu-1b.yaml "${tiny[@]}" \
    "${device_arg[@]}" --steps 8 --csv "$raw/train_deepspeed.csv" >"$raw/train_deepspeed.log" 2>&1 || rc=1
  tail -3 "$raw/train_deepspeed.log"
  return $rc
}
wanted peers_step && run peers_step 160 300 peers_step

# 6. rates: the GEMM rate and copy bandwidth, into a measured copy of the cluster file.
rates_step() {
  "$python" peers/device_rates.py "${device_arg[@]}" --cluster "$cluster" \
    --csv "$raw/rates.csv" --write-cluster "$raw/gpu_cluster.yaml"
}
wanted rates && run rates 15 60 rates_step

# 7. project: the step by the projection, with the committed and the measured cluster file.
project_step() {
  local rc=0 file
  for file in "$cluster" "$raw/gpu_cluster.yaml"; do
    [ -f "$file" ] || continue
    local tag=committed
    [ "$file" = "$raw/gpu_cluster.yaml" ] && tag=measured
    rm -f "$raw/projection_$tag.csv"
    "$build/apps/ted_project" experiment -c experiments/train/gpu-1b.yaml --cluster "$file" \
      --set experiment=ablation --set systems=ted-baseline --set layout.tp=1 --set layout.ep=1 \
      --set layout.dp=1 "${tiny[@]}" --csv "$raw/projection_$tag.csv" || rc=1
  done
  return $rc
}
wanted project && run project 5 60 project_step

# 8. extra: while the budget lasts.
if wanted extra; then
  for round in $(seq 2 "$rounds"); do run "block_$round" 120 240 block_round "$round"; done
  run step_2 40 120 step_ours 2
  if [ "$dry" = 0 ]; then
    ncu_step() {
      local ncu
      ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      [ -x "$ncu" ] || { echo "ncu not found"; return 1; }
      "$ncu" --profile-from-start off --clock-control none --replay-mode application \
        --metrics gpu__time_duration.sum --csv --page raw --print-units base \
        "$build/apps/bench_moe_block_cuda" --profile-step=paper_h4096_E8_top2_8192tok \
        >"$raw/ncu.csv" 2>"$raw/ncu.log"
    }
    run ncu 90 200 ncu_step
  fi
fi

# 9. report.
stamp "report"
report_args=("$raw" "$report_dir" --session)
[ "$dry" = 1 ] && report_args+=(--dry-run)
python3 scripts/gpu/gpu_report.py "${report_args[@]}" >"$raw/report.txt" 2>&1 || failed=1
tail -3 "$raw/report.txt"
stamp "done: $(grep -c ',passed$' "$raw/steps.csv") step(s) passed, $(grep -c 'skipped' "$raw/steps.csv") skipped, $(grep -cE ',(failed|timed out)$' "$raw/steps.csv") failed; raw outputs in $raw"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp -f "$raw/steps.csv" "$OUT/"
  cp -f "$(ls -t "$report_dir"/*-session.md | head -1)" "$(ls -t "$report_dir"/*-session.csv | head -1)" "$OUT/" 2>/dev/null
  sleep 1  # the log's tee catches up
  cp -f "$raw/session.log" "$OUT/"
  tar -czf "$OUT/gpu_session_raw.tar.gz" -C "$raw" . && echo "raw outputs: \$OUT/gpu_session_raw.tar.gz" &&
    rm -rf "$raw"
fi
exit "$failed"
