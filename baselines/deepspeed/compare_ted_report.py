"""The report of compare_ted.sh, as Markdown: per system of ours, the median time per step of
each side over the rounds and the ratio ours / DeepSpeed-TED (each round's; their median and
range), and the same at the 10th percentile.
    compare_ted_report.py <results dir> <rounds> <cpu> <cores> <versions> <revision> [exclusive]
"""
import csv
import statistics
import sys

out, rounds, cpu, cores, versions, revision = sys.argv[1:7]
exclusive = len(sys.argv) > 7 and sys.argv[7] == "exclusive"
rounds = int(rounds)
PAIRS = (("ted-baseline", "ted-nodtd"), ("ted+dtd", "ted"))
SKIP = 5  # training steps left out of each round's median (start-up)


def rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def spread(values, digits=3):
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}-{max(values):.{digits}f})")


def percentile(values, q):
    ordered = sorted(values)
    position = q / 100 * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


ours, theirs = rows(f"{out}/ted_ablation_ours.csv"), rows(f"{out}/ted_ablation_deepspeed.csv")
quiet_note = ("every round under an exclusive lock of the file the machine's other sessions "
              "lock (shared) for their builds and tests, so none of those ran while it was timed"
              if exclusive else "shared with other work")
print(f"# Ours against DeepSpeed-TED on this machine\n\nCPU: {cpu}, {cores} cores, "
      f"{quiet_note}; the rounds alternate which side goes first. {versions}. Revision "
      f"{revision}. {rounds} rounds; fp32, one thread per rank, ZeRO-1 on both sides, the same "
      "layout, model, tokens and initial weights. Ratios below 1: ours takes less time.\n")
print("## experiments/ablation/cpu.yaml on 4 ranks, T=2 Ep=2 D=1: ted_ablation against run.py "
      "--systems\n")
print("Time per iteration: each round's median (and 10th percentile) over 5 timed iterations "
      "after 1 warm-up, the slowest rank's, from a barrier. Both sides checkpoint every block; "
      "neither has CAC here.\n")
print("| ours | DeepSpeed | ours ms | DeepSpeed ms | ours / DeepSpeed: median (range) | "
      "p10 ratio: median (range) | all-to-all ms, ours / DeepSpeed |")
print("|---|---|---|---|---|---|---|")
for system, config in PAIRS:
    mine = [r for r in ours if r["system"] == system]
    ds = [r for r in theirs if r["system"].endswith("-" + config)]
    assert len(mine) == len(ds) == rounds, f"{system}: one row per round on each side"
    times = [float(r["time_ms_median"]) for r in mine]
    ds_times = [float(r["time_ms_median"]) for r in ds]
    ratios = [a / b for a, b in zip(times, ds_times)]
    quiet = [float(a["time_ms_p10"]) / float(b["time_ms_p10"]) for a, b in zip(mine, ds)]
    a2a = (statistics.median(float(r["all_to_all_ms"]) for r in mine),
           statistics.median(float(r["all_to_all_ms"]) for r in ds))
    print(f"| {system} | {ds[0]['system']} | {statistics.median(times):.1f} | "
          f"{statistics.median(ds_times):.1f} | {spread(ratios)} | {spread(quiet)} | "
          f"{a2a[0]:.1f} / {a2a[1]:.1f} |")
print()
print(f"## experiments/train/tiny-cpu.yaml on 4 ranks, T=2 Ep=2, DTD: ted_train --dtd against "
      f"run.py\n\nEach round's median (and 10th percentile) step time over the steps after the "
      f"first {SKIP}.\n")
print("| round | ours ms | DeepSpeed ms | ours / DeepSpeed | p10 ratio |")
print("|---|---|---|---|---|")
ratios, quiet = [], []
for r in range(1, rounds + 1):
    mine = [float(x["seconds"]) * 1e3 for x in rows(f"{out}/ted_train_ours_round{r}.csv")][SKIP:]
    ds = [float(x["seconds"]) * 1e3 for x in rows(f"{out}/ted_train_deepspeed_round{r}.csv")][SKIP:]
    ratios.append(statistics.median(mine) / statistics.median(ds))
    quiet.append(percentile(mine, 10) / percentile(ds, 10))
    print(f"| {r} | {statistics.median(mine):.2f} | {statistics.median(ds):.2f} | "
          f"{ratios[-1]:.3f} | {quiet[-1]:.3f} |")
print(f"\nOver the rounds: ours / DeepSpeed {spread(ratios)}, p10 ratio {spread(quiet)}.")
