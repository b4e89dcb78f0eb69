#!/usr/bin/python3
"""Holds the DeepSpeed baseline's rows to ours (tests/apps/deepspeed_baseline.sh wrote them):
    check_deepspeed.py <work dir> <ranks> <print_workload>
ours.csv (ted_ablation: deepspeed-moe and ted, one untimed step), deepspeed.csv (run.py, one
timed step), ours_train.csv and deepspeed_train.csv (5 steps each); under a forced workload
ours_workload.csv and deepspeed_workload.csv (ted_train's schema), ours_loads.csv
(print_workload loads) and deepspeed_loads.csv (run.py --loads). print_workload (our C++) also
checks the baseline's port of the workloads (baselines/deepspeed/ted_workload.py). Prints each
check; exit 1 on the first that fails."""
import csv
import math
import subprocess
import sys
from pathlib import Path

work, ranks, print_workload = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "baselines/deepspeed"))
import ted_workload  # noqa: E402 (the baseline's port, from its folder)
VOCAB_TINY, VOCAB_TRAIN = 64, 32  # deepspeed_tiny.yaml, experiments/train/tiny-cpu.yaml


def read(name):
    with open(work / name, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        return header, [dict(zip(header, row)) for row in reader]


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        sys.exit(1)


def near_uniform(loss, vocab, who):
    value = float(loss)
    check(math.isfinite(value) and abs(value / math.log(vocab) - 1) <= 0.05,
          f"{who}: first step's loss {value:.4f} within 5% of ln({vocab}) = {math.log(vocab):.4f}")


# The experiments' schema.
ours_header, ours = read("ours.csv")
ds_header, ds = read("deepspeed.csv")
check(ds_header == ours_header, f"deepspeed.csv has ted_ablation's {len(ours_header)} columns, "
      "in its order")
check(len(ds) == 1 and len(ours) == 2, f"rows: 1 DeepSpeed, 2 ours ({len(ds)}, {len(ours)})")
row = ds[0]
mine = {r["system"]: r for r in ours}
baseline = mine["deepspeed-moe"]
check(row["system"].startswith("deepspeed-0."), f"system is named after DeepSpeed and its "
      f"version: {row['system']}")
for key in ("experiment", "G", "T", "Ep", "D", "model", "layers", "hidden", "heads", "experts",
            "top_k", "parameters", "seq_len", "micro_batch", "micro_batches", "checkpoint"):
    check(row[key] == baseline[key], f"{key}: DeepSpeed {row[key]} = our deepspeed-moe "
          f"{baseline[key]}")
check(int(row["G"]) == ranks and row["T"] == "1", f"laid out on {ranks} ranks with T = 1")


def tokens(r):
    return int(r["micro_batch"]) * int(r["micro_batches"]) * int(r["Ep"]) * int(r["D"]) * \
        int(r["seq_len"])


check(tokens(row) == tokens(baseline), f"tokens per step: {tokens(row)} on both")
timed = float(row["tokens_per_s"]) * float(row["time_ms_median"]) / 1e3
check(abs(timed / tokens(row) - 1) < 1e-6, f"tokens/s x time = {timed:.1f}: the same tokens")
median, p10, p90 = (float(row[k]) for k in ("time_ms_median", "time_ms_p10", "time_ms_p90"))
check(0 < p10 <= median <= p90, f"time per iteration measured: {median:.2f} ms")
check(float(row["tflops_per_rank"]) > 0, "model FLOPs rate filled")
for who, r in (("DeepSpeed", row), ("our deepspeed-moe", baseline), ("our ted", mine["ted"])):
    near_uniform(r["final_loss"], VOCAB_TINY, who)
if int(row["Ep"]) > 1:
    for key in ("all_to_all_calls", "all_to_all_bytes"):
        check(row[key] == baseline[key], f"{key} per rank per step: DeepSpeed {row[key]} = ours "
              f"{baseline[key]} (the same exchange, recompute included)")
for key in ("compute_ms", "comm_ms", "all_reduce_bytes", "all_gather_bytes", "peak_total_bytes",
            "pct_of_peak"):
    check(row[key] == "", f"{key} not measured on the CPU: left empty")
check(row["status"] == "measured", "status measured")

# ted_train's per-step schema.
ours_header, ours = read("ours_train.csv")
ds_header, ds = read("deepspeed_train.csv")
check(ds_header == ours_header, f"deepspeed_train.csv has ted_train's {len(ours_header)} columns")
check(len(ds) == len(ours) == 5, "5 steps on both sides")
check(all(math.isfinite(float(r[k])) for r in ds + ours for k in ("loss", "lm_loss", "aux_loss")),
      "every loss finite")
near_uniform(ours[0]["loss"], VOCAB_TRAIN, "ted_train")
near_uniform(ds[0]["loss"], VOCAB_TRAIN, "DeepSpeed on ted_train's config")
for a, b in zip(ours, ds):
    mine_tokens = float(a["tokens_per_s"]) * float(a["seconds"])
    theirs = float(b["tokens_per_s"]) * float(b["seconds"])
    if abs(mine_tokens / theirs - 1) > 1e-6:
        check(False, f"step {a['step']}: tokens per step {mine_tokens:.0f} vs {theirs:.0f}")
check(True, f"tokens per step equal at every step ({mine_tokens:.0f})")
check(all(math.isclose(float(a["lr"]), float(b["lr"]), rel_tol=1e-6) for a, b in zip(ours, ds)),
      "the same learning-rate schedule")
check(ds[-1]["fingerprint"] != "", "fingerprint on the last row")

# A forced workload: DeepSpeed's gate took our experts.
ours_loads = (work / "ours_loads.csv").read_text()
ds_loads = (work / "deepspeed_loads.csv").read_text()
lines = ours_loads.splitlines()
check(len(lines) > 2 and ds_loads == ours_loads, f"forced workload: DeepSpeed's per-expert loads "
      f"of every step and MoE layer, and its dropped choices, equal ours ({len(lines) - 2} "
      f"counts, {lines[-1]})")
_, ours = read("ours_workload.csv")
_, ds = read("deepspeed_workload.csv")
check([r["dropped"] for r in ds] == [r["dropped"] for r in ours],
      f"forced workload: dropped choices per step equal ted_train's on {ranks} ranks "
      f"({', '.join(r['dropped'] for r in ours)})")

# The port: every workload's experts as our C++ assigns them (top-1 and top-2, parameters at
# their defaults and at their edges, a large global token index).
cases = 0
for kind in ted_workload.KINDS[1:]:
    for experts, top_k, params in ((4, 1, (0, 0.5, 1.0, 0)), (8, 2, (0, 0.5, 1.0, 0)),
                                   (8, 2, (1, 1.0, 8.0, 6)), (16, 2, (3, 0.9, 0.3, 2)),
                                   (6, 1, (6, 0.0, 0.0, 5))):
        hot, share, zipf_s, zero = params
        routing = {"workload": kind, "hot_experts": hot, "hot_share": share, "zipf_s": zipf_s,
                   "zero_experts": zero}
        for seed, step, layer, first in ((1234, 0, 1, 0), (7, 13, 3, 123456789012)):
            args = [kind, experts, top_k, seed, step, layer, first, 300, hot, share, zipf_s, zero]
            ours = subprocess.run([print_workload, "choices"] + [str(a) for a in args],
                                  capture_output=True, text=True, check=True).stdout
            theirs = ted_workload.assign_experts(routing, experts, top_k, seed, step, layer,
                                                 first, 300)
            cases += 1
            if ours != "".join(" ".join(map(str, row)) + "\n" for row in theirs.tolist()):
                check(False, f"the port's experts differ from ours: {kind} {params}")
check(True, f"the port assigns our C++'s experts: {cases} cases, every workload, 300 tokens each")
print("passed")
