#!/usr/bin/python3
"""Training curves from ted_train CSVs: loss (total and LM) against step, one line per CSV,
and tokens/s below.

    /usr/bin/python3 plots/plot_train.py results/train/tiny-cpu.csv [more.csv ...] plots/figures/train.png

Writes the PNG and a PDF beside it.
"""
import sys
from pathlib import Path

from plotlib import read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402


def draw(inputs):
    figure, (loss_axis, speed_axis) = plt.subplots(
        2, 1, figsize=(8, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    revisions = set()
    for path in inputs:
        rows = read_rows(path)
        if not rows:
            continue
        first = rows[0]
        setup = (f"{first.get('backend', '?')} {first.get('dtype', '?')}, {first.get('G', '?')} "
                 f"rank(s), T={first.get('T', '?')} Ep={first.get('Ep', '?')} D={first.get('D', '?')}")
        if (first.get("G"), first.get("backend"), first.get("dtype")) == ("1", "cpu", "fp32"):
            setup += ": the reference"
        name = f"{Path(path).stem} ({setup})"
        steps = [int(r["step"]) for r in rows]  # from 1
        loss_axis.plot(steps, [float(r["loss"]) for r in rows], label=f"{name}: total loss")
        loss_axis.plot(steps, [float(r["lm_loss"]) for r in rows], "--", alpha=0.7,
                       label=f"{name}: LM loss")
        speed_axis.plot(steps, [float(r["tokens_per_s"]) / 1e3 for r in rows], label=name)
        revisions.add(rows[0]["git_revision"])
    loss_axis.set_ylabel("loss (nats per token)")
    loss_axis.set_title("ted_train: loss and speed per optimizer step\n"
                        f"revision {', '.join(sorted(revisions))}", fontsize=10)
    loss_axis.grid(True, alpha=0.3)
    loss_axis.legend(fontsize=8)
    speed_axis.set_ylabel("thousand tokens/s")
    speed_axis.set_xlabel("optimizer step")
    speed_axis.grid(True, alpha=0.3)
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
