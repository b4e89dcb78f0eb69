"""Our YAML configs, read for the DeepSpeed runner: the keys, defaults and rules of
lib/ted/train/train_config.hpp and lib/ted/experiments/harness.hpp (a wrong key or value is a
ConfigError naming the file and key), and the points each experiment measures. By default laid
out as our `deepspeed-moe` system lays them (make_point in lib/ted/experiments/plans.cpp): T = 1,
the tensor ranks becoming data ranks, so DeepSpeed runs the same model, micro-batches and tokens
per step. With `systems` (run.py --systems) each of our systems runs as DeepSpeed's configuration
that equals it (DEEPSPEED_OF), at the point's T: DeepSpeed-TED (deepspeed_ted.py); a ted_train
config with parallel.tp > 1 runs DeepSpeed-TED by its parallel.* switches.
"""
import copy
import json
import math
import os
from pathlib import Path

import yaml

import ted_workload


class ConfigError(Exception):
    pass


# Every key our programs accept, its type and default: the C++ schema itself, as
# `ted_project experiment -c <yaml> --print-config` prints it (its "schema" part, committed as
# experiments/config_schema.json; the test config_schema holds the file to the program and this
# module's reading of the YAMLs to the program's). Keys that steer only our schedule (DTD, CAC,
# reduce-scatter, tiles, overlap, clusters) are accepted and have no DeepSpeed counterpart.
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "experiments/config_schema.json").read_text())
DEFAULTS, TOP_LEVEL = {}, {}
for _key, _entry in SCHEMA.items():
    _default = float(_entry["default"]) if _entry["type"] == "number" else _entry["default"]
    if "." in _key:
        _section, _name = _key.split(".", 1)
        DEFAULTS.setdefault(_section, {})[_name] = _default
    else:
        TOP_LEVEL[_key] = _default

# The experiments the DeepSpeed runner runs: those experiments/registry.txt marks deepspeed yes.
EXPERIMENTS = tuple(
    fields[0] for fields in (line.split() for line in
                             (ROOT / "experiments/registry.txt").read_text().splitlines())
    if fields and fields[0][0].isalpha() and fields[4] == "yes")


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


def _unique_mapping(loader, node, deep=False):
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise ConfigError(f"key '{key}' is given twice (line {key_node.start_mark.line + 1})")
        keys.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _words(names):
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def _convert(value, entry, key):
    """`value` as the schema's `entry` types it; no inf or NaN anywhere."""
    kind = entry["type"]
    if kind == "boolean":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if isinstance(value, bool):
            return value
        raise ConfigError(f"key '{key}' must be true or false, got '{value}'")
    if kind == "integer":
        try:
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"key '{key}' must be an integer, got '{value}'") from None
    if kind == "number":
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"key '{key}' must be a number, got '{value}'") from None
        if not math.isfinite(number):
            raise ConfigError(f"key '{key}' must be a finite number, got '{value}'")
        return number
    if kind in ("integers", "strings"):
        if isinstance(value, str):  # --set key=a,b,c as ours takes it
            value = [v.strip() for v in value.split(",")] if value.strip() else []
        if not isinstance(value, list):
            raise ConfigError(f"key '{key}' must be a list, got '{value}'")
        if kind == "strings":  # YAML's true stays the word, as ours reads it
            return [str(v).lower() if isinstance(v, bool) else str(v) for v in value]
        return [_convert(v, {"type": "integer"}, key) for v in value]
    text = "" if value is None else str(value)
    if kind == "choice" and text not in entry["choices"]:
        raise ConfigError(f"key '{key}' must be {_words(entry['choices'])}, got '{text}'")
    return text


def _set(cfg, key, value):
    if key not in SCHEMA:
        raise ConfigError(f"unknown key '{key}'")
    converted = _convert(value, SCHEMA[key], key)
    if "." in key:
        section, name = key.split(".", 1)
        cfg[section][name] = converted
    else:
        cfg[key] = converted


def _positive(cfg, keys):
    for key in keys:
        section, name = key.split(".")
        if cfg[section][name] < 1:
            raise ConfigError(f"key '{key}' must be at least 1, got {cfg[section][name]}")


def load(path, overrides=()):
    """The config of `path` with `section.key=value` overrides, checked; ConfigError names the
    file and key."""
    where = path + (" with --set" if overrides else "")
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such file")
    cfg = copy.deepcopy(DEFAULTS)
    cfg.update(copy.deepcopy(TOP_LEVEL))
    try:
        with open(path) as handle:
            doc = yaml.load(handle, Loader=_UniqueKeyLoader) or {}
        if not isinstance(doc, dict):
            raise ConfigError("the file must be a YAML map of sections")
        for section, body in doc.items():
            if section in TOP_LEVEL:
                _set(cfg, section, body)
                continue
            if section not in DEFAULTS:
                raise ConfigError(f"unknown section '{section}'")
            if not isinstance(body, dict):
                raise ConfigError(f"section '{section}' must be a map")
            for key, value in body.items():
                _set(cfg, f"{section}.{key}", value)
        for assignment in overrides:
            if "=" not in assignment:
                raise ConfigError(f"--set '{assignment}' is not section.key=value")
            key, value = assignment.split("=", 1)
            _set(cfg, key.strip(), yaml.load(value, Loader=_UniqueKeyLoader))
        _validate(cfg)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{where}: not valid YAML: {str(error).splitlines()[0]}") from None
    cfg["where"] = where
    return cfg


def _check_megatron_files(prefix, key):
    """train/megatron_data.cpp check_megatron_files: <prefix>.idx and <prefix>.bin are files."""
    if prefix.endswith((".bin", ".idx")) and not os.path.exists(prefix + ".idx"):
        raise ConfigError(f"{key} '{prefix}' names a file of the dataset; give its prefix, "
                          "without .bin or .idx")
    for suffix, what in ((".idx", "index"), (".bin", "data")):
        if not os.path.isfile(prefix + suffix):
            raise ConfigError(f"{key}: the Megatron {what} '{prefix + suffix}' does not exist")


def _validate(cfg):
    m, g, o, d, r = cfg["model"], cfg["gating"], cfg["optimizer"], cfg["data"], cfg["run"]
    _positive(cfg, ["model.seq_len", "model.hidden", "model.heads", "model.layers",
                    "model.ffn_mult", "model.experts", "model.expert_interval",
                    "data.micro_batch", "data.micro_batches", "training.steps"])
    if m["vocab"] < 2:
        raise ConfigError(f"key 'model.vocab' must be at least 2, got {m['vocab']}")
    if m["hidden"] % m["heads"]:
        raise ConfigError(f"model.heads ({m['heads']}) must divide model.hidden ({m['hidden']})")
    if g["top_k"] not in (1, 2) or g["top_k"] > m["experts"]:
        raise ConfigError(f"gating.top_k must be 1 or 2 and at most model.experts, got "
                          f"{g['top_k']}")
    if not 0 < g["capacity_factor"] <= m["experts"]:
        raise ConfigError("gating.capacity_factor must be positive and at most model.experts")
    if g["min_capacity"] < 0 or g["aux_coeff"] < 0:
        raise ConfigError("gating.min_capacity and gating.aux_coeff must not be negative")
    if not 0 <= m["dropout"] < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {m['dropout']}")
    if not 0 < m["init_std"] <= 1:
        raise ConfigError(f"model.init_std must be in (0, 1], got {m['init_std']}")
    if o["lr"] <= 0 or o["min_lr"] < 0 or o["warmup_steps"] < 0 or o["grad_clip"] < 0:
        raise ConfigError("optimizer.lr must be positive; min_lr, warmup_steps and grad_clip "
                          "must not be negative")
    if d["source"] not in ("synthetic", "file", "megatron"):
        raise ConfigError(f"data.source must be synthetic, file or megatron, got '{d['source']}'")
    if d["source"] == "file" and not os.path.isfile(d["path"]):
        raise ConfigError(f"data.path: '{d['path']}' is not a file")
    megatron = d["source"] == "megatron"
    if megatron and not d["path"]:
        raise ConfigError("data.path must name a Megatron dataset's prefix (<prefix>.bin and "
                          "<prefix>.idx) when data.source is megatron")
    if megatron:
        _check_megatron_files(d["path"], "data.path")
    if not 0 <= d["valid_fraction"] <= 0.5:
        raise ConfigError(f"data.valid_fraction must be in [0, 0.5], got {d['valid_fraction']}")
    if not megatron and (d["valid_fraction"] > 0 or d["valid_path"]):
        key = "data.valid_fraction" if d["valid_fraction"] > 0 else "data.valid_path"
        raise ConfigError(f"{key} splits a Megatron dataset: it needs data.source megatron, got "
                          f"'{d['source']}'")
    if d["valid_fraction"] > 0 and d["valid_path"]:
        raise ConfigError("data.valid_fraction and data.valid_path both name the validation "
                          "split: give one (valid_fraction 0 with valid_path)")
    if d["valid_path"]:
        _check_megatron_files(d["valid_path"], "data.valid_path")
    if d["token_bytes"] not in (2, 4):
        raise ConfigError(f"data.token_bytes must be 2 or 4, got {d['token_bytes']}")
    if not 0 <= d["noise"] <= 1:
        raise ConfigError(f"data.noise must be in [0, 1], got {d['noise']}")
    t = cfg["training"]
    if t["eval_every"] < 0:
        raise ConfigError("training.eval_every must be at least 0 (0: never)")
    if t["eval_batches"] < 1:
        raise ConfigError("training.eval_batches must be at least 1")
    if t["eval_every"] > 0 and cfg["data"]["source"] == "file":
        raise ConfigError("training.eval_every needs a held-out split, and data.source file has none")
    grad_dtype = cfg["training"]["grad_dtype"]
    if grad_dtype not in ("fp32", r["dtype"]):
        raise ConfigError(f"training.grad_dtype must be fp32 or the storage type run.dtype "
                          f"({r['dtype']}), got '{grad_dtype}'")
    if r["warmup"] < 0 or r["iters"] < 0:
        raise ConfigError("run.warmup and run.iters must not be negative")
    # Ours time in interleaved rounds (lib/ted/experiments/rounds.hpp); DeepSpeed's points run
    # once each, its ranks wait as torch.distributed does (run.wait, a choice the schema checks).
    if not 1 <= r["rounds"] <= 1000:
        raise ConfigError(f"run.rounds must be in [1, 1000], got {r['rounds']}")
    try:
        ted_workload.validate(cfg["routing"], m["experts"], g["top_k"])
    except ted_workload.WorkloadError as error:
        raise ConfigError(str(error)) from None
    for key in ("sweep.workloads", "sweep.dropless", "training.save_dir", "training.resume",
                "training.load"):
        section, name = key.split(".")
        if cfg[section][name]:
            raise ConfigError(f"key '{key}': the DeepSpeed runner has no "
                              + ("routing sweep" if section == "sweep" else "checkpoints"))
    if cfg["experiment"] and cfg["experiment"] not in EXPERIMENTS + ("memory",):
        raise ConfigError(f"unknown experiment '{cfg['experiment']}'")


# Our systems and DeepSpeed's configuration equal to each (deepspeed_ted.CONFIGS): "moe" is
# DeepSpeed-MoE (T = 1, no mpu); the others DeepSpeed-TED at the point's T. CAC DeepSpeed does
# not have: a system with it runs without (the recompute redoes the collectives, the row says
# cac 0). The reduce-scatter and the overlap it has no counterpart of: skipped with a line.
def deepspeed_of(system, split_experts=True):
    """(DeepSpeed configuration, note) for one of our systems, or (None, why not: every part
    DeepSpeed has no equal for). A +bf16/+fp16 part (the system's storage type, make_point) is
    DeepSpeed's 16-bit engine (run.py by run.dtype, which system_dtype sets on the point; run on
    CPU ranks too, docs/deepspeed.md's memory table)."""
    if system == "deepspeed-moe":
        return "moe", ""
    parts = {"ted": {"dtd", "cac"}, "ted-baseline": set()}.get(system)
    if parts is None:
        if not system.startswith("ted+"):
            return None, f"unknown system '{system}'"
        parts = set(system[4:].split("+"))
        if any(p.startswith("overlap") for p in parts):
            return None, "DeepSpeed has no overlapped MoE exchange"
    missing = []
    if "rs" in parts:
        missing.append("DeepSpeed has no reduce-scatter in the expert block")
    if "tile" in parts:  # as train_deepspeed_config refuses parallel.tile_elems
        missing.append("DeepSpeed's ZeRO-1 step has no tiles")
    if missing:
        return None, "; ".join(missing)
    note = "no CAC in DeepSpeed: its recompute runs the collectives again" if "cac" in parts \
        else ""
    if not split_experts:
        if "dtd" not in parts:
            return None, "DeepSpeed drops the duplicate tokens of whole experts always (T > 1)"
        return "ted-whole", note
    return ("ted" if "dtd" in parts else "ted-nodtd"), note


class Point:
    """One configuration DeepSpeed runs: the config with the point's model and micro-batches,
    and the layout: DeepSpeed-MoE's (ds_config "moe": T = 1, Ep, D = G / Ep, our
    deepspeed-moe's) or DeepSpeed-TED's (T, Ep, D as ours)."""

    def __init__(self, cfg, ranks, tp, ep, label, ds_config="moe", system="", note=""):
        if ranks % (tp * ep):
            raise ConfigError(f"{cfg['where']}: {label}: tp x ep = {tp * ep} does not divide "
                              f"{ranks} ranks")
        self.cfg, self.label = cfg, label
        self.ds_config, self.system, self.note = ds_config, system, note
        self.G, self.Ep = ranks, ep
        if ds_config == "moe":
            self.T, self.D = 1, ranks // ep  # our deepspeed-moe: the tensor ranks become data ranks
        else:
            self.T, self.D = tp, ranks // (tp * ep)
            m = cfg["model"]
            for key, value in (("model.heads", m["heads"]), ("model.hidden", m["hidden"]),
                               ("the FFN width", m["ffn_mult"] * m["hidden"])):
                if value % tp:
                    raise ConfigError(f"{cfg['where']}: {label}: T = {tp} does not divide "
                                      f"{key} ({value})")
            if m["tie_embeddings"] and m["vocab"] % tp:
                raise ConfigError(f"{cfg['where']}: {label}: the vocabulary-parallel embedding "
                                  f"needs T = {tp} to divide model.vocab ({m['vocab']})")
        if cfg["model"]["experts"] % ep:
            raise ConfigError(f"{cfg['where']}: {label}: Ep = {ep} does not divide "
                              f"model.experts = {cfg['model']['experts']}")

    @property
    def model_name(self):
        m = self.cfg["model"]
        return f"h{m['hidden']}-L{m['layers']}-E{m['experts']}"

    def tokens_per_step(self):
        d = self.cfg["data"]
        return d["micro_batch"] * d["micro_batches"] * (self.G // self.T) * \
            self.cfg["model"]["seq_len"]


def _with_global_batch(cfg, point, global_batch):
    if global_batch <= 0:
        return
    data_parallel = point.G // point.T
    per_step = cfg["data"]["micro_batch"] * data_parallel
    if global_batch % per_step:
        raise ConfigError(f"{cfg['where']}: {point.label}: a global batch of {global_batch} "
                          f"sequences does not divide into micro-batches of "
                          f"{cfg['data']['micro_batch']} over {data_parallel} data-parallel ranks")
    cfg["data"]["micro_batches"] = global_batch // per_step


def train_deepspeed_config(cfg):
    """DeepSpeed's configuration for a ted_train config: "moe" at parallel.tp = 1 (T = 1, the
    switches of TED ignored), else DeepSpeed-TED by parallel.dtd and parallel.split_experts;
    what DeepSpeed cannot run is refused (ConfigError naming the key). The tied embedding is the
    tensor-parallel model's only (at T = 1 too: its "ted" configuration, nothing to drop)."""
    p = cfg["parallel"]
    if p["tp"] <= 1:
        return "ted" if cfg["model"]["tie_embeddings"] else "moe"
    for key, why in (("cac", "DeepSpeed has no communication-aware checkpointing"),
                     ("cac_all_reduce", "DeepSpeed has no communication-aware checkpointing"),
                     ("reduce_scatter", "DeepSpeed has no reduce-scatter in the expert block"),
                     ("tile_elems", "DeepSpeed's ZeRO-1 step has no tiles")):
        if p[key]:
            raise ConfigError(f"{cfg['where']}: key 'parallel.{key}': {why} (DeepSpeed-TED runs "
                              "without it only)")
    if p["overlap"] > 1:
        raise ConfigError(f"{cfg['where']}: key 'parallel.overlap': DeepSpeed has no overlapped "
                          "MoE exchange")
    system = "ted+dtd" if p["dtd"] else "ted-baseline"
    config, why = deepspeed_of(system, p["split_experts"])
    if config is None:
        raise ConfigError(f"{cfg['where']}: keys 'parallel.dtd/split_experts': {why}")
    return config


def system_dtype(system):
    """The storage type a system's +bf16/+fp16 part asks for, "" without one."""
    parts = set(system[4:].split("+")) if system.startswith("ted+") else set()
    return next((d for d in ("bf16", "fp16") if d in parts), "")


def _systems_of(cfg, systems, label):
    """[(system, DeepSpeed configuration, note)] of the config's systems to run, and lines
    for those DeepSpeed cannot run; `systems` None: DeepSpeed-MoE alone (the T = 1 baseline)."""
    if systems is None:
        return [("deepspeed-moe", "moe", "")], []
    wanted = cfg["systems"] if systems == ["all"] else systems
    runs, skipped, seen = [], [], set()
    for system in wanted:
        if system not in cfg["systems"] and systems != ["all"]:
            raise ConfigError(f"{cfg['where']}: --systems: '{system}' is not one of the config's "
                              f"systems ({', '.join(cfg['systems'])})")
        config, note = deepspeed_of(system, cfg["parallel"]["split_experts"])
        if config is None:
            skipped.append(f"skipping {system} at {label}: {note}")
        elif (config, cfg["model"]["checkpoint"] or "cac" in note) in seen:
            skipped.append(f"skipping {system} at {label}: DeepSpeed runs it as the "
                           f"{config} row already measured ({note})")
        else:
            seen.add((config, cfg["model"]["checkpoint"] or "cac" in note))
            runs.append((system, config, note))
    return runs, skipped


def all_points(cfg, world_size, systems=None, skipped=None):
    """Every point of the config (dp 0: `world_size` ranks): laid out as our deepspeed-moe
    when `systems` is None, else one point per system of ours DeepSpeed has a configuration for
    (lines for the others appended to `skipped`)."""
    experiment = cfg["experiment"]
    skipped = [] if skipped is None else skipped
    points = []

    def add(point_cfg, ranks, tp, ep, label, global_batch=0):
        runs, lines = _systems_of(point_cfg, systems, label)
        skipped.extend(lines)
        made = []
        for system, config, note in runs:
            own = copy.deepcopy(point_cfg)
            if "cac" in note:  # ours turns checkpointing on with CAC; DeepSpeed recomputes
                own["model"]["checkpoint"] = True
            dtype = system_dtype(system)
            if dtype:  # make_point: the system's type, 16-bit gradients where the YAML has them
                if own["training"]["grad_dtype"] != "fp32":
                    own["training"]["grad_dtype"] = dtype
                own["run"]["dtype"] = dtype
            if experiment == "convergence" and config == "moe" and \
                    own["model"]["tie_embeddings"]:
                # From our very weights: DeepSpeed's MoE layer in the tensor-parallel model at
                # T = 1 (gpt_ted.py, the tied embedding; nothing for DTD to drop), as a ted_train
                # config at parallel.tp 1 runs; still DeepSpeed-MoE's layout, D = G / Ep.
                point = Point(own, ranks, 1, ep, label, "ted", system, note)
            else:
                point = Point(own, ranks, tp, ep, label, config, system, note)
            _with_global_batch(point.cfg, point, global_batch)
            made.append(point)
        points.extend(made)
        return made

    if not experiment:  # ted_train's config: parallel.* on the launched ranks
        p = cfg["parallel"]
        ranks = p["tp"] * p["ep"] * p["dp"] if p["dp"] > 0 else world_size
        config = train_deepspeed_config(cfg)
        points.append(Point(copy.deepcopy(cfg), ranks, p["tp"], p["ep"], "parallel.*", config,
                            "ted_train"))
    elif experiment == "ablation":
        lay = cfg["layout"]
        ranks = lay["tp"] * lay["ep"] * lay["dp"] if lay["dp"] > 0 else world_size
        add(cfg, ranks, lay["tp"], lay["ep"], "layout.*", cfg["data"]["global_batch"])
    elif experiment == "convergence":
        # ted_convergence: the ablation's layout, every system of the YAML DeepSpeed has an
        # equal for (the others skipped with a line), each trained training.steps steps (run.iters
        # 0, the correctness-only mode: 2 steps).
        systems = ["all"] if systems is None else systems
        lay = cfg["layout"]
        ranks = lay["tp"] * lay["ep"] * lay["dp"] if lay["dp"] > 0 else world_size
        steps = 2 if cfg["run"]["iters"] == 0 else cfg["training"]["steps"]
        for point in add(cfg, ranks, lay["tp"], lay["ep"], "layout.*",
                         cfg["data"]["global_batch"]):
            point.cfg["training"]["steps"] = steps
    elif experiment in ("weak_scaling", "strong_scaling"):
        s = cfg["sweep"]
        if not s["ranks"]:
            raise ConfigError(f"{cfg['where']}: key 'sweep.ranks' must list the rank count of "
                              "every point")
        for key, values in s.items():
            if values and len(values) != len(s["ranks"]) or key in ("tp", "ep") and not values:
                raise ConfigError(f"{cfg['where']}: key 'sweep.{key}' must have one entry per "
                                  f"point ({len(s['ranks'])})")
        for i, ranks in enumerate(s["ranks"]):
            point_cfg = copy.deepcopy(cfg)
            for key in ("hidden", "heads", "layers", "experts"):
                if s[key]:
                    point_cfg["model"][key] = s[key][i]
            global_batch = s["global_batch"][i] if s["global_batch"] else \
                cfg["data"]["global_batch"]
            for point in add(point_cfg, ranks, s["tp"][i], s["ep"][i], f"sweep point {i + 1}",
                             global_batch):
                if experiment == "strong_scaling" and global_batch <= 0:
                    data_parallel = point.G // point.T
                    if point.cfg["data"]["micro_batches"] % data_parallel:
                        raise ConfigError(f"{cfg['where']}: key 'data.micro_batches' (the whole "
                                          f"step's) must divide over the {data_parallel} "
                                          f"data-parallel ranks of sweep point {i + 1}")
                    point.cfg["data"]["micro_batches"] //= data_parallel
    else:
        raise ConfigError(f"{cfg['where']}: the DeepSpeed runner runs ablation, weak_scaling, "
                          f"strong_scaling, convergence and ted_train configs, not "
                          f"'{experiment}'")
    for point in points:
        m, g = point.cfg["model"], point.cfg["gating"]
        if m["hidden"] % m["heads"]:
            raise ConfigError(f"{cfg['where']}: {point.label}: model.heads must divide "
                              "model.hidden")
        try:  # a sweep point's experts
            ted_workload.validate(point.cfg["routing"], m["experts"], g["top_k"])
        except ted_workload.WorkloadError as error:
            raise ConfigError(f"{cfg['where']}: {point.label}: {error}") from None
        tokens = point.cfg["data"]["micro_batch"] * m["seq_len"]
        if g["top_k"] == 1 and tokens < g["min_capacity"]:  # ours allows it; DeepSpeed asserts
            raise ConfigError(f"{cfg['where']}: {point.label}: DeepSpeed's top-1 gating needs at "
                              f"least gating.min_capacity ({g['min_capacity']}) tokens per "
                              f"micro-batch, this one has {tokens}")
        if point.T > 1 and CONFIGS_WITH_DROPPING.get(point.ds_config):
            if not g["dropless"]:
                capacity = deepspeed_capacity(tokens, m["experts"], g)
                if capacity % point.T:
                    raise ConfigError(
                        f"{cfg['where']}: {point.label}: DeepSpeed splits each expert's capacity "
                        f"over the T = {point.T} tensor ranks and asserts that T divides it; "
                        f"gating.capacity_factor gives {capacity} (ours pads it to a multiple of "
                        "T, DeepSpeed does not)")
            elif point.ds_config == "ted":
                raise ConfigError(
                    f"{cfg['where']}: {point.label}: gating.dropless with tensor-parallel "
                    "experts: DeepSpeed 0.19.8 pads the dropless capacity to a multiple of T only "
                    "for whole experts, and its token dropping asserts on any other")
    return points


# DeepSpeed's configurations that split the capacity over the tensor group (drop_tokens).
CONFIGS_WITH_DROPPING = {"ted": True, "ted-whole": True, "ted-nodtd": False, "moe": False}


def deepspeed_capacity(tokens, experts, gating):
    """DeepSpeed's capacity under capacity routing (sharded_moe.py _capacity): ceil(tokens /
    experts x factor) in float32 (the factor is a float32 tensor), top-2 with twice the factor,
    at least min_capacity."""
    import numpy as np
    factor = np.float32(gating["capacity_factor"] * (2 if gating["top_k"] == 2 else 1))
    capacity = int(np.ceil(np.float32(tokens / experts) * factor))
    return max(capacity, gating["min_capacity"])


def plan(cfg, world_size, systems=None):
    """(points, skipped lines): the points of the config whose rank count is `world_size`
    (DeepSpeed's data-parallel world is the whole job, so each rank count is its own launch)."""
    skipped = []
    points = all_points(cfg, world_size, systems, skipped)
    runnable = [p for p in points if p.G == world_size]
    for p in points:
        if p.G != world_size:
            skipped.append(f"skipping {p.label} (G={p.G}): launch it on {p.G} ranks "
                           f"({world_size} launched)")
    return runnable, skipped
