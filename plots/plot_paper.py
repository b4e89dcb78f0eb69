#!/usr/bin/python3
"""The paper's figures (DeepSpeed-TED, ICS 2023), drawn in the paper's form from the projection's
CSVs (ted_project experiment on the paper YAMLs), so that ours can be laid beside the paper's:

  weak      time per iteration as lines over "GPUs (base model)", DeepSpeed-TED against
            DeepSpeed-TED (baseline); DeepSpeed-TED's % of peak beside it
  strong    one panel per base model, each point marked with its expert count; the 6.7B with
            its experts fixed in a panel apart; log2 axes with numeric ticks
  ablation  three stacked bars (DeepSpeed-TED (baseline), +DTD, +DTD+CAC): computation at the
            bottom, then all-reduce, all-to-all, all-gather
  largest   the largest trainable model, DeepSpeed-TED against DeepSpeed-MoE over the GPU
            counts, on a linear axis of parameters, each point named by its model
  spike     the optimizer step's memory with and without tiles (ThetaGPU)

The suite's additions (not in the paper) have figures of their own: the ablation with every
variant (+CAC alone, +reduce-scatter) and the reduce-scatter as its own part
(ablation-variants); weak and strong scaling with DeepSpeed-MoE beside TED (weak-systems,
strong-systems).

A point whose projected peak exceeds the GPU's memory (fits 0) is marked "OOM" at its GPU count,
never drawn as a time; a row never run (status "not run: ...") is left out and named in the
title. Each figure writes a sidecar (same name, .json: plotlib.sidecar) that
tests/plots/check_paper_figures.py holds to this form.

    plot_paper.py weak     results/projection/weak_scaling_paper_summit.csv plots/figures/paper_weak_scaling.png
    plot_paper.py strong   A.csv [B.csv] plots/figures/paper_strong_scaling.png
    plot_paper.py ablation results/projection/ablation_paper_summit.csv plots/figures/paper_ablation.png
    plot_paper.py largest  results/projection/memory_paper_summit.csv plots/figures/paper_largest_model.png
    plot_paper.py spike    results/projection/memory_paper-spike_thetagpu.csv plots/figures/paper_spike.png
    plot_paper.py ablation-variants | weak-systems | strong-systems  CSV... plots/figures/OUT.png
"""
import sys
import textwrap

from plotlib import BadInput, read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

# The systems as the paper names them; the suite's variants by what they add to the baseline.
NAMES = {"ted-baseline": "DeepSpeed-TED (baseline)", "ted": "DeepSpeed-TED",
         "deepspeed-moe": "DeepSpeed-MoE", "ted+dtd": "+DTD", "ted+cac": "+CAC",
         "ted+dtd+cac": "+DTD+CAC", "ted+dtd+cac+rs": "+DTD+CAC+reduce-scatter"}
COLORS = {"ted-baseline": "#8c8c8c", "ted": "#4c72b0", "deepspeed-moe": "#dd8452"}
BASES = {2048: "1.3B", 2560: "2.7B", 4096: "6.7B", 5120: "13B"}
PAPER_TIME_SYSTEMS = ["ted-baseline", "ted"]
ALL_TIME_SYSTEMS = ["ted-baseline", "ted", "deepspeed-moe"]
PAPER_ABLATION = ["ted-baseline", "ted+dtd", "ted+dtd+cac"]
# Stacked bottom-up as the paper stacks them. ZeRO-1 reduces the gradients with a
# reduce-scatter (and gathers the updated weights with an all-gather): the paper's four parts
# count that reduction as all-reduce.
PAPER_PARTS = [("computation", ("other_ms",), "#4c72b0"),
               ("all-reduce", ("all_reduce_ms", "reduce_scatter_ms"), "#dd8452"),
               ("all-to-all", ("all_to_all_ms",), "#c44e52"),
               ("all-gather", ("all_gather_ms",), "#55a868")]
ALL_PARTS = [("computation", ("other_ms",), "#4c72b0"),
             ("all-reduce", ("all_reduce_ms",), "#dd8452"),
             ("reduce-scatter", ("reduce_scatter_ms",), "#8172b2"),
             ("all-to-all", ("all_to_all_ms",), "#c44e52"),
             ("all-gather", ("all_gather_ms",), "#55a868")]


def name(system):
    return NAMES.get(system, system)


def ran(row):
    return row["status"] == "measured" or row["status"].startswith("projected")


def fits(row):
    return row.get("fits", "") != "0"


def base(row):
    return BASES.get(int(row["hidden"]), "h" + row["hidden"])


def seconds(row):
    return float(row["time_ms_median"]) / 1e3


def rows_of(inputs):
    rows = [r for p in inputs for r in read_rows(p)]
    if not rows:
        raise BadInput("no rows in " + ", ".join(inputs))
    return rows


def missing(rows):
    """What the title says of the rows that are not drawn as a value."""
    def label(r):
        return f'{name(r["system"])} on {r["G"]} GPUs ({base(r)}, {r["experts"]} experts)'
    text = []
    over = [r for r in rows if ran(r) and not fits(r)]
    if over:
        budget = float(over[0]["budget_bytes"]) / 1e9
        text.append(f"OOM: projected peak above {budget:.0f} GB per GPU")
    never = [label(r) for r in rows if not ran(r)]
    if never:
        text.append("not run: " + ", ".join(never))
    return ". ".join(text)


def headline(prefix, rows, width):
    return textwrap.fill(" ".join(t for t in (prefix, missing(rows)) if t), width)


def log2_axis(axis, which, values):
    """A log2 axis with numeric ticks: at `values` (the GPU counts) or, for times, at the powers
    of two spanning them, written as plain numbers (0.5, 1, 2, ...)."""
    if which == "x":
        axis.set_xscale("log", base=2)
        target, ticks = axis.xaxis, sorted(set(values))
        axis.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)
    else:
        axis.set_yscale("log", base=2)
        target = axis.yaxis
        low, high = min(values), max(values)
        first, last = 2.0 ** _floor_log2(low), 2.0 ** (_floor_log2(high) + 1)
        ticks, t = [], first
        while t <= last:
            ticks.append(t)
            t *= 2
        axis.set_ylim(first / 1.1, last * 1.1)
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_locator(NullLocator())


def _floor_log2(value):
    exponent = 0
    while 2.0 ** (exponent + 1) <= value:
        exponent += 1
    while 2.0 ** exponent > value:
        exponent -= 1
    return exponent


def oom_marks(axis, system, gpus, level):
    """"OOM" at each GPU count in `gpus` where `system` does not fit, near the axis' bottom
    (level: which line of marks, so two systems do not overlap)."""
    for g in gpus:
        axis.annotate("OOM", (g, 0.03 + 0.055 * level), xycoords=("data", "axes fraction"),
                      ha="center", fontsize=8, fontweight="bold", color=COLORS.get(system),
                      gid="oom|" + name(system))


def lines(axis, rows, systems, value, label=None, labelled=None):
    """One line per system over the GPU counts: the points that fit; OOM marks for the rest.
    label(row): the text beside each point of the systems in `labelled` (default: all)."""
    oom_level = 0
    for level, system in enumerate(systems):
        chosen = sorted((r for r in rows if r["system"] == system and ran(r)),
                        key=lambda r: int(r["G"]))
        drawn = [r for r in chosen if fits(r)]
        if drawn:
            axis.plot([int(r["G"]) for r in drawn], [value(r) for r in drawn], "o-",
                      color=COLORS.get(system), label=name(system), gid="series|" + name(system))
        elif chosen:  # a legend entry even when nothing of it fits
            axis.plot([], [], "o-", color=COLORS.get(system), label=name(system))
        over = [int(r["G"]) for r in chosen if not fits(r)]
        if over:
            oom_marks(axis, system, over, oom_level)
            oom_level += 1
        if label and (labelled is None or system in labelled):
            for r in drawn:
                # The first system (the slower: the baseline) labelled above its points, the
                # next below, so that the labels of two close lines stay apart.
                axis.annotate(label(r), (int(r["G"]), value(r)), fontsize=7, ha="center",
                              textcoords="offset points", xytext=(0, -12 if level % 2 else 6),
                              color=COLORS.get(system), gid="label|" + name(system))


def weak(inputs, systems=PAPER_TIME_SYSTEMS, peak_systems=("ted",)):
    rows = rows_of(inputs)
    figure, (times, peak) = plt.subplots(1, 2, figsize=(11, 4.4))
    gpus = sorted({int(r["G"]) for r in rows})
    models = {g: next(base(r) for r in rows if int(r["G"]) == g) for g in gpus}
    lines(times, rows, systems, seconds)
    lines(peak, rows, list(peak_systems), lambda r: float(r["pct_of_peak"]))
    for axis, ylabel, gid, corner in ((times, "time per iteration (s)", "time", "upper left"),
                                      (peak, "% of peak", "percent_of_peak", "upper right")):
        axis.set_gid(gid)
        log2_axis(axis, "x", gpus)
        axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}\n({models[int(v)]})"))
        axis.set_xlabel("GPUs (base model)")
        axis.set_ylabel(ylabel)
        axis.set_ylim(0, axis.get_ylim()[1] * 1.15)
        axis.legend(fontsize=8, loc=corner)
    times.set_title("time per iteration", fontsize=9)
    peak.set_title("% of peak: " + ", ".join(name(s) for s in peak_systems), fontsize=9)
    experts = "/".join(sorted({r["experts"] for r in rows}, key=int))
    figure.suptitle(headline(f"Weak scaling, {experts} experts, projected on Summit.", rows, 140),
                    fontsize=9)
    figure.ted_sidecar = {"figure": "weak", "form": "paper"}
    return figure


def strong(inputs, systems=PAPER_TIME_SYSTEMS, labelled=None):
    # One panel per base model whose experts grow with the GPUs, then one per base model whose
    # experts stay fixed (the paper's 6.7B with 4 experts).
    rows = rows_of(inputs)
    panels = []
    for path in inputs:
        table = read_rows(path)
        for model in dict.fromkeys(base(r) for r in table):
            panel = [r for r in table if base(r) == model]
            experts = {int(r["experts"]) for r in panel}
            panels.append((len(experts) == 1, model, panel))
    panels.sort(key=lambda p: p[0])  # growing experts first, fixed apart after them
    figure, axes = plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 4.2), squeeze=False)
    for axis, (fixed, model, panel) in zip(axes[0], panels):
        lines(axis, panel, systems, seconds, label=lambda r: f'E={r["experts"]}',
              labelled=labelled)
        times = [seconds(r) for r in panel if r["system"] in systems and ran(r) and fits(r)]
        log2_axis(axis, "x", [int(r["G"]) for r in panel])
        if times:
            log2_axis(axis, "y", times)
        sample = next(r for r in panel if r["system"] != "deepspeed-moe")
        if fixed:
            axis.set_gid(f"{model} fixed")
            axis.set_title(f'{model} base, {sample["experts"]} experts (fixed), T={sample["T"]}',
                           fontsize=9)
        else:
            axis.set_gid(model)
            axis.set_title(f'{model} base, T={sample["T"]}, experts grow with the GPUs',
                           fontsize=9)
        axis.set_xlabel("GPUs")
        axis.set_ylabel("time per iteration (s)")
        axis.legend(fontsize=7, loc="upper right")
    figure.suptitle(headline("Strong scaling, projected on Summit; E = experts.", rows, 200),
                    fontsize=9)
    figure.ted_sidecar = {"figure": "strong", "form": "paper"}
    return figure


def ablation(inputs, systems=PAPER_ABLATION, parts=PAPER_PARTS):
    rows = rows_of(inputs)
    by_system = {r["system"]: r for r in rows}
    systems = [s for s in (systems or list(by_system)) if s in by_system]
    figure, axis = plt.subplots(figsize=(7 if len(systems) <= 3 else 9, 4.8))
    axis.set_gid("ablation")
    labelled = set()
    for i, system in enumerate(systems):
        r = by_system[system]
        if not ran(r):
            continue
        if not fits(r):
            axis.annotate("OOM", (i, 0.03), xycoords=("data", "axes fraction"), ha="center",
                          fontweight="bold", gid="oom|" + name(system))
            continue
        bottom = 0.0
        for part, columns, color in parts:
            value = sum(float(r[c] or 0) for c in columns) / 1e3
            axis.bar(i, value, 0.6, bottom=bottom, color=color, edgecolor="black",
                     linewidth=0.3, label=None if part in labelled else part,
                     gid=f"bar|{name(system)}|{part}")
            labelled.add(part)
            bottom += value
        axis.annotate(f"{bottom:.1f} s", (i, bottom), textcoords="offset points", xytext=(0, 3),
                      ha="center", fontsize=8, gid="note|total " + name(system))
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    order = [p for p, _, _ in parts][::-1]  # the legend lists the parts top-down, as stacked
    axis.legend([unique[p] for p in order if p in unique], [p for p in order if p in unique],
                fontsize=8, loc="upper right")
    axis.set_xticks(range(len(systems)))
    axis.set_xticklabels([name(s) for s in systems], fontsize=8)
    axis.set_xlim(-0.6, len(systems) - 0.4 + (0.9 if len(systems) <= 3 else 1.4))
    axis.set_ylabel("time per iteration (s)")
    r = by_system[systems[0]] if systems else rows[0]
    note = ("" if parts is not PAPER_PARTS else
            " all-reduce includes ZeRO-1's gradient reduce-scatter.")
    axis.set_title(headline(f'{base(r)} base, {r["experts"]} experts, {r["G"]} GPUs '
                            f'(T={r["T"]}, Ep={r["Ep"]}, D={r["D"]}), projected on Summit.' +
                            note, rows, 90), fontsize=8)
    figure.ted_sidecar = {"figure": "ablation", "form": "paper"}
    return figure


def largest(inputs):
    rows = rows_of(inputs)
    figure, axis = plt.subplots(figsize=(8, 4.8))
    axis.set_gid("largest")
    systems = [s for s in ("ted", "deepspeed-moe") if any(r["system"] == s for r in rows)]
    lines(axis, rows, systems, lambda r: int(r["parameters"]) / 1e9,
          label=lambda r: f'{base(r)}-{r["experts"]}E')
    log2_axis(axis, "x", [int(r["G"]) for r in rows])
    axis.set_yscale("linear")
    axis.set_ylim(0, axis.get_ylim()[1] * 1.1)
    axis.set_xlabel("GPUs (Summit, V100-16GB)")
    axis.set_ylabel("parameters of the largest trainable model (billions)")
    axis.legend(fontsize=8, loc="upper left")
    axis.set_title(headline("Largest trainable model (base-experts): the projected peak within "
                            "the GPU's memory.", rows, 100), fontsize=9)
    figure.ted_sidecar = {"figure": "largest", "form": "paper"}
    return figure


def spike(inputs):
    rows = rows_of(inputs)
    figure, axis = plt.subplots(figsize=(8, 4.8))
    axis.set_gid("spike")
    steady = ["peak_parameters_bytes", "peak_gradients_bytes", "peak_optimizer_state_bytes"]
    labels = [""] * len(rows)
    for i, r in enumerate(rows):
        persistent = sum(int(r[c]) for c in steady) / 1e9
        spike_bytes = int(r["peak_optimizer_temporaries_bytes"]) / 1e9
        bar = f'{base(r)}-{r["experts"]}E ' + ("tiled" if i % 2 else "untiled")
        axis.bar(i, persistent, color="#4c72b0", gid=f"bar|{bar}|weights, gradients, Adam state",
                 label="weights, gradients, Adam state" if i == 0 else None)
        axis.bar(i, spike_bytes, bottom=persistent, color="#c44e52",
                 gid=f"bar|{bar}|optimizer step's temporary",
                 label="optimizer step's temporary (the spike)" if i == 0 else None)
        axis.plot([i - 0.4, i + 0.4], [int(r["peak_total_bytes"]) / 1e9] * 2, color="black",
                  label="projected peak (persistent + the larger phase)" if i == 0 else None)
        if not fits(r):
            axis.annotate("OOM", (i, int(r["peak_total_bytes"]) / 1e9), ha="center",
                          textcoords="offset points", xytext=(0, 4), fontweight="bold",
                          gid="oom|" + bar)
        labels[i] = f'{bar}, T={r["T"]} Ep={r["Ep"]}\nspike {spike_bytes:.2f} GB'
    budget = float(rows[0]["budget_bytes"]) / 1e9 if rows[0]["budget_bytes"] else None
    if budget:
        axis.axhline(budget, color="gray", linestyle="--", label=f"{budget:.1f} GB usable")
    axis.set_xticks(range(len(rows)))
    axis.set_xticklabels(labels, fontsize=8)
    axis.set_ylabel("GB per GPU")
    axis.legend(fontsize=8, loc="lower right")
    axis.set_title("Optimizer step memory on 32 A100-40GB, untiled then tiled", fontsize=9)
    figure.ted_sidecar = {"figure": "spike", "form": "paper"}
    return figure


def suite(draw, kind, **options):
    """One of the suite's own figures: `draw` with `options`, its sidecar named `kind`."""
    def drawn(inputs):
        figure = draw(inputs, **options)
        figure.ted_sidecar = {"figure": kind, "form": "suite"}
        return figure
    return drawn


KINDS = {"weak": weak, "strong": strong, "ablation": ablation, "largest": largest,
         "spike": spike,
         "ablation-variants": suite(ablation, "ablation-variants", systems=None, parts=ALL_PARTS),
         "weak-systems": suite(weak, "weak-systems", systems=ALL_TIME_SYSTEMS,
                               peak_systems=ALL_TIME_SYSTEMS),
         "strong-systems": suite(strong, "strong-systems", systems=ALL_TIME_SYSTEMS,
                                 labelled=("ted",))}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in KINDS:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    kind = sys.argv.pop(1)
    sys.exit(run(KINDS[kind], __doc__))
