#!/usr/bin/python3
"""The paper's validation by training, in its form: training loss against optimizer step, one
line per system (ted_convergence's rows, column system; DeepSpeed's training rows of
baselines/deepspeed, named deepspeed-<version> at T = 1 and DeepSpeed-TED at T > 1), each the
mean of the 20 steps around each drawn over its raw steps, the held-out loss as markers, and below each
system's smoothed loss relative to the first input's first system, with the 1% band. A corpus
summary (a .json input with unigram_entropy, scripts/data/prepare_corpus.sh) adds the loss of a
model without context as a line.

    /usr/bin/python3 plots/plot_convergence.py results/convergence/cpu.csv \
        [results/convergence/deepspeed_cpu.csv ...] [corpus.json] plots/figures/convergence_cpu.png

Writes the PNG, a PDF and the sidecar (JSON) beside it.
"""
import json
import sys
from pathlib import Path

from plotlib import BadInput, read_rows, run  # first: selects the Agg backend

import matplotlib.pyplot as plt  # noqa: E402

WINDOW = 20  # steps in the moving mean, as the acceptance's "smoothed over 20 steps"


def smoothed(values, window=WINDOW):
    """The mean of the `window` steps centred on each, so the smooth curve lies on the raw one:
    at the start the window narrows symmetrically (the first step is its own mean, where the loss
    falls fastest), at the end it is the last `window` steps. Every system is smoothed alike
    before two are compared."""
    prefix = [0.0]
    for value in values:
        prefix.append(prefix[-1] + value)
    out, n = [], len(values)
    for i in range(n):
        half = min(window // 2, i)
        low, high = i - half, min(n, i + half + 1)
        if high - low < 2 * half + 1:  # the end: the last full window
            low = max(0, n - window)
        out.append((prefix[high] - prefix[low]) / (high - low))
    return out


def system_of(row, path):
    if row.get("system"):
        return row["system"]
    # DeepSpeed's training rows (ted_train's schema): named by the runner's configuration.
    name = "DeepSpeed-TED" if int(row.get("T") or 1) > 1 else "DeepSpeed-MoE"
    return f"{name} ({Path(path).stem})"


def curves(inputs):
    systems, entropy, machines, revisions = {}, None, set(), set()
    for path in inputs:
        if path.endswith(".json"):
            summary = json.load(open(path))
            entropy = summary.get("unigram_entropy_nats", summary.get("unigram_entropy"))
            continue
        for row in read_rows(path):
            name = system_of(row, path)
            curve = systems.setdefault(name, {"steps": [], "loss": [], "valid": [], "seconds": 0.0,
                                              "row": row})
            step = int(row["step"])
            if curve["steps"] and step <= curve["steps"][-1]:  # a later run of the same system
                curve.update(steps=[], loss=[], valid=[], seconds=0.0)
            curve["steps"].append(step)
            curve["loss"].append(float(row["loss"]))
            curve["seconds"] += float(row.get("seconds") or 0)
            if row.get("valid_loss"):
                curve["valid"].append((step, float(row["valid_loss"])))
            machines.add(f"{row.get('backend', '?')} ({row.get('blas_kernel') or row.get('blas', '')}"
                         " BLAS kernels)")
            revisions.add(row.get("git_revision", "?"))
    if not systems:
        raise BadInput("no training rows in " + ", ".join(inputs))
    return systems, entropy, machines, revisions


def draw(inputs):
    systems, entropy, machines, revisions = curves(inputs)
    figure, (loss_axis, diff_axis) = plt.subplots(
        2, 1, figsize=(9, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    loss_axis.set_gid("loss")
    diff_axis.set_gid("difference")
    reference_name = next(iter(systems))
    reference = dict(zip(systems[reference_name]["steps"], smoothed(systems[reference_name]["loss"])))
    for index, (name, curve) in enumerate(systems.items()):
        color = f"C{index}"
        row = curve["row"]
        label = (f"{name}: T={row.get('T')} Ep={row.get('Ep')} D={row.get('D')}, "
                 f"{row.get('dtype')}, {curve['seconds']:.0f} s")
        loss_axis.plot(curve["steps"], curve["loss"], color=color, alpha=0.2, linewidth=0.8)
        mean = smoothed(curve["loss"])
        # Curves that agree lie on each other: each its own dash and width, so all stay visible.
        style = dict(linestyle=("-", "--", ":", "-.")[index % 4], linewidth=2.4 - 0.4 * (index % 4))
        loss_axis.plot(curve["steps"], mean, color=color, label=label, gid=f"series|{name}", **style)
        if curve["valid"]:
            steps, values = zip(*curve["valid"])
            loss_axis.plot(steps, values, "o", color=color, markersize=4,
                           label=f"{name}: held-out loss", gid=f"series|{name} held-out")
        pairs = [(s, 100.0 * (m / reference[s] - 1.0)) for s, m in zip(curve["steps"], mean)
                 if s in reference]
        if pairs and name != reference_name:
            steps, percent = zip(*pairs)
            diff_axis.plot(steps, percent, color=color, label=name, gid=f"series|{name}", **style)
    if entropy:
        loss_axis.axhline(entropy, color="gray", linestyle=":", linewidth=1,
                          label=f"unigram entropy of the corpus ({entropy:.2f} nats)")
    loss_axis.set_ylabel(f"training loss (nats per token; lines: mean of {WINDOW} steps)")
    loss_axis.set_title(
        "Validation by training: the systems' losses from the same weights on the same tokens\n"
        f"{'; '.join(sorted(machines))}; revision {', '.join(sorted(revisions))}", fontsize=9)
    loss_axis.grid(True, alpha=0.3)
    loss_axis.legend(fontsize=7)
    diff_axis.axhspan(-1, 1, color="gray", alpha=0.15, label="within 1%")
    diff_axis.axhline(0, color="black", linewidth=0.6)
    diff_axis.set_ylabel(f"vs {reference_name} (%)", fontsize=8)
    diff_axis.set_xlabel("optimizer step")
    diff_axis.grid(True, alpha=0.3)
    diff_axis.legend(fontsize=7)
    figure.ted_sidecar = {"figure": "convergence", "form": "paper", "reference": reference_name,
                          "window": WINDOW}
    return figure


if __name__ == "__main__":
    sys.exit(run(draw, __doc__))
