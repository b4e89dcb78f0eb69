#!/usr/bin/python3
"""The ablation figure: time per iteration of each system split into computation and
communication (median; whiskers p10-p90 of the total), and what the ledger says each moved:
all-to-all bytes per rank per iteration and the number of all-to-alls. Rows of the DeepSpeed
baseline (baselines/deepspeed, another CSV) stand beside ours: their total is one hatched bar
(DeepSpeed's time is not split), their all-to-alls are what its MoE layer sent. A CSV that
several runs appended to is drawn from the latest row of each point (the title says so), or
from one run with --run ID (column run_id). Where the ranks shared CPU cores (column
ranks_per_core above 1), the title says how many per core and the communication part is named
for what it then holds: waiting for ranks the OS has not scheduled as well as transfers.

    /usr/bin/python3 plots/plot_ablation.py results/ablation/cpu.csv plots/figures/ablation_cpu.png
    /usr/bin/python3 plots/plot_ablation.py results/ablation/cpu.csv \
        results/ablation/deepspeed_cpu.csv plots/figures/ablation_cpu.png
    /usr/bin/python3 plots/plot_ablation.py --run RUN_ID results/ablation/cpu.csv plots/figures/ablation_cpu.png
"""
import sys

from plotlib import (is_baseline, latest, mib, oversubscribed_note, read_rows,  # first: Agg
                     readable_count, run, selection_note)

import matplotlib.pyplot as plt  # noqa: E402


def draw(inputs):
    rows = latest([r for path in inputs for r in read_rows(path)],
                  ["system", "G", "T", "Ep", "D", "model"])
    rows = [r for r in rows if r["time_ms_median"]]  # points measured with timed iterations
    # Ours split the time; the baseline's total is one bar.
    split = [not is_baseline(r) for r in rows]
    first = next(r for r, s in zip(rows, split) if s) if any(split) else rows[0]
    layout = ("T", "Ep", "D")  # a row laid out unlike the title's says how (deepspeed-moe: T=1)
    names = [r["system"] + ("" if all(r[k] == first[k] for k in layout) else
                            f"\nT={r['T']} Ep={r['Ep']} D={r['D']}") for r in rows]
    compute = [float(r["compute_ms"]) if s else 0.0 for r, s in zip(rows, split)]
    comm = [float(r["comm_ms"]) if s else 0.0 for r, s in zip(rows, split)]
    total = [float(r["time_ms_median"]) for r in rows]
    low = [t - float(r["time_ms_p10"]) for t, r in zip(total, rows)]
    high = [float(r["time_ms_p90"]) - t for t, r in zip(total, rows)]
    figure, (times, moved) = plt.subplots(1, 2, figsize=(11, 4.8),
                                          gridspec_kw={"width_ratios": [3, 2]})
    x = range(len(rows))
    times.bar(x, compute, label="computation", color="#4c72b0")
    oversubscribed = oversubscribed_note(rows)
    times.bar(x, comm, bottom=compute, color="#dd8452",
              label="communication (collectives)" if not oversubscribed else
              "in collectives: transfers and waiting\nfor ranks not scheduled (oversubscribed)")
    if not all(split):
        times.bar(x, [0 if s else t for s, t in zip(split, total)], color="#8c8c8c",
                  hatch="//", edgecolor="white", label="DeepSpeed: total (not split)")
    for i, (r, s) in enumerate(zip(rows, split)):
        if not s and r["all_to_all_ms"]:  # what the baseline could time: its all-to-alls
            times.annotate(f"all-to-all\n{float(r['all_to_all_ms']):.0f} ms", (i, total[i] / 2),
                           ha="center", va="center", fontsize=8, color="white")
    times.errorbar(x, total, yerr=[low, high], fmt="none", ecolor="black", capsize=4,
                   label="p10-p90 of the total")
    times.set_xticks(list(x))
    times.set_xticklabels(names, rotation=20, ha="right", fontsize=9)
    times.set_ylabel("time per iteration (ms, median)")
    # Room above the tallest whisker for the legend, so that it covers no bar.
    times.set_ylim(0, max(t + h for t, h in zip(total, high)) * 1.5)
    times.legend(fontsize=8, loc="upper left", ncol=2)
    times.grid(True, axis="y", alpha=0.3)

    a2a = [mib(r["all_to_all_bytes"] or 0) for r in rows]
    bars = moved.bar(x, a2a, color="#55a868")
    for bar, r in zip(bars, rows):
        moved.annotate(f"{r['all_to_all_calls']} calls", (bar.get_x() + bar.get_width() / 2,
                       bar.get_height()), ha="center", va="bottom", fontsize=8)
    moved.set_xticks(list(x))
    moved.set_xticklabels(names, rotation=20, ha="right", fontsize=9)
    moved.set_ylabel("all-to-all bytes sent per rank per iteration (MiB)")
    moved.grid(True, axis="y", alpha=0.3)
    title = (f"Ablation: {first['model']} ({readable_count(first['parameters'])} parameters), "
             f"G={first['G']} T={first['T']} Ep={first['Ep']} D={first['D']}, "
             f"{first['backend']} {first['dtype']}, revision {first['git_revision']}")
    notes = [n for n in (oversubscribed, selection_note()) if n]
    figure.suptitle("\n".join([title] + notes), fontsize=10 if not notes else 9)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
