#!/usr/bin/python3
"""Holds DeepSpeed-TED's runs to ours (tests/apps/deepspeed_ted.sh and deepspeed_ted_forms.sh
wrote them):
    check_deepspeed_ted.py <work dir>          (deepspeed_ted.sh)
    check_deepspeed_ted.py <work dir> forms    (deepspeed_ted_forms.sh: see forms())
For each DeepSpeed configuration (ted, ted-nodtd, ted-whole, and ted-dropout: ted with
model.dropout 0.1): ours_<name>.csv and deepspeed_<name>.csv (ted_train's schema, 3 steps on 4
ranks, T = 2, Ep = 2, D = 1), deepspeed_loads_<name>.csv (run.py --loads) and ours_loads.csv
(print_workload loads). Prints each check; exit 1 on the first that fails.

The tolerance: both sides start from the same weights (the baseline draws ours), route every
token to the same experts (the forced workload) and drop none, so they compute the same
function in fp32 in different orders of summation: the losses and gradient norms of every step
agree to 1e-5 relative (measured: about 1e-7) and the final fingerprint to 1e-6. With dropout
too: the baseline drops with our masks (baselines/deepspeed/dropout_masks.py), so both sides
zero the same elements; that the masks apply shows in each side's losses, unlike those of the
run without dropout.

Bytes per operation and group (rank 0, each step), in our ledger's convention:
- the model's collectives equal: the expert all-to-alls, the tensor group's all-reduces (the
  Megatron pair around attention and the FFNs, the expert's row-parallel sum) and all-gathers
  (DeepSpeed's gather_tokens, our DTD gather);
- ZeRO-1 by design: DeepSpeed all-reduces the gradients in each data group where ours
  reduce-scatters them (the same bytes sent), then both all-gather the updated shards; in a group
  of one rank (the expert-data group at D = 1) ours still makes the call and counts it,
  DeepSpeed does not;
- whole experts: the expert-data group is, on both sides, the T x D ranks that hold the same
  experts (DeepSpeed's expert groups are consecutive ranks; ours are the T x D ranks of the same
  expert rank e): DeepSpeed all-reduces their gradients there where ours reduce-scatters them,
  and both shard their optimizer state over it and all-gather 1 / (T x D) of them per rank.
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


def forms():
    """The ablation's rows (ours.csv from ted_ablation: ted-baseline, ted+dtd, ted; DeepSpeed's
    deepspeed.csv: one row per configuration, ted-nodtd and ted) and the tied embedding at T = 1
    and T = 2 (tied_t1.csv, tied_t2.csv)."""
    with open(work / "ours.csv", newline="") as handle:
        ours_header = next(csv.reader(handle))
    with open(work / "deepspeed.csv", newline="") as handle:
        ds_header = next(csv.reader(handle))
    check(ds_header == ours_header, f"DeepSpeed-TED's rows have ted_ablation's "
          f"{len(ours_header)} columns, in its order")
    mine = {r["system"]: r for r in read("ours.csv")}
    ds = {r["system"].split("-", 2)[2]: r for r in read("deepspeed.csv")}
    check(sorted(ds) == ["ted", "ted-nodtd"] and all(r["system"].startswith("deepspeed-0.")
                                                     for r in ds.values()),
          f"one row per DeepSpeed configuration, named deepspeed-<version>-<configuration>: "
          f"{', '.join(r['system'] for r in ds.values())}")
    for config, system in (("ted-nodtd", "ted-baseline"), ("ted", "ted+dtd")):
        d, o = ds[config], mine[system]
        for key in ("experiment", "G", "T", "Ep", "D", "model", "parameters", "micro_batch",
                    "micro_batches", "checkpoint", "dtd", "all_to_all_calls", "all_to_all_bytes"):
            check(d[key] == o[key], f"{config} = ours {system}: {key} {d[key]}")
        # ZeRO-1: DeepSpeed all-reduces the gradients ours reduce-scatters (the same bytes).
        check(int(d["all_reduce_bytes"]) == int(o["all_reduce_bytes"]) +
              int(o["reduce_scatter_bytes"]) and d["reduce_scatter_bytes"] == "0",
              f"{config}: all-reduce {d['all_reduce_bytes']} B = ours' tensor all-reduces "
              f"{o['all_reduce_bytes']} + its gradient reduce-scatters {o['reduce_scatter_bytes']}")
        check(float(d["final_loss"]) > 0 and abs(float(d["final_loss"]) /
                                                  float(o["final_loss"]) - 1) < 0.01,
              f"{config}: loss after one step {d['final_loss']}, ours {o['final_loss']} (1%: "
              "which tokens a full expert drops is DeepSpeed's)")
        for c in ("parameters", "gradients"):
            check(d[f"peak_{c}_bytes"] == o[f"peak_{c}_bytes"],
                  f"{config}: {c} {d[f'peak_{c}_bytes']} B, as ours")
    t1, t2 = read("tied_t1.csv"), read("tied_t2.csv")
    check(len(t1) == len(t2) == 3 and t1[0]["T"] == "1" and t2[0]["T"] == "2",
          "the tied embedding ran 3 steps at T = 1 and at T = 2")
    for a, b2 in zip(t1, t2):
        for key in ("loss", "lm_loss", "aux_loss", "grad_norm"):
            check(close(b2[key], a[key], 1e-5), f"tied, step {a['step']}: {key} at T = 2 "
                  f"{b2[key]} = at T = 1 {a[key]}")
    check(close(t2[-1]["fingerprint"], t1[-1]["fingerprint"], 1e-6),
          f"tied: fingerprint at T = 2 {t2[-1]['fingerprint']} = at T = 1 "
          f"{t1[-1]['fingerprint']}")


if len(sys.argv) > 2 and sys.argv[2] == "forms":
    forms()
    sys.exit(0)

ours_loads = (work / "ours_loads.csv").read_text()
for name in ("ted", "ted-nodtd", "ted-whole", "ted-dropout"):
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
        replicas = T * D if name == "ted-whole" else D  # the ranks holding the same experts
        if replicas > 1:
            check(b(d, "all_gather", "expert_data") == b(o, "all_gather", "expert_data") > 0 and
                  b(d, "all_gather", "expert_data") * replicas == expert_grads,
                  f"{name} step {step}: expert all-gather {b(d, 'all_gather', 'expert_data')} B "
                  f"= ours, 1/{replicas} of the expert part ({expert_grads} B)")
        else:
            check(b(d, "all_gather", "expert_data") == 0,
                  f"{name} step {step}: no expert all-gather on DeepSpeed's side (ours counts "
                  f"its call in a group of one rank: {b(o, 'all_gather', 'expert_data')} B)")
    for category in ("parameters", "gradients"):
        key = f"peak_{category}_bytes"
        check(ds[-1][key] == ours[-1][key], f"{name}: DeepSpeed holds {ds[-1][key]} B of "
              f"{category}, as ours")
    print(f"#     {name}: memory DeepSpeed / ours: " + ", ".join(
        f"{c} {ds[-1][f'peak_{c}_bytes']}/{ours[-1][f'peak_{c}_bytes']}"
        for c in ("optimizer_state", "activations", "communication", "optimizer_temporaries")))

# Dropout 0.1 changes every step's loss on both sides (the masks are applied), against the same
# run without it (ted); the tight agreement above is with them.
plain = [float(r["loss"]) for r in read("ours_ted.csv")]
for side in ("ours", "deepspeed"):
    dropped = [float(r["loss"]) for r in read(f"{side}_ted-dropout.csv")]
    check(all(a != b for a, b in zip(dropped, plain)), f"ted-dropout: {side} losses "
          f"{', '.join(map(str, dropped))}, unlike those without dropout")
