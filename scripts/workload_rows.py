#!/usr/bin/env python3
"""Joins ted_project CSVs of one experiment projected under several routing workloads into one,
each row tagged with its workload and capacity rule (columns `workload` and `dropless`, as the
measured experiments' CSVs carry them; filled from the file names when the rows lack them).
    scripts/workload_rows.py OUT.csv WORKLOAD:DROPLESS:IN.csv ...
"""
import csv
import sys


def main(out, parts):
    rows, columns = [], []
    for part in parts:
        workload, dropless, path = part.split(":", 2)
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            for name in reader.fieldnames:
                if name not in columns:
                    columns.append(name)
            for row in reader:
                if not row.get("workload"):
                    row["workload"] = workload
                if not row.get("dropless"):
                    row["dropless"] = dropless
                rows.append(row)
    for name in ("workload", "dropless"):
        if name not in columns:
            columns.append(name)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
