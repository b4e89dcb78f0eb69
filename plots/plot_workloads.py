#!/usr/bin/python3
"""Time against routing skew: an experiment swept over routing workloads (sweep.workloads) with
capacity and dropless routing (sweep.dropless), one line per system and layout (TED's against
DeepSpeed-MoE's) and capacity rule, its points the workloads ordered by the skew they measured.
x is the measured per-expert load max/mean (the most loaded expert of any MoE layer over the
mean, averaged over the measured steps; 1 is even), or with --per-rank the per-rank load
max/mean (each expert rank's experts summed), the columns of docs/experiments.md. Panels:
  1. time per iteration (median of the slowest rank), or, where nothing was timed (the memory
     experiment's one untimed step), the peak bytes per rank;
  2. the same relative to the line's own system and layout at the balanced workload with
     capacity (1: no cost of skew; a dropless line above 1 at balanced is what dropless costs);
  3. the token choices capacity dropped (capacity lines; dropless drops none);
  4. the all-to-all bytes the busiest rank sent per step in its expert group: the same at every
     skew with capacity, growing with it dropless (the buffers take the largest load).
Panels 3 and 4 are exact counts; the times of an oversubscribed CPU run also hold its noise.
A sweep over rank counts (weak and strong scaling) is drawn at its largest G, where the experts
are spread over expert ranks (the title says so). A CSV that several runs appended to is drawn from the latest row of each point (the title says
so), or from one run with --run ID. Rows without the routing columns (CSVs measured before them)
have no skew to draw: one line, exit 2.

    /usr/bin/python3 plots/plot_workloads.py results/ablation/workloads_cpu.csv \
        plots/figures/workloads_ablation.png
    /usr/bin/python3 plots/plot_workloads.py --per-rank results/ablation/workloads_cpu.csv \
        plots/local/workloads_ablation_rank.png
"""
import sys

from plotlib import (BadInput, is_baseline, latest, mib, oversubscribed_note,  # first: Agg
                     read_rows, run, selection_note)

import matplotlib.pyplot as plt  # noqa: E402

options = {"per_rank": False}  # --per-rank
LAYOUT = ["system", "G", "T", "Ep", "D", "model"]
SHORT = {"learned": "learned", "balanced": "bal", "hot_experts": "hot-E", "hot_rank": "hot-R",
         "zipf": "zipf", "zero_load": "zero", "rotating": "rot"}


def skew(row):
    """The row's load max/mean: per expert, or per expert rank with --per-rank."""
    kind = "rank" if options["per_rank"] else "expert"
    return float(row[f"{kind}_load_max"]) / float(row[f"{kind}_load_mean"])


def draw(inputs):
    rows = [r for path in inputs for r in read_rows(path)]
    if not any(r.get("expert_load_mean") for r in rows):
        raise BadInput("no row with measured loads (column expert_load_mean): the CSVs were "
                       "written before the routing columns, or by the DeepSpeed baseline")
    for r in rows:  # rows of a CSV measured before the columns: the default routing
        r.setdefault("workload", "learned")
        r.setdefault("dropless", "0")
    rows = latest(rows, LAYOUT + ["workload", "dropless"])
    rows = [r for r in rows if r.get("expert_load_mean") and float(r["expert_load_mean"]) > 0
            and not is_baseline(r)]
    if not rows:
        raise BadInput("no row of our systems with measured loads")
    largest = max(int(r["G"]) for r in rows)
    others = sorted({int(r["G"]) for r in rows} - {largest})
    rows = [r for r in rows if int(r["G"]) == largest]
    timed = any(r["time_ms_median"] and float(r["time_ms_median"]) > 0 for r in rows)

    def value(r):
        return float(r["time_ms_median"]) if timed else mib(r["peak_total_bytes"])

    if timed:
        rows = [r for r in rows if r["time_ms_median"] and float(r["time_ms_median"]) > 0]
    figure, axes = plt.subplots(2, 2, figsize=(13, 9))
    (absolute, relative), (dropped, moved) = axes
    layouts = list(dict.fromkeys(tuple(r[c] for c in LAYOUT) for r in rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    named = False
    for index, layout in enumerate(layouts):
        mine = [r for r in rows if tuple(r[c] for c in LAYOUT) == layout]
        reference = next((r for r in mine if r["workload"] == "balanced" and r["dropless"] == "0"),
                         min(mine, key=skew))
        system, G, T, Ep, D, _ = layout
        color = colors[index % len(colors)]
        marker = "s" if system == "deepspeed-moe" else "o"
        for dropless in ("0", "1"):
            line = sorted((r for r in mine if r["dropless"] == dropless), key=skew)
            if not line:
                continue
            x = [skew(r) for r in line]
            style = "--" if dropless == "1" else "-"
            label = f"{system} G={G} T={T} Ep={Ep} D={D}, " + ("dropless" if dropless == "1"
                                                               else "capacity")
            absolute.plot(x, [value(r) for r in line], style, marker=marker, color=color,
                          label=label)
            relative.plot(x, [value(r) / value(reference) for r in line], style, marker=marker,
                          color=color, label=label)
            moved.plot(x, [mib(r["all_to_all_rank_bytes_max"]) for r in line], style,
                       marker=marker, color=color, label=label)
            if dropless == "0":
                dropped.plot(x, [100 * float(r["dropped_fraction"]) for r in line], style,
                             marker=marker, color=color, label=label)
            if not named:  # which workload each skew is: the first line's points, named
                for r, at in zip(line, x):
                    absolute.annotate(SHORT.get(r["workload"], r["workload"]), (at, value(r)),
                                      textcoords="offset points", xytext=(0, 6), ha="center",
                                      fontsize=7, rotation=60)
                named = True
    per = "per expert rank (its experts summed)" if options["per_rank"] else "per expert"
    for axis in (absolute, relative, dropped, moved):
        axis.set_xlabel(f"measured load max/mean {per}")
        axis.grid(True, alpha=0.3)
    absolute.set_ylabel("time per iteration (ms, median of the slowest rank)" if timed
                        else "peak bytes per rank (MiB, one untimed step)")
    relative.set_ylabel("relative to the same system and layout at balanced, capacity")
    relative.axhline(1.0, color="black", linewidth=0.8)
    dropped.set_ylabel("token choices dropped by capacity (%)")
    moved.set_ylabel("all-to-all bytes sent per step, busiest rank (MiB)")
    relative.legend(fontsize=7)
    first = rows[0]
    title = (f"{first['experiment']}: {'time' if timed else 'peak memory'} against routing skew, "
             f"{first['model']} (top-{first['top_k']} of {first['experts']} experts), "
             f"{first['backend']} {first['dtype']}, revision {first['git_revision']}\nworkloads: "
             + ", ".join(f"{v} = {k}" for k, v in SHORT.items() if v != k)
             + "; lines: solid capacity, dashed dropless; squares DeepSpeed-MoE's layout (T = 1)")
    scope = (f"drawn at G={largest}, the sweep's largest; G={', '.join(map(str, others))} left "
             "out" if others else "")
    notes = [n for n in (scope, oversubscribed_note(rows), selection_note()) if n]
    figure.suptitle("\n".join([title] + notes), fontsize=9)
    return figure


if __name__ == "__main__":
    if "--per-rank" in sys.argv:
        sys.argv.remove("--per-rank")
        options["per_rank"] = True
    sys.exit(run(draw, __doc__))
