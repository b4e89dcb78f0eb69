#!/usr/bin/python3
"""Holds DeepSpeed-TED's runs to ours (tests/apps/deepspeed_ted.sh wrote them):
    check_deepspeed_ted.py <work dir>
For each DeepSpeed configuration (ted, ted-nodtd, ted-whole): ours_<name>.csv and
deepspeed_<name>.csv (ted_train's schema, 3 steps on 4 ranks, T = 2, Ep = 2, D = 1),
deepspeed_loads_<name>.csv (run.py --loads) and ours_loads.csv (print_workload loads). Prints
each check; exit 1 on the first that fails.

The tolerance: both sides start from the same weights (the baseline draws ours), route every
token to the same experts (the forced workload) and drop none, so they compute the same
function in fp32 in different orders of summation: the losses and gradient norms of every step
agree to 1e-5 relative (measured: about 1e-7) and the final fingerprint to 1e-6.

Bytes per operation and group (rank 0, each step), in our ledger's convention:
- the model's collectives equal: the expert all-to-alls, the tensor group's all-reduces (the
  Megatron pair around attention and the FFNs, the expert's row-parallel sum) and all-gathers
  (DeepSpeed's gather_tokens, our DTD gather);
- ZeRO-1 by design: DeepSpeed all-reduces the gradients in each data group where ours
  reduce-scatters them (the same bytes sent), then both all-gather the updated shards; in a group
  of one rank (the expert-data group at D = 1) ours still makes the call and counts it,
  DeepSpeed does not;
- whole experts by design: ours sums their gradients over the tensor group (an all-reduce there)
  and keeps their optimizer state whole on each tensor rank; DeepSpeed's expert-data group is
  T x D ranks (its expert groups are consecutive ranks), so it all-reduces them there and shards
  their state over it, all-gathering 1 / (T x D) of them per rank.
"""
import csv
import math
import sys
from pathlib import Path

work = Path(sys.argv[1])
T, D = 2, 1


def read(name):
    with open(work / name, newline="") as handle:
        return list(csv.DictReader(handle))


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        sys.exit(1)


def close(a, b, tolerance):
    a, b = float(a), float(b)
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= tolerance * max(abs(b), 1e-12)


def b(row, op, group):
    return int(row[f"{op}_{group}_bytes"] or 0)


ours_loads = (work / "ours_loads.csv").read_text()
for name in ("ted", "ted-nodtd", "ted-whole"):
    ours, ds = read(f"ours_{name}.csv"), read(f"deepspeed_{name}.csv")
    check(len(ours) == len(ds) == 3, f"{name}: 3 steps on each side")
    check(ds[0]["T"] == "2" and ds[0]["Ep"] == "2" and
          ds[0]["D"] == str(D), f"{name}: DeepSpeed laid out T = 2, Ep = 2, D = {D}")
    worst = 0.0
    for o, d in zip(ours, ds):
        for key in ("loss", "lm_loss", "aux_loss", "grad_norm"):
            worst = max(worst, abs(float(d[key]) - float(o[key])) / abs(float(o[key])))
            check(close(d[key], o[key], 1e-5), f"{name} step {o['step']}: {key} DeepSpeed "
                  f"{d[key]} = ours {o[key]} (1e-5)")
        check(d["dropped"] == o["dropped"] == "0", f"{name} step {o['step']}: nothing dropped")
    check(close(ds[-1]["fingerprint"], ours[-1]["fingerprint"], 1e-6),
          f"{name}: fingerprint after 3 steps DeepSpeed {ds[-1]['fingerprint']} = ours "
          f"{ours[-1]['fingerprint']} (largest relative loss difference {worst:.1e})")
    loads = (work / f"deepspeed_loads_{name}.csv").read_text()
    check(loads == ours_loads and len(loads.splitlines()) > 2,
          f"{name}: per-expert loads of every step and layer equal ours "
          f"({len(loads.splitlines()) - 2} entries)")
    for o, d in zip(ours, ds):
        step = o["step"]
        same = [("all_to_all", "expert"), ("all_reduce", "tensor"), ("all_gather", "tensor"),
                ("all_gather", "nonexpert_data")]
        if name == "ted-whole":
            same.remove(("all_reduce", "tensor"))
        for op, group in same:
            check(b(d, op, group) == b(o, op, group), f"{name} step {step}: {op} {group} "
                  f"{b(d, op, group)} B = ours")
        check(b(d, "all_to_all", "expert") > 0 and b(d, "all_reduce", "tensor") > 0,
              f"{name} step {step}: the all-to-alls and tensor all-reduces were counted")
        check(b(d, "all_reduce", "nonexpert_data") == b(o, "reduce_scatter", "nonexpert_data"),
              f"{name} step {step}: dense gradients: DeepSpeed's all-reduce "
              f"{b(d, 'all_reduce', 'nonexpert_data')} B = our reduce-scatter")
        check(b(d, "all_reduce", "expert_data") == b(o, "reduce_scatter", "expert_data"),
              f"{name} step {step}: expert gradients: DeepSpeed's all-reduce "
              f"{b(d, 'all_reduce', 'expert_data')} B = our reduce-scatter")
        for op in ("reduce_scatter",):
            for group in ("tensor", "expert", "expert_data", "nonexpert_data"):
                check(b(d, op, group) == 0, f"{name} step {step}: DeepSpeed {op} {group}: none")
        expert_grads = b(o, "reduce_scatter", "expert_data")
        if name == "ted-whole":
            check(b(o, "all_reduce", "tensor") == b(d, "all_reduce", "tensor") + expert_grads,
                  f"{name} step {step}: ours all-reduces {expert_grads} B more in the tensor "
                  "group (the whole experts' gradients)")
            check(b(d, "all_gather", "expert_data") * T * D == expert_grads,
                  f"{name} step {step}: DeepSpeed all-gathers 1/(T x D) of the expert shard "
                  f"({b(d, 'all_gather', 'expert_data')} B)")
        else:
            check(b(d, "all_gather", "expert_data") == (b(o, "all_gather", "expert_data")
                                                        if D > 1 else 0),
                  f"{name} step {step}: expert all-gather {b(d, 'all_gather', 'expert_data')} "
                  f"B (ours counts its call in a group of one rank: {b(o, 'all_gather', 'expert_data')})")
    for category in ("parameters", "gradients"):
        key = f"peak_{category}_bytes"
        check(ds[-1][key] == ours[-1][key], f"{name}: DeepSpeed holds {ds[-1][key]} B of "
              f"{category}, as ours")
    print(f"#     {name}: memory DeepSpeed / ours: " + ", ".join(
        f"{c} {ds[-1][f'peak_{c}_bytes']}/{ours[-1][f'peak_{c}_bytes']}"
        for c in ("optimizer_state", "activations", "communication", "optimizer_temporaries")))
