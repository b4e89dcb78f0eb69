#!/usr/bin/python3
"""The projection against measurement: predicted against measured time per iteration for every
measured point (left, with the ideal diagonal and a +/-20% band), and each point's relative
error (right), from ted_project validate's CSV.

    /usr/bin/python3 plots/plot_validation.py results/projection/validation_cpu.csv plots/figures/projection_validation_cpu.png
"""
import statistics
import sys

from plotlib import read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402


def draw(inputs):
    rows = [r for path in inputs for r in read_rows(path)]
    figure, (scatter, errors) = plt.subplots(1, 2, figsize=(12, 4.8),
                                             gridspec_kw={"width_ratios": [1, 1.4]})
    for experiment in dict.fromkeys(r["experiment"] for r in rows):
        points = [r for r in rows if r["experiment"] == experiment]
        scatter.scatter([float(r["measured_ms"]) for r in points],
                        [float(r["predicted_ms"]) for r in points], label=experiment)
    top = max(max(float(r["measured_ms"]), float(r["predicted_ms"])) for r in rows) * 1.1
    scatter.plot([0, top], [0, top], color="gray", lw=1, label="predicted = measured")
    scatter.fill_between([0, top], [0, 0.8 * top], [0, 1.2 * top], color="gray", alpha=0.1,
                         label="within 20%")
    scatter.set_xlim(0, top)
    scatter.set_ylim(0, top)
    scatter.set_xlabel("measured time per iteration (ms, median)")
    scatter.set_ylabel("predicted time per iteration (ms)")
    scatter.legend(fontsize=8)
    scatter.grid(True, alpha=0.3)
    labels = [f"{r['experiment'][:6]} {r['system']}\nG={r['G']} {r['model']}" for r in rows]
    values = [100 * float(r["relative_error"]) for r in rows]
    errors.bar(range(len(rows)), values, color=["#c44e52" if v > 0 else "#4c72b0" for v in values])
    errors.axhline(0, color="black", lw=0.8)
    errors.set_xticks(range(len(rows)))
    errors.set_xticklabels(labels, rotation=70, ha="right", fontsize=6)
    errors.set_ylabel("relative error of the prediction (%)")
    errors.grid(True, axis="y", alpha=0.3)
    median = statistics.median(abs(v) for v in values)
    figure.suptitle(f"Projection against measurement on {rows[0]['cluster']}: median |error| "
                    f"{median:.1f}% over {len(rows)} points, revision {rows[0]['git_revision']}",
                    fontsize=10)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
