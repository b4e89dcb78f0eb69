#!/usr/bin/python3
"""Compares the CSV rows a Slurm job wrote with an mpirun run of the same config.

    slurm_rows.py same <reference.csv> <job CSV> <job id | -> [row=<K>] [<column>=<value> ...]
        the job CSV's rows whose slurm_job is <job id> (with -: all its rows, for a CSV of one
        job without that column, as ted_train's) equal the reference's rows (only its K-th with
        row=K) in number, order and every deterministic column (everything but times, rates, the
        command, the thread count, the job and run ids and the ranks per core); the
        <column>=<value> pairs must hold in each of them
    slurm_rows.py whole <CSV> <least> <most>
        the file is whole rows only (each with the header's field count), between <least> and
        <most> of them; prints the count
    slurm_rows.py jobs <CSV>
        prints each slurm_job value with its row count, one per line
"""
import collections
import csv
import sys

# What differs from run to run or launch to launch: timings and the rates made of them, how the
# program was started, and where.
VOLATILE = {
    "time_ms_median", "time_ms_p10", "time_ms_p90", "compute_ms", "comm_ms", "all_reduce_ms",
    "all_to_all_ms", "all_gather_ms", "reduce_scatter_ms", "other_ms", "pct_of_peak",
    "tokens_per_s", "tflops_per_rank", "time_us_median", "time_us_p10", "time_us_p90",
    "algbw_GBps", "busbw_GBps", "mpi_time_us_median", "mpi_busbw_GBps", "busbw_ratio_vs_mpi",
    "command", "threads", "slurm_job", "run_id", "ranks_per_core",
    "seconds", "gflops_per_s",  # ted_train's columns (the convergence's too)
}


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def read(path):
    with open(path, newline="") as handle:
        lines = list(csv.reader(handle))
    if not lines:
        fail(f"{path} is empty")
    header = lines[0]
    for number, fields in enumerate(lines[1:], start=2):
        if len(fields) != len(header):
            fail(f"{path} line {number}: {len(fields)} fields, the header {len(header)}")
    return [dict(zip(header, fields)) for fields in lines[1:]]


def same(reference_path, path, job, *pairs):
    reference = read(reference_path)
    for pair in pairs:
        if pair.startswith("row="):
            reference = reference[int(pair[4:]) - 1:int(pair[4:])]
    pairs = [pair for pair in pairs if not pair.startswith("row=")]
    rows = [row for row in read(path) if job == "-" or row["slurm_job"] == job]
    if len(rows) != len(reference):
        fail(f"{path}: {len(rows)} rows of job {job}, the mpirun run has {len(reference)}")
    for number, (row, expected) in enumerate(zip(rows, reference), start=1):
        if set(row) != set(expected):
            fail(f"{path}: other columns than {reference_path}")
        for column, value in expected.items():
            if column not in VOLATILE and row[column] != value:
                fail(f"{path} job {job} row {number}: {column} = {row[column]!r}, mpirun "
                     f"{value!r}")
        for pair in pairs:
            column, value = pair.split("=", 1)
            if row[column] != value:
                fail(f"{path} job {job} row {number}: {column} = {row[column]!r}, not {value!r}")
    of = "" if job == "-" else f" of job {job}"
    print(f"ok: {len(rows)} rows{of} in {path} equal the mpirun run's")


def whole(path, least, most):
    rows = read(path)
    if not int(least) <= len(rows) <= int(most):
        fail(f"{path}: {len(rows)} rows, not {least} to {most}")
    print(len(rows))


def jobs(path):
    for job, count in collections.Counter(row["slurm_job"] for row in read(path)).items():
        print(job, count)


if __name__ == "__main__":
    commands = {"same": same, "whole": whole, "jobs": jobs}
    if len(sys.argv) < 3 or sys.argv[1] not in commands:
        fail(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
