#!/usr/bin/python3
"""Weak or strong scaling: time per iteration and TFLOP/s per rank against the rank count, one
line per system, with the ideal (weak: flat time and rate; strong: time falling as 1/G, flat
rate), from the first point of each system. Rows of the DeepSpeed baseline (baselines/deepspeed,
another CSV) are drawn dashed beside ours; their rate counts model FLOPs (README's formula), ours
the GEMMs run.

    /usr/bin/python3 plots/plot_scaling.py results/weak_scaling/cpu.csv plots/weak_scaling_cpu.png
    /usr/bin/python3 plots/plot_scaling.py results/weak_scaling/cpu.csv \
        results/weak_scaling/deepspeed_cpu.csv plots/weak_scaling_cpu.png
"""
import sys

from plotlib import is_baseline, latest, read_rows, run  # first: selects the Agg backend

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
        rate = [float(r["tflops_per_rank"]) * 1e3 for r in points]
        style, name = ("s--", f"{system} (model FLOPs)") if is_baseline(points[0]) else ("o-", system)
        line, = times.plot(ranks, time, style, label=system)
        rates.plot(ranks, rate, style, color=line.get_color(), label=name)
        ideal_time = [time[0]] * len(ranks) if weak else [time[0] * ranks[0] / g for g in ranks]
        times.plot(ranks, ideal_time, ":", color=line.get_color(), label=f"{system}, ideal")
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
    rates.set_ylabel("GFLOP/s per rank (GEMMs)")
    first = next((r for r in rows if not is_baseline(r)), rows[0])
    what = "Weak scaling" if weak else f"Strong scaling of {first['model']}"
    figure.suptitle(f"{what}, {first['backend']} {first['dtype']}, "
                    f"revision {first['git_revision']}", fontsize=10)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
