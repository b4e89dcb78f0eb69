#!/usr/bin/python3
"""Bus bandwidth against message size from ted_collbench CSVs (one line per CSV), with the
plain-MPI reference measured in the same run where the CSV has it, and the ratio below.

    /usr/bin/python3 plots/plot_collbench.py results/collbench/X.csv [more.csv ...] plots/figures/X.png

Writes the PNG and a PDF beside it. Reads only results/ (or the CSVs named).
"""
import sys

from plotlib import read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402


def label_of(row):
    return (f"{row['op']} on {row['group']} (n={row['group_size']}), {row['backend']}, "
            f"G={row['G']} T={row['T']} Ep={row['Ep']} D={row['D']}")


def size_label(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size // scale}{unit}"
    return str(size)


def draw(inputs):
    figure, (bandwidth, ratio) = plt.subplots(
        2, 1, figsize=(8, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    has_reference = False
    revisions = set()
    for path in inputs:
        rows = read_rows(path)
        if not rows:
            continue
        sizes = [int(r["bytes"]) for r in rows]
        bandwidth.plot(sizes, [float(r["busbw_GBps"]) for r in rows], "o-", label=label_of(rows[0]))
        revisions.add(rows[0]["git_revision"])
        if rows[0].get("mpi_busbw_GBps"):
            has_reference = True
            bandwidth.plot(sizes, [float(r["mpi_busbw_GBps"]) for r in rows], "s--", alpha=0.8,
                           label="plain MPI call, same run")
            ratio.plot(sizes, [float(r["busbw_ratio_vs_mpi"]) for r in rows], "o-")
        wrong = sum(int(r["wrong"]) for r in rows)
        if wrong:
            bandwidth.text(0.02, 0.9, f"{wrong} WRONG elements", color="red",
                           transform=bandwidth.transAxes)
    bandwidth.set_xscale("log", base=2)
    bandwidth.set_ylabel("bus bandwidth (GB/s)")
    bandwidth.set_title("Collective bus bandwidth (nccl-tests definition), median of timed "
                        f"iterations\nrevision {', '.join(sorted(revisions))}", fontsize=10)
    bandwidth.grid(True, which="both", alpha=0.3)
    bandwidth.legend(fontsize=8, loc="upper left")
    if has_reference:
        ratio.axhspan(0.9, 1.1, color="green", alpha=0.1, label="within 10%")
        ratio.axhline(1.0, color="gray", lw=0.8)
        ratio.set_ylim(0.5, 1.5)
        ratio.legend(fontsize=8, loc="lower right")
    ratio.set_ylabel("busbw ratio\nsuite / MPI")
    ratio.set_xlabel("message size (bytes per rank)")
    ratio.grid(True, which="both", alpha=0.3)
    ticks = sorted({int(r["bytes"]) for p in inputs for r in read_rows(p)})
    ratio.set_xticks(ticks[::2])
    ratio.set_xticklabels([size_label(t) for t in ticks[::2]], fontsize=8)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
