#!/usr/bin/python3
"""Checks an experiment's CSV for what the paper's experiments must show.

    check_experiment.py ablation results.csv   all-to-all bytes fall by T with DTD, the number
                                               of all-to-alls by a third with CAC
    check_experiment.py memory results.csv     TED fits a larger base model than DeepSpeed-MoE
                                               within the same budget (measured peaks)
    check_experiment.py rows results.csv N     N rows, every loss finite
"""
import csv
import math
import sys


def rows_of(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def check_ablation(rows):
    by = {r["system"]: r for r in rows}
    base, dtd, cac = by["ted-baseline"], by["ted+dtd"], by["ted+cac"]
    t = int(base["T"])
    if int(dtd["all_to_all_bytes"]) * t != int(base["all_to_all_bytes"]):
        fail(f"DTD all-to-all bytes {dtd['all_to_all_bytes']} x T={t} != {base['all_to_all_bytes']}")
    if int(cac["all_to_all_calls"]) * 3 != int(base["all_to_all_calls"]) * 2:
        fail(f"CAC all-to-alls {cac['all_to_all_calls']} are not 2/3 of {base['all_to_all_calls']}")
    print(f"ok: all-to-all bytes {base['all_to_all_bytes']} -> {dtd['all_to_all_bytes']} with "
          f"DTD (T={t}); all-to-alls {base['all_to_all_calls']} -> {cac['all_to_all_calls']} with CAC")


def check_memory(rows):
    largest = {}
    for r in rows:
        if r["budget_bytes"] and r["fits"] == "1":
            largest[r["system"]] = max(largest.get(r["system"], 0), int(r["parameters"]))
    ted, ds = largest.get("ted", 0), largest.get("deepspeed-moe", 0)
    if ted <= ds:
        fail(f"TED's largest fitting model ({ted} parameters) is not larger than "
             f"DeepSpeed-MoE's ({ds})")
    print(f"ok: largest within the budget: ted {ted} parameters, deepspeed-moe {ds}")


def main(argv):
    kind, path = argv[1], argv[2]
    rows = rows_of(path)
    for r in rows:
        if not math.isfinite(float(r["final_loss"])):
            fail(f"loss {r['final_loss']} in {r['system']}")
    if kind == "ablation":
        check_ablation(rows)
    elif kind == "memory":
        check_memory(rows)
    elif kind == "rows":
        if len(rows) != int(argv[3]):
            fail(f"{len(rows)} rows, expected {argv[3]}")
        print(f"ok: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
