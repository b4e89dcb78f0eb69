#!/usr/bin/python3
"""Writes a measured cluster file from what scripts/calibration/calibrate_cluster.sh measured.

    /usr/bin/python3 scripts/calibration/make_cluster.py OUT.yaml --name NAME --nodes N
        --per-node P --device DEVICE --revision REV --launch "LAUNCHER" --work DIR
        [--compute-from CLUSTER.yaml]

DIR holds bench_machine.json (one device's GEMM rates and element-wise bandwidth; absent with
--compute-from, whose compute keys are copied and marked so), links.txt (the latency-bandwidth
constants: scripts/calibration/fit_links.py's lines) and one ted_collbench CSV per collective and
group layout, named <op>_n<members>_q<per node>.csv: the measured curves, by the bytes each rank
sends per call (the ledger's, column ledger_bytes_sent) and the median time of the slowest rank.
Bad or missing input: one line, exit 2, OUT untouched.
"""
import argparse
import csv
import datetime
import glob
import json
import os
import re
import sys


def die(message):
    print(f"make_cluster: {message}", file=sys.stderr)
    sys.exit(2)


def gemm_rates(path):
    """(peak, sustained, bandwidth, shapes) from bench_machine's JSON."""
    try:
        benchmarks = json.load(open(path))["benchmarks"]
    except (OSError, ValueError, KeyError) as e:
        die(f"{path}: not bench_machine's JSON ({e})")

    def rate(part, counter):
        rows = [b for b in benchmarks if part in b["name"] and b.get(counter) is not None]
        if not rows:
            die(f"{path}: no {part} benchmark with {counter}: run it again on a quieter machine")
        return rows[0][counter]

    shapes = {next(p for p in b["name"].split("/") if "cpu_" in p): b["GFLOP/s"] * 1e9
              for b in benchmarks if "cpu_" in b["name"] and b.get("GFLOP/s") is not None}
    sustained = rate("cpu_ffn", "GFLOP/s") * 1e9
    peak = max(rate("large", "GFLOP/s") * 1e9, sustained)
    return peak, sustained, rate("cpu_block", "GB/s") * 1e9, shapes


def compute_keys(path):
    """The compute keys of an existing cluster file, as text."""
    keys = {}
    section = None
    for line in open(path):
        m = re.match(r"^(\w+):\s*([^#\s]*)", line)
        if m:
            section = m.group(1)
            if m.group(2):
                keys[section] = m.group(2)
            continue
        m = re.match(r"^\s+(\w+):\s*([^#\s]*)", line)
        if m and section == "gemm":
            keys["gemm." + m.group(1)] = m.group(2)
    for key in ("peak_flops", "sustained_flops", "memory_bandwidth", "memory_bytes",
                "gemm.units", "gemm.tile_m", "gemm.tile_n", "gemm.k_overhead"):
        if key not in keys:
            die(f"{path}: no key '{key}' to take the compute from")
    return keys


def curves(work):
    out = []
    files = sorted(glob.glob(os.path.join(work, "*_n*_q*.csv")))
    if not files:
        die(f"{work}: no ted_collbench CSVs (<op>_n<members>_q<per node>.csv)")
    for path in files:
        m = re.match(r"(\w+)_n(\d+)_q(\d+)\.csv$", os.path.basename(path))
        if not m:
            die(f"{path}: not named <op>_n<members>_q<per node>.csv")
        op, members, per_node = m.group(1), int(m.group(2)), int(m.group(3))
        points = {}
        for row in csv.DictReader(open(path)):
            if row.get("op") != op or int(row.get("group_size", 0)) != members:
                die(f"{path}: a row of {row.get('op')} on {row.get('group_size')} ranks")
            if row.get("wrong", "0") not in ("0", ""):
                die(f"{path}: {row['wrong']} wrong elements at {row['bytes']} bytes")
            points[int(row["ledger_bytes_sent"])] = float(row["time_us_median"]) * 1e-6
        if not points:
            die(f"{path}: no rows")
        measured = sorted(points.items())
        # A call of fewer bytes on the same group takes no longer than one of more: a small size
        # measured slower than a larger one is the machine's noise (a rank descheduled), and the
        # curve keeps the larger size's time there (the least time at that size or above).
        kept, least = [], float("inf")
        for size, seconds in reversed(measured):
            least = min(least, seconds)
            kept.append((size, least))
        out.append((op, members, per_node, measured, kept[::-1], path))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    for key in ("name", "device", "revision", "launch", "work"):
        p.add_argument("--" + key, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--per-node", type=int, required=True)
    p.add_argument("--cores-per-node", type=float, default=0)
    p.add_argument("--host-cores", type=float, default=0)
    p.add_argument("--curves-ranks", type=int, default=0)
    p.add_argument("--memory-bytes", default="24e9")
    p.add_argument("--compute-from")
    p.add_argument("--seconds", type=float, default=0)
    a = p.parse_args()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    links, notes = {}, []
    try:
        for line in open(os.path.join(a.work, "links.txt")):
            if line.startswith("note "):
                notes.append(line[5:].strip())
                continue
            key, value = line.split()
            links[key] = float(value)
    except (OSError, ValueError) as e:
        die(f"{a.work}/links.txt: not fit_links.py's lines ({e})")
    for key in ("intra.bandwidth", "intra.latency", "inter.bandwidth", "inter.latency",
                "inter.peer_latency", "inter.peer_overhead"):
        if key not in links:
            die(f"{a.work}/links.txt: no {key}")
    measured = f"measured {when}, revision {a.revision}, {a.nodes} nodes x {a.per_node} {a.device}"
    if a.compute_from:
        k = compute_keys(a.compute_from)
        compute = [
            f"memory_bytes: {k['memory_bytes']}   # from {a.compute_from}, not measured here",
            f"peak_flops: {k['peak_flops']}   # from {a.compute_from}, not measured here",
            f"sustained_flops: {k['sustained_flops']}   # from {a.compute_from}, not measured here",
            f"memory_bandwidth: {k['memory_bandwidth']}   # from {a.compute_from}, not measured here",
            "gemm:   # from " + a.compute_from,
            f"  units: {k['gemm.units']}", f"  tile_m: {k['gemm.tile_m']}",
            f"  tile_n: {k['gemm.tile_n']}", f"  k_overhead: {k['gemm.k_overhead']}"]
    else:
        peak, sustained, bandwidth, shapes = gemm_rates(os.path.join(a.work, "bench_machine.json"))
        each = ", ".join(f"{name} {rate / 1e9:.1f}" for name, rate in sorted(shapes.items()))
        compute = [
            f"memory_bytes: {a.memory_bytes}   # not measured: the memory the ranks may use",
            f"peak_flops: {peak:.4g}   # measured: sgemm 2048 x 2048 x 512 on one device (bench_machine), or the FFN shape's if faster",
            f"sustained_flops: {sustained:.4g}   # measured: sgemm at the CPU experiments' FFN shape (GFLOP/s at their shapes: {each})",
            f"memory_bandwidth: {bandwidth:.4g}   # measured: the suite's element-wise work in the CPU experiments' block (bench_machine)",
            "gemm:   # one core: the measured rate is the rate of the experiments' shapes",
            "  units: 1", "  tile_m: 1", "  tile_n: 1", "  k_overhead: 0"]
    lines = [
        f"# {a.name}: {measured}, by scripts/calibration/calibrate_cluster.sh",
        f"# (launcher: {a.launch}; {a.seconds:.0f} s). Every value below is measured there unless its",
        "# comment says otherwise. The collectives are measured curves (`curves`, by the bytes each rank",
        "# sends per call; lib/ted/projection/curves.hpp): a group laid as one was measured takes its",
        "# time off the curve; any other group, and other cluster sizes, the links' constants, fitted",
        "# to the same all-to-alls (scripts/calibration/fit_links.py).",
    ] + [f"# The links' constants: {note}" for note in notes] + [
        f"name: {a.name}",
        f"device: {a.device}",
        f"devices_per_node: {a.per_node}",
        f"cores_per_node: {a.cores_per_node:g}   # 0: devices that share nothing (GPUs)",
    ] + ([f"host_cores: {a.host_cores:g}   # measured: every node on this machine (one boot_id), sharing its cores"]
         if a.host_cores > 0 else []) + [
        f"curves_ranks: {a.curves_ranks}   # the ranks running while the curves were measured",
    ] + compute + [
        "intra:",
        f"  bandwidth: {links['intra.bandwidth']:.4g}   # measured: the all-to-all of a pair inside a node, 1 MiB and more per rank",
        f"  latency: {links['intra.latency']:.4g}   # measured: that pair at its smallest size",
        "  peer_latency: 0   # set to 0: the fit puts a call's cost in its latency",
        "  peer_overhead: 0",
        "inter:",
        f"  bandwidth: {links['inter.bandwidth']:.4g}   # measured: per node, the all-to-all of a pair across nodes, 1 MiB and more per rank",
        f"  latency: {links['inter.latency']:.4g}   # measured: a call, as inside a node",
        f"  peer_latency: {links['inter.peer_latency']:.4g}",
        f"  peer_overhead: {links['inter.peer_overhead']:.4g}   # measured: per off-node peer, the world's smallest all-to-all less a call",
        f"  device_bandwidth: {links['inter.bandwidth']:.4g}   # taken as the node's: one rank's messages can fill its link",
        f"source: {measured} (scripts/calibration/calibrate_cluster.sh)",
        "curves:   # ted_collbench (a barrier before each call; median of the slowest rank; no time",
        "          # above a larger size's: a slower small size is the machine's noise)",
    ]
    for op, members, per_node, measured, points, path in curves(a.work):
        if per_node > a.per_node or members % per_node:
            die(f"{path}: {members} members, {per_node} per node, on nodes of {a.per_node}")
        if measured != points:
            lines.append("  # measured (a smaller size slower than a larger one keeps the larger's time): [" +
                         ", ".join(f"{t:.4g}" for _, t in measured) + "]")
        lines += [
            f"  - op: {op}",
            f"    members: {members}",
            f"    per_node: {per_node}",
            "    bytes: [" + ", ".join(str(b) for b, _ in points) + "]",
            "    seconds: [" + ", ".join(f"{t:.4g}" for _, t in points) + "]",
        ]
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
