#!/usr/bin/python3
"""Holds the DeepSpeed runner's CSV columns (baselines/deepspeed/run.py TRAIN_COLUMNS and
EXPERIMENT_COLUMNS) equal to the C++ tables that declare them (lib/ted/run/train_csv.cpp,
lib/ted/experiments/rows.cpp), as print_csv_columns prints them:
    check_csv_columns.py <print_csv_columns> <repository root>
Python cannot read the C++ tables, and run.py runs where nothing of ours is built, so it keeps
its copy; this test makes the copy fail loudly the day the two part. Exit 1 on a difference."""
import subprocess
import sys
from pathlib import Path

program, root = sys.argv[1], Path(sys.argv[2])
sys.path.insert(0, str(root / "baselines/deepspeed"))
import run  # noqa: E402  (needs only PyYAML: DeepSpeed and torch are imported where used)

ours = {}
for line in subprocess.run([program], check=True, capture_output=True, text=True).stdout.splitlines():
    name, _, columns = line.partition(": ")
    ours[name] = columns.split(",")
failed = False
for name, theirs in (("train", list(run.TRAIN_COLUMNS)), ("experiments", list(run.EXPERIMENT_COLUMNS))):
    if theirs == ours[name]:
        print(f"ok    {name}: run.py's {len(theirs)} columns are the C++ table's, in its order")
        continue
    failed = True
    first = next((i for i, (a, b) in enumerate(zip(theirs, ours[name])) if a != b),
                 min(len(theirs), len(ours[name])))
    print(f"FAIL  {name}: run.py has {len(theirs)} columns, the C++ table {len(ours[name])}; "
          f"first difference at column {first + 1}: run.py "
          f"{theirs[first] if first < len(theirs) else '(none)'}, C++ "
          f"{ours[name][first] if first < len(ours[name]) else '(none)'}")
sys.exit(1 if failed else 0)
