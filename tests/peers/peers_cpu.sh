#!/usr/bin/env bash
# The peers' CPU check (label peers, outside the default run: its environment is minutes of
# downloads the first time): in Python 3.12 with PyTorch 2.11 as on the GPU machine
# (peers/setup.sh), the carried wheels installed as the GPU machine installs them
# (peers/install_wheels.sh; fetched into the work folder when the tree has none), then
#   - peers/moe_block.py at the tiny size in fp32, checks only: eager, compile, DeepSpeed-MoE,
#     Megatron-Core (its unfused attention and SDPA) each equal to our block (relative error
#     <= 1e-4; DeepSpeed at capacity factor 1 with drops, Megatron without drops); Tutel either
#     passes or is 'not loaded' (its extension needs the CUDA driver)
#   - the same timed in bf16, two alternated rounds: every loaded system has a time
#   - peers/train_step.py, Megatron-Core's GPTModel and DeepSpeed-MoE (the suite's GPT of
#     baselines/deepspeed/gpt_moe.py on DeepSpeed's engine) on gpu-1b.yaml's layers, tiny: finite losses, the first within 5% of
#     ln(vocab); parameters: DeepSpeed's equal ours, Megatron's ours less exactly the biases;
#     Megatron with SDPA as its core attention gives its unfused attention's losses
#   - peers/device_rates.py on the CPU and its measured copy of the H100 cluster file, which
#     ted_project reads
# Skipped (77) without a registry or a Python 3.12, or with TED_SKIP_PEERS set.
#   peers_cpu.sh <source dir> <build dir> <work dir>
set -euo pipefail
source_dir=$1 build=$2 work=$3
[ -n "${TED_SKIP_PEERS:-}" ] && { echo "SKIPPED: TED_SKIP_PEERS is set"; exit 77; }
rc=0
venv=$("$source_dir/peers/setup.sh" | tail -1) || rc=$?
[ "$rc" = 3 ] && { echo "SKIPPED: no package registry or no Python 3.12 for the peers' environment"; exit 77; }
[ "$rc" = 0 ] || exit "$rc"
rm -rf "$work"
mkdir -p "$work"
wheels=$source_dir/.whl
if ! ls "$wheels"/deepspeed-*.whl "$wheels"/megatron_core-*.whl >/dev/null 2>&1; then
  wheels=$work/wheels
  rc=0
  "$source_dir/peers/fetch_wheels.sh" "$wheels" || rc=$?
  [ "$rc" = 3 ] && { echo "SKIPPED: no package registry to fetch the peers' wheels"; exit 77; }
  [ "$rc" = 0 ] || exit "$rc"
fi
python=$venv/bin/python
"$source_dir/peers/install_wheels.sh" "$wheels" "$work/site" "$python" >/dev/null
export PYTHONPATH=$work/site OMP_NUM_THREADS=1 TORCH_EXTENSIONS_DIR=$work/torch_extensions NO_VCS_VERSION=1
cd "$source_dir"
echo "== checks: every peer against our block (tiny, fp32)"
"$python" peers/moe_block.py --tiny --device cpu --dtype fp32 --check-only \
  --systems eager,compile,deepspeed,megatron,megatron-sdpa,tutel >"$work/checks.csv" 2>"$work/checks.log" ||
  { tail -30 "$work/checks.log"; cat "$work/checks.csv"; exit 1; }
cat "$work/checks.csv"
echo "== timed: two alternated rounds (tiny, bf16)"
"$python" peers/moe_block.py --tiny --device cpu --dtype bf16 --warmup 1 --iters 2 --rounds 2 \
  --systems eager,deepspeed,megatron,megatron-sdpa >"$work/timed.csv" 2>"$work/timed.log" ||
  { tail -30 "$work/timed.log"; exit 1; }
cat "$work/timed.csv"
tiny=(--set model.hidden=64 --set model.heads=4 --set model.vocab=256 --set model.seq_len=64
  --set model.layers=4 --set data.micro_batch=2)
for system in megatron megatron-sdpa deepspeed; do
  echo "== the training step: $system"
  "$python" peers/train_step.py --system "${system%-sdpa}" $([ "$system" = megatron-sdpa ] && echo --sdpa) \
    -c experiments/train/gpu-1b.yaml "${tiny[@]}" --device cpu --dtype fp32 --steps 3 \
    --csv "$work/train_$system.csv" >"$work/train_$system.log" 2>&1 ||
    { tail -30 "$work/train_$system.log"; exit 1; }
  cat "$work/train_$system.csv"
done
echo "== the device's rates and the measured cluster file"
"$python" peers/device_rates.py --device cpu --dtype fp32 --cluster experiments/clusters/h100-sxm-1gpu.yaml \
  --csv "$work/rates.csv" --write-cluster "$work/cluster.yaml"
"$build/apps/ted_project" experiment -c experiments/train/gpu-1b.yaml --cluster "$work/cluster.yaml" \
  --set experiment=ablation --set systems=ted-baseline --set layout.tp=1 --set layout.ep=1 \
  --set layout.dp=1 "${tiny[@]}" --csv "$work/projection.csv" >/dev/null
/usr/bin/python3 "$source_dir/tests/peers/check_peers.py" "$work"
