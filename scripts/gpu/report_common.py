"""What the GPU reports share (gpu_report.py, gpu_session_report.py): the device's datasheet
peak, our CSVs with their '#' headers, numbers, medians and Nsight Compute's kernel table.
Standard library only."""
import csv
import io
import re
import statistics

# Dense (no sparsity) bf16 tensor-core peaks by the device name nvidia-smi gives, FLOP/s, from
# NVIDIA's datasheets: H100 SXM5 and H200 SXM 989.4 TFLOP/s (1979 with sparsity), H100 PCIe
# 756.5, H100 NVL 835.5 (1671 with sparsity).
DENSE_PEAK = (("H200", 989.4e12), ("H100 PCIe", 756.5e12), ("H100 NVL", 835.5e12),
              ("H100", 989.4e12))


def dense_peak(device):
    """(FLOP/s, where from) for a device name, or (None, why not)."""
    for key, value in DENSE_PEAK:
        if key in device:
            return value, f"dense bf16 peak of the {key} by NVIDIA's datasheet"
    return None, f"no datasheet peak known for '{device}'"


def read_csv_lines(path):
    """The CSV rows of a file whose other lines start with '#' (our programs' headers)."""
    if not path.exists():
        return []
    text = "".join(line for line in path.read_text().splitlines(True) if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def comments(path):
    return [line[1:].strip() for line in path.read_text().splitlines() if line.startswith("#")] \
        if path.exists() else []


def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def kernels(raw):
    """Nsight Compute's raw CSV: per kernel name, its launches and total seconds."""
    path = raw / "ncu.csv"
    if not path.exists():
        return None, "no ncu output"
    lines = [l for l in path.read_text().splitlines() if l.startswith('"')]
    if not lines:
        return None, (raw / "ncu.log").read_text()[-400:] if (raw / "ncu.log").exists() else "empty"
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    try:
        name_at, time_at = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    except ValueError:
        return None, "unexpected ncu columns: " + ",".join(header[:12])
    table = {}
    for row in rows[1:]:
        seconds = number(row[time_at]) if len(row) > time_at else None
        if seconds is None:  # the units row
            continue
        name = row[name_at]
        calls, total = table.get(name, (0, 0.0))
        table[name] = (calls + 1, total + seconds * 1e-9)  # base units: nanoseconds
    return table, ""


def short(name, width=110):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[:width - 3] + "..."
