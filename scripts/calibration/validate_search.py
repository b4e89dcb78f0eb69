#!/usr/bin/python3
"""Holds a calibrated cluster file to the cluster it describes: every layout and system the
search ranks for an experiment YAML, projected on the file (ted_project search) and measured on
the cluster (the experiment's program through LAUNCH, one run per layout), point by point.

    /usr/bin/python3 scripts/calibration/validate_search.py -c experiments/ablation/cpu.yaml \\
        --cluster experiments/clusters/NAME.yaml --gpus 4 --launch "mpirun -n 4 --oversubscribe" \\
        --measured results/ablation/NAME_layouts.csv [--reuse]

Prints each point's projected and measured time per iteration (the latest row of each point; of
a run in rounds, its summary row) and the error, the median and the
largest |error|, and the search's first layout against the measured fastest. --reuse compares
the rows already in --measured (the latest of each point) without measuring. The search's
deepspeed-moe+cac (T = 1) is measured as ted+cac at T = 1, the same point.
Bad input: one line, exit 2.
"""
import argparse
import csv
import os
import shlex
import statistics
import subprocess
import sys
import tempfile


def die(message):
    print(f"validate_search: {message}", file=sys.stderr)
    sys.exit(2)


def key(row):
    return (int(row["T"]), int(row["Ep"]), int(row["D"]), int(row["micro_batches"]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-c", "--config", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--launch", default="")
    p.add_argument("--measured", required=True)
    p.add_argument("--build", default="build")
    p.add_argument("--reuse", action="store_true")
    a = p.parse_args()
    for path in (a.config, a.cluster):
        if not os.path.isfile(path):
            die(f"cannot read {path}")
    launch = shlex.split(a.launch or f"mpirun -n {a.gpus} --oversubscribe")
    with tempfile.TemporaryDirectory() as tmp:
        projected_csv = os.path.join(tmp, "search.csv")
        r = subprocess.run([f"{a.build}/apps/ted_project", "search", "-c", a.config, "--cluster",
                            a.cluster, "--gpus", str(a.gpus), "--top", "100000", "--csv",
                            projected_csv], capture_output=True, text=True)
        if r.returncode:
            die(f"ted_project search: {r.stderr.strip()}")
        projected = list(csv.DictReader(open(projected_csv)))
    experiment = projected[0]["experiment"]
    measured_as = {"deepspeed-moe+cac": "ted+cac"}
    if not a.reuse:
        layouts = {}
        for row in projected:
            layouts.setdefault(key(row), []).append(measured_as.get(row["system"], row["system"]))
        for (t, ep, d, micro), systems in layouts.items():
            command = launch + [f"{a.build}/apps/ted_{experiment}", "-c", a.config, "--csv",
                                a.measured]
            for s in (f"layout.tp={t}", f"layout.ep={ep}", f"layout.dp={d}",
                      f"data.micro_batches={micro}", "systems=" + ",".join(systems)):
                command += ["--set", s]
            print(f"== measuring T={t} Ep={ep} D={d}, {micro} micro-batches: {', '.join(systems)}",
                  flush=True)
            if subprocess.run(command, stdout=subprocess.DEVNULL).returncode:
                die(f"the run failed: {' '.join(command)}")
    if not os.path.isfile(a.measured):
        die(f"no measured rows in {a.measured}")
    latest = {}
    for row in csv.DictReader(open(a.measured)):
        if row.get("round"):  # interleaved rounds: the point's summary row (round empty) counts
            continue
        latest[key(row) + (row["system"],)] = float(row["time_ms_median"])
    errors, pairs = [], []
    print(f"{'rank':>4} {'system':<18} {'T':>2} {'Ep':>2} {'D':>2} {'projected':>10} {'measured':>10} {'error':>7}")
    for rank, row in enumerate(projected, 1):
        system = measured_as.get(row["system"], row["system"])
        k = key(row) + (system,)
        if k not in latest:
            die(f"{a.measured}: no measured row for {row['system']} at T={k[0]} Ep={k[1]} D={k[2]}")
        proj, meas = float(row["time_ms_median"]), latest[k]
        errors.append(abs(proj / meas - 1))
        pairs.append((rank, row["system"], k, proj, meas))
        print(f"{rank:>4} {row['system']:<18} {k[0]:>2} {k[1]:>2} {k[2]:>2} {proj:>10.1f} "
              f"{meas:>10.1f} {100 * (proj / meas - 1):>+6.1f}%")
    fastest = min(pairs, key=lambda x: x[4])
    first = pairs[0]
    print(f"median |error| {100 * statistics.median(errors):.1f}% over {len(errors)} points, "
          f"largest {100 * max(errors):.1f}%")
    print(f"search's first: {first[1]} T={first[2][0]} Ep={first[2][1]} D={first[2][2]}, measured "
          f"{first[4]:.1f} ms; measured fastest: {fastest[1]} T={fastest[2][0]} Ep={fastest[2][1]} "
          f"D={fastest[2][2]}, {fastest[4]:.1f} ms (rank {fastest[0]} in the search): the first is "
          f"{100 * (first[4] / fastest[4] - 1):+.1f}% of it")


if __name__ == "__main__":
    main()
