"""What every plot script shares: argument handling (CSV inputs, then the output PNG) and
saving the figure as PNG and PDF."""
import csv
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def run(draw, doc):
    """Calls draw(inputs) -> figure with the CSV paths of the command line, saves the figure to
    the last argument (PNG and a PDF beside it) and returns the exit code."""
    if len(sys.argv) < 3:
        print(doc.strip(), file=sys.stderr)
        return 2
    *inputs, output = sys.argv[1:]
    figure = draw(inputs)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(output, dpi=120)
    figure.savefig(output.with_suffix(".pdf"))
    print(f"wrote {output} and {output.with_suffix('.pdf')}")
    return 0


def latest(rows, key_columns):
    """The last row of every configuration (rows appended by later runs replace earlier ones),
    in the order the configurations first appear."""
    chosen = {}
    for row in rows:
        chosen[tuple(row[c] for c in key_columns)] = row
    return list(chosen.values())


def is_baseline(row):
    """A row of another framework run on our configs (baselines/deepspeed: system
    deepspeed-<version>), not of this suite."""
    return re.match(r"deepspeed-\d", row["system"]) is not None


def mib(value):
    return float(value) / 2**20
