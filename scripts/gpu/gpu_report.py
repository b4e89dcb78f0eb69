#!/usr/bin/env python3
"""The report of scripts/gpu/gpu_bench.sh: reads its raw outputs and writes, into the report folder,
<device>-<revision>.md (the block side by side, the training step, the top 15 kernels, the
issue's bars) and <device>-<revision>.csv (one row per measurement, each with the revision, the
device and the attention that ran). Ends with a verdict line; exits 1 when a bar is not met or a
measurement is missing. Standard library only, so it runs on any GPU machine.
With --session, the report of scripts/gpu/gpu_session.sh instead (gpu_session_report.py): the owed
checks, ours against every peer on the block and the training step, memory three ways, the
projection against the measurement.

MFU is stated twice, each labelled: over the device's dense bf16 peak (DENSE_PEAK, NVIDIA's
datasheets) and over the best bf16 GEMM rate measured in the same run.

  python3 scripts/gpu/gpu_report.py <raw folder> <report folder> [--session [--dry-run]]
"""
import csv
import re
import sys
from pathlib import Path

from report_common import comments, dense_peak, kernels, median, number, read_csv_lines, short

BLOCK = "paper_h4096_E8_top2_8192tok"


def ours(raw):
    """Per benchmark name: the rows of every round (time in ms, TFLOP/s, GEMM rate, label)."""
    runs = {}
    for path in sorted(raw.glob("ours_*.csv")):
        tag = "passes" if path.stem == "ours_passes" else "auto"
        for row in read_csv_lines(path):
            if row.get("error_occurred") == "true":
                runs.setdefault(("error", tag), []).append(row.get("error_message", ""))
                continue
            name = re.sub(r"/(manual_time|iterations:\d+)", "", row["name"])
            runs.setdefault((name, tag), []).append({
                "ms": number(row["real_time"]), "tflops": number(row.get("TFLOPs", "")),
                "gemm": number(row.get("gemm_TFLOPs", "")), "label": row.get("label", "")})
    return runs


def torch_rows(raw):
    runs = {}
    for path in sorted(raw.glob("torch_*.csv")):
        for row in read_csv_lines(path):
            runs.setdefault(row["attention"], []).append(row)
    return runs


def main():
    if "--session" in sys.argv[3:]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gpu_session_report
        return gpu_session_report.main(Path(sys.argv[1]), Path(sys.argv[2]),
                                       "--dry-run" in sys.argv[3:])
    raw, out = Path(sys.argv[1]), Path(sys.argv[2])
    device_line = (raw / "device.txt").read_text().strip() if (raw / "device.txt").exists() else ""
    device = device_line.split(",")[0].strip() or "unknown GPU"
    header = comments(raw / "ours_1.csv")
    revision = "unknown"
    for line in header:
        match = re.search(r"revision (\S+)", line)
        if match:
            revision = match.group(1)
    cudnn = next((part.strip() for line in header for part in line.split(";")
                  if "cuDNN" in part), "cuDNN: not stated")
    o, t = ours(raw), torch_rows(raw)
    train = read_csv_lines(raw / "train_1b.csv")
    problems = []

    def ours_median(name, tag="auto"):
        rows = o.get((name, tag), [])
        if not rows:
            problems.append(f"no result for {name} ({tag})")
            return None, None, None, ""
        return (median(r["ms"] for r in rows), median(r["tflops"] for r in rows),
                median(r["gemm"] for r in rows), rows[0]["label"])

    block_ms, block_tf, gemm_in_run, block_label = ours_median(f"moe_block_bf16/{BLOCK}")
    passes_ms, passes_tf, _, passes_label = ours_median(f"moe_block_bf16/{BLOCK}", "passes")
    mat_ms, mat_tf, _, mat_label = ours_median(f"moe_block_bf16/{BLOCK}_materialized")
    cublas = o.get((f"cublas_gemm_bf16/{BLOCK}", "auto"), [])
    cublas_tf = median(r["tflops"] for r in cublas) if cublas else None
    for (name, tag), rows in o.items():
        if name == "error":
            problems += [f"bench error: {m}" for m in rows]
    torch_ms = {a: median(number(r["ms_per_iter"]) for r in rows) for a, rows in t.items()}
    torch_tf = {a: median(number(r["tflops"]) for r in rows) for a, rows in t.items()}
    torch_gemm = median(number(r["gemm_tflops"]) for rows in t.values() for r in rows)
    torch_version = next((r["torch"] for rows in t.values() for r in rows), "?")
    sdpa_backends = next((r.get("sdpa_backends", "") for r in t.get("sdpa", [])), "")
    if not t:
        problems.append("no PyTorch result")
    # The measured GEMM peak: the better of cuBLAS's and torch.matmul's rate at the experts' shape.
    peaks = [v for v in (cublas_tf, gemm_in_run, torch_gemm) if v]
    peak = max(peaks) if peaks else None
    attention = re.search(r"attention (\w+)", block_label or "")
    attention = attention.group(1) if attention else "?"

    steps = [r for r in train[2:] if number(r.get("step", "")) is not None]  # the first 2: warm-up
    train_tps = median(number(r["tokens_per_s"]) for r in steps) if steps else None
    train_tf = median(number(r["gflops_per_s"]) for r in steps) / 1e3 if steps else None
    train_attention = train[0].get("attention", "?") if train else "?"
    mfu = train_tf / peak if train_tf and peak else None
    dense, dense_source = dense_peak(device)
    mfu_dense = train_tf * 1e12 / dense if train_tf and dense else None
    train_log = (raw / "train_1b.log").read_text() if (raw / "train_1b.log").exists() else ""
    params = re.search(r"; (\d+) parameters", train_log)
    if not steps:
        problems.append("no timed ted_train steps (train_1b.log)")

    sdpa = torch_ms.get("sdpa")
    bars = [
        ("the block at or under PyTorch's SDPA time",
         block_ms is not None and sdpa is not None and block_ms <= sdpa,
         f"{block_ms:.1f} ms vs {sdpa:.1f} ms" if block_ms and sdpa else "not measured"),
        ("the block at >= 50% of the measured bf16 GEMM rate",
         block_tf is not None and peak is not None and block_tf >= 0.5 * peak,
         f"{block_tf:.0f} of {peak:.0f} TFLOP/s = {100 * block_tf / peak:.1f}%"
         if block_tf and peak else "not measured"),
        ("the 1-GPU training step at >= 40% of the measured GEMM rate",
         mfu is not None and mfu >= 0.40,
         f"{train_tf:.0f} of {peak:.0f} TFLOP/s = {100 * mfu:.1f}% (MFU over the dense peak: "
         + (f"{100 * mfu_dense:.1f}% of {dense * 1e-12:.1f})" if mfu_dense else
            f"not stated: {dense_source})") if mfu else "not measured"),
    ]

    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{slug}-{revision}"
    rows = []

    def add(measurement, system, att, ms=None, tf=None, tps=None, note=""):
        rows.append({"revision": revision, "device": device, "measurement": measurement,
                     "system": system, "attention": att, "dtype": "bf16",
                     "ms": f"{ms:.3f}" if ms else "", "tflops": f"{tf:.1f}" if tf else "",
                     "gemm_tflops": f"{peak:.1f}" if peak else "",
                     "pct_of_gemm": f"{100 * tf / peak:.1f}" if tf and peak else "",
                     "tokens_per_s": f"{tps:.0f}" if tps else "", "note": note})

    add("block", "ours", attention, block_ms, block_tf, note=block_label)
    add("block", "ours, epilogues as separate passes (TED_CUBLASLT=0)", attention, passes_ms,
        passes_tf, note=passes_label)
    add("block", "ours, materialised attention", "materialized", mat_ms, mat_tf, note=mat_label)
    for att, name in (("materialized", "PyTorch eager"), ("sdpa", "PyTorch eager + SDPA")):
        add("block", f"{name} {torch_version}", "materialized" if att == "materialized" else
            f"torch-sdpa ({sdpa_backends})", torch_ms.get(att), torch_tf.get(att))
    add("gemm", "cuBLAS bf16 GEMM, experts' shape (8192 x 4096 x 16384)", "", None, cublas_tf)
    add("gemm", f"torch.matmul bf16, same shape", "", None, torch_gemm)
    add("train", "ted_train experiments/train/gpu-1b.yaml", train_attention, None, train_tf,
        train_tps, (f"MFU {100 * mfu_dense:.1f}% of the dense peak; " if mfu_dense else "")
        + (f"{100 * mfu:.1f}% of the measured GEMM rate" if mfu else ""))
    with open(f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)

    k, why = kernels(raw)
    lines = [f"# One GPU, side by side: {device}", "",
             f"- device: {device_line}", f"- revision {revision}; {cudnn}; PyTorch {torch_version}"
             f" (SDPA backends enabled: {sdpa_backends or '?'})",
             "- made by `scripts/gpu/gpu_bench.sh` (raw outputs beside it on the machine); every time "
             "is a median over the timed iterations of every round, ours and PyTorch alternating",
             "", "## The bars", ""]
    for name, ok, text in bars:
        lines.append(f"- {'**met**' if ok else '**not met**'}: {name}: {text}")
    lines += ["", "## The paper's MoE block (h 4096, 32 heads, 8 experts, top-2, 4 x 2048 tokens,"
              " forward + backward, bf16)", "",
              "| system | attention | ms | TFLOP/s | % of GEMM rate |", "|---|---|---|---|---|"]
    for r in rows:
        if r["measurement"] in ("block", "gemm"):
            lines.append(f"| {r['system']} | {r['attention']} | {r['ms']} | {r['tflops']} | "
                         f"{r['pct_of_gemm'] if r['measurement'] == 'block' else ''} |")
    lines += ["", f"GEMM rate used for the bars: {peak:.0f} TFLOP/s (the best of the rates "
              "measured in this run)." if peak else "", "",
              "## Training: ted_train, 1 GPU", "",
              f"experiments/train/gpu-1b.yaml ({params.group(1) if params else '?'} parameters, "
              f"attention {train_attention}): {train_tps:.0f} tokens/s, {train_tf:.0f} TFLOP/s of "
              f"model FLOPs (forward x 3, experts at their capacity, attention's full square); "
              f"MFU over the {dense_source}: "
              + (f"{100 * mfu_dense:.1f}% of {dense * 1e-12:.1f} TFLOP/s" if mfu_dense else "not stated")
              + f"; over the best GEMM rate measured in this run: {100 * mfu:.1f}% of {peak:.0f} "
              f"TFLOP/s; medians of steps 3 to {len(train)}." if mfu else "not measured", "",
              "## Where one step of our block goes (Nsight Compute, gpu__time_duration, top 15)", ""]
    if k:
        total = sum(v[1] for v in k.values())
        lines += [f"{len(k)} kernels, {sum(v[0] for v in k.values())} launches, "
                  f"{total * 1e3:.2f} ms of kernel time (serialised by the profiler).", "",
                  "| kernel | launches | ms | share |", "|---|---|---|---|"]
        for name, (calls, seconds) in sorted(k.items(), key=lambda kv: -kv[1][1])[:15]:
            lines.append(f"| `{short(name)}` | {calls} | {seconds * 1e3:.3f} | "
                         f"{100 * seconds / total:.1f}% |")
    else:
        lines.append(f"not measured: {why}")
    if problems:
        lines += ["", "## Missing", ""] + [f"- {p}" for p in problems]
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"report: {stem}.md, {stem}.csv")
    met = all(ok for _, ok, _ in bars)
    print(f"verdict: {'PASS' if met and not problems else 'FAIL'}: "
          f"{sum(ok for _, ok, _ in bars)} of {len(bars)} bars met"
          f"{', something missing' if problems else ''}")
    return 0 if met and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
