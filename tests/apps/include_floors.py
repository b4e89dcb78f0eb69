"""No include runs up the floors: every #include "ted/<folder>/..." of lib/ted/<folder> names a
folder of its own layer or a lower one, and lib/emulated_gpu includes only ted/core, as
docs/layout.md's chain of layers says (read from there: `a` → `b`, `c` → ...). Prints each
include that climbs, and exits 1 when there is one.
  include_floors.py <source root>"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1])
layout = (root / "docs/layout.md").read_text()
chain = re.search(r"step or before it:(.*?)\.", layout, re.S)
if not chain:
    sys.exit("FAIL: docs/layout.md has no chain of layers ('... step or before it: `core` → ...')")
level = {}
for i, step in enumerate(chain.group(1).split("→")):
    for name in re.findall(r"`([^`]+)`", step):
        level[name.rstrip("/").split("/")[-1]] = i
if "core" not in level or "emulated_gpu" not in level:
    sys.exit(f"FAIL: docs/layout.md's chain lacks core or lib/emulated_gpu: {sorted(level)}")

climbs = checked = 0
for path in sorted((root / "lib").rglob("*")):
    if path.suffix not in (".h", ".hpp", ".cpp", ".cu", ".cuh"):
        continue
    parts = path.relative_to(root / "lib").parts
    me = parts[1] if parts[0] == "ted" else parts[0]
    if me not in level:
        continue
    for line_no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = re.match(r'\s*#\s*include\s+"ted/(\w+)/', line)
        if not m:
            continue
        checked += 1
        target = m.group(1)
        if target not in level:
            print(f"FAIL: {path.relative_to(root)}:{line_no} includes ted/{target}/, a folder the chain does not name")
            climbs += 1
        elif level[target] > level[me]:
            print(f"FAIL: {path.relative_to(root)}:{line_no} ({me}) includes ted/{target}/, a higher layer")
            climbs += 1
print(f"{checked} includes checked, {climbs} climbing")
sys.exit(1 if climbs else 0)
