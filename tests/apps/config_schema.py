"""One schema for C++ and Python: `ted_project experiment -c <yaml> --print-config` prints every
key's type and default, and the YAML's resolved values. Its schema must be the committed
experiments/config_schema.json (what the DeepSpeed runner's ted_config.py reads), and
ted_config.load must resolve each YAML to the program's values, key by key (paths as given, the
program having found them: compared by file name). Prints each difference; exits 1 on one.
  config_schema.py <ted_project> <source root> <yaml>..."""
import json
import subprocess
import sys
from pathlib import Path

program, root, yamls = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
sys.path.insert(0, str(root / "baselines/deepspeed"))
import ted_config  # noqa: E402

committed = json.loads((root / "experiments/config_schema.json").read_text())
failures = 0


def fail(line):
    global failures
    failures += 1
    print("FAIL:", line)


for path in yamls:
    out = subprocess.run([program, "experiment", "-c", str(root / path), "--print-config"],
                         capture_output=True, text=True, cwd=root)
    if out.returncode != 0:
        fail(f"{path}: ted_project --print-config exited {out.returncode}: {out.stderr.strip()}")
        continue
    printed = json.loads(out.stdout)
    if printed["schema"] != committed:
        keys = set(printed["schema"]) ^ set(committed)
        changed = [k for k in set(printed["schema"]) & set(committed)
                   if printed["schema"][k] != committed[k]]
        fail(f"experiments/config_schema.json differs from ted_project --print-config "
             f"(keys only in one: {sorted(keys)}; changed: {sorted(changed)}); write it again "
             f"with: ted_project experiment -c {path} --print-config, its \"schema\" part")
    cfg = ted_config.load(str(root / path))
    compared = 0
    for key, value in printed["values"].items():
        section, _, name = key.partition(".")
        ours = cfg[section][name] if name else cfg[section]
        if committed.get(key, {}).get("type") == "path":
            value, ours = Path(value).name, Path(ours).name
        compared += 1
        if ours != value:
            fail(f"{path}: {key}: the program resolves {value!r}, ted_config.py {ours!r}")
    print(f"{path}: {compared} keys compared")
print(f"{failures} failure(s)" if failures else "Passed: one schema, the same values")
sys.exit(1 if failures else 0)
