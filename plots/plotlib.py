"""What every plot script shares: argument handling (CSV inputs, then the output PNG), saving
the figure as PNG and PDF, and the sidecar: a JSON file beside the PNG that says what the figure
drew, read back from the figure's artists (see sidecar())."""
import csv
import json
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
    written = [output, output.with_suffix(".pdf")]
    meta = getattr(figure, "ted_sidecar", None)
    if meta is not None:  # after savefig: the tick labels are formatted by then
        described = dict(meta, image=output.name, inputs=inputs, panels=sidecar(figure))
        with open(output.with_suffix(".json"), "w") as handle:
            json.dump(described, handle, indent=1)
            handle.write("\n")
        written.append(output.with_suffix(".json"))
    print("wrote " + ", ".join(map(str, written)))
    return 0


def _axis(axis, label, scale):
    """One axis of a panel: label, scale (and its base when logarithmic), limits and the major
    ticks in view with the text each shows."""
    low, high = sorted(axis.get_view_interval())
    locations = list(axis.get_majorticklocs())
    texts = axis.get_major_formatter().format_ticks(locations)
    slack = 1e-9 * max(abs(low), abs(high), 1.0)
    ticks = [(float(x), t) for x, t in zip(locations, texts) if low - slack <= x <= high + slack]
    described = {"label": label, "scale": scale, "limits": [float(low), float(high)],
                 "ticks": [x for x, _ in ticks], "tick_labels": [t for _, t in ticks]}
    if scale == "log":
        described["base"] = float(axis.get_transform().base)
    return described


def sidecar(figure):
    """What the figure drew, from its artists, per panel (an axes whose gid names it). The plot
    script tags what it draws with gids, fields split by "|":
      line        "series|NAME"        -> series NAME, its points (x, y) as drawn
      annotation  "label|NAME"         -> the text beside series NAME's point at its xy
      annotation  "oom|NAME"           -> an "OOM" mark of series NAME at x (no y: not a time)
      rectangle   "bar|NAME|PART"      -> the segment PART of the stacked bar NAME
      annotation  "note|WHAT"          -> any other text the check may read (a bar's total)"""
    panels = []
    for axes in figure.axes:
        if not axes.get_gid():
            continue
        panel = {"name": axes.get_gid(), "title": axes.get_title(),
                 "x": _axis(axes.xaxis, axes.get_xlabel(), axes.get_xscale()),
                 "y": _axis(axes.yaxis, axes.get_ylabel(), axes.get_yscale()),
                 "series": [], "bars": [], "oom": [], "notes": []}
        series = {}
        for line in axes.get_lines():
            kind, _, name = (line.get_gid() or "").partition("|")
            if kind == "series":
                points = [{"x": float(x), "y": float(y)}
                          for x, y in zip(line.get_xdata(), line.get_ydata())]
                series[name] = {"name": name, "points": points}
                panel["series"].append(series[name])
        bars = {}
        for patch in axes.patches:
            fields = (patch.get_gid() or "").split("|")
            if fields[0] != "bar" or len(fields) != 3:
                continue
            bar = bars.setdefault(fields[1], {"name": fields[1], "segments": []})
            bar["x"] = float(patch.get_x() + patch.get_width() / 2)
            bar["segments"].append({"part": fields[2], "bottom": float(patch.get_y()),
                                    "height": float(patch.get_height())})
        panel["bars"] = sorted(bars.values(), key=lambda b: b["x"])
        for text in axes.texts:
            kind, _, name = (text.get_gid() or "").partition("|")
            x, y = (float(v) for v in getattr(text, "xy", text.get_position()))
            if kind == "label":
                point = next((p for p in series.get(name, {"points": []})["points"]
                              if abs(p["x"] - x) <= 1e-9 * abs(x) and
                              abs(p["y"] - y) <= 1e-9 * abs(y)), None)
                if point is None:
                    panel["notes"].append({"what": "stray label " + name, "x": x, "y": y,
                                           "text": text.get_text()})
                else:
                    point["label"] = text.get_text()
            elif kind == "oom":
                panel["oom"].append({"series": name, "x": x, "text": text.get_text()})
            elif kind == "note":
                panel["notes"].append({"what": name, "x": x, "y": y, "text": text.get_text()})
        panels.append(panel)
    return panels


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
