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


class BadInput(Exception):
    """Input the figure cannot be drawn from: one line, exit code 2."""


_selection = {"run": None, "note": ""}  # --run ID, and what latest() says it drew


def run(draw, doc):
    """Calls draw(inputs) -> figure with the CSV paths of the command line, saves the figure to
    the last argument (PNG and a PDF beside it) and returns the exit code. `--run ID` anywhere
    on the command line: latest() keeps only that run's rows (column run_id)."""
    arguments = sys.argv[1:]
    if "--run" in arguments:
        at = arguments.index("--run")
        if at + 1 >= len(arguments):
            print("error: --run needs a run id (the CSV's run_id column)", file=sys.stderr)
            return 2
        _selection["run"] = arguments[at + 1]
        del arguments[at:at + 2]
    if len(arguments) < 2:
        print(doc.strip(), file=sys.stderr)
        return 2
    *inputs, output = arguments
    try:
        figure = draw(inputs)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(output, dpi=120)
    figure.savefig(output.with_suffix(".pdf"))
    print(f"wrote {output} and {output.with_suffix('.pdf')}")
    return 0


def run_of(row):
    """The run a row came from: its run_id, or for rows written before runs had ids, its
    revision and command."""
    return row.get("run_id") or (row.get("git_revision", ""), row.get("command", ""))


def latest(rows, key_columns):
    """The rows a figure draws: with --run ID that run's rows; else the last row of every
    configuration (rows appended by later runs replace earlier ones), in the order the
    configurations first appear. What was chosen is in selection_note()."""
    wanted = _selection["run"]
    if wanted is not None:
        runs = list(dict.fromkeys(r.get("run_id", "") for r in rows))
        rows = [r for r in rows if r.get("run_id") == wanted]
        if not rows:
            raise BadInput(f"no row of run {wanted}; the CSVs' runs: "
                           + (", ".join(x for x in runs if x) or "none (no run_id column)"))
    chosen = {}
    for row in rows:
        chosen[tuple(row[c] for c in key_columns)] = row
    runs = len({run_of(r) for r in rows})
    if wanted is not None:
        _selection["note"] = f"run {wanted}"
    elif len(chosen) < len(rows):
        _selection["note"] = (f"the latest row of each point: {len(chosen)} of {len(rows)} rows, "
                              f"from {runs} runs (--run ID draws one)")
    else:
        _selection["note"] = ""
    return list(chosen.values())


def selection_note():
    """What latest() drew, for the title: "" when the CSVs hold one row per point."""
    return _selection["note"]


def ranks_per_core(rows):
    """The most ranks per CPU core of the rows' measurements (column ranks_per_core), 0 when
    not recorded."""
    return max((float(r.get("ranks_per_core") or 0) for r in rows), default=0.0)


def oversubscribed_note(rows):
    """A line saying the ranks shared cores, when they did ("" otherwise)."""
    per_core = ranks_per_core(rows)
    if per_core <= 1:
        return ""
    return (f"Oversubscribed: {per_core:g} ranks per core. A rank waiting for a peer the OS has "
            "not scheduled counts that wait as communication.")


def readable_count(value):
    """2713088 -> "2.7 M", 6.7e9 -> "6.7 B"."""
    value = float(value)
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f}"


def is_baseline(row):
    """A row of another framework run on our configs (baselines/deepspeed: system
    deepspeed-<version>), not of this suite."""
    return re.match(r"deepspeed-\d", row["system"]) is not None


def mib(value):
    return float(value) / 2**20
