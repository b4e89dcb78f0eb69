#!/usr/bin/python3
"""Fits link constants to ted_collbench CSVs.

    /usr/bin/python3 scripts/calibration/fit_links.py a.csv [b.csv ...]
        time = latency + bus bytes / bandwidth over every size of every file (one node's links);
        prints "bandwidth latency" (bytes/s, s). A negative intercept (noise at small sizes)
        falls back to the smallest message's time as the latency.

    /usr/bin/python3 scripts/calibration/fit_links.py --all-to-all MEASURED.csv RANKS_PER_NODE
        the all-to-all model's constants (lib/ted/projection/comm_time.cpp) for a cluster of
        nodes of RANKS_PER_NODE ranks from the three all-to-all curves scripts/calibration/calibrate_emulated.sh
        measures (rows told apart by their group, T and Ep columns): a pair inside a node
        (expert group, T = 1, Ep = 2), a pair across two nodes (T = RANKS_PER_NODE, Ep = 2), and
        the world, the all-to-all the model is held to (tests/projection/test_all_to_all_model.cpp).
        Each constant comes from the sizes where it alone sets the time, and the world's
        bandwidth from another pattern than the world, so that the world's sizes in between,
        and its large ones, test the model's form:
          bandwidths: the slope of time over bytes at 1 MiB and more per rank, of the pair
            inside a node (the device's link) and of the pair across nodes (its node carries
            RANKS_PER_NODE ranks' messages: the node's link);
          the per-call latency: the pair inside a node at its smallest size, 1 KiB (shared-memory
            messages cost nothing beyond the call: intra peer_latency and peer_overhead 0);
          inter peer_overhead: the world at 1 KiB less the call, over its off-node peers: MPI's
            all-to-all exchanges with its peers in rounds, one after another, so a message's
            latency is the rank's own cost (inter peer_latency 0).
        Prints YAML lines for the cluster file's intra and inter sections.
"""
import csv
import sys


def fit_line(points):
    """Least squares time = a + x / b over (x, time); returns (b, a)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum(
        (x - mean_x) ** 2 for x, _ in points)
    return 1.0 / slope, mean_y - slope * mean_x


def ring_fit(paths):
    points = []  # (bus bytes per call, seconds)
    for path in paths:
        for row in csv.DictReader(open(path)):
            seconds = float(row["time_us_median"]) * 1e-6
            points.append((float(row["busbw_GBps"]) * 1e9 * seconds, seconds))
    bandwidth, latency = fit_line(points)
    if latency <= 0:
        latency = min(y for _, y in points)
    print(f"{bandwidth:.4g} {latency:.4g}")


def all_to_all_fit(path, per_node):
    curves = {"intra": {}, "inter": {}, "world": {}}
    for row in csv.DictReader(open(path)):
        if row["op"] != "all_to_all":
            continue
        if row["group"] == "world":
            kind = "world"
        elif row["group"] == "expert" and row["Ep"] == "2":
            kind = "intra" if row["T"] == "1" else "inter" if int(row["T"]) == per_node else None
        else:
            kind = None
        if kind:
            curves[kind][int(row["bytes"])] = float(row["time_us_median"]) * 1e-6
    for kind, curve in curves.items():
        if not curve:
            sys.exit(f"fit_links: {path} has no {kind} all-to-all rows")
    world_size = next(int(r["G"]) for r in csv.DictReader(open(path)) if r["group"] == "world")

    def small(kind):  # the smallest size: on a slow link even 4 KiB waits for its bytes
        return curves[kind][min(curves[kind])]

    def large(kind, share):  # (bandwidth, intercept) of time = a + share x bytes / bandwidth
        return fit_line([(share * s, t) for s, t in curves[kind].items() if s >= 1 << 20])

    # A pair inside a node sends half its bytes to its peer through its own link.
    intra_bandwidth, _ = large("intra", 0.5)
    # A pair across nodes: each of the node's per_node ranks sends half its bytes off the node.
    node_bandwidth, _ = large("inter", 0.5 * per_node)
    call = small("intra")
    off_world = world_size - per_node  # a world member's peers off its node
    overhead = (small("world") - call) / off_world
    latency = 0.0
    if overhead <= 0:
        sys.exit(f"fit_links: the world's small all-to-alls ({small('world'):.3g} s) are no slower "
                 f"than a call ({call:.3g} s): measure again on a quiet machine")
    print(f"intra.bandwidth {intra_bandwidth:.4g}")
    print(f"intra.latency {call:.4g}")
    print(f"inter.bandwidth {node_bandwidth:.4g}")
    print(f"inter.latency {call:.4g}")
    print(f"inter.peer_latency {latency:.4g}")
    print(f"inter.peer_overhead {overhead:.4g}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--all-to-all":
        if len(sys.argv) != 4:
            sys.exit("usage: fit_links.py --all-to-all MEASURED.csv RANKS_PER_NODE")
        all_to_all_fit(sys.argv[2], int(sys.argv[3]))
    else:
        ring_fit(sys.argv[1:])
