#!/usr/bin/python3
"""The paper's figures, drawn from the projection's CSVs (ted_project experiment, paper YAMLs)
the way the paper draws them. A projected point whose peak exceeds the GPU's memory (fits 0,
status "projected: does not fit: ...") keeps its time but is drawn hatched or hollow and named
in the title; a row never run (status "not run: ...") is left out and named too.

    plot_paper.py weak     results/projection/weak_scaling_paper_summit.csv plots/figures/paper_weak_scaling.png
    plot_paper.py strong   A.csv [B.csv] plots/figures/paper_strong_scaling.png
    plot_paper.py ablation results/projection/ablation_paper_summit.csv plots/figures/paper_ablation.png
    plot_paper.py largest  results/projection/memory_paper_summit.csv plots/figures/paper_largest_model.png
    plot_paper.py spike    results/projection/memory_paper-spike_thetagpu.csv plots/figures/paper_spike.png
"""
import sys
import textwrap

from plotlib import read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"ted-baseline": "#8c8c8c", "ted": "#4c72b0", "deepspeed-moe": "#dd8452"}
BASES = {2048: "1.3B", 2560: "2.7B", 4096: "6.7B", 5120: "13B"}


def ran(row):
    return row["status"] == "measured" or row["status"].startswith("projected")


def fits(row):
    return row.get("fits", "") != "0"


def base(row):
    return BASES.get(int(row["hidden"]), "h" + row["hidden"])


def missing(rows, names=True):
    def name(r):
        return f'{r["system"]} G={r["G"]} {base(r)}-{r["experts"]}E'
    over = [name(r) for r in rows if ran(r) and not fits(r)]
    never = [name(r) for r in rows if not ran(r)]
    text = []
    if over:
        budget = float(next(r for r in rows if ran(r) and not fits(r))["budget_bytes"]) / 1e9
        text.append(f"hatched/hollow: projected peak above {budget:.0f} GB per GPU" +
                    (": " + ", ".join(over) if names else ""))
    if never:
        text.append("not run: " + ", ".join(never))
    return ". ".join(text)


def headline(prefix, rows, width, names=True):
    """prefix and what missing(rows) says, wrapped to `width` characters a line"""
    return textwrap.fill(" ".join(t for t in (prefix, missing(rows, names)) if t), width)


def weak(inputs):
    rows = [r for p in inputs for r in read_rows(p)]
    figure, (times, peak) = plt.subplots(1, 2, figsize=(12, 4.8))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    gpus = sorted({int(r["G"]) for r in rows})
    width = 0.8 / len(systems)
    labelled = set()
    for i, system in enumerate(systems):
        for g_index, g in enumerate(gpus):
            row = [r for r in rows if r["system"] == system and int(r["G"]) == g]
            if not row or not ran(row[0]):
                continue
            x = g_index + (i - (len(systems) - 1) / 2) * width
            label = None if system in labelled else system
            labelled.add(system)
            style = dict(color=COLORS.get(system), label=label)
            if not fits(row[0]):
                style.update(hatch="//", alpha=0.45, edgecolor="black")
            times.bar(x, float(row[0]["time_ms_median"]) / 1e3, width, **style)
            peak.bar(x, float(row[0]["pct_of_peak"]), width, **style)
    labels = []
    for g in gpus:
        row = [r for r in rows if int(r["G"]) == g][0]
        labels.append(f'{g} GPUs\n{base(row)}, T={max(int(r["T"]) for r in rows if int(r["G"]) == g)}')
    for axis, title in ((times, "time per iteration (s)"), (peak, "% of peak (model FLOPs)")):
        axis.set_xticks(range(len(gpus)))
        axis.set_xticklabels(labels)
        axis.set_ylabel(title)
        axis.legend()
    figure.suptitle(headline("Weak scaling, projected on Summit (16 experts).", rows, 150), fontsize=9)
    return figure


def strong(inputs):
    # One panel per series: per input CSV, per base model (a CSV may hold several).
    series = []
    for path in inputs:
        table = read_rows(path)
        for name in dict.fromkeys(base(r) for r in table):
            series.append([r for r in table if base(r) == name])
    rows = [r for panel in series for r in panel]
    figure, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 4.4), squeeze=False)
    for axis, panel in zip(axes[0], series):
        for system in dict.fromkeys(r["system"] for r in panel):
            chosen = sorted((r for r in panel if r["system"] == system and ran(r)),
                            key=lambda r: int(r["G"]))
            if not chosen:
                continue
            axis.plot([int(r["G"]) for r in chosen],
                      [float(r["time_ms_median"]) / 1e3 for r in chosen], "-",
                      color=COLORS.get(system), label=system)
            for r in chosen:  # filled where the point fits, hollow where it does not
                axis.plot(int(r["G"]), float(r["time_ms_median"]) / 1e3, "o",
                          color=COLORS.get(system),
                          markerfacecolor=COLORS.get(system) if fits(r) else "white")
        sample = next((r for r in panel if r["system"] != "deepspeed-moe"), panel[0])
        experts = sorted({int(r["experts"]) for r in panel})
        axis.set_title(f'{base(sample)}, T={sample["T"]}, experts ' +
                       ("/".join(map(str, experts)) if len(experts) > 1
                        else f"{experts[0]} (fixed)"), fontsize=9)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("GPUs")
        axis.set_ylabel("time per iteration (s)")
        axis.legend(fontsize=8)
    figure.suptitle(headline("Strong scaling, projected on Summit.", rows, 200, names=False), fontsize=8)
    return figure


def ablation(inputs):
    rows = [r for p in inputs for r in read_rows(p)]
    figure, axis = plt.subplots(figsize=(8, 4.8))
    parts = [("all_reduce_ms", "all-reduce", "#dd8452"), ("all_to_all_ms", "all-to-all", "#c44e52"),
             ("all_gather_ms", "all-gather", "#55a868"),
             ("reduce_scatter_ms", "reduce-scatter", "#8172b2"),
             ("other_ms", "everything else", "#4c72b0")]
    shown = [r for r in rows if ran(r)]
    bottom = [0.0] * len(shown)
    for column, label, color in parts:
        values = [float(r[column] or 0) / 1e3 for r in shown]
        axis.bar(range(len(shown)), values, bottom=bottom, label=label, color=color,
                 hatch=["" if fits(r) else "//" for r in shown], edgecolor="black", linewidth=0.3)
        bottom = [b + v for b, v in zip(bottom, values)]
    axis.set_xticks(range(len(shown)))
    axis.set_xticklabels([r["system"] for r in shown], rotation=15)
    axis.set_ylabel("time per iteration (s)")
    axis.legend()
    if shown:
        r = shown[0]
        axis.set_title(headline(f'{base(r)} base, {r["experts"]} experts, {r["G"]} GPUs '
                             f'(T={r["T"]}, Ep={r["Ep"]}, D={r["D"]}), projected on Summit.',
                             rows, 110), fontsize=8)
    else:
        axis.set_title(headline("Ablation:", rows, 110), fontsize=8)
    return figure


def largest(inputs):
    rows = [r for p in inputs for r in read_rows(p)]
    figure, axis = plt.subplots(figsize=(8, 4.8))
    for system in dict.fromkeys(r["system"] for r in rows):
        chosen = sorted((r for r in rows if r["system"] == system and r["fits"] == "1"),
                        key=lambda r: int(r["G"]))
        axis.plot([int(r["G"]) for r in chosen], [int(r["parameters"]) / 1e9 for r in chosen],
                  "o-", color=COLORS.get(system), label=system)
        for r in chosen:
            axis.annotate(f'{base(r)}-{r["experts"]}E T={r["T"]}',
                          (int(r["G"]), int(r["parameters"]) / 1e9), fontsize=7,
                          textcoords="offset points", xytext=(4, 4))
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("GPUs (Summit, V100-16GB)")
    axis.set_ylabel("largest trainable model (billions of parameters)")
    axis.legend()
    axis.set_title("Largest model that fits: projected peak within the GPU's memory", fontsize=9)
    return figure


def spike(inputs):
    rows = [r for p in inputs for r in read_rows(p)]
    figure, axis = plt.subplots(figsize=(8, 4.8))
    steady = ["peak_parameters_bytes", "peak_gradients_bytes", "peak_optimizer_state_bytes"]
    labels = [""] * len(rows)
    for i, r in enumerate(rows):
        persistent = sum(int(r[c]) for c in steady) / 1e9
        spike_bytes = int(r["peak_optimizer_temporaries_bytes"]) / 1e9
        axis.bar(i, persistent, color="#4c72b0", label="weights, gradients, Adam state" if i == 0 else None)
        axis.bar(i, spike_bytes, bottom=persistent, color="#c44e52",
                 label="optimizer step's temporary (the spike)" if i == 0 else None)
        axis.plot([i - 0.4, i + 0.4], [int(r["peak_total_bytes"]) / 1e9] * 2, color="black",
                  label="projected peak (persistent + the larger phase)" if i == 0 else None)
        labels[i] = (f'{base(r)}-{r["experts"]}E, Ep={r["Ep"]}\nspike {spike_bytes:.2f} GB, ' +
                     ("fits" if r["fits"] == "1" else "does not fit"))
    budget = float(rows[0]["budget_bytes"]) / 1e9 if rows and rows[0]["budget_bytes"] else None
    if budget:
        axis.axhline(budget, color="gray", linestyle="--", label=f"{budget:.1f} GB usable")
    axis.set_xticks(range(len(rows)))
    axis.set_xticklabels(labels, fontsize=8)
    axis.set_ylabel("GB per GPU")
    axis.legend(fontsize=8)
    axis.set_title("Optimizer step memory on 32 A100-40GB: bars in pairs, untiled then tiled",
                   fontsize=9)
    return figure


if __name__ == "__main__":
    kinds = {"weak": weak, "strong": strong, "ablation": ablation, "largest": largest,
             "spike": spike}
    if len(sys.argv) < 2 or sys.argv[1] not in kinds:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    kind = sys.argv.pop(1)
    sys.exit(run(kinds[kind], __doc__))
