#!/usr/bin/python3
"""The rounds, the disturbance flag and the main job's ablation figure, from the CSVs and the
figures' sidecars that tests/apps/rounds_disturbance.sh leaves in <scratch>:
quiet.csv, busy.csv (ted_ablation, 3 rounds), quiet-here.csv, busy-here.csv (ted_project
validate), paper.csv (ted_project experiment on Summit), quiet.json, busy.json (sidecars).

    check_ablation_figure.py <scratch dir>
"""
import csv
import json
import statistics
import sys
from pathlib import Path

scratch = Path(sys.argv[1])
failures = []


def check(condition, what):
    print(("ok: " if condition else "FAILED: ") + what)
    if not condition:
        failures.append(what)


def rows(name):
    return list(csv.DictReader(open(scratch / name)))


def close(a, b, tolerance=1e-6):
    return abs(a - b) <= tolerance * max(1.0, abs(a), abs(b))


for run in ("quiet", "busy"):
    table = rows(f"{run}.csv")
    rounds = [r for r in table if r["round"]]
    summaries = [r for r in table if not r["round"]]
    systems = [r["system"] for r in summaries]
    count = int(summaries[0]["rounds"])
    # Interleaving: round k (1-based) runs every system once, starting at system k - 1.
    order = [(int(r["round"]), r["system"]) for r in rounds]
    expected = [(k + 1, systems[(k + j) % len(systems)])
                for k in range(count) for j in range(len(systems))]
    check(order == expected, f"{run}: the rounds alternate the systems, rotated: {order}")
    check(count == 3 and len(summaries) == 3, f"{run}: a summary row per system, 3 rounds")
    verdicts = {r["disturbed"] for r in summaries}
    check(len(verdicts) == 1, f"{run}: one verdict on every summary row: {verdicts}")
    for s in summaries:
        medians = [float(r["time_ms_median"]) for r in rounds if r["system"] == s["system"]]
        spread = (max(medians) - min(medians)) / statistics.median(medians) * 100
        check(close(float(s["round_spread_pct"]), spread, 1e-4),
              f"{run} {s['system']}: round_spread_pct {s['round_spread_pct']} is its rounds' "
              f"(largest - smallest) / median, {spread:.4g}")
        pooled = float(s["time_ms_median"])
        check(min(medians) * (1 - 1e-9) <= pooled <= max(medians) * (1 + 1e-9),
              f"{run} {s['system']}: the pooled median {pooled:.4g} lies among its rounds' "
              f"medians {[round(m, 3) for m in medians]}")
        check(float(s["others_cpu_pct"]) == max(float(r["others_cpu_pct"]) for r in rounds
                                                if r["system"] == s["system"]),
              f"{run} {s['system']}: others_cpu_pct is the most of its rounds'")
    # The verdict: any round's others or steal over its limit, or a spread over 35 %.
    flagged = (any(r["disturbed"] == "1" for r in rounds) or
               any(float(s["round_spread_pct"]) > 35 for s in summaries))
    check(verdicts == {"1" if flagged else "0"}, f"{run}: the verdict follows its rounds")
    sidecar = json.load(open(scratch / f"{run}.json"))
    check(sidecar["disturbed"] == (verdicts == {"1"}),
          f"{run}: the figure's verdict is the CSV's ({sidecar['machine']!r})")

quiet, busy = rows("quiet.csv"), rows("busy.csv")
check({r["disturbed"] for r in quiet if not r["round"]} == {"0"}, "the quiet run: not disturbed")
check({r["disturbed"] for r in busy if not r["round"]} == {"1"},
      "the run beside a busy loop: disturbed")
busiest = max(float(r["others_cpu_pct"]) for r in busy if r["round"])
check(busiest > 10, f"the busy loop's share is measured: up to {busiest:.1f}% of the cores")
check(json.load(open(scratch / "busy.json"))["machine"].startswith("DISTURBED"),
      "the busy run's figure says DISTURBED")

# The three panels of the quiet run's figure.
sidecar = json.load(open(scratch / "quiet.json"))
panels = {p["name"]: p for p in sidecar["panels"]}
check(list(panels) == ["measured", "projected_here", "projected_paper"],
      f"three panels: measured, projected here, projected for the paper: {list(panels)}")
check(panels["measured"]["title"].startswith("Measured here") and
      panels["projected_here"]["title"].startswith("Projected here") and
      panels["projected_paper"]["title"].startswith("Projected for the paper"),
      "each panel says which it is")


def check_bars(panel, table, compute, comm, what):
    """A bar per system of `table` in `panel`, its two parts the table's columns."""
    bars = panels[panel]["bars"]
    check(sorted(b["name"] for b in bars) == sorted(table), f"{what}: a bar per system")
    for bar in bars:
        parts = {s["part"]: s["height"] for s in bar["segments"]}
        row = table[bar["name"]]
        check(close(parts["computation"], float(row[compute])) and
              close(parts["communication"], float(row[comm])),
              f"{what} {bar['name']}: the bar is the CSV's split")


summaries = {r["system"]: r for r in quiet if not r["round"]}
check_bars("measured", summaries, "compute_ms", "comm_ms", "measured")
notes = {n["what"]: n["text"] for n in panels["measured"]["notes"]}
for system, row in summaries.items():
    mib = float(row["all_to_all_bytes"]) / 2**20
    check(notes.get(system, "").startswith(f"a2a {mib:.2f} MiB"),
          f"measured {system}: the all-to-all bytes above its bar ({notes.get(system)!r})")
here = {r["system"]: r for r in rows("quiet-here.csv")}
check_bars("projected_here", here, "predicted_compute_ms", "predicted_comm_ms", "projected here")
points = panels["projected_here"]["series"][0]["points"]
for point, system in zip(points, summaries):
    error = float(here[system]["relative_error"]) * 100
    check(close(point["y"], float(here[system]["measured_ms"])) and
          point.get("label") == f"{error:+.0f}%",
          f"projected here {system}: the measured median beside it, error {point.get('label')}")
errors = [abs(float(r["relative_error"])) * 100 for r in here.values()]
check(f"median {statistics.median(errors):.0f}%" in panels["projected_here"]["title"],
      "the projection's median error is stated")
paper = {r["system"]: r for r in rows("paper.csv")}
for bar in panels["projected_paper"]["bars"]:
    total = sum(s["height"] for s in bar["segments"])
    check(close(total, float(paper[bar["name"]]["time_ms_median"]) / 1e3, 1e-6),
          f"paper {bar['name']}: the bar is the projected time, {total:.2f} s")
check("summit" in panels["projected_paper"]["title"] and
      "128 x" in panels["projected_paper"]["title"], "the paper's panel names its cluster")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
