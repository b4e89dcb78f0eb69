#!/usr/bin/python3
"""The ablation figure: what DTD and CAC do, measured here, projected here and projected for the
paper's cluster, one panel each.

1. Measured here: each system's time per iteration split into computation and communication
   (median), whiskers the spread the machine gave it, above each bar the all-to-all bytes each
   rank sent per iteration (the ledger's count: exact). Timed in interleaved rounds (run.rounds),
   the whiskers span the medians of its rounds; else p10-p90 of its iterations. A system whose
   whiskers overlap the baseline's is marked "inside the spread": that difference is noise, not
   a result. Rows of the DeepSpeed baseline (baselines/deepspeed, another CSV) stand beside ours
   as one hatched bar (DeepSpeed's time is not split).
2. Projected here (with a `ted_project validate` CSV): the same points on the model calibrated
   on this machine, computation and communication, the measured medians beside them and each
   one's error.
3. Projected for the paper's cluster (with a `ted_project experiment` CSV): the paper's ablation
   on its cluster, split into all-reduce, all-to-all, all-gather and the rest, the all-to-all
   bytes above each bar.

The title says whether the machine disturbed the run (column disturbed: other processes took
CPU time, or the rounds disagreed; lib/ted/experiments/disturbance.hpp) with the measured
figures, and when the ranks shared cores. A CSV that several runs appended to is drawn from the
latest row of each point (the title says so), or from one run with --run ID (column run_id).
The inputs are told apart by their columns.

    /usr/bin/python3 plots/plot_ablation.py results/ablation/cpu.csv plots/figures/ablation_cpu.png
    /usr/bin/python3 plots/plot_ablation.py results/local/ablation/cpu.csv \\
        results/local/ablation/projected_here.csv results/local/ablation/paper_summit.csv \\
        plots/local/ablation_cpu.png
    /usr/bin/python3 plots/plot_ablation.py --run RUN_ID results/ablation/cpu.csv out.png
"""
import statistics
import sys

from plotlib import (BadInput, is_baseline, latest, mib, oversubscribed_note,  # first: Agg
                     read_rows, readable_count, run, selection_note)

import matplotlib.pyplot as plt  # noqa: E402

KEY = ["system", "G", "T", "Ep", "D", "model"]


def sort_inputs(inputs):
    """(measured rows, validation rows, paper projection rows) from the CSVs, by their columns."""
    measured, validation, paper = [], [], []
    for path in inputs:
        rows = read_rows(path)
        if rows and "predicted_ms" in rows[0]:
            validation += rows
        elif rows and all(r.get("status") == "projected" or
                          r.get("status", "").startswith("projected:") for r in rows):
            paper += rows
        else:
            measured += rows
    if not measured:
        raise BadInput("no measured rows among " + ", ".join(inputs))
    return measured, validation, paper


def spread(rows, all_rows):
    """Per summary row: (low, high) of the whiskers and what they are."""
    whiskers, what = [], "p10-p90 of the iterations"
    for r in rows:
        rounds = [float(x["time_ms_median"]) for x in all_rows
                  if x.get("round") and x.get("run_id") == r.get("run_id") and
                  all(x[k] == r[k] for k in KEY)]
        if len(rounds) > 1:
            whiskers.append((min(rounds), max(rounds)))
            what = f"spread: the {len(rounds)} rounds' medians"
        else:
            whiskers.append((float(r["time_ms_p10"]), float(r["time_ms_p90"])))
    return whiskers, what


def machine_note(rows):
    """The machine's verdict for the title, from the summary rows' columns; "" for CSVs from
    before they were kept."""
    if not any(r.get("disturbed") for r in rows):
        return ""
    others = max(float(r.get("others_cpu_pct") or 0) for r in rows)
    steal = max(float(r.get("steal_pct") or 0) for r in rows)
    spread_pct = max(float(r.get("round_spread_pct") or 0) for r in rows)
    measured = (f"other processes took up to {others:.0f}% of the cores, the hypervisor "
                f"{steal:.0f}%, a system's rounds spread up to {spread_pct:.0f}%")
    if any(r.get("disturbed") == "1" for r in rows):
        return ("DISTURBED: " + measured + ". The measured times show the machine, not the "
                "systems.")
    return "Machine quiet: " + measured + "."


def draw_measured(axes, rows, all_rows):
    split = [not is_baseline(r) for r in rows]
    first = next(r for r, s in zip(rows, split) if s) if any(split) else rows[0]
    layout = ("T", "Ep", "D")  # a row laid out unlike the title's says how (deepspeed-moe: T=1)
    names = [r["system"] + ("" if all(r[k] == first[k] for k in layout) else
                            f"\nT={r['T']} Ep={r['Ep']} D={r['D']}") for r in rows]
    compute = [float(r["compute_ms"]) if s else 0.0 for r, s in zip(rows, split)]
    comm = [float(r["comm_ms"]) if s else 0.0 for r, s in zip(rows, split)]
    total = [float(r["time_ms_median"]) for r in rows]
    whiskers, what = spread(rows, all_rows)
    x = range(len(rows))
    oversubscribed = oversubscribed_note(rows)
    for i, r in enumerate(rows):
        name = r["system"]
        axes.bar(i, compute[i], color="#4c72b0", gid=f"bar|{name}|computation",
                 label="computation" if i == 0 else None)
        axes.bar(i, comm[i], bottom=compute[i], color="#dd8452", gid=f"bar|{name}|communication",
                 label=None if i else "communication (collectives)" if not oversubscribed else
                 "in collectives: transfers and waiting\nfor ranks not scheduled (oversubscribed)")
    if not all(split):
        axes.bar(x, [0 if s else t for s, t in zip(split, total)], color="#8c8c8c",
                 hatch="//", edgecolor="white", label="DeepSpeed: total (not split)")
    for i, (r, s) in enumerate(zip(rows, split)):
        if not s and r["all_to_all_ms"]:  # what the baseline could time: its all-to-alls
            axes.annotate(f"all-to-all\n{float(r['all_to_all_ms']):.0f} ms", (i, total[i] / 2),
                          ha="center", va="center", fontsize=8, color="white")
    low = [t - w[0] for t, w in zip(total, whiskers)]
    high = [w[1] - t for t, w in zip(total, whiskers)]
    axes.errorbar(x, total, yerr=[[max(0.0, v) for v in low], [max(0.0, v) for v in high]],
                  fmt="none", ecolor="black", capsize=4, label=what)
    # Above each bar: the bytes (exact), and against the baseline, the change or "noise".
    base = next((i for i, r in enumerate(rows) if r["system"] == "ted-baseline"), None)
    for i, r in enumerate(rows):
        text = f"a2a {mib(r['all_to_all_bytes'] or 0):.2f} MiB"
        if base is not None and i != base and split[i]:
            change = (total[i] / total[base] - 1) * 100
            overlap = whiskers[i][0] <= whiskers[base][1] and whiskers[base][0] <= whiskers[i][1]
            text += f"\n{change:+.0f}%" + (" (inside\nthe spread)" if overlap else "")
        axes.annotate(text, (i, whiskers[i][1]), xytext=(0, 3), textcoords="offset points",
                      ha="center", va="bottom", fontsize=7, gid=f"note|{r['system']}")
    axes.set_xticks(list(x))
    axes.set_xticklabels(names, rotation=20, ha="right", fontsize=9)
    axes.set_ylabel("time per iteration (ms, median)")
    # Room above the tallest whisker for the notes and the legend, so that they cover no bar.
    axes.set_ylim(0, max(w[1] for w in whiskers) * 1.7)
    axes.legend(fontsize=7, loc="upper left")
    axes.grid(True, axis="y", alpha=0.3)
    rounds = max((int(r.get("rounds") or 1) for r in rows), default=1)
    axes.set_title(f"Measured here ({rounds} interleaved rounds)" if rounds > 1 else
                   "Measured here", fontsize=10)
    axes.set_gid("measured")
    return first


def draw_projected_here(axes, validation, rows):
    """The validation rows of the drawn points, in the measured panel's order."""
    by_key = {tuple(v[k] for k in KEY): v for v in validation}
    drawn = [by_key.get(tuple(r[k] for k in KEY)) for r in rows if not is_baseline(r)]
    drawn = [v for v in drawn if v is not None]
    if not drawn:
        raise BadInput("the validation CSV has none of the measured points")
    x = list(range(len(drawn)))
    for i, v in enumerate(drawn):
        compute, comm = float(v["predicted_compute_ms"]), float(v["predicted_comm_ms"])
        axes.bar(i, compute, color="#4c72b0", gid=f"bar|{v['system']}|computation",
                 label="projected computation" if i == 0 else None)
        axes.bar(i, comm, bottom=compute, color="#dd8452", gid=f"bar|{v['system']}|communication",
                 label="projected communication" if i == 0 else None)
    measured = [float(v["measured_ms"]) for v in drawn]
    axes.plot(x, measured, linestyle="none", marker="D", color="black", label="measured (median)",
              gid="series|measured")
    for i, v in enumerate(drawn):
        axes.annotate(f"{float(v['relative_error']) * 100:+.0f}%", (i, measured[i]),
                      xytext=(8, 0), textcoords="offset points", fontsize=8, va="center",
                      gid="label|measured")
    errors = [abs(float(v["relative_error"])) * 100 for v in drawn]
    axes.set_xticks(x)
    axes.set_xticklabels([v["system"] for v in drawn], rotation=20, ha="right", fontsize=9)
    axes.set_ylabel("time per iteration (ms)")
    top = max(max(measured), max(float(v["predicted_ms"]) for v in drawn))
    axes.set_ylim(0, top * 1.5)
    axes.legend(fontsize=7, loc="upper left")
    axes.grid(True, axis="y", alpha=0.3)
    cluster = drawn[0].get("cluster", "")
    axes.set_title(f"Projected here: the model of this machine (cluster file '{cluster}')\n"
                   f"error of the projection: median {statistics.median(errors):.0f}%, "
                   f"largest {max(errors):.0f}%", fontsize=10)
    axes.set_gid("projected_here")


def draw_paper(axes, paper):
    rows = latest(paper, KEY)
    parts = [("all_reduce_ms", "all-reduce", "#4c72b0"), ("all_to_all_ms", "all-to-all", "#dd8452"),
             ("all_gather_ms", "all-gather", "#55a868")]
    for i, r in enumerate(rows):
        bottom = 0.0
        for column, label, color in parts:
            seconds = float(r[column] or 0) / 1e3
            axes.bar(i, seconds, bottom=bottom, color=color, label=label if i == 0 else None,
                     gid=f"bar|{r['system']}|{label}")
            bottom += seconds
        rest = float(r["time_ms_median"]) / 1e3 - bottom
        axes.bar(i, rest, bottom=bottom, color="#c4c4c4", label="the rest" if i == 0 else None,
                 gid=f"bar|{r['system']}|the rest")
        axes.annotate(f"a2a {float(r['all_to_all_bytes']) / 2**30:.1f} GiB\n"
                      f"{float(r['time_ms_median']) / 1e3:.1f} s", (i, bottom + rest),
                      xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                      fontsize=7, gid=f"note|{r['system']}")
    axes.set_xticks(list(range(len(rows))))
    axes.set_xticklabels([r["system"] for r in rows], rotation=20, ha="right", fontsize=9)
    axes.set_ylabel("time per iteration (s, projected)")
    axes.set_ylim(0, max(float(r["time_ms_median"]) for r in rows) / 1e3 * 1.45)
    axes.legend(fontsize=7, loc="upper left", ncol=2)
    axes.grid(True, axis="y", alpha=0.3)
    first = rows[0]
    cluster = first["backend"].split(":", 1)[-1]
    axes.set_title(f"Projected for the paper's cluster ({cluster}): {first['model']}, "
                   f"{readable_count(first['parameters'])} parameters\n"
                   f"{first['G']} x {first['device']}, T={first['T']} Ep={first['Ep']} "
                   f"D={first['D']}", fontsize=10)
    axes.set_gid("projected_paper")


def draw(inputs):
    measured, validation, paper = sort_inputs(inputs)
    summaries = [r for r in measured if not r.get("round")]
    rows = latest(summaries, KEY)
    # Points measured with timed iterations (correctness-only and not-run rows hold 0).
    rows = [r for r in rows if float(r["time_ms_median"] or 0) > 0]
    if not rows:
        raise BadInput("no timed row to draw (a correctness-only run, --iters 0, times nothing)")
    panels = 1 + bool(validation) + bool(paper)
    figure, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 5.8), squeeze=False)
    axes = list(axes[0])
    first = draw_measured(axes[0], rows, measured)
    at = 1
    if validation:
        draw_projected_here(axes[at], validation, rows)
        at += 1
    if paper:
        draw_paper(axes[at], paper)
    title = (f"Ablation: {first['model']} ({readable_count(first['parameters'])} parameters), "
             f"G={first['G']} T={first['T']} Ep={first['Ep']} D={first['D']}, "
             f"{first['backend']} {first['dtype']}, revision {first['git_revision']}")
    machine = machine_note(rows)
    scale = ("One machine's all-to-all is a memory copy: the bytes DTD and CAC save (above the "
             "bars) cost little here, and seconds at the paper's scale." if paper else "")
    notes = [n for n in (machine, oversubscribed_note(rows), selection_note(), scale) if n]
    figure.suptitle("\n".join([title] + notes), fontsize=10 if not notes else 9)
    figure.ted_sidecar = {"figure": "ablation", "form": "main job",
                          "disturbed": machine.startswith("DISTURBED"),
                          "machine": machine}
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
