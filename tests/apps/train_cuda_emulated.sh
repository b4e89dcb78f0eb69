#!/usr/bin/env bash
# ted_train with --backend cuda on the emulated GPU (the CUDA sources run on the CPU; no GPU ran
# this): 10 steps of tiny-cpu in fp32 on one rank equal the CPU backend's losses step by step
# (1e-4 relative), and a bf16 run on 2 ranks over the emulated NCCL (Ep = 2) ends within 5% of
# fp32's loss. Every row names the backend, the comm and the emulated device.
#   train_cuda_emulated.sh <ted_train> <ted_train_emulated> <repository root> <scratch> <mpirun>
set -u
cpu=$1
emulated=$2
root=$3
scratch=$4
mpirun=$5
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
config="$root/experiments/train/tiny-cpu.yaml"

"$cpu" -c "$config" --steps 10 --csv "$scratch/cpu.csv" >"$scratch/cpu.out" 2>&1 ||
  fail "CPU run: $(cat "$scratch/cpu.out")"
"$emulated" -c "$config" --steps 10 --backend cuda --csv "$scratch/cuda.csv" >"$scratch/cuda.out" 2>&1 ||
  fail "emulated GPU run: $(cat "$scratch/cuda.out")"
"$mpirun" -n 2 --oversubscribe "$emulated" -c "$config" --steps 10 --backend cuda --comm nccl \
  --dtype bf16 --ep 2 --csv "$scratch/bf16.csv" >"$scratch/bf16.out" 2>&1 ||
  fail "emulated GPU bf16 run on 2 ranks: $(cat "$scratch/bf16.out")"
/usr/bin/python3 - "$scratch" <<'PY' || fail "losses or rows (above)"
import csv, sys
d = sys.argv[1]
rows = {name: list(csv.DictReader(open(f"{d}/{name}.csv"))) for name in ("cpu", "cuda", "bf16")}
assert all(len(r) == 10 for r in rows.values()), {k: len(v) for k, v in rows.items()}
for r in rows["cuda"] + rows["bf16"]:
    assert r["backend"] == "cuda" and "emulated" in r["device"], (r["backend"], r["device"])
assert {r["comm"] for r in rows["bf16"]} == {"nccl"} and {r["dtype"] for r in rows["bf16"]} == {"bf16"}
worst = max(abs(float(a["loss"]) - float(b["loss"])) / float(a["loss"])
            for a, b in zip(rows["cpu"], rows["cuda"]))
print(f"fp32: worst relative loss difference over 10 steps {worst:.2e}")
assert worst < 1e-4, worst
last = abs(float(rows["bf16"][-1]["loss"]) / float(rows["cpu"][-1]["loss"]) - 1)
print(f"bf16 on 2 ranks (nccl, Ep=2): final loss within {last:.2%} of fp32")
assert last < 0.05, last
PY
echo "ok: ted_train on the emulated GPU"
finish
