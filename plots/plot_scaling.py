#!/usr/bin/python3
"""Weak or strong scaling: time per iteration and GFLOP/s per rank (the CSV's tflops_per_rank
x 1000) against the rank count, one line per system, with the ideal: the first point's rate held
at every point, so the ideal time follows each point's work per rank (GFLOP per rank per step,
rate x time; weak scaling grows the model faster than the ranks, strong scaling splits it).
Rows of the DeepSpeed baseline (baselines/deepspeed, another CSV) are drawn dashed beside ours;
their rate counts model FLOPs (README's formula), ours the GEMMs run. Several runs in a CSV:
the latest row of each point (the title says so), or --run ID.

    /usr/bin/python3 plots/plot_scaling.py results/weak_scaling/cpu.csv plots/figures/weak_scaling_cpu.png
    /usr/bin/python3 plots/plot_scaling.py results/weak_scaling/cpu.csv \
        results/weak_scaling/deepspeed_cpu.csv plots/figures/weak_scaling_cpu.png
"""
import sys

from plotlib import (is_baseline, latest, oversubscribed_note, read_rows, run,  # first: Agg
                     selection_note)

import matplotlib.pyplot as plt  # noqa: E402


def draw(inputs):
    rows = latest([r for path in inputs for r in read_rows(path)],
                  ["system", "G", "T", "Ep", "D", "model"])
    experiment = rows[0]["experiment"]
    weak = experiment == "weak_scaling"
    figure, (times, rates) = plt.subplots(1, 2, figsize=(11, 4.6))
    for system in dict.fromkeys(r["system"] for r in rows):
        points = sorted((r for r in rows if r["system"] == system and r["time_ms_median"]),
                        key=lambda r: int(r["G"]))
        if not points:
            continue
        ranks = [int(r["G"]) for r in points]
        time = [float(r["time_ms_median"]) for r in points]
        rate = [float(r["tflops_per_rank"]) * 1e3 for r in points]  # GFLOP/s
        work = [g * t * 1e-3 for g, t in zip(rate, time)]  # GFLOP per rank per step
        style, name = ("s--", f"{system} (model FLOPs)") if is_baseline(points[0]) else ("o-", system)
        line, = times.plot(ranks, time, style, label=system)
        rates.plot(ranks, rate, style, color=line.get_color(), label=name)
        ideal_time = [time[0] * w / work[0] for w in work]  # the first point's rate
        times.plot(ranks, ideal_time, ":", color=line.get_color(),
                   label=f"{system}, ideal (work per rank x{work[-1] / work[0]:.2g})")
        rates.plot(ranks, [rate[0]] * len(ranks), ":", color=line.get_color(),
                   label=f"{system}, ideal")
    labels = {int(r["G"]): r["model"] for r in rows}
    for axis in (times, rates):
        axis.set_xscale("log", base=2)
        axis.set_xticks(sorted(labels))
        axis.set_xticklabels([f"{g}\n{labels[g]}" if weak else str(g) for g in sorted(labels)],
                             fontsize=8)
        axis.set_xlabel("ranks G" + (" (and base model)" if weak else ""))
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    times.set_ylabel("time per iteration (ms, median)")
    rates.set_ylabel("GFLOP/s per rank (GEMMs; tflops_per_rank x 1000)")
    first = next((r for r in rows if not is_baseline(r)), rows[0])
    what = "Weak scaling" if weak else f"Strong scaling of {first['model']}"
    notes = [n for n in (oversubscribed_note(rows), selection_note()) if n]
    figure.suptitle("\n".join([f"{what}, {first['backend']} {first['dtype']}, "
                               f"revision {first['git_revision']}"] + notes), fontsize=10)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
