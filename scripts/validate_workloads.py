#!/usr/bin/env python3
"""The projection's per-workload ratios against measured runs: for each system, layout and
capacity rule, the time of each routing workload over the balanced workload's, projected
(ted_project rows tagged by scripts/workload_rows.py) and measured (an experiment's
workloads_<cluster>.csv, columns workload and dropless; the latest row of each point), and the
error of the projected ratio. Prints one line per point and the median |error|; writes a CSV.
    scripts/validate_workloads.py MEASURED.csv PROJECTED.csv OUT.csv
"""
import csv
import statistics
import sys


def key(row):
    return (row["system"], row["T"], row["Ep"], row["D"], row["hidden"], row["layers"],
            row["micro_batches"], row["dropless"])


def times(path):
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):  # the latest row of a point wins
            out[key(row) + (row["workload"],)] = float(row["time_ms_median"])
    return out


def main(measured_csv, projected_csv, out_csv):
    measured, projected = times(measured_csv), times(projected_csv)
    lines, errors = [], []
    for k, t in sorted(measured.items()):
        point, workload = k[:-1], k[-1]
        base = point + ("balanced",)
        if workload in ("balanced", "learned") or base not in measured or k not in projected \
                or base not in projected:
            continue
        m, p = t / measured[base], projected[k] / projected[base]
        error = (p - m) / m
        errors.append(abs(error))
        lines.append(dict(system=point[0], T=point[1], Ep=point[2], D=point[3], hidden=point[4],
                          dropless=point[7], workload=workload, measured_ratio=f"{m:.4f}",
                          projected_ratio=f"{p:.4f}", error=f"{error:+.4f}"))
        print(f"{point[0]:14} T={point[1]} Ep={point[2]} D={point[3]} dropless={point[7]} "
              f"{workload:12} measured x{m:.3f} projected x{p:.3f} ({error:+.1%})")
    with open(out_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(lines[0]) if lines else ["error"],
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows(lines)
    if errors:
        print(f"# median |error| of the ratio {statistics.median(errors):.1%} over {len(errors)} "
              f"points (max {max(errors):.1%})")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
