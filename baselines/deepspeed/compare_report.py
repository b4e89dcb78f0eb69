"""The report of compare.sh, as Markdown: per system the median time per step of each side over
the rounds and the ratio ours / DeepSpeed (each round's ratio; their median and range).
    compare_report.py <results dir> <rounds> <cpu> <cores> <versions> <revision>
"""
import csv
import statistics
import sys

out, rounds, cpu, cores, versions, revision = sys.argv[1:]
rounds = int(rounds)
SYSTEMS = ("deepspeed-moe", "ted-baseline", "ted")
SKIP = 5  # training steps left out of each round's median (start-up)


def rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def spread(values, digits=3):
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def tokens(r):
    return int(r["micro_batch"]) * int(r["micro_batches"]) * int(r["Ep"]) * int(r["D"]) * \
        int(r["seq_len"])


ours, theirs = rows(f"{out}/ablation_ours.csv"), rows(f"{out}/ablation_deepspeed.csv")
assert len(theirs) == rounds and all(
    sum(r["system"] == s for r in ours) == rounds for s in SYSTEMS), "one row per round"
print(f"# Ours against DeepSpeed-MoE on this machine\n\nCPU: {cpu}, {cores} cores, shared with "
      f"other work (the rounds alternate which side goes first). {versions}. Revision "
      f"{revision}. {rounds} rounds; fp32, one thread per rank, ZeRO-1 on both sides. Ratios "
      "below 1: ours takes less time.\n")
print("## experiments/ablation/cpu.yaml on 4 ranks: ted_ablation against run.py\n")
print("Time per iteration: each round's median over 5 timed iterations after 1 warm-up (the "
      "slowest rank's, from a barrier). DeepSpeed runs the deepspeed-moe layout (T=1 Ep=2 D=2); "
      "ted-baseline and ted run T=2 Ep=2 D=1 and so half the tokens per step, hence the "
      "per-token column.\n")
print("The p10 columns compare each round's 10th-percentile iteration, the ones least disturbed "
      "by other work on the machine.\n")
print("| ours | layout | tokens/step | ours ms | DeepSpeed ms | ours / DeepSpeed, time: median "
      "(range) | per token: median (range) | p10 ratio: median (range) |")
print("|---|---|---|---|---|---|---|---|")
ds = [float(r["time_ms_median"]) for r in theirs]
ds_p10 = [float(r["time_ms_p10"]) for r in theirs]
for system in SYSTEMS:
    mine = [r for r in ours if r["system"] == system]
    times = [float(r["time_ms_median"]) for r in mine]
    ratios = [a / b for a, b in zip(times, ds)]
    per_token = [q * tokens(theirs[0]) / tokens(mine[0]) for q in ratios]
    quiet = [float(r["time_ms_p10"]) / b for r, b in zip(mine, ds_p10)]
    print(f"| {system} | T={mine[0]['T']} Ep={mine[0]['Ep']} D={mine[0]['D']} | "
          f"{tokens(mine[0])} | {statistics.median(times):.1f} | {statistics.median(ds):.1f} | "
          f"{spread(ratios)} | {spread(per_token)} | {spread(quiet)} |")
a2a = {s: statistics.median(float(r["all_to_all_ms"]) for r in ours if r["system"] == s)
       for s in SYSTEMS}
print(f"\nExpert all-to-alls, medians: DeepSpeed (gloo) "
      f"{statistics.median(float(r['all_to_all_ms']) for r in theirs):.1f} ms of its "
      f"{statistics.median(ds):.1f} ms; ours (MPI) "
      + ", ".join(f"{s} {ms:.1f} ms" for s, ms in a2a.items()) + ".")
final = {s: statistics.median(float(r["final_loss"]) for r in ours if r["system"] == s)
         for s in SYSTEMS}
print(f"Loss after the 6 steps, medians: DeepSpeed "
      f"{statistics.median(float(r['final_loss']) for r in theirs):.4f}; ours "
      + ", ".join(f"{s} {v:.4f}" for s, v in final.items()) + ".\n")

print("## experiments/train/tiny-cpu.yaml on 2 ranks, Ep=2: ted_train against run.py\n")

def p10(values):
    ordered = sorted(values)
    position = 0.1 * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


mine_ms, ds_ms, quiet = [], [], []
for i in range(1, rounds + 1):
    a = [float(r["seconds"]) for r in rows(f"{out}/train_ours_round{i}.csv")][SKIP:]
    b = [float(r["seconds"]) for r in rows(f"{out}/train_deepspeed_round{i}.csv")][SKIP:]
    mine_ms.append(statistics.median(a) * 1e3)
    ds_ms.append(statistics.median(b) * 1e3)
    quiet.append(p10(a) / p10(b))
steps = len(rows(f"{out}/train_ours_round1.csv"))
print(f"Time per step: each round's median over steps {SKIP + 1}-{steps} (ours: rank 0's step; "
      "DeepSpeed: the slowest rank's, from a barrier); 512 tokens per step on both.\n")
print("| ours ms | DeepSpeed ms | ours / DeepSpeed: median (range) | p10 ratio: median (range) |")
print("|---|---|---|---|")
print(f"| {statistics.median(mine_ms):.2f} | {statistics.median(ds_ms):.2f} | "
      f"{spread([a / b for a, b in zip(mine_ms, ds_ms)])} | {spread(quiet)} |")
first = {side: rows(f"{out}/train_{side}_round1.csv") for side in ("ours", "deepspeed")}
print(f"\nLoss in round 1 over {steps} steps: ours {float(first['ours'][0]['loss']):.4f} -> "
      f"{float(first['ours'][-1]['loss']):.4f}, DeepSpeed "
      f"{float(first['deepspeed'][0]['loss']):.4f} -> "
      f"{float(first['deepspeed'][-1]['loss']):.4f}.\n")
print("## Each round (ms)\n")
print("| round | ablation: ours deepspeed-moe / ted / DeepSpeed | train: ours / DeepSpeed |")
print("|---|---|---|")
by = {s: [float(r["time_ms_median"]) for r in ours if r["system"] == s] for s in SYSTEMS}
for i in range(rounds):
    print(f"| {i + 1} | {by['deepspeed-moe'][i]:.1f} / {by['ted'][i]:.1f} / {ds[i]:.1f} | "
          f"{mine_ms[i]:.2f} / {ds_ms[i]:.2f} |")
