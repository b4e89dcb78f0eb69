#!/usr/bin/python3
"""The memory figure, from the tracking allocator's peaks (max over ranks) or the memory
model's (projected rows): left, the base
model's peak bytes per rank by category for each layout and system; right, the peak of each
model of the growing family against its size, TED against DeepSpeed-MoE, with the budget.
Points never run because their projected peak did not fit the device (status "not run: ...")
have no peaks to draw and are left out.

    /usr/bin/python3 plots/plot_memory.py results/memory/cpu.csv plots/figures/memory_cpu.png
"""
import sys

from plotlib import latest, mib, read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402

CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "communication",
              "cac_stash", "optimizer_temporaries"]


def draw(inputs):
    rows = latest([r for path in inputs for r in read_rows(path)],
                  ["system", "G", "T", "Ep", "D", "model", "budget_bytes"])
    rows = [r for r in rows if not r.get("status", "").startswith("not run")]
    layouts = [r for r in rows if not r["budget_bytes"]]
    family = [r for r in rows if r["budget_bytes"]]
    figure, (stack, fit) = plt.subplots(1, 2, figsize=(12, 5))
    x = range(len(layouts))
    bottom = [0.0] * len(layouts)
    for category in CATEGORIES:
        values = [mib(r[f"peak_{category}_bytes"]) for r in layouts]
        stack.bar(x, values, bottom=bottom, label=category.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    stack.set_xticks(list(x))
    stack.set_xticklabels([f"{r['system']}\nT={r['T']} Ep={r['Ep']}\nD={r['D']}" for r in layouts],
                          fontsize=7)
    stack.set_ylabel("peak bytes per rank (MiB), by category")
    stack.set_title(f"{layouts[0]['model'] if layouts else ''}: peaks by category", fontsize=10)
    stack.legend(fontsize=7)
    stack.grid(True, axis="y", alpha=0.3)
    if family:
        budget = mib(family[0]["budget_bytes"])
        for system in dict.fromkeys(r["system"] for r in family):
            points = sorted((r for r in family if r["system"] == system),
                            key=lambda r: int(r["parameters"]))
            sizes = [int(r["parameters"]) / 1e6 for r in points]
            peaks = [mib(r["peak_total_bytes"]) for r in points]
            line, = fit.plot(sizes, peaks, "o-", label=system)
            fitting = [r for r in points if r["fits"] == "1"]
            if fitting:
                best = fitting[-1]
                fit.annotate(f"largest that fits: {best['model']}",
                             (int(best["parameters"]) / 1e6, mib(best["peak_total_bytes"])),
                             textcoords="offset points", xytext=(-20, 14), fontsize=8,
                             color=line.get_color())
        fit.axhline(budget, color="red", ls="--", label=f"budget {budget:.0f} MiB per rank")
        fit.set_xlabel("model parameters (millions, all experts)")
        fit.set_ylabel("peak bytes per rank (MiB)")
        first = family[0]
        fit.set_title(f"growing base models on T={first['T']} Ep={first['Ep']} D={first['D']} "
                      "(DeepSpeed-MoE: T=1)", fontsize=10)
        fit.legend(fontsize=8)
        fit.grid(True, alpha=0.3)
    source = rows[0]["backend"]
    how = (f"projected by the memory model on {source.split(':', 1)[1]}"
           if source.startswith("projected") else "tracking allocator, max over ranks")
    figure.suptitle(f"Memory per rank ({how}), {rows[0]['dtype']}, "
                    f"revision {rows[0]['git_revision']}", fontsize=10)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
