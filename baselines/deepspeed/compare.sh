#!/usr/bin/env bash
# The measured comparison on this machine: our deepspeed-moe, ted-baseline and ted systems
# (ted_ablation, experiments/ablation/cpu.yaml, 4 ranks) and ted_train (tiny-cpu.yaml, 2 ranks,
# Ep = 2) against DeepSpeed on the same configs (baselines/deepspeed/launch.sh), the two sides
# alternating which goes first, for several rounds, so that whatever else the machine does falls
# on both. Prints, and writes to results/deepspeed/cpu_comparison.md, per system the median
# time per step of each side and the ratio ours / DeepSpeed: median over the rounds and range.
# Every round's rows are kept in results/deepspeed/ (CSV).
#   baselines/deepspeed/compare.sh            # 5 rounds
#   ROUNDS=3 TRAIN_STEPS=30 baselines/deepspeed/compare.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
ted_prepare >/dev/null
ROUNDS=${ROUNDS:-5}
TRAIN_STEPS=${TRAIN_STEPS:-30}
out=${TED_RESULTS:-results}/deepspeed
mkdir -p "$out"
rm -f "$out"/ablation_ours.csv "$out"/ablation_deepspeed.csv "$out"/train_*.csv
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1  # 4 ranks on 2 cores: one thread each
ablation=experiments/ablation/cpu.yaml train=experiments/train/tiny-cpu.yaml

ours_ablation() {
  mpirun -n 4 --oversubscribe -q "$TED_BUILD/apps/ted_ablation" -c "$ablation" \
    --set "systems=[deepspeed-moe, ted-baseline, ted]" --csv "$out/ablation_ours.csv" >/dev/null
}
deepspeed_ablation() {
  baselines/deepspeed/launch.sh -n 4 -c "$ablation" --csv "$out/ablation_deepspeed.csv" \
    >/dev/null 2>"$out/.stderr" || { cat "$out/.stderr" >&2; return 1; }
}
ours_train() {  # <round>
  mpirun -n 2 --oversubscribe -q "$TED_BUILD/apps/ted_train" -c "$train" --ep 2 \
    --steps "$TRAIN_STEPS" --csv "$out/train_ours_round$1.csv" >/dev/null
}
deepspeed_train() {  # <round>
  baselines/deepspeed/launch.sh -n 2 -c "$train" --set parallel.ep=2 --steps "$TRAIN_STEPS" \
    --csv "$out/train_deepspeed_round$1.csv" >/dev/null 2>"$out/.stderr" ||
    { cat "$out/.stderr" >&2; return 1; }
}
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS"
  if [ $((round % 2)) -eq 1 ]; then
    ours_ablation && deepspeed_ablation && ours_train "$round" && deepspeed_train "$round"
  else
    deepspeed_ablation && ours_ablation && deepspeed_train "$round" && ours_train "$round"
  fi
done
rm -f "$out/.stderr"

venv=$(baselines/deepspeed/setup.sh | tail -1)
versions=$("$venv/bin/python" -c 'import torch, deepspeed; print(f"DeepSpeed {deepspeed.__version__}, torch {torch.__version__}")')
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
/usr/bin/python3 - "$out" "$ROUNDS" "$cpu" "$(nproc)" "$versions" "$(git rev-parse --short=12 HEAD)" \
  <<'PY' | tee "$out/cpu_comparison.md"
import csv, statistics, sys
out, rounds, cpu, cores, versions, revision = sys.argv[1:]
rounds = int(rounds)
rows = lambda path: list(csv.DictReader(open(path, newline="")))
ours, theirs = rows(f"{out}/ablation_ours.csv"), rows(f"{out}/ablation_deepspeed.csv")
print(f"# Ours against DeepSpeed-MoE on this machine\n\nCPU: {cpu}, {cores} cores (shared with "
      f"other work: rounds alternate the order). {versions}. Revision {revision}. "
      f"{rounds} rounds; fp32, one thread per rank, ZeRO-1 on both sides.\n")
print("## experiments/ablation/cpu.yaml, 4 ranks (ted_ablation against run.py)\n")
print("Time per iteration: each round's median over 5 timed iterations after 1 warm-up (the "
      "slowest rank's). DeepSpeed runs the deepspeed-moe layout (T=1 Ep=2 D=2, 2048 tokens per "
      "step); ted-baseline and ted run T=2 Ep=2 D=1 (1024 tokens per step), so their ratio is "
      "also given per token.\n")
print("| ours | layout | tokens/step | ours ms (median) | DeepSpeed ms (median) | ours / DeepSpeed: "
      "time, median (range) | per token, median (range) |")
print("|---|---|---|---|---|---|---|")
ds = [float(r["time_ms_median"]) for r in theirs]
tokens = lambda r: int(r["micro_batch"]) * int(r["micro_batches"]) * int(r["Ep"]) * int(r["D"]) * \
    int(r["seq_len"])
ds_tokens = tokens(theirs[0])
for system in ("deepspeed-moe", "ted-baseline", "ted"):
    mine = [r for r in ours if r["system"] == system]
    times = [float(r["time_ms_median"]) for r in mine]
    ratios = [a / b for a, b in zip(times, ds)]
    per_token = [q * ds_tokens / tokens(mine[0]) for q in ratios]
    print(f"| {system} | T={mine[0]['T']} Ep={mine[0]['Ep']} D={mine[0]['D']} | {tokens(mine[0])} "
          f"| {statistics.median(times):.1f} | {statistics.median(ds):.1f} | "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
          f"{statistics.median(per_token):.3f} ({min(per_token):.3f}-{max(per_token):.3f}) |")
a2a = [float(r["all_to_all_ms"]) for r in theirs]
print(f"\nDeepSpeed's expert all-to-alls (gloo) took {statistics.median(a2a):.1f} ms of its "
      f"{statistics.median(ds):.1f} ms (medians); ours on MPI: "
      + ", ".join(f"{s} {statistics.median(float(r['all_to_all_ms']) for r in ours if r['system'] == s):.1f} ms"
                  for s in ("deepspeed-moe", "ted-baseline", "ted")) + ".")
print(f"Final losses (step 6): ours deepspeed-moe "
      f"{statistics.median(float(r['final_loss']) for r in ours if r['system'] == 'deepspeed-moe'):.4f}, "
      f"DeepSpeed {statistics.median(float(r['final_loss']) for r in theirs):.4f}.\n")
print("## experiments/train/tiny-cpu.yaml, 2 ranks, Ep=2 (ted_train against run.py)\n")
skip = 5
ratios, mine_ms, ds_ms = [], [], []
for i in range(1, rounds + 1):
    a = [float(r["seconds"]) for r in rows(f"{out}/train_ours_round{i}.csv")][skip:]
    b = [float(r["seconds"]) for r in rows(f"{out}/train_deepspeed_round{i}.csv")][skip:]
    mine_ms.append(statistics.median(a) * 1e3)
    ds_ms.append(statistics.median(b) * 1e3)
    ratios.append(mine_ms[-1] / ds_ms[-1])
steps = len(rows(f"{out}/train_ours_round1.csv"))
print(f"Time per step: each round's median over steps {skip + 1}-{steps} (ours: rank 0's step; "
      "DeepSpeed: the slowest rank's, from a barrier).\n")
print("| ours ms (median) | DeepSpeed ms (median) | ours / DeepSpeed: median (range) |")
print("|---|---|---|")
print(f"| {statistics.median(mine_ms):.2f} | {statistics.median(ds_ms):.2f} | "
      f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
first = lambda path: float(rows(path)[0]["loss"])
last = lambda path: float(rows(path)[-1]["loss"])
print(f"\nLoss, round 1: ours {first(f'{out}/train_ours_round1.csv'):.4f} -> "
      f"{last(f'{out}/train_ours_round1.csv'):.4f}, DeepSpeed "
      f"{first(f'{out}/train_deepspeed_round1.csv'):.4f} -> "
      f"{last(f'{out}/train_deepspeed_round1.csv'):.4f} over {steps} steps.\n")
print("Per round (ms): ablation ours deepspeed-moe / DeepSpeed; train ours / DeepSpeed")
ds_moe = [float(r["time_ms_median"]) for r in ours if r["system"] == "deepspeed-moe"]
for i in range(rounds):
    print(f"- round {i + 1}: {ds_moe[i]:.1f} / {ds[i]:.1f}; {mine_ms[i]:.2f} / {ds_ms[i]:.2f}")
PY
