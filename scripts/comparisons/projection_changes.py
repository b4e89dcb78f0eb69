#!/usr/bin/python3
"""The paper's projected points, a git revision's committed CSVs against the checkout's
(scripts/project.sh writes them to results/projection/), as docs/history/projection_changes.md lists
them: per experiment, every point whose time, memory or fits verdict moved, with its step time
(s), its gradients' and total peak (GB per rank) old and new, and a line for the points that did
not move.
    scripts/comparisons/projection_changes.py <revision> [experiment CSV stems...]
Default stems: the weak and strong scaling, the fixed 6.7B-4E strong scaling, the ablation, the
largest model and the optimizer spike."""
import csv
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEMS = {
    "weak_scaling_paper_summit": "Weak scaling (Summit)",
    "strong_scaling_paper_summit": "Strong scaling (Summit)",
    "strong_scaling_paper-6.7B-4E_summit": "Strong scaling, 6.7B with 4 experts (Summit)",
    "ablation_paper_summit": "Ablation (Summit, 128 GPUs)",
    "memory_paper_summit": "Largest trainable model (Summit)",
    "memory_paper-spike_thetagpu": "Optimizer spike (ThetaGPU)",
}


def rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def key(row):
    return (row["system"], row["G"], row["T"], row["Ep"], row["D"], row["model"])


def keyed(rows_):
    """Each row by its point, and its place among the rows of the same point (the optimizer
    spike's tiled and untiled step share one)."""
    seen, out = {}, {}
    for r in rows_:
        k = key(r)
        seen[k] = seen.get(k, 0) + 1
        out[k + (seen[k],)] = r
    return out


def gb(row, column):
    return int(row[column]) / 1e9


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    revision, stems = sys.argv[1], sys.argv[2:] or list(STEMS)
    for stem in stems:
        path = f"results/projection/{stem}.csv"
        try:
            old_text = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{path}"],
                                      check=True, capture_output=True, text=True).stdout
        except subprocess.CalledProcessError:
            sys.exit(f"projection_changes.py: {path} is not in revision {revision}")
        old = keyed(rows(old_text))
        new = keyed(rows((ROOT / path).read_text()))
        print(f"### {STEMS.get(stem, stem)}\n")
        print("| system | G | T | Ep | D | model | step time old/new (s) | gradients old/new (GB) "
              "| peak old (GB) | peak new (GB) | new/old | fits old/new |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        unmoved, missing = 0, 0
        for k, r in new.items():
            o = old.get(k)
            if o is None:
                missing += 1
                continue
            same = all(o[c] == r[c] for c in ("time_ms_median", "peak_gradients_bytes",
                                              "peak_total_bytes", "fits"))
            if same:
                unmoved += 1
                continue
            print(f"| {' | '.join(key(r))} | {float(o['time_ms_median']) / 1e3:.2f}/"
                  f"{float(r['time_ms_median']) / 1e3:.2f} | {gb(o, 'peak_gradients_bytes'):.2f}/"
                  f"{gb(r, 'peak_gradients_bytes'):.2f} | {gb(o, 'peak_total_bytes'):.2f} | "
                  f"{gb(r, 'peak_total_bytes'):.2f} | "
                  f"{int(r['peak_total_bytes']) / int(o['peak_total_bytes']):.3f} | "
                  f"{o['fits']}/{r['fits']} |")
        print(f"\n{unmoved} points unmoved; {missing} points new (a layout or model the old "
              f"revision did not have)\n")


main()
