#!/usr/bin/env bash
# Memory per rank by category, three ways, for the same model and layout: our tracking
# allocator (ted_ablation, one step, the largest rank's peak per category), DeepSpeed-TED's own
# tensors (run.py --systems, memory_count.py) and our projection (ted_project experiment), all
# three with the vocabulary-parallel tied embedding (model.tie_embeddings, as Megatron's GPT
# that DeepSpeed-TED trained). The model is
# experiments/ablation/cpu.yaml's (h128, L4, 8 experts, checkpointing), system ted+dtd
# (DeepSpeed: tensor-parallel experts with its DTD), fp32 on CPU ranks, at several layouts of 2
# to 8 ranks. A layout is TxEpxD, optionally with a variant: -whole (parallel.split_experts
# false: DeepSpeed's whole experts), -bf16 (run.dtype bf16 on both sides, fp32 masters and Adam
# state; ours' gradients fp32, training.grad_dtype's default) or -bf16g (the same with ours'
# gradients in bf16, training.grad_dtype bf16, as DeepSpeed keeps them). Writes
# results/deepspeed/memory_cpu.csv (one row per layout, side and category) and
# results/deepspeed/memory_cpu.md (memory_table.py: the tables).
#   baselines/deepspeed/memory_table.sh                    # the layouts below (about 12 min)
#   LAYOUTS="2x2x1 2x1x2-whole" baselines/deepspeed/memory_table.sh
#   KEEP_DEEPSPEED=1 baselines/deepspeed/memory_table.sh  # ours and the projection anew, the
#                                                          # DeepSpeed runs already there kept
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
ted_prepare >/dev/null
out=${TED_RESULTS:-results}/deepspeed
work=$out/memory_runs
mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
config=experiments/ablation/cpu.yaml
system=${SYSTEM:-ted+dtd}
for layout in ${LAYOUTS:-2x1x1 2x2x1 2x1x2 4x2x1 2x2x2 2x2x1-whole 2x2x1-bf16 2x2x1-bf16g}; do
  IFS=x read -r tp ep dp <<<"${layout%-*}"
  ranks=$((tp * ep * dp))
  set_layout=(--set layout.tp="$tp" --set layout.ep="$ep" --set layout.dp="$dp"
    --set systems="$system" --set model.tie_embeddings=true)
  case $layout in
    *-whole) set_layout+=(--set parallel.split_experts=false) ;;
    *-bf16) set_layout+=(--set run.dtype=bf16) ;;
    *-bf16g) set_layout+=(--set run.dtype=bf16 --set training.grad_dtype=bf16) ;;
    *-*) echo "memory_table.sh: unknown variant in '$layout' (-whole, -bf16, -bf16g)" >&2
      exit 2 ;;
  esac
  echo "== $layout: T=$tp Ep=$ep D=$dp ($ranks ranks)"
  rm -f "$work/ours_$layout.csv" "$work/projection_$layout.csv" "$work/ours_$layout.txt" \
    "$work/projection_$layout.txt" "$work/tied_$layout.csv"
  [ -n "${KEEP_DEEPSPEED:-}" ] && [ -s "$work/deepspeed_$layout.csv" ] ||
    rm -f "$work/deepspeed_$layout.csv"
  # stdout kept: its progress line says what of the activations is kept for backward
  mpirun -n "$ranks" --oversubscribe "$TED_BUILD/apps/ted_ablation" -c "$config" \
    "${set_layout[@]}" --iters 0 --csv "$work/ours_$layout.csv" >"$work/ours_$layout.txt"
  [ -s "$work/deepspeed_$layout.csv" ] ||
    baselines/deepspeed/launch.sh -n "$ranks" -c "$config" "${set_layout[@]}" --systems all \
      --iters 0 --csv "$work/deepspeed_$layout.csv" >/dev/null 2>"$work/.stderr" ||
    { tail -20 "$work/.stderr" >&2; exit 1; }
  "$TED_BUILD/apps/ted_project" experiment -c "$config" --cluster experiments/clusters/cpu.yaml \
    "${set_layout[@]}" --csv "$work/projection_$layout.csv" >"$work/projection_$layout.txt"
done
rm -f "$work/.stderr"
/usr/bin/python3 baselines/deepspeed/memory_table.py "$work" "$out/memory_cpu.csv" \
  "$out/memory_cpu.md"
