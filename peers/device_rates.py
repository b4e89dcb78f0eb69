#!/usr/bin/env python3
"""The two rates the projection's compute model runs at, measured on this device through
PyTorch: the bf16 GEMM rate (torch.matmul, cuBLAS on a GPU, at 8192 x 8192 x 8192 and at the
experts' shape of the paper's block, 8192 x 4096 x 16384; random data, the best of 10 after a
warm-up) and the copy bandwidth (a device-to-device copy of 1 GiB, bytes read plus written, the
best of 10). With --write-cluster, a copy of the cluster file with sustained_flops and
memory_bandwidth replaced by these (the better GEMM rate), its name and source saying so: what
scripts/gpu/gpu_session.sh projects the training step with, beside the committed file.

  python3 peers/device_rates.py --cluster experiments/clusters/h100-sxm-1gpu.yaml \\
      --csv rates.csv --write-cluster gpu_cluster.yaml
  python3 peers/device_rates.py --device cpu --dtype fp32 ...   # small sizes: a smoke run
"""
import argparse
import re
import sys

import torch


def timer(device):
    sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests/cuda")
    import torch_moe_block
    return torch_moe_block.timer(device)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--cluster", help="the cluster YAML to copy with the measured rates")
    parser.add_argument("--csv", required=True)
    parser.add_argument("--write-cluster")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible to PyTorch")
        return 77
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    small = not args.device.startswith("cuda")
    measure = timer(args.device)
    rows = []
    shapes = [(512, 512, 512)] if small else [(8192, 8192, 8192), (8192, 16384, 4096)]
    for m, n, k in shapes:
        a = torch.randn(m, k, device=args.device).to(dtype)
        b = torch.randn(k, n, device=args.device).to(dtype)
        c = torch.matmul(a, b)
        reference = torch.matmul(a[:64].double(), b.double())  # a spot check of the product
        error = ((c[:64].double() - reference).norm() / reference.norm()).item()
        if not error < 2e-2:
            print(f"device_rates: the {m}x{n}x{k} product is off by {error:.2e}", file=sys.stderr)
            return 1
        best = min(measure(lambda: torch.matmul(a, b)) for _ in range(10))
        rows.append((f"gemm_{args.dtype}_{m}x{n}x{k}", 2.0 * m * n * k / best, "FLOP/s"))
    elements = (1 << 24 if small else 1 << 29) // 2  # 16 MiB or 1 GiB of 16-bit elements
    src = torch.randn(elements, device=args.device).to(torch.bfloat16)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(measure(lambda: dst.copy_(src)) for _ in range(10))
    if not torch.equal(dst, src):
        print("device_rates: the copy is wrong", file=sys.stderr)
        return 1
    rows.append(("copy_read_plus_write", 2.0 * src.numel() * 2 / best, "B/s"))
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    with open(args.csv, "w") as handle:
        handle.write("rate,value,unit,device,torch\n")
        for rate, value, unit in rows:
            handle.write(f"{rate},{value:.6g},{unit},{name},{torch.__version__}\n")
            print(f"{rate}: {value:.4g} {unit}")
    if args.cluster and args.write_cluster:
        text = open(args.cluster).read()
        gemm = max(v for r, v, _ in rows if r.startswith("gemm"))
        copy = rows[-1][1]
        when = "measured by peers/device_rates.py in this session on " + name
        text = re.sub(r"(?m)^sustained_flops:.*$",
                      f"sustained_flops: {gemm:.4g}   # {when}: the best bf16 torch.matmul", text)
        text = re.sub(r"(?m)^memory_bandwidth:.*$",
                      f"memory_bandwidth: {copy:.4g}   # {when}: a copy, read + written", text)
        text = re.sub(r"(?m)^name: (\S+)", r"name: \1-measured", text)
        text = re.sub(r"(?ms)^source: .*", f"source: >-\n  {args.cluster} with the two rates {when}\n",
                      text)
        open(args.write_cluster, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
