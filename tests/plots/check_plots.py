#!/usr/bin/python3
"""The figures say what they draw: plots/plot_ablation.py and plots/plot_scaling.py on CSVs
made from the committed CPU results, checked on the figure objects themselves.
  - several runs in one CSV: the title says the latest row of each point was drawn, and
    --run ID draws that run's rows (an unknown id: one line, exit 2);
  - oversubscribed ranks (ranks_per_core 2): the title says so and the communication part is
    named for the waiting it holds;
  - the parameter count is readable (2.68 M), the legend covers no bar;
  - weak scaling: the ideal time follows the work per rank (rate x time), not a flat line; the
    rate axis is GFLOP/s, the CSV's tflops_per_rank x 1000.
  - the workloads figure (plots/plot_workloads.py) on the committed workload sweeps: one
    capacity and one dropless line per system and layout, balanced at skew 1.0 and, relative
    to itself, 1.0; --per-rank draws the per-rank skew; the memory sweep (nothing timed) draws
    peak bytes; a CSV from before the routing columns is one line, exit 2.

    check_plots.py <repository root> <scratch dir>
"""
import csv
import subprocess
import sys
from pathlib import Path

root, scratch = Path(sys.argv[1]), Path(sys.argv[2])
scratch.mkdir(parents=True, exist_ok=True)
sys.path.insert(0, str(root / "plots"))
import plotlib  # noqa: E402  (selects the Agg backend)
import plot_ablation  # noqa: E402
import plot_scaling  # noqa: E402
import plot_workloads  # noqa: E402

failures = []


def check(condition, what):
    print(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        failures.append(what)


def two_runs(source, target, per_core):
    """source's rows twice, as runs A (times x 2) and B (as measured), with run ids."""
    rows = list(csv.DictReader(open(source)))
    # The latest run's summary rows (a run in rounds has a row per round too).
    if any(r.get("round") for r in rows):
        rows = [r for r in rows if r.get("run_id") == rows[-1].get("run_id") and not r.get("round")]
    columns = list(rows[0].keys()) + [c for c in ("ranks_per_core", "run_id") if c not in rows[0]]
    with open(target, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        for run, factor in (("A", 2.0), ("B", 1.0)):
            for row in rows:
                row = dict(row, run_id=run, ranks_per_core=per_core)
                for column in ("time_ms_median", "time_ms_p10", "time_ms_p90", "compute_ms",
                               "comm_ms"):
                    if row[column]:
                        row[column] = str(float(row[column]) * factor)
                writer.writerow(row)
    return rows


def select(run):
    plotlib._selection["run"] = run


# --- the ablation figure
ablation_csv = scratch / "ablation.csv"
rows = two_runs(root / "results/ablation/cpu.csv", ablation_csv, "2")
select(None)
figure = plot_ablation.draw([str(ablation_csv)])
title = figure._suptitle.get_text()
check("2.68 M parameters" in title, f"readable parameter count in the title: {title!r}")
check("2 ranks per core" in title, "the title says the ranks were oversubscribed")
check(f"the latest row of each point: {len(rows)} of {2 * len(rows)} rows, from 2 runs" in title,
      "the title says the latest row of each point was drawn")
times = figure.axes[0]
labels = [t.get_text() for t in times.get_legend().get_texts()]
check(any("waiting" in label for label in labels), f"communication named with waiting: {labels}")
figure.canvas.draw()
legend_box = times.get_legend().get_window_extent()
bars = [p.get_window_extent() for p in times.patches if p.get_height() > 0]
check(bars and not any(legend_box.overlaps(b) for b in bars), "the legend covers no bar")
drawn = sorted(p.get_y() + p.get_height() for p in times.patches)[-1]
measured = max(float(r["time_ms_median"]) for r in rows)
check(abs(drawn - measured) < 1e-6 * measured, "the latest run (B) drawn by default")
select("A")
figure = plot_ablation.draw([str(ablation_csv)])
drawn = sorted(p.get_y() + p.get_height() for p in figure.axes[0].patches)[-1]
check(abs(drawn - 2 * measured) < 1e-6 * measured and "run A" in figure._suptitle.get_text(),
      "--run A draws run A and says so")
select(None)
single = scratch / "single.csv"  # one run, without ranks_per_core (as rows before it was kept)
with open(single, "w", newline="") as handle:
    writer = csv.DictWriter(handle, list(rows[0].keys()))
    writer.writeheader()
    writer.writerows(dict(row, ranks_per_core="", run_id="") for row in rows)
figure = plot_ablation.draw([str(single)])
title = figure._suptitle.get_text()
check("latest" not in title and "per core" not in title,
      "one run, ranks_per_core not recorded: no note")
result = subprocess.run([sys.executable, str(root / "plots/plot_ablation.py"), "--run", "Z",
                         str(ablation_csv), str(scratch / "z.png")], capture_output=True, text=True)
check(result.returncode == 2 and result.stderr.count("\n") == 1 and "no row of run Z" in
      result.stderr and not (scratch / "z.png").exists(),
      f"an unknown --run: one line, exit 2, no figure ({result.stderr.strip()!r})")

# --- the weak-scaling figure
weak_csv = scratch / "weak.csv"
rows = two_runs(root / "results/weak_scaling/cpu.csv", weak_csv, "2")
figure = plot_scaling.draw([str(weak_csv)])
times, rates = figure.axes
check("GFLOP/s" in rates.get_ylabel() and "tflops_per_rank x 1000" in rates.get_ylabel(),
      f"rate axis units: {rates.get_ylabel()!r}")
timed = [r for r in rows if r["system"] == "ted" and float(r["time_ms_median"] or 0) > 0]
timed.sort(key=lambda r: int(r["G"]))
work = [float(r["tflops_per_rank"]) * float(r["time_ms_median"]) for r in timed]
expected = [float(timed[0]["time_ms_median"]) * w / work[0] for w in work]
ideal = next(line for line in times.get_lines() if line.get_label().startswith("ted, ideal"))
check(all(abs(a - b) < 1e-6 * b for a, b in zip(ideal.get_ydata(), expected)),
      f"weak-scaling ideal follows work per rank: {list(ideal.get_ydata())} vs {expected}")
check(expected[-1] > 2 * expected[0], "the ideal grows (work per rank x%.2g)" %
      (work[-1] / work[0]))
check("2 ranks per core" in figure._suptitle.get_text(), "scaling title says oversubscribed")

# --- the workloads figure
select(None)
workloads_csv = root / "results/ablation/workloads_cpu.csv"
rows = list(csv.DictReader(open(workloads_csv)))
figure = plot_workloads.draw([str(workloads_csv)])
absolute, relative, dropped, moved = figure.axes
layouts = {(r["system"], r["T"], r["Ep"], r["D"]) for r in rows}
check(len(absolute.get_lines()) == 2 * len(layouts),
      f"a capacity and a dropless line per system and layout ({len(layouts)} layouts)")
check({"ted", "deepspeed-moe"} <= {r["system"] for r in rows}, "TED's and DeepSpeed-MoE's layouts")
ones = [line for line in relative.get_lines() if line.get_label().endswith("capacity")
        and any(abs(x - 1) < 1e-12 and abs(y - 1) < 1e-12
                for x, y in zip(line.get_xdata(), line.get_ydata()))]
check(len(ones) == len(layouts), "balanced with capacity: skew 1.0 and relative time 1.0")
check("per expert" in absolute.get_xlabel() and "ms" in absolute.get_ylabel(),
      f"axes: {absolute.get_xlabel()!r}, {absolute.get_ylabel()!r}")
plot_workloads.options["per_rank"] = True
figure = plot_workloads.draw([str(workloads_csv)])
check("per expert rank" in figure.axes[0].get_xlabel(), "--per-rank: the per-rank skew")
plot_workloads.options["per_rank"] = False
figure = plot_workloads.draw([str(root / "results/memory/workloads_cpu.csv")])
check("peak bytes" in figure.axes[0].get_ylabel(), "the memory sweep (untimed): peak bytes")
old_csv = scratch / "before_routing_columns.csv"  # the ablation's rows without them
with open(root / "results/ablation/cpu.csv") as handle:
    old_rows = list(csv.DictReader(handle))
routing_columns = {"workload", "dropless", "expert_load_max", "expert_load_mean",
                   "expert_load_min", "rank_load_max", "rank_load_mean", "dropped_fraction",
                   "all_to_all_rank_bytes_max", "all_to_all_rank_bytes_mean", "straggler_rank",
                   "straggler_time_ms", "straggler_compute_ms", "straggler_comm_ms",
                   "straggler_all_to_all_ms", "rank_compute_ms_mean"}
with open(old_csv, "w", newline="") as handle:
    kept = [c for c in old_rows[0] if c not in routing_columns]
    writer = csv.DictWriter(handle, kept, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(old_rows)
(scratch / "old.png").unlink(missing_ok=True)  # from an earlier run
result = subprocess.run([sys.executable, str(root / "plots/plot_workloads.py"),
                         str(old_csv), str(scratch / "old.png")],
                        capture_output=True, text=True)
check(result.returncode == 2 and result.stderr.count("\n") == 1 and "expert_load_mean" in
      result.stderr and not (scratch / "old.png").exists(),
      f"a CSV from before the routing columns: one line, exit 2 ({result.stderr.strip()!r})")

if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("all figure checks passed")
