#!/usr/bin/env python3
"""Holds tests/peers/peers_cpu.sh's outputs to what that script's header says; prints one line
per check and 'N passed, N failed'; exits 1 on any failure.
  check_peers.py <work dir>
"""
import csv
import math
import sys
from pathlib import Path

work = Path(sys.argv[1])
results = []


def check(ok, text):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {text}")


def table(name):
    return list(csv.DictReader(open(work / name)))


checks = {r["system"]: r for r in table("checks.csv")}
for system in ("eager", "compile", "deepspeed", "megatron", "megatron-sdpa"):
    r = checks.get(system, {})
    check(r.get("check") == "passed" and float(r.get("check_rel_err") or 1) <= 1e-4,
          f"{system}: its block equals ours ({r.get('check')}, error {r.get('check_rel_err')})")
tutel = checks.get("tutel", {})
check(tutel.get("check") in ("passed", "not loaded"),
      f"tutel: passed or not loaded ({tutel.get('check')}: {tutel.get('note', '')[:80]})")
timed = {r["system"]: r for r in table("timed.csv")}
for system in ("eager", "deepspeed", "megatron", "megatron-sdpa"):
    ms = timed.get(system, {}).get("ms_per_iter")
    check(ms and float(ms) > 0, f"{system}: timed ({ms} ms)")
check(timed.get("deepspeed", {}).get("capacity") == timed.get("eager", {}).get("capacity"),
      "DeepSpeed's capacity equals ours")
vocab, h, layers, f, experts = 256, 64, 4, 256, 4
biases = layers * 4 * h + (layers // 2) * (f + h) + (layers // 2) * experts * (f + h)
for system in ("megatron", "megatron-sdpa", "deepspeed"):
    rows = list(csv.DictReader(open(work / f"train_{system}.csv")))
    losses = [float(r["loss"]) for r in rows]
    check(len(rows) == 3 and all(math.isfinite(x) for x in losses), f"{system}: 3 finite losses {losses}")
    check(abs(losses[0] / math.log(vocab) - 1) < 0.05, f"{system}: first loss {losses[0]:.3f} "
          f"within 5% of ln({vocab}) = {math.log(vocab):.3f}")
    check(all(float(r["tokens_per_s"]) > 0 for r in rows), f"{system}: tokens/s on every step")
local, sdpa = ([float(r["loss"]) for r in csv.DictReader(open(work / f"train_{s}.csv"))]
               for s in ("megatron", "megatron-sdpa"))
check(all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(local, sdpa)),
      f"Megatron's step with SDPA gives its unfused attention's losses ({local} vs {sdpa})")
megatron = int(list(csv.DictReader(open(work / "train_megatron.csv")))[0]["parameters"])
ours = int(list(csv.DictReader(open(work / "train_deepspeed.csv")))[0]["parameters"])
check(ours - megatron == biases, f"Megatron's parameters {megatron} = ours {ours} less the "
      f"{biases} biases it has no place for")
rates = {r["rate"]: float(r["value"]) for r in csv.DictReader(open(work / "rates.csv"))}
check(len(rates) == 2 and all(v > 0 for v in rates.values()), f"device rates {rates}")
cluster = (work / "cluster.yaml").read_text()
check("-measured" in cluster and "measured by peers/device_rates.py" in cluster,
      "the measured cluster file names itself and its source")
projection = list(csv.DictReader(open(work / "projection.csv")))
check(projection and float(projection[0]["time_ms_median"]) > 0,
      "ted_project reads the measured cluster file")
failed = results.count(False)
print(f"{results.count(True)} passed, {failed} failed")
sys.exit(1 if failed else 0)
