#!/usr/bin/python3
"""Overlap measured and projected: time per iteration of ted and of ted+overlapN (the MoE
exchange in N chunks), the median over the rounds of scripts/comparisons/measure_overlap.sh with their range,
next to the projection's prediction for each; the change against ted, measured and predicted,
above each pair.

    /usr/bin/python3 plots/plot_overlap.py results/ablation/overlap_emulated_2x2-slow.csv \
        results/projection/validation_overlap_2x2-slow.csv plots/figures/ablation_overlap_2x2-slow.png
"""
import statistics
import sys

from plotlib import read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402


def draw(inputs):
    measured_path, predicted_path = inputs
    measured = [r for r in read_rows(measured_path) if r["status"] == "measured"]
    predicted = read_rows(predicted_path)
    systems = list(dict.fromkeys(r["system"] for r in measured))
    times = {s: [float(r["time_ms_median"]) for r in measured if r["system"] == s] for s in systems}
    model = {s: statistics.median(float(r["predicted_ms"]) for r in predicted if r["system"] == s)
             for s in systems}
    median = {s: statistics.median(times[s]) for s in systems}
    base = "ted" if "ted" in systems else systems[0]
    figure, axis = plt.subplots(figsize=(8, 4.8))
    width = 0.38
    for i, s in enumerate(systems):
        low, high = min(times[s]), max(times[s])
        axis.bar(i - width / 2, median[s], width, color="#4c72b0",
                 yerr=[[median[s] - low], [high - median[s]]], capsize=4,
                 label="measured (median, range over rounds)" if i == 0 else None)
        axis.bar(i + width / 2, model[s], width, color="#dd8452",
                 label="projected" if i == 0 else None)
        if s != base:  # the change of time per iteration against ted (negative: faster)
            change = median[s] / median[base] - 1
            change_model = model[s] / model[base] - 1
            axis.annotate(f"measured {change:+.1%}\nprojected {change_model:+.1%}",
                          (i, max(high, model[s])), textcoords="offset points", xytext=(0, 6),
                          ha="center", fontsize=8)
    axis.set_xticks(range(len(systems)))
    axis.set_xticklabels(systems)
    axis.set_ylabel("time per iteration (ms)")
    axis.set_ylim(0, max(max(max(v) for v in times.values()), max(model.values())) * 1.18)
    sample = measured[0]
    axis.set_title(f'Overlap of the expert all-to-all with expert compute: {sample["model"]}, '
                   f'T={sample["T"]} Ep={sample["Ep"]} D={sample["D"]}, {sample["backend"]}, '
                   f'{len(times[base])} rounds', fontsize=8)
    axis.legend(fontsize=8, loc="lower right")
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
