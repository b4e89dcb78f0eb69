#!/usr/bin/env python3
"""The paper's ablation and weak scaling projected on Summit per routing workload
(results/projection/workloads_<experiment>_summit.csv, scripts/project.sh): (a) the ablation's
time per system, capacity and dropless routing; (b) TED's time over DeepSpeed-MoE's along the
weak scaling (hollow: DeepSpeed-MoE does not fit 16 GB); (c) what DTD + CAC save, TED-baseline's
time over TED's.
    /usr/bin/python3 plots/plot_workloads_projected.py ABLATION.csv WEAK.csv OUT.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

WORKLOADS = ["balanced", "zero_load", "hot_experts", "hot_rank", "rotating", "zipf"]


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main(ablation_csv, weak_csv, out):
    ablation, weak = rows(ablation_csv), rows(weak_csv)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    ax = axes[0]
    systems = list(dict.fromkeys(r["system"] for r in ablation))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        for dropless, hatch in (("0", ""), ("1", "//")):
            t = {r["workload"]: float(r["time_ms_median"]) / 1e3 for r in ablation
                 if r["system"] == system and r["dropless"] == dropless}
            xs = [w + i * width - 0.4 + width / 2 + (0.0 if dropless == "0" else 0) for w in
                  range(len(WORKLOADS))]
            if dropless == "0":
                ax.bar(xs, [t[w] for w in WORKLOADS], width, color=f"C{i}", alpha=0.35)
            else:
                ax.bar(xs, [t[w] for w in WORKLOADS], width, fill=False, edgecolor=f"C{i}",
                       hatch=hatch, label=system)
    ax.set_xticks(range(len(WORKLOADS)), WORKLOADS, rotation=30)
    ax.set_ylabel("time per step (s)")
    ax.set_title("(a) ablation, 6.7B 16E, 128 V100\nshaded: capacity (= balanced), hatched: dropless")
    ax.legend(fontsize=7)
    for ax, title, num, den in (
            (axes[1], "(b) TED / DeepSpeed-MoE time, weak scaling", "ted", "deepspeed-moe"),
            (axes[2], "(c) TED-baseline / TED time (what DTD + CAC save)", "ted-baseline", "ted")):
        for j, workload in enumerate(WORKLOADS):
            for dropless, style in (("1", "-"), ("0", ":")):
                if dropless == "0" and workload != "balanced":
                    continue  # capacity routing projects every workload as balanced on GPUs
                pick = {(r["G"], r["system"]): r for r in weak
                        if r["workload"] == workload and r["dropless"] == dropless}
                gs = sorted({int(g) for g, _ in pick})
                ratio = [float(pick[(str(g), num)]["time_ms_median"]) /
                         float(pick[(str(g), den)]["time_ms_median"]) for g in gs]
                fits = [pick[(str(g), "deepspeed-moe")]["fits"] == "1" for g in gs]
                label = workload + (" dropless" if dropless == "1" else " capacity (all)")
                ax.plot(gs, ratio, style, color=f"C{j}", label=label)
                ax.scatter(gs, ratio, color=[f"C{j}" if f or num != "ted" else "none" for f in fits],
                           edgecolors=f"C{j}", zorder=3)
        ax.axhline(1, color="grey", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xticks([32, 64, 128, 256], ["32\n1.3B", "64\n2.7B", "128\n6.7B", "256\n13B"])
        ax.set_xlabel("GPUs (model)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    fig.savefig(out.rsplit(".", 1)[0] + ".pdf")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
