#!/usr/bin/python3
"""The memory table of baselines/deepspeed/memory_table.sh: per layout and category, our
tracking allocator's peak (ted_ablation), DeepSpeed-TED's count of its own tensors and our
projection, the model's embedding tied and vocabulary-parallel on all three (as Megatron's GPT),
with the ratios to DeepSpeed's, as one CSV (a row per layout and category) and one Markdown file.
    memory_table.py <runs dir> <out.csv> <out.md>
"""
import csv
import re
import sys
from pathlib import Path

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "communication",
              "cac_stash", "optimizer_temporaries")
COLUMNS = ["layout", "G", "T", "Ep", "D", "variant", "model", "system", "deepspeed_system",
           "dtype", "category",
           "ours_bytes", "deepspeed_bytes", "projection_bytes",
           "ours_over_deepspeed", "projection_over_deepspeed", "cpu", "git_revision"]


def one_row(path, predicate):
    with open(path, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if predicate(r)]
    if len(rows) != 1:
        raise SystemExit(f"memory_table.py: {path}: expected one row, found {len(rows)}")
    return rows[0]


def saved_for_backward(path):
    """Of the activations, what the model keeps for backward at its largest: the figure the
    progress line of ted_ablation / ted_project prints (GptModel::saved_peak_bytes,
    projection::MemoryEstimate::activations_saved)."""
    found = re.findall(r"saved for backward (\d+) B", Path(path).read_text())
    if len(found) != 1:
        raise SystemExit(f"memory_table.py: {path}: expected one 'saved for backward' figure, "
                         f"found {len(found)}")
    return int(found[0])


def ratio(a, b):
    return f"{a / b:.3f}" if b else ""


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def kib(value):
    return f"{value / 1024:,.1f}"


def main():
    runs, out_csv, out_md = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    rows, sections = [], []
    variants = {"": "", "whole": "whole experts (parallel.split_experts false)",
                "bf16": "bf16 (run.dtype; ours' gradients fp32)",
                "bf16g": "bf16, ours' gradients bf16 (training.grad_dtype)"}
    layouts = sorted({p.stem.split("_", 1)[1] for p in runs.glob("ours_*.csv")},
                     key=lambda l: (l.partition("-")[2],
                                    [int(x) for x in l.partition("-")[0].split("x")]))
    for layout in layouts:
        ours = one_row(runs / f"ours_{layout}.csv", lambda r: True)
        deepspeed_row = lambda r: r["system"].startswith("deepspeed")  # noqa: E731
        ds = one_row(runs / f"deepspeed_{layout}.csv", deepspeed_row)
        projection = one_row(runs / f"projection_{layout}.csv", lambda r: True)
        for side in (ds, projection):
            for key in ("G", "T", "Ep", "D", "model"):
                if side[key] != ours[key]:
                    raise SystemExit(f"memory_table.py: {layout}: {key} differs between the sides")
        variant = variants[layout.partition("-")[2]]
        lines = [f"### T = {ours['T']}, Ep = {ours['Ep']}, D = {ours['D']} ({ours['G']} ranks)"
                 f"{', ' + variant if variant else ''}, {ours['model']}, {ours['dtype']}, ours "
                 f"{ours['system']}, DeepSpeed {ds['system']}", "",
                 "| category | ours (KiB) | DeepSpeed (KiB) | projection (KiB) | "
                 "ours / DeepSpeed | projection / DeepSpeed |",
                 "|---|---:|---:|---:|---:|---:|"]
        # The activations twice: ours' peak of every activation allocation (the gradients of
        # activations and the temporaries included), then what is kept for backward, the same
        # thing DeepSpeed's count of autograd's saved tensors is.
        for c in CATEGORIES[:4] + ("activations_saved",) + CATEGORIES[4:]:
            key = f"peak_{c}_bytes"
            if c == "activations_saved":
                o = saved_for_backward(runs / f"ours_{layout}.txt")
                d = int(ds["peak_activations_bytes"] or 0)
                p = saved_for_backward(runs / f"projection_{layout}.txt")
            else:
                o, d, p = (int(side[key] or 0) for side in (ours, ds, projection))
            rows.append({"layout": layout, "G": ours["G"], "T": ours["T"], "Ep": ours["Ep"],
                         "D": ours["D"], "variant": layout.partition("-")[2],
                         "model": ours["model"], "system": ours["system"],
                         "deepspeed_system": ds["system"], "dtype": ours["dtype"],
                         "category": c, "ours_bytes": o,
                         "deepspeed_bytes": d, "projection_bytes": p,
                         "ours_over_deepspeed": ratio(o, d),
                         "projection_over_deepspeed": ratio(p, d), "cpu": cpu_name(),
                         "git_revision": ds["git_revision"]})
            label = {"activations": "activations (ours: every allocation at the peak)",
                     "activations_saved": "activations saved for backward"}.get(c, c)
            lines.append(f"| {label} | {kib(o)} | {kib(d)} | {kib(p)} | {ratio(o, d)} | "
                         f"{ratio(p, d)} |")
        sections.append("\n".join(lines))
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with open(out_csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    text = [
        "# Memory per rank by category: ours, DeepSpeed-TED, the projection",
        "",
        "Written by `baselines/deepspeed/memory_table.sh` (the explanation of every category "
        "where ours holds more: [docs/deepspeed.md](../../docs/deepspeed.md), \"Memory beside "
        "DeepSpeed's\"). Per rank, the largest over the ranks, one optimizer step of "
        "`experiments/ablation/cpu.yaml`'s model (system ted+dtd; the token embedding tied to "
        "the LM head and split over the tensor group by vocabulary, on every side) on CPU ranks, "
        "in fp32 unless the heading says otherwise. Ours: the tracking allocator's peak per category "
        "(`ted_ablation`); DeepSpeed: its own tensors at their largest over the step "
        "(`baselines/deepspeed/memory_count.py`: ZeRO's flat weights, the gradients, ZeRO's "
        "fp32 partitions and Adam's moments, the reduce buckets, the fp32 gradient partition "
        "of the step, the tensors autograd saves for backward); the projection: "
        "`ted_project experiment` (`lib/ted/projection/memory.cpp`). A ratio is empty where "
        "DeepSpeed holds none. Activations are given twice: ours' category holds every "
        "activation allocation at its peak, the backward's gradients of activations and the "
        "forward's temporaries included, which DeepSpeed's count of saved tensors does not "
        "see; the row below it compares the same thing on both sides: what the model keeps "
        "for backward at its largest (ours: `GptModel::saved_peak_bytes`, counted off its own "
        "tensors; the projection: `MemoryEstimate::activations_saved`; DeepSpeed: its "
        f"activations). CPU: {cpu_name()}.",
        ""] + [s + "\n" for s in sections]
    out_md.write_text("\n".join(text))
    print(f"# {out_csv} ({len(rows)} rows), {out_md}")


if __name__ == "__main__":
    main()
