#!/usr/bin/python3
"""Checks an experiment's CSV for what the paper's experiments must show.

    check_experiment.py ablation results.csv   all-to-all bytes fall by T with DTD, the number
                                               of all-to-alls by a third with CAC
    check_experiment.py memory results.csv     TED fits a larger base model than DeepSpeed-MoE
                                               within the same budget (measured peaks)
    check_experiment.py rows results.csv N     N rows, every loss finite
    check_experiment.py convergence results.csv  every system trained from the same weights on the
                                               same data: the first step's loss equal (fp32 to
                                               1e-5, 16-bit to 1e-2), the held-out loss at the end
    check_experiment.py workloads results.csv  the routing columns of a workload sweep
                                               (sweep.workloads, sweep.dropless): exact loads,
                                               drops and all-to-all bytes (check_workloads)
CSVs written before a column existed still load: every check reads its columns by name.
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


def check_convergence(rows):
    by = {}
    for r in rows:
        by.setdefault(r["system"], []).append(r)
    if len(by) < 2:
        fail(f"{len(by)} systems, expected at least 2 to compare")
    first = {name: float(runs[0]["loss"]) for name, runs in by.items()}
    reference = next(name for name, runs in by.items() if runs[0]["dtype"] == "fp32")
    for name, runs in by.items():
        steps = [int(r["step"]) for r in runs]
        if steps != list(range(1, len(runs) + 1)):
            fail(f"{name}: steps {steps}")
        tolerance = 1e-5 if runs[0]["dtype"] == "fp32" else 1e-2
        difference = abs(first[name] / first[reference] - 1)
        if difference > tolerance:
            fail(f"{name}: first loss {first[name]} vs {reference}'s {first[reference]}: "
                 f"{difference:.1e} > {tolerance:g}")
        if not runs[-1]["valid_loss"] or not math.isfinite(float(runs[-1]["valid_loss"])):
            fail(f"{name}: no held-out loss after the last step")
    print(f"ok: {len(by)} systems from the same first loss {first[reference]:.6f} "
          f"({', '.join(f'{n} {v:.6f}' for n, v in first.items())}), held-out losses "
          + ", ".join(f"{n} {float(r[-1]['valid_loss']):.4f}" for n, r in by.items()))


def check_workloads(rows):
    """Per row: the mean load is the step's token choices over the experts, exactly; the
    expert ranks' loads sum the same choices; balanced (capacity) loads every expert equally
    (max/mean 1.0 exactly, nothing dropped); zero_load leaves its experts at 0; dropless drops
    nothing; each rank's all-to-all bytes are at most the max; rows that ran the 4-rank layouts
    with capacity drop choices under every skewed workload."""
    seen = set()
    for r in rows:
        name = f"{r['system']} {r['T']}x{r['Ep']}x{r['D']} {r['workload']} dropless={r['dropless']}"
        seen.add((r["workload"], r["dropless"]))
        E, ep, k = int(r["experts"]), int(r["Ep"]), int(r["top_k"])
        tokens = int(r["micro_batch"]) * int(r["micro_batches"]) * ep * int(r["D"]) * int(r["seq_len"])
        mean, most, least = (float(r[c]) for c in ("expert_load_mean", "expert_load_max",
                                                   "expert_load_min"))
        if mean != tokens * k / E:
            fail(f"{name}: expert_load_mean {mean}, expected {tokens} tokens x top-{k} / {E}")
        if float(r["rank_load_mean"]) != mean * E / ep:
            fail(f"{name}: rank_load_mean {r['rank_load_mean']} is not {E // ep} experts' {mean}")
        if not least <= mean <= most <= float(r["rank_load_max"]):
            fail(f"{name}: loads out of order: min {least} mean {mean} max {most} rank max "
                 f"{r['rank_load_max']}")
        dropped = float(r["dropped_fraction"])
        if r["workload"] == "balanced" and r["dropless"] == "0" and not (most == mean == least
                                                                           and dropped == 0):
            fail(f"{name}: balanced loads {least}..{most} (mean {mean}), dropped {dropped}")
        if r["workload"] == "zero_load" and least != 0:
            fail(f"{name}: zero_load's least loaded expert has {least} choices")
        if r["dropless"] == "1" and dropped != 0:
            fail(f"{name}: dropless dropped {dropped} of the choices")
        if (r["workload"] in ("hot_experts", "hot_rank", "zipf", "zero_load", "rotating")
                and r["dropless"] == "0" and not dropped > 0):
            fail(f"{name}: skewed routing with capacity factor 1 dropped nothing")
        a2a_max, a2a_mean = float(r["all_to_all_rank_bytes_max"]), float(r["all_to_all_rank_bytes_mean"])
        if ep > 1 and not 0 < a2a_mean <= a2a_max:
            fail(f"{name}: all-to-all bytes per rank mean {a2a_mean}, max {a2a_max}")
    for workload in ("balanced", "zero_load"):
        for dropless in ("0", "1"):
            if (workload, dropless) not in seen:
                fail(f"no row of {workload} with dropless={dropless}")
    print(f"ok: {len(rows)} rows over {len(seen)} workload x capacity points: loads, drops and "
          f"all-to-all bytes as the workloads decide")


def main(argv):
    kind, path = argv[1], argv[2]
    rows = rows_of(path)
    for r in rows:
        loss = r["final_loss"] if "final_loss" in r else r["loss"]
        if not math.isfinite(float(loss)):
            fail(f"loss {loss} in {r['system']}")
    if kind == "ablation":
        check_ablation(rows)
    elif kind == "memory":
        check_memory(rows)
    elif kind == "workloads":
        check_workloads(rows)
    elif kind == "convergence":
        check_convergence(rows)
    elif kind == "rows":
        if len(rows) != int(argv[3]):
            fail(f"{len(rows)} rows, expected {argv[3]}")
        print(f"ok: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
