#!/usr/bin/python3
"""Fits time = latency + bus bytes / bandwidth to ted_collbench CSVs (every size of every file).
Prints "bandwidth latency" (bytes/s, s). A negative intercept (noise at small sizes) falls back
to the smallest message's time as the latency.

    /usr/bin/python3 scripts/calibration/fit_links.py a.csv [b.csv ...]
"""
import csv
import sys

points = []  # (bus bytes per call, seconds)
for path in sys.argv[1:]:
    for row in csv.DictReader(open(path)):
        seconds = float(row["time_us_median"]) * 1e-6
        points.append((float(row["busbw_GBps"]) * 1e9 * seconds, seconds))
n = len(points)
mean_x = sum(x for x, _ in points) / n
mean_y = sum(y for _, y in points) / n
slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum(
    (x - mean_x) ** 2 for x, _ in points)
latency = mean_y - slope * mean_x
if latency <= 0:
    latency = min(y for _, y in points)
print(f"{1.0 / slope:.4g} {latency:.4g}")
