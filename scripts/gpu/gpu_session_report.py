"""The report of scripts/gpu/gpu_session.sh (called through scripts/gpu/gpu_report.py --session): reads
its raw folder and writes <device>-<revision>-session.md and .csv into the report folder: the
steps and what the budget left out; the owed checks (gpu_check.sh's verdict, the once-failed
ted_cuda_staged_np4_bf16 with its output when it failed); the paper's block, ours against every
peer; the 1.35B training step, ours against Megatron-Core and DeepSpeed-MoE, with one FLOP
count per step and MFU over the dense peak and over the measured GEMM rate, each labelled; the
step's peak memory by the tracking allocator, the CUDA driver and the projection's model; the
projected against the measured step time; every system's version. Ends with a verdict line and
exits 1 when a bar is not met or something is missing. Standard library only.
"""
import csv
import io
import re
import statistics
from pathlib import Path

import report_common as base


def rows_of(path):
    return base.read_csv_lines(path) if path.exists() else []


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ours_block(raw, name):
    """Our block's time (ms) and TFLOP/s, the medians over every round, and its label."""
    ms, tf, gemm, label, errors = [], [], [], "", []
    for path in sorted(raw.glob("ours_[0-9]*.csv")):
        for r in rows_of(path):
            if not r.get("name", "").startswith(name + "/") and r.get("name") != name:
                if r.get("name", "").startswith("cublas_gemm_bf16/"):
                    gemm.append(base.number(r.get("TFLOPs")))
                continue
            if r.get("error_occurred") == "true":
                errors.append(r.get("error_message", ""))
                continue
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(r.get("time_unit", "ms"), 1.0)
            ms.append(base.number(r["real_time"]) * scale)
            tf.append(base.number(r.get("TFLOPs")) if r.get("TFLOPs") else
                      (base.number(r.get("GFLOP/s")) or 0) / 1e3)
            gemm.append(base.number(r.get("gemm_TFLOPs", "")))
            label = r.get("label", "")
    return med(ms), med(tf), med(gemm), label, errors


def peers_block(raw):
    """Per peer system: its rows of every round (moe_block.py's CSV)."""
    table = {}
    for path in sorted(raw.glob("peers_[0-9]*.csv")):
        text = path.read_text()
        start = text.find("size,dtype,device,system,")  # anything a library printed before it
        if start < 0:
            continue
        for r in csv.DictReader(io.StringIO(text[start:])):
            table.setdefault(r["system"], []).append(r)
    return table


def train_rows(path, skip=2):
    """(median tokens/s of the steps after `skip`, median seconds, the rows)."""
    rows = rows_of(path)
    timed = rows[skip:] if len(rows) > skip else rows
    return (med(base.number(r.get("tokens_per_s")) for r in timed),
            med(base.number(r.get("seconds")) for r in timed), rows)


def memory(raw):
    """Our step's peak three ways: the tracking allocator and the projection's model (ted_train's
    footer), the driver (nvidia-smi's memory.used polled during the run, less the idle count)."""
    log = raw / "train_ours_1.log"
    text = log.read_text() if log.exists() else ""
    found = re.search(r"total: (\d+) bytes tracked, (\d+) bytes projected", text)
    tracked, projected = (int(found.group(1)), int(found.group(2))) if found else (None, None)
    driver = None
    poll, idle = raw / "memory_poll_1.txt", raw / "memory_idle_1.txt"
    if poll.exists() and idle.exists():
        used = [base.number(line) for line in poll.read_text().split()]
        used = [u for u in used if u is not None]
        start = base.number(idle.read_text().strip())
        if used and start is not None:
            driver = (max(used) - start) * 2**20  # MiB
    return tracked, projected, driver


def gib(value):
    return f"{value / 2**30:.2f} GiB" if value else "not measured"


def main(raw, out, dry):
    env = dict(line.split("=", 1) for line in (raw / "session.env").read_text().split("\n") if "=" in line) \
        if (raw / "session.env").exists() else {}
    device_line = (raw / "device.txt").read_text().strip() if (raw / "device.txt").exists() else "?"
    device = device_line.split(",")[0].strip()
    versions = dict(line.split(",", 1) for line in (raw / "versions.txt").read_text().split("\n")
                    if "," in line) if (raw / "versions.txt").exists() else {}
    steps = rows_of(raw / "steps.csv")
    log = (raw / "train_ours_1.log").read_text() if (raw / "train_ours_1.log").exists() else ""
    revision = re.search(r"^# ted_train (\S+):", log, re.M)
    revision = revision.group(1) if revision else "unknown"
    problems = []

    # The FLOP count, once: ted_train's model FLOPs per step of this config (its gflops_per_s x
    # seconds), the same for every system, since all run the same model and tokens.
    ours_tps, ours_s, ours_rows = train_rows(raw / "train_ours_1.csv")
    for extra in sorted(raw.glob("train_ours_[2-9].csv")):
        more = train_rows(extra)[2]
        ours_rows += more[2:]
    if ours_rows:
        timed = ours_rows[2:] or ours_rows
        ours_tps = med(base.number(r.get("tokens_per_s")) for r in timed)
        ours_s = med(base.number(r.get("seconds")) for r in timed)
    flops_step = med(base.number(r.get("gflops_per_s")) * 1e9 * base.number(r.get("seconds"))
                     for r in ours_rows if r.get("gflops_per_s") and r.get("seconds"))
    tokens_step = ours_tps * ours_s if ours_tps and ours_s else None
    dense, dense_source = base.dense_peak(device)
    ms, tf, gemm_in_run, label, errors = ours_block(raw, env.get("block_name", ""))
    problems += [f"our block: {e}" for e in errors]
    rates = {r["rate"]: base.number(r["value"]) for r in rows_of(raw / "rates.csv")}
    gemm_rates = [v for k, v in rates.items() if k.startswith("gemm")] + ([gemm_in_run] if gemm_in_run else [])
    gemm = max(gemm_rates) if gemm_rates else None  # FLOP/s or TFLOP/s: normalised below
    gemm = gemm * 1e12 if gemm and gemm < 1e9 else gemm

    def mfu(flops_per_s):
        return (f"{100 * flops_per_s / dense:.1f}%" if flops_per_s and dense else "",
                f"{100 * flops_per_s / gemm:.1f}%" if flops_per_s and gemm else "")

    csv_rows = []

    def add(measurement, system, version, ms_value=None, flops_per_s=None, tps=None, note=""):
        dense_pct, gemm_pct = mfu(flops_per_s)
        csv_rows.append({"revision": revision, "device": device, "measurement": measurement,
                         "system": system, "version": version,
                         "ms": f"{ms_value:.3f}" if ms_value else "",
                         "tflops": f"{flops_per_s * 1e-12:.3f}" if flops_per_s else "",
                         "pct_of_dense_peak": dense_pct, "pct_of_measured_gemm": gemm_pct,
                         "tokens_per_s": f"{tps:.0f}" if tps else "", "note": note})

    # The block.
    add("block", "ours", revision, ms, tf * 1e12 if tf else None, note=label)
    if ms is None:
        problems.append("no time for our block")
    peers = peers_block(raw)
    fastest_peer = None
    for system, rs in peers.items():
        p_ms = med(base.number(r.get("ms_per_iter")) for r in rs)
        p_tf = med(base.number(r.get("tflops")) for r in rs)
        checks = sorted({r.get("check", "") for r in rs})
        add("block", system, rs[0].get("version", ""), p_ms, p_tf * 1e12 if p_tf else None,
            note=f"check {'/'.join(checks)} (rel. error {rs[0].get('check_rel_err', '')}); "
                 f"capacity {rs[0].get('capacity', '')}; {rs[0].get('note', '')}")
        if any(c.startswith("FAILED") for c in checks):
            problems.append(f"{system}: its check against our block failed")
        if p_ms and (fastest_peer is None or p_ms < fastest_peer[1]):
            fastest_peer = (system, p_ms)
    # The training step.
    add("train", "ours (ted_train)", revision, ours_s * 1e3 if ours_s else None,
        flops_step / ours_s if flops_step and ours_s else None, ours_tps,
        "experiments/train/gpu-1b.yaml; medians of the steps after the first 2")
    if not ours_tps:
        problems.append("no timed steps of our training step")
    fastest_train = None
    for system in ("megatron", "deepspeed"):
        tps, seconds, rs = train_rows(raw / f"train_{system}.csv")
        if not rs:
            problems.append(f"no training step from {system} (train_{system}.log)")
            continue
        add("train", rs[0].get("system") or system, rs[0].get("version", ""),
            seconds * 1e3 if seconds else None,
            flops_step / seconds if flops_step and seconds else None, tps, rs[0].get("note", ""))
        if tps and (fastest_train is None or tps > fastest_train[1]):
            fastest_train = (rs[0].get("system") or system, tps)
    tracked, projected, driver = memory(raw)
    add("memory", "ours: tracking allocator", revision, note=gib(tracked))
    add("memory", "ours: CUDA driver (nvidia-smi, less idle)", revision, note=gib(driver))
    add("memory", "projection's memory model (ted_train)", revision, note=gib(projected))
    projections = {}
    for tag in ("committed", "measured"):
        rs = rows_of(raw / f"projection_{tag}.csv")
        if rs:
            projections[tag] = rs[0]
            add("projection", f"ted_project, {tag} cluster file", revision,
                base.number(rs[0]["time_ms_median"]),
                note=f"peak {gib(base.number(rs[0]['peak_total_bytes']))}")
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"
    stem = out / f"{slug}-{revision}-session"
    with open(f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(csv_rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(csv_rows)

    # The owed checks.
    summary = raw / "checks" / "summary.md"
    verdict = next((line for line in reversed(summary.read_text().splitlines())
                    if line.startswith("verdict:")), None) if summary.exists() else None
    ctest = (raw / "checks" / "ctest.txt").read_text() if (raw / "checks" / "ctest.txt").exists() else ""
    owed = re.search(r"^.*Test +#\d+: ted_cuda_staged_np4_bf16 .*$", ctest, re.M)

    bars = [
        ("the owed checks pass (gpu_check.sh's verdict)", bool(verdict and "PASS" in verdict),
         verdict or "not run"),
        ("our block at or under the fastest peer's time",
         bool(ms and fastest_peer and ms <= fastest_peer[1]),
         f"{ms:.3f} ms vs {fastest_peer[0]} {fastest_peer[1]:.3f} ms" if ms and fastest_peer
         else "not measured"),
        ("our training step at or above the fastest peer's tokens/s",
         bool(ours_tps and fastest_train and ours_tps >= fastest_train[1]),
         f"{ours_tps:.0f} vs {fastest_train[0]} {fastest_train[1]:.0f} tokens/s"
         if ours_tps and fastest_train else "not measured"),
    ]
    lines = [f"# One GPU session, ours against the peers: {device}", ""]
    if dry:
        lines += ["**DRY RUN on the CPU, tiny sizes: the control flow of scripts/gpu/gpu_session.sh; "
                  "no number here is a GPU's.**", ""]
    lines += [f"- device: {device_line}", f"- revision {revision}; budget {env.get('budget', '?')} s",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
              "- made by `scripts/gpu/gpu_session.sh`; times are medians over the timed iterations of "
              "every round, ours and the peers alternating", "", "## Bars", ""]
    lines += [f"- {'**met**' if ok else '**not met**'}: {name}: {text}" for name, ok, text in bars]
    lines += ["", "## Steps (the time budget)", "", "| step | planned s | took s | exit | status |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['step']} | {r['planned_s']} | {r['seconds']} | {r['exit']} | {r['status']} |"
              for r in steps]
    lines += ["", "## The owed checks", "", f"- scripts/gpu/gpu_check.sh: {verdict or 'not run'}",
              f"- ted_cuda_staged_np4_bf16: {owed.group(0).strip() if owed else 'not run'}"]
    if owed and "Passed" not in owed.group(0):
        start = ctest.find("ted_cuda_staged_np4_bf16")
        lines += ["", "```", ctest[max(0, start - 200):start + 3000].strip(), "```"]
    flops_text = (f"{flops_step:.4g} FLOP per step ({tokens_step:.0f} tokens): ted_train's model "
                  "FLOPs of experiments/train/gpu-1b.yaml (per token and layer 24 h^2 + 4 S h "
                  "forward, an MoE FFN as top_k FFNs plus its gate, the LM head; x 3 for forward "
                  "and backward), the same work for every system" if flops_step and tokens_step
                  else "not measured")
    lines += ["", "## MFU's two denominators", "",
              f"- FLOP count: {flops_text}",
              f"- dense peak: {dense * 1e-12:.1f} TFLOP/s, the {dense_source}" if dense
              else f"- dense peak: not stated ({dense_source})",
              f"- measured GEMM rate: {gemm * 1e-12:.1f} TFLOP/s, the best bf16 GEMM measured in "
              "this session (cuBLAS at the experts' shape, torch.matmul at 8192^3 and at that "
              "shape)" if gemm else "- measured GEMM rate: not measured"]
    for title, kind in (("The paper's MoE block (h 4096, 32 heads, 8 experts, top-2, 4 x 2048 "
                         "tokens, forward + backward, bf16)", "block"),
                        ("The 1.35B MoE GPT training step (experiments/train/gpu-1b.yaml)", "train")):
        lines += ["", f"## {title}", "",
                  "| system | version | ms | TFLOP/s | % of dense peak | % of measured GEMM | "
                  "tokens/s | note |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['system']} | {r['version']} | {r['ms']} | {r['tflops']} | "
                  f"{r['pct_of_dense_peak']} | {r['pct_of_measured_gemm']} | {r['tokens_per_s']} | "
                  f"{r['note']} |" for r in csv_rows if r["measurement"] == kind]
    lines += ["", "## The step's peak memory, three ways", "",
              f"- the tracking allocator: {gib(tracked)}",
              f"- the CUDA driver (memory.used during the run less before it; the CUDA context "
              f"included): {gib(driver)}", f"- the projection's memory model: {gib(projected)}"]
    lines += ["", "## The projection against the measurement", ""]
    for tag, r in projections.items():
        t = base.number(r["time_ms_median"])
        ratio = f", {t / (ours_s * 1e3):.3f} of the measured {ours_s * 1e3:.1f} ms" if ours_s else ""
        lines.append(f"- {tag} cluster file ({r.get('device', '')}): {t:.1f} ms per step{ratio}; "
                     f"peak {gib(base.number(r['peak_total_bytes']))}")
    if not projections:
        lines.append("not projected")
    if rates:
        lines += ["", "## The device's rates (peers/device_rates.py)", ""]
        lines += [f"- {k}: {v:.4g}" for k, v in rates.items()]
    table, why = base.kernels(raw)
    if table:
        total = sum(v[1] for v in table.values())
        lines += ["", "## Where one step of our block goes (Nsight Compute, top 15)", "",
                  "| kernel | launches | ms | share |", "|---|---|---|---|"]
        for name, (calls, seconds) in sorted(table.items(), key=lambda kv: -kv[1][1])[:15]:
            lines.append(f"| `{base.short(name)}` | {calls} | {seconds * 1e3:.3f} | "
                         f"{100 * seconds / total:.1f}% |")
    skipped = [r["step"] for r in steps if "skipped" in r["status"]]
    if skipped:
        problems.append("left out by the budget: " + ", ".join(skipped))
    problems += [f"step {r['step']}: {r['status']} (exit {r['exit']})" for r in steps
                 if r["status"] in ("failed", "timed out")]
    if problems:
        lines += ["", "## Missing or failed", ""] + [f"- {p}" for p in problems]
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    met = all(ok for _, ok, _ in bars)
    print(f"report: {stem}.md, {stem}.csv")
    print(f"verdict: {'PASS' if met and not problems else 'FAIL'}: "
          f"{sum(ok for _, ok, _ in bars)} of {len(bars)} bars met"
          f"{', something missing or failed' if problems else ''}")
    return 0 if met and not problems else 1
