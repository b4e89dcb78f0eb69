"""Holds the DeepSpeed runner's convergence rows to ted_convergence's, system by system.

    check_deepspeed_convergence.py <ours.csv> <deepspeed.csv> <steps> [tolerance]

Ours' systems map to DeepSpeed's rows by the runner's names: deepspeed-moe to deepspeed-<version>
(DeepSpeed-MoE, T = 1), ted/ted+dtd to deepspeed-<version>-ted (DeepSpeed-TED with its DTD); a
system of ours DeepSpeed has no equal for has no rows there (the runner skips it with a line).
Every system DeepSpeed ran: `steps` rows, the same layout, learning rates and dropped choices, and
per step loss, lm_loss, aux_loss, grad_norm and valid_loss (where evaluated, on both sides or
neither) within `tolerance` relative (default 1e-5, check_deepspeed_ted.py's). Prints the worst.
"""
import csv
import re
import sys

ours_path, theirs_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5


def by_system(path):
    systems = {}
    for row in csv.DictReader(open(path)):
        systems.setdefault(row["system"], []).append(row)
    return systems


ours, theirs = by_system(ours_path), by_system(theirs_path)


def deepspeed_name(system):
    if system == "deepspeed-moe":
        return r"deepspeed-[0-9][0-9.]*"
    if system in ("ted", "ted+dtd"):
        return r"deepspeed-[0-9][0-9.]*-ted"
    return None


def fail(message):
    sys.exit(f"check_deepspeed_convergence: {message}")


matched = set()
for system, rows in ours.items():
    pattern = deepspeed_name(system)
    names = [n for n in theirs if pattern and re.fullmatch(pattern, n)]
    if not names:
        if pattern:
            fail(f"DeepSpeed has no rows for {system} (expected {pattern})")
        print(f"ok    {system}: no DeepSpeed rows (the runner has no equal for it)")
        continue
    name = names[0]
    matched.add(name)
    mine = theirs[name]
    if not len(rows) == len(mine) == steps:
        fail(f"{system}: {len(rows)} rows of ours, {len(mine)} of DeepSpeed's, want {steps}")
    worst = {}
    for a, b in zip(rows, mine):
        where = f"{system} / {name}, step {a['step']}"
        for key in ("step", "G", "T", "Ep", "D", "dtd", "dropped"):
            if a[key] != b[key]:
                fail(f"{where}: {key} ours {a[key]}, DeepSpeed {b[key]}")
        for key in ("lr", "loss", "lm_loss", "aux_loss", "grad_norm", "valid_loss"):
            if (a[key] == "") != (b[key] == ""):
                fail(f"{where}: {key} ours '{a[key]}', DeepSpeed '{b[key]}'")
            if a[key] == "":
                continue
            error = abs(float(b[key]) / float(a[key]) - 1)
            worst[key] = max(worst.get(key, 0.0), error)
            if error > tolerance:
                fail(f"{where}: {key} ours {a[key]}, DeepSpeed {b[key]} ({error:.2e} relative, "
                     f"tolerance {tolerance:g})")
    if "valid_loss" not in worst:
        fail(f"{system}: no held-out loss in any row")
    print(f"ok    {system} = {name}: {steps} steps within {tolerance:g} (worst " +
          ", ".join(f"{k} {v:.1e}" for k, v in worst.items() if k != "lr") + ")")
extra = set(theirs) - matched
if extra:
    fail(f"DeepSpeed rows of no system of ours: {sorted(extra)}")
