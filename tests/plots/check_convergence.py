#!/usr/bin/python3
"""Holds a convergence run (ted_convergence's CSV, DeepSpeed's beside it, the figure's sidecar)
to what the paper's validation by training must show:
  - every system starts from the same loss (the same weights on the same tokens) and agrees with
    the first system step by step at first: the first 10 steps within the equality tests'
    tolerance (fp32: 1e-5 relative; a 16-bit system: 1e-2);
  - each system's loss, smoothed over 20 steps, stays within 1% of the first system's to the end;
  - the held-out loss falls (its last value below its first) and ends below the corpus' unigram
    entropy when a corpus summary is given;
  - the figure's sidecar drew every system's curve in the loss panel.
    check_convergence.py <ours.csv> [<deepspeed.csv>] [--corpus summary.json] [--figure F.json]
Prints each check; exit 1 on a failure."""
import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plots"))
from plot_convergence import smoothed, system_of  # noqa: E402

failures = 0


def check(ok, text):
    global failures
    print(("ok    " if ok else "FAIL  ") + text)
    failures += 0 if ok else 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csvs", nargs="+")
    parser.add_argument("--corpus")
    parser.add_argument("--figure")
    args = parser.parse_args()
    systems = {}
    for path in args.csvs:
        for row in csv.DictReader(open(path, newline="")):
            systems.setdefault(system_of(row, path), []).append(row)
    check(len(systems) >= 2, f"{len(systems)} systems: {', '.join(systems)}")
    names = list(systems)
    reference = systems[names[0]]
    ref_loss = [float(r["loss"]) for r in reference]
    ref_mean = smoothed(ref_loss)
    for name in names[1:]:
        rows = systems[name]
        loss = [float(r["loss"]) for r in rows]
        n = min(len(loss), len(ref_loss))
        check(n == len(ref_loss) == len(loss), f"{name}: {len(loss)} steps, {names[0]} {len(ref_loss)}")
        sixteen = rows[0]["dtype"] != "fp32" or reference[0]["dtype"] != "fp32"
        tolerance = 1e-2 if sixteen else 1e-5
        first = abs(loss[0] / ref_loss[0] - 1)
        check(first <= tolerance,
              f"{name}: the first loss {loss[0]:.6f} vs {ref_loss[0]:.6f} ({first:.1e})")
        early = max(abs(a / b - 1) for a, b in zip(loss[:10], ref_loss[:10]))
        check(early <= tolerance, f"{name}: the first 10 steps within {early:.1e} of {names[0]}'s "
              f"(at most {tolerance:g})")
        mean = smoothed(loss[:n])
        worst = max(abs(a / b - 1) for a, b in zip(mean, ref_mean[:n]))
        check(worst <= 0.01, f"{name}: smoothed over 20 steps, at most {100 * worst:.2f}% from "
              f"{names[0]}'s over {n} steps")
    entropy = None
    if args.corpus:
        summary = json.load(open(args.corpus))
        entropy = summary.get("unigram_entropy_nats", summary.get("unigram_entropy"))
    for name, rows in systems.items():
        valid = [float(r["valid_loss"]) for r in rows if r.get("valid_loss")]
        check(len(valid) >= 2 and valid[-1] < valid[0],
              f"{name}: the held-out loss falls: " + " -> ".join(f"{v:.3f}" for v in valid[:1] + valid[-1:]))
        if entropy and valid:
            check(valid[-1] < entropy, f"{name}: the held-out loss {valid[-1]:.3f} ends below the "
                  f"unigram entropy {entropy:.3f}")
    if args.figure:
        sidecar = json.load(open(args.figure))
        panel = next((p for p in sidecar["panels"] if p["name"] == "loss"), None)
        drawn = {s["name"] for s in panel["series"]} if panel else set()
        check(set(names) <= drawn, f"the figure's loss panel draws {len(drawn)} series, every "
              "system among them")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
