#!/usr/bin/python3
"""Training curves from ted_train CSVs: loss (total and LM) against step, one line per CSV,
and tokens/s below.

    /usr/bin/python3 plots/plot_train.py results/train/tiny-cpu.csv [more.csv ...] plots/train.png

Writes the PNG and a PDF beside it.
"""
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    *inputs, output = argv[1:]
    figure, (loss_axis, speed_axis) = plt.subplots(
        2, 1, figsize=(8, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    revisions = set()
    for path in inputs:
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        if not rows:
            continue
        name = Path(path).stem
        steps = [int(r["step"]) + 1 for r in rows]
        loss_axis.plot(steps, [float(r["loss"]) for r in rows], label=f"{name}: total loss")
        loss_axis.plot(steps, [float(r["lm_loss"]) for r in rows], "--", alpha=0.7,
                       label=f"{name}: LM loss")
        speed_axis.plot(steps, [float(r["tokens_per_s"]) / 1e3 for r in rows], label=name)
        revisions.add(rows[0]["git_revision"])
    loss_axis.set_ylabel("loss (nats per token)")
    loss_axis.set_title("Reference training (CPU, fp32)\n"
                        f"revision {', '.join(sorted(revisions))}", fontsize=10)
    loss_axis.grid(True, alpha=0.3)
    loss_axis.legend(fontsize=8)
    speed_axis.set_ylabel("thousand tokens/s")
    speed_axis.set_xlabel("optimizer step")
    speed_axis.grid(True, alpha=0.3)
    figure.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=120)
    figure.savefig(output.with_suffix(".pdf"))
    print(f"wrote {output} and {output.with_suffix('.pdf')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
