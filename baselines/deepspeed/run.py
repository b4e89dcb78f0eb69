"""The DeepSpeed-MoE baseline: DeepSpeed's own MoE layer and engine on one of our YAML configs,
written into our CSV schemas, so its rows sit beside ours in the same files' format and figures.

Reads an experiment YAML (ablation, weak_scaling, strong_scaling) or ted_train's config, builds
the suite's GPT-MoE with deepspeed.moe.layer.MoE (gpt_moe.py) and runs it under the DeepSpeed
engine: ZeRO stage 1 (parallel.zero1), AdamW with our schedule and weight-decay groups, gradient
clipping, fp32 on the CPU (bf16/fp16 on GPUs by run.dtype), expert parallelism Ep and data
parallelism as our `deepspeed-moe` system lays the point out (T = 1), with the same micro-batch,
micro-batches, tokens per step and the very tokens (our synthetic source, ported).

DeepSpeed-TED (deepspeed_ted.py): with --systems, each of the experiment's systems runs as the
DeepSpeed configuration equal to it at the point's T (the tensor-parallel model of gpt_ted.py
under deepspeed.initialize(mpu=...), system deepspeed-<version>-<configuration>); a ted_train
config with parallel.tp > 1 (or model.tie_embeddings) runs so by its parallel.* switches. Its rows
add the bytes of every collective per group (the ledger columns) and the memory by category.

Experiments: one row per point, appended to --csv (default results/local/<experiment>/deepspeed_<config>.csv)
(--csv), as soon as it is measured: system deepspeed-<version>, time per iteration (median,
p10, p90 of the slowest rank's, from a common barrier, after run.warmup), tokens/s, model
FLOPs per rank by README's formula, the expert all-to-alls DeepSpeed made (calls, bytes sent
per rank, their time), peak memory where PyTorch reports it (CUDA), final loss. Columns it
cannot measure stay empty. ted_train configs: one row per step in ted_train's schema, written
at the end (or at a non-finite loss, with the steps before it) to
results/local/train/deepspeed_<config>.csv, the dropped choices included, and with
training.eval_every > 0 the validation split's LM loss every eval_every steps and after the last
(valid_loss, over training.eval_batches global batches); --loads FILE adds each step's
per-expert loads (write_loads).

Convergence YAMLs (ted_convergence's): each system of the YAML DeepSpeed has an equal for
(deepspeed-moe at T = 1, ted/ted+dtd as DeepSpeed-TED at layout.tp; the others skipped with a
line) trains as a ted_train config does, training.steps steps (run.iters 0: 2) from our weights
with our dropout masks and the held-out loss, its rows appended to --csv (default
results/local/convergence/deepspeed_<config>.csv) in ted_train's schema plus `system`.

routing.workload other than learned: DeepSpeed's gate takes each token's experts from our forced
workload (ted_workload.py, handed over by routing_probe.py), its probabilities still weighting
them.

Launch with torchrun (baselines/deepspeed/launch.sh does it) or srun (slurm/*.sbatch beside
this file): a point runs when its rank count is the launched one; the others are skipped with a
line. Bad input: one line, exit 2, no CSV touched. `--check --ranks N` validates only.
Several runs share one launch when `--then` separates their options: each run's points in turn,
in the same processes, so PyTorch and DeepSpeed load once (about 5 s of CPU per rank).
    baselines/deepspeed/launch.sh -n 4 -c experiments/ablation/cpu.yaml
    baselines/deepspeed/launch.sh -n 2 -c experiments/train/tiny-cpu.yaml --csv a.csv \
        --then -c experiments/train/tiny-cpu.yaml --set model.dropout=0.1 --csv b.csv
"""
import argparse
import contextlib
import faulthandler
import fcntl
import math
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import ted_config

REPO = Path(__file__).resolve().parents[2]
PROGRAM = "deepspeed_baseline"

# The columns of our CSVs, in their order: the C++ tables (lib/ted/run/train_csv.cpp,
# lib/ted/experiments/rows.cpp) declare them; test csv_columns holds these lists equal to them.
EXPERIMENT_COLUMNS = (
    "experiment,system,G,T,Ep,D,model,layers,hidden,heads,experts,top_k,parameters,seq_len,"
    "micro_batch,micro_batches,backend,dtype,grad_dtype,comm,device,checkpoint,dtd,cac,"
    "reduce_scatter,warmup,"
    "iters,time_ms_median,time_ms_p10,time_ms_p90,compute_ms,comm_ms,all_reduce_ms,all_to_all_ms,"
    "all_gather_ms,reduce_scatter_ms,other_ms,pct_of_peak,tokens_per_s,tflops_per_rank,"
    "all_reduce_bytes,all_gather_bytes,reduce_scatter_bytes,all_to_all_bytes,all_to_all_calls,"
    "peak_parameters_bytes,peak_gradients_bytes,peak_optimizer_state_bytes,peak_activations_bytes,"
    "peak_communication_bytes,peak_cac_stash_bytes,peak_optimizer_temporaries_bytes,"
    "peak_total_bytes,budget_bytes,fits,status,final_loss,git_revision,command,threads,"
    "slurm_job,ranks_per_core,run_id,attention,workload,dropless,expert_load_max,"
    "expert_load_mean,expert_load_min,rank_load_max,rank_load_mean,dropped_fraction,"
    "all_to_all_rank_bytes_max,all_to_all_rank_bytes_mean,straggler_rank,straggler_time_ms,"
    "straggler_compute_ms,straggler_comm_ms,straggler_all_to_all_ms,rank_compute_ms_mean,blas,"
    "blas_kernel,round,rounds,wait,others_cpu_pct,steal_pct,round_spread_pct,disturbed"
).split(",")
_LEDGER = [f"{op}_{group}_bytes" for op in ("all_reduce", "all_gather", "reduce_scatter",
                                            "all_to_all")
           for group in ("tensor", "expert", "expert_data", "nonexpert_data")]
TRAIN_COLUMNS = (
    "step,loss,lm_loss,aux_loss,valid_loss,lr,grad_norm,dropped,seconds,tokens_per_s,gflops_per_s,"
    "G,T,Ep,D,"
    "dtd,cac,reduce_scatter,zero1,tile_elems,backend,dtype,grad_dtype,comm,device,loss_scale,"
    "skipped"
).split(",") + _LEDGER + [
    f"peak_{c}_bytes" for c in ("parameters", "gradients", "optimizer_state", "activations",
                                "communication", "cac_stash", "optimizer_temporaries")
] + ["fingerprint", "git_revision", "command", "attention", "blas", "blas_kernel"]
# ted_convergence's: ted_train's columns and the system (apps/ted_convergence.cpp header()).
CONVERGENCE_COLUMNS = TRAIN_COLUMNS + ["system"]
# The experiments trained step by step (rows per step, ted_train's schema plus the system).
TRAINED_EXPERIMENTS = ("convergence",)


def torch_blas(torch):
    """The BLAS torch's CPU GEMMs run on, as its build says ("MKL 2024.2"; the blas column).
    Its kernels are not named (blas_kernel empty): MKL does not say which code path it took."""
    config = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([0-9.]+)", config)
    if mkl:
        return f"MKL {mkl.group(1)}"
    blas = re.search(r"BLAS_INFO=([A-Za-z0-9_]+)", config)
    return blas.group(1) if blas else ""


def fmt(value):
    """A CSV field as ours writes it: %.9g for numbers, "" for what was not measured."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.9g}"
    text = str(value)
    if any(c in text for c in ',"\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def check_appendable(path, columns):
    """ConfigError when `path` cannot take rows of `columns` (another header, a directory)."""
    path = Path(path)
    if path.is_dir():
        raise ted_config.ConfigError(f"key 'run.csv': '{path}' is a directory")
    if path.exists() and path.stat().st_size > 0:
        with open(path) as handle:
            header = handle.readline().rstrip("\n").split(",")
        if header != columns:
            raise ted_config.ConfigError(f"key 'run.csv': '{path}' has another header (not "
                                         "this schema's): give another --csv")


def append_rows(path, columns, rows):
    """Appends whole rows under an exclusive flock, the header first into a new or empty file
    (lib/ted/core/csv.cpp append_csv's rules, so ours and this can share a file), except that
    this runner does not widen a file written before columns were added: it needs the exact
    header (give a new --csv, or let one of our programs widen the file first)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        first = handle.readline().rstrip("\n")
        text = "" if first else ",".join(columns) + "\n"
        if first and first.split(",") != columns:
            raise RuntimeError(f"{path} has another header")
        text += "".join(",".join(fmt(r.get(c)) for c in columns) + "\n" for r in rows)
        handle.seek(0, os.SEEK_END)
        handle.write(text)


def write_atomic(path, columns, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w") as handle:
        handle.write(",".join(columns) + "\n")
        handle.writelines(",".join(fmt(r.get(c)) for c in columns) + "\n" for r in rows)
    os.replace(temporary, path)


def git_revision():
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True).stdout
        return head + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def slurm_job():
    """<job id>, or <array job>_<task> in an array, "" outside Slurm (for a slurm_job column)."""
    env = os.environ
    if "SLURM_ARRAY_JOB_ID" in env:
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}"
    return env.get("SLURM_JOB_ID", "")


# The run id of this process's rows, as ted's experiments write it: UTC start time and pid.
RUN_ID = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"


def learning_rate(o, step, total_steps):
    """lib/ted/train/optimizer.cpp learning_rate: linear warm-up, then cosine to min_lr."""
    if step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / o["warmup_steps"]
    decay_steps = total_steps - o["warmup_steps"] - 1
    if decay_steps <= 0:
        return o["lr"]
    progress = min(1.0, (step - o["warmup_steps"]) / decay_steps)
    return o["min_lr"] + 0.5 * (o["lr"] - o["min_lr"]) * (1 + math.cos(math.pi * progress))


def first_sample(step, micro_batches, data_ranks, micro, data_rank, micro_batch):
    """lib/ted/train/data.hpp first_sample: the global index of the first sequence of micro-batch
    `micro` of data-parallel rank `data_rank` in step `step`, global micro-batch
    micro x data_ranks + data_rank, as lib/ted/train/trainer.cpp hands them out."""
    return (step * micro_batches * data_ranks + micro * data_ranks + data_rank) * micro_batch


def percentile(values, q):
    """Linear interpolation between closest ranks (lib/ted/core/stats.cpp)."""
    ordered = sorted(values)
    position = q / 100 * (len(ordered) - 1)
    low = int(math.floor(position))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distributed_environment():
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT from torchrun, else srun, else one rank."""
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
        env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
        env.setdefault("MASTER_PORT", "29500")
        if "MASTER_ADDR" not in env:  # the sbatch scripts export the first node's name
            raise ted_config.ConfigError("under srun MASTER_ADDR must name the job's first node "
                                         "(baselines/deepspeed/slurm/*.sbatch export it)")
    if "RANK" not in env:
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            env["MASTER_PORT"] = str(probe.getsockname()[1])
    return int(env["RANK"]), int(env["WORLD_SIZE"])


class AllToAllCounter:
    """Counts, sizes and times the expert all-to-alls DeepSpeed's MoE layer makes (forward,
    backward and recompute), by wrapping the module's `dist`: bytes are the send buffer, as our
    ledger counts an all-to-all; the time is the blocking call's wall time."""

    def __init__(self, sharded_moe, accelerator):
        self.calls = self.bytes = 0
        self.seconds = 0.0
        counter, real = self, sharded_moe.dist

        class Proxy:
            def __getattr__(self, name):
                return getattr(real, name)

            def all_to_all_single(self, output, input, *args, **kwargs):
                start = time.perf_counter()
                result = real.all_to_all_single(output, input, *args, **kwargs)
                accelerator.synchronize()
                counter.seconds += time.perf_counter() - start
                counter.calls += 1
                counter.bytes += input.numel() * input.element_size()
                return result

        sharded_moe.dist = Proxy()

    def reset(self):
        self.calls = self.bytes = 0
        self.seconds = 0.0


class Run:
    """One point on the DeepSpeed engine."""

    def __init__(self, point, total_steps):
        import deepspeed
        import torch
        from deepspeed.accelerator import get_accelerator
        from deepspeed.moe import sharded_moe
        from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

        import gpt_moe
        from routing_probe import RoutingProbe

        self.torch, self.dist = torch, torch.distributed
        self.point, cfg = point, point.cfg
        self.accelerator = get_accelerator()
        if cfg["run"]["backend"] == "cuda":  # one GPU per rank of a node
            self.accelerator.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        m, o, d, r = cfg["model"], cfg["optimizer"], cfg["data"], cfg["run"]
        self.rank, self.world = self.dist.get_rank(), self.dist.get_world_size()
        self.device = torch.device(self.accelerator.device_name(
            self.accelerator.current_device()) if r["backend"] == "cuda" else "cpu")
        import deepspeed_ted
        deepspeed_ted.reset_deepspeed_state()  # a launch's earlier point laid out otherwise
        torch.manual_seed(cfg["training"]["seed"])
        self.loads, self.dropped = None, 0  # the last step's, over the global batch
        config = {
            "train_micro_batch_size_per_gpu": d["micro_batch"],
            "gradient_accumulation_steps": d["micro_batches"],
            # the data-parallel ranks: all of them at T = 1, G / T under DeepSpeed-TED
            "train_batch_size": d["micro_batch"] * d["micro_batches"] * (self.world // point.T),
            "gradient_clipping": o["grad_clip"],
            "zero_optimization": {"stage": 1 if cfg["parallel"]["zero1"] else 0},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 1 << 30,
        }
        if r["dtype"] == "bf16":
            config["bf16"] = {"enabled": True}
        elif r["dtype"] == "fp16":
            config["fp16"] = {"enabled": True, "initial_scale_power":
                              int(round(math.log2(r["loss_scale"]))),
                              "loss_scale_window": r["loss_scale_window"]}
        schedule = lambda opt: torch.optim.lr_scheduler.LambdaLR(  # noqa: E731
            opt, lambda step: learning_rate(o, step, total_steps) / o["lr"])

        def make_optimizer(groups):
            return torch.optim.AdamW(split_params_into_different_moe_groups_for_optimizer(groups),
                                     lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                                     weight_decay=o["weight_decay"])

        self.ted = None
        if point.ds_config != "moe":  # DeepSpeed-TED: the tensor-parallel model, the mpu
            import gpt_ted
            self.ted = deepspeed_ted.TedEngine(point, cfg, gpt_moe.optimizer_groups,
                                               make_optimizer, config, schedule)
            self.engine, self.probe = self.ted.engine, self.ted.probe
            if self.rank == 0:  # the groups each side makes, by kind (rank 0's)
                ours, theirs = self.ted.describe_groups()
                print("# groups of rank 0, ours / DeepSpeed's: " + ", ".join(
                    f"{kind} {ours[kind]} / {theirs[kind]}" for kind in ours), flush=True)
            self.parameters = gpt_ted.parameter_count(cfg, m["tie_embeddings"])
            self.a2a = None
        else:
            model = gpt_moe.GptMoe(cfg, point.Ep)
            gpt_moe.initialise(model, m["init_std"], cfg["training"]["seed"],
                               self.rank % point.Ep, m["experts"] // point.Ep)
            # Each MoE layer's per-expert loads and drops, and a forced workload's experts.
            self.probe = RoutingProbe(model, cfg, sharded_moe, torch)
            self.parameters = gpt_moe.parameter_count(cfg)
            self.engine, _, _, _ = deepspeed.initialize(model=model,
                                                        optimizer=make_optimizer(
                                                            gpt_moe.optimizer_groups(model)),
                                                        lr_scheduler=schedule, config=config)
            self.a2a = AllToAllCounter(sharded_moe, self.accelerator)
        self.gpt_moe = gpt_moe
        self.source = gpt_moe.make_source(cfg)
        self.valid_source = None  # training.eval_every's held-out samples
        if cfg["training"].get("eval_every", 0) > 0:
            self.valid_source = gpt_moe.make_validation_source(cfg)
            if self.valid_source is None:
                raise ValueError("training.eval_every needs held-out data: the synthetic source, "
                                 "or data.source megatron with data.valid_fraction or "
                                 "data.valid_path")
        self.flops_per_step = gpt_moe.model_flops(cfg, point.tokens_per_step())
        self.step_ledger = {}  # DeepSpeed-TED: the last step's bytes per (operation, group)
        # ted_train configs drop with our masks (dropout_masks.py), keyed per micro-batch in
        # step(); an experiment's timed points keep PyTorch's, drawn on the device (ours are
        # numpy's, on the host: at the paper's shapes they would dominate the step).
        self.dropout_keys = None
        if (not cfg["experiment"] or cfg["experiment"] in TRAINED_EXPERIMENTS) and \
                m["dropout"] > 0:
            import dropout_masks
            self.dropout_keys = dropout_masks.DropoutKeys(cfg["training"]["seed"], m["dropout"],
                                                          m["seq_len"])
            self.engine.module.use_dropout_keys(self.dropout_keys)

    def step(self, step):
        """One optimizer step: (slowest rank's seconds, lm loss, aux loss, lr, grad norm,
        all-to-all seconds of the slowest rank); losses are means over the global batch. Its
        per-expert loads ([MoE layers, E], before drops) and dropped choices, summed over the
        data-parallel ranks as ours sums them: self.loads, self.dropped. DeepSpeed-TED: the
        data-parallel rank is the rank's place in its non-expert data group (every rank of a
        tensor group takes the same micro-batch), the step's collectives are in self.step_ledger
        (this rank's, as ours writes rank 0's) and the memory peaks are updated."""
        torch, cfg = self.torch, self.point.cfg
        d, seq = cfg["data"], cfg["model"]["seq_len"]
        micro = d["micro_batches"]
        aux_coeff = cfg["gating"]["aux_coeff"]
        lr = self.engine.get_lr()[0]
        data_parallel, data_rank, sum_group = self.data_ranks()
        if self.ted:
            self.ted.ledger.clear()
        else:
            self.a2a.reset()
        self.probe.begin_step(step)
        self.dist.barrier()
        start = time.perf_counter()
        sums = [0.0, 0.0]
        for m in range(micro):
            first = first_sample(step, micro, data_parallel, m, data_rank, d["micro_batch"])
            self.probe.begin_micro_batch(first)
            if self.dropout_keys is not None:  # ours' Batch{first_sample, step}
                self.dropout_keys.at(step, first)
            tokens, targets = self.gpt_moe.micro_batch(
                self.source, first, d["micro_batch"], seq, self.device)
            if self.ted:
                lm, aux = self.ted.forward_backward(tokens, targets, aux_coeff)
            else:
                lm, aux = self.engine(tokens, targets)
                self.engine.backward(lm + aux_coeff * aux)
            self.engine.step()
            sums[0] += lm.item()
            sums[1] += aux.item()
        self.accelerator.synchronize()
        seconds = time.perf_counter() - start
        if self.ted:
            self.ted.after_step()
            self.ted.print_memory_detail()
            self.step_ledger = dict(self.ted.ledger.bytes)
            a2a_seconds = sum(v for (op, _), v in self.ted.ledger.seconds.items()
                              if op == "all_to_all")
        else:
            a2a_seconds = self.a2a.seconds
        slowest = torch.tensor([seconds, a2a_seconds], dtype=torch.float64)
        self.dist.all_reduce(slowest, op=self.dist.ReduceOp.MAX)
        losses = torch.tensor(sums, dtype=torch.float64)
        self.dist.all_reduce(losses, group=sum_group)
        losses /= micro * data_parallel
        loads, dropped = self.probe.step_counts()
        counts = torch.tensor(loads.ravel().tolist() + [dropped], dtype=torch.int64)
        self.dist.all_reduce(counts, group=sum_group)
        self.loads, self.dropped = counts[:-1].numpy().reshape(loads.shape), int(counts[-1])
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else None
        return slowest[0].item(), losses[0].item(), losses[1].item(), lr, norm, slowest[1].item()

    def data_ranks(self):
        """(data-parallel ranks, this rank's place among them, the group a sum over them takes):
        all the ranks at T = 1; under DeepSpeed-TED the rank's non-expert data group (every rank
        of a tensor group takes the same micro-batch)."""
        if self.ted:
            g = self.ted.groups
            return len(g.data_ranks), g.data_ranks.index(g.rank), g.data
        return self.world, self.rank, None

    def evaluate(self, batches):
        """The validation LM loss (the aux loss left out), the mean over `batches` global batches
        of the validation split: batch b's micro-batches are those training's step b reads
        (first_sample), forward only, the model in eval mode (no dropout). Collective."""
        torch, d = self.torch, self.point.cfg["data"]
        seq, micro = self.point.cfg["model"]["seq_len"], d["micro_batches"]
        data_parallel, data_rank, sum_group = self.data_ranks()
        total = 0.0
        self.engine.eval()
        with torch.no_grad():
            for b in range(batches):
                for m in range(micro):
                    first = first_sample(b, micro, data_parallel, m, data_rank, d["micro_batch"])
                    self.probe.begin_micro_batch(first)  # a forced workload's key
                    tokens, targets = self.gpt_moe.micro_batch(
                        self.valid_source, first, d["micro_batch"], seq, self.device)
                    lm, _ = self.engine(tokens, targets)
                    total += lm.item()
        self.engine.train()
        loss = torch.tensor([total], dtype=torch.float64)
        self.dist.all_reduce(loss, group=sum_group)
        return loss.item() / (batches * micro * data_parallel)

    def a2a_totals(self):
        """(calls, bytes) of the expert all-to-alls of the last step on this rank."""
        if self.ted:
            ledger = self.ted.ledger
            return (sum(v for (op, k), v in ledger.calls.items()
                        if op == "all_to_all" and k != "control"), ledger.total("all_to_all"))
        return self.a2a.calls, self.a2a.bytes

    def ledger_columns(self):
        """The ledger columns of our schemas (<op>_<group>_bytes) from the last step, with the
        totals per operation of the experiments' schema; {} at T = 1 (not counted there)."""
        if not self.ted:
            return {}
        columns = {}
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            for kind in ("tensor", "expert", "expert_data", "nonexpert_data"):
                columns[f"{op}_{kind}_bytes"] = self.step_ledger.get((op, kind), 0)
            # ours keeps its control scalars off the ledger (tensor_parallel.Ledger.record)
            columns[f"{op}_bytes"] = sum(v for (o, k), v in self.step_ledger.items()
                                         if o == op and k != "control")
        return columns

    def memory_columns(self):
        """peak_<category>_bytes so far, the largest over the ranks, each category on its own
        (as ours writes them), DeepSpeed-TED's (memory_count.py); {} otherwise. Collective."""
        if not self.ted:
            return {}
        peaks = self.ted.memory_peaks()
        values = self.torch.tensor(list(peaks.values()), dtype=self.torch.int64)
        self.dist.all_reduce(values, op=self.dist.ReduceOp.MAX)
        return {f"peak_{c}_bytes": int(v) for c, v in zip(peaks, values.tolist())}

    def peak_bytes(self):
        if self.device.type != "cuda":
            return None  # no allocator statistics on the CPU: left empty
        peak = self.torch.tensor([self.torch.cuda.max_memory_allocated()], dtype=self.torch.int64,
                                 device=self.device)
        self.dist.all_reduce(peak, op=self.dist.ReduceOp.MAX)
        return int(peak.item())

    def fingerprint(self):
        """Sum of squares of all parameters over the layout (each element once), as ours."""
        torch = self.torch
        if self.ted:
            import gpt_ted
            return gpt_ted.fingerprint(self.engine.module, self.ted.groups, self.dist)
        total = torch.zeros(1, dtype=torch.float64)
        for name, p in self.engine.module.named_parameters():
            expert = ".deepspeed_experts." in name
            if (expert and self.rank < self.point.Ep) or (not expert and self.rank == 0):
                total += p.detach().double().pow(2).sum().cpu()
        self.dist.all_reduce(total)
        return total.item()

    def describe(self):
        import deepspeed
        torch = self.torch
        device = "cpu" if self.device.type == "cpu" else \
            f"cuda:{self.device.index} {torch.cuda.get_device_name(self.device)}"
        # The type DeepSpeed keeps and reduces gradients in (fp16 ZeRO-1: fp16), as it says.
        names = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
        grad_dtype = names.get(self.engine.communication_data_type,
                               str(self.engine.communication_data_type))
        fused = self.point.cfg["model"]["attention"] != "materialized" and \
            self.dropout_keys is None  # our masks: materialized
        system = f"deepspeed-{deepspeed.__version__}"
        # DeepSpeed-MoE run in the tensor-parallel model at T = 1 for our weights (convergence)
        # is still DeepSpeed-MoE's row
        if self.ted and self.point.system != "deepspeed-moe":
            import deepspeed_ted
            system = deepspeed_ted.system_name(deepspeed.__version__, self.point.ds_config)
        return {"system": system,
                "device": f"{device} (torch {torch.__version__})",
                "comm": self.dist.get_backend(), "grad_dtype": grad_dtype,
                "attention": "torch-sdpa" if fused else "materialized",
                "blas": torch_blas(torch), "blas_kernel": ""}


def run_experiment_point(point, cfg, args, command, revision):
    r = point.cfg["run"]
    warmup, iters = r["warmup"], r["iters"]
    steps = 1 if iters == 0 else warmup + iters
    run = Run(point, max(1, warmup + iters))
    times, a2a_times, loss = [], [], None
    for step in range(steps):
        seconds, lm, aux, _, _, a2a_seconds = run.step(step)
        loss = lm + point.cfg["gating"]["aux_coeff"] * aux
        if iters > 0 and step >= warmup:
            times.append(seconds * 1e3)
            a2a_times.append(a2a_seconds * 1e3)
    m, d = point.cfg["model"], point.cfg["data"]
    calls, a2a_bytes = run.a2a_totals()
    dtd = int(point.ds_config in ("ted", "ted-whole"))
    row = {"experiment": cfg["experiment"], "G": point.G, "T": point.T, "Ep": point.Ep,
           "D": point.D,
           "model": point.model_name, "layers": m["layers"], "hidden": m["hidden"],
           "heads": m["heads"], "experts": m["experts"], "top_k": point.cfg["gating"]["top_k"],
           "parameters": run.parameters, "seq_len": m["seq_len"], "micro_batch": d["micro_batch"],
           "micro_batches": d["micro_batches"], "backend": r["backend"], "dtype": r["dtype"],
           "checkpoint": int(m["checkpoint"]), "dtd": dtd, "cac": 0, "reduce_scatter": 0,
           "warmup": warmup, "iters": iters, "all_to_all_calls": calls,
           "all_to_all_bytes": a2a_bytes, "peak_total_bytes": run.peak_bytes(),
           "status": "measured", "final_loss": loss, "git_revision": revision,
           "command": command, "threads": run.torch.get_num_threads(), "slurm_job": slurm_job(),
           "run_id": RUN_ID,
           # DeepSpeed's gate routes by its own choices (learned); the loads, drops and
           # straggler columns stay empty: its MoE layer does not report them per expert.
           "workload": "learned", "dropless": int(point.cfg["gating"]["dropless"])}
    row.update(run.describe())
    ledger = run.ledger_columns()
    row.update({k: v for k, v in ledger.items() if k in EXPERIMENT_COLUMNS})
    row.update(run.memory_columns())
    if times:
        median = percentile(times, 50)
        row.update(time_ms_median=median, time_ms_p10=percentile(times, 10),
                   time_ms_p90=percentile(times, 90), all_to_all_ms=percentile(a2a_times, 50),
                   tokens_per_s=point.tokens_per_step() / (median * 1e-3),
                   tflops_per_rank=run.flops_per_step / point.G / (median * 1e-3) / 1e12)
    if run.rank == 0:
        append_rows(args.csv, EXPERIMENT_COLUMNS, [row])
        timing = (f"{row['time_ms_median']:9.2f} ms/iter (p10 {row['time_ms_p10']:.2f} p90 "
                  f"{row['time_ms_p90']:.2f}), {row['tokens_per_s']:.3g} tok/s, ") if times else ""
        mirrors = f" (as ours {point.system}{'; ' + point.note if point.note else ''})" \
            if point.ds_config != "moe" else ""
        print(f"{row['system']}{mirrors} G={point.G} T={point.T} Ep={point.Ep} D={point.D} "
              f"{point.model_name} {timing}a2a {a2a_bytes} B x {calls}, loss {loss:.4f}",
              flush=True)
    return run


def write_loads(path, loads, dropped):
    """Each step's per-expert loads, "step,layer,expert,load" (step from 0, layer the block's
    index), and a last line "dropped,<choices dropped in all steps>": the format of
    tests/apps/print_workload.cpp's loads, which prints ours."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        handle.write("step,layer,expert,load\n")
        handle.writelines(f"{s},{layer},{e},{count}\n" for s, layer, e, count in loads)
        handle.write(f"dropped,{dropped}\n")


def run_training(point, cfg, args, command, revision):
    """ted_train's config, or one system of a trained experiment (convergence: point.cfg's
    steps, the rows appended to --csv with the system, as ted_convergence appends its)."""
    experiment = cfg["experiment"]
    cfg = point.cfg
    steps = cfg["training"]["steps"]
    eval_every, eval_batches = cfg["training"].get("eval_every", 0), \
        cfg["training"].get("eval_batches", 1)
    run = Run(point, steps)
    rows, first, loads, dropped = [], None, [], 0
    try:
        for step in range(steps):
            seconds, lm, aux, lr, norm, _ = run.step(step)
            loss = lm + point.cfg["gating"]["aux_coeff"] * aux
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss is {loss} at step {step + 1}")
            first = loss if first is None else first
            tokens = point.tokens_per_step()
            loads += [(step, layer, e, int(count)) for layer, per_expert in
                      zip(run.probe.moe_layers, run.loads) for e, count in enumerate(per_expert)]
            dropped += run.dropped
            row = {"step": step + 1, "loss": loss, "lm_loss": lm, "aux_loss": aux, "lr": lr,
                   "grad_norm": norm, "dropped": run.dropped, "seconds": seconds,
                   "tokens_per_s": tokens / seconds,
                   "gflops_per_s": run.flops_per_step / point.G / seconds / 1e9, "G": point.G,
                   "T": point.T, "Ep": point.Ep, "D": point.D,
                   "dtd": int(point.ds_config in ("ted", "ted-whole") and
                              point.system != "deepspeed-moe"), "cac": 0,
                   "reduce_scatter": 0,
                   "zero1": int(cfg["parallel"]["zero1"]), "tile_elems": 0,
                   "backend": cfg["run"]["backend"], "dtype": cfg["run"]["dtype"],
                   "loss_scale": float(getattr(run.engine.optimizer, "cur_scale", 1.0)),
                   "skipped": 0, "all_to_all_expert_bytes": run.a2a_totals()[1],
                   "git_revision": revision, "command": command}
            described = run.describe()
            if experiment:
                row["system"] = described["system"]
            row.update(comm=described["comm"], device=described["device"],
                       grad_dtype=described["grad_dtype"], attention=described["attention"],
                       blas=described["blas"], blas_kernel=described["blas_kernel"])
            row.update({k: v for k, v in run.ledger_columns().items() if k in TRAIN_COLUMNS})
            row.update(run.memory_columns())
            # Every eval_every steps and after the last: the validation split's LM loss.
            evaluated = eval_every > 0 and ((step + 1) % eval_every == 0 or step + 1 == steps)
            if evaluated:
                row["valid_loss"] = run.evaluate(eval_batches)
            rows.append(row)
            if run.rank == 0 and (step % cfg["training"]["log_every"] == 0 or step + 1 == steps
                                  or evaluated):
                print((f"{row['system']:<28s} " if experiment else "") + f"step {step + 1:5d}/{steps} loss {loss:.4f} lm {lm:.4f} aux {aux:.4f} "
                      f"lr {lr:.2e} |g| {norm if norm is not None else float('nan'):.3f} "
                      f"tok/s {tokens / seconds:.0f}"
                      + (f" valid {row['valid_loss']:.4f}" if evaluated else ""), flush=True)
    except FloatingPointError as error:
        if run.rank == 0 and rows:
            keep(args.csv, experiment, rows)
        raise RuntimeError(f"{error}; the steps before it are in {args.csv}" if rows else
                           str(error)) from None
    fingerprint = run.fingerprint()
    if run.rank == 0:
        rows[-1]["fingerprint"] = f"{fingerprint:.9e}"
        keep(args.csv, experiment, rows)
        if args.loads:
            write_loads(args.loads, loads, dropped)
        print((f"# {rows[-1]['system']}" + (f" (as ours {point.system}; {point.note})"
                                              if point.note else "") + ": " if experiment else
               "# ") + f"loss {first:.4f} -> {rows[-1]['loss']:.4f}\n# fingerprint "
              f"{fingerprint:.9e}\n# CSV: {args.csv}", flush=True)
    return len(rows)


def keep(path, experiment, rows):
    """ted_train's rows replace the file; a trained experiment's system appends its own."""
    if experiment:
        append_rows(path, CONVERGENCE_COLUMNS, rows)
    else:
        write_atomic(path, TRAIN_COLUMNS, rows)


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog=PROGRAM)
    parser.add_argument("-c", "--config", required=True, help="experiment or ted_train YAML")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--iters", type=int, help="timed iterations (run.iters; 0: one step)")
    parser.add_argument("--steps", type=int, help="ted_train configs: training.steps")
    parser.add_argument("--dtype", help="fp32, bf16 or fp16 (run.dtype)")
    parser.add_argument("--backend", help="cpu or cuda (run.backend)")
    parser.add_argument("--csv", help="CSV (default results/local/<experiment>/deepspeed_<config>.csv, ignored by git)")
    parser.add_argument("--loads", help="ted_train configs: each step's per-expert loads to this "
                        "file (step,layer,expert,load; a last line dropped,<total>)")
    parser.add_argument("--systems", help="experiments: our systems to run as DeepSpeed's "
                        "configuration equal to each (comma list, or 'all': the config's "
                        "systems); default deepspeed-moe alone (DeepSpeed-MoE, T = 1), for "
                        "convergence (trained) all")
    parser.add_argument("--check", action="store_true", help="validate only, run nothing")
    parser.add_argument("--ranks", type=int, help="with --check: the rank count to check for")
    parser.add_argument("--list-ranks", action="store_true",
                        help="print the rank counts of the config's points up to --ranks")
    parser.epilog = ("--then starts another run with its own options (-c and the rest), on the "
                     "same ranks after the one before it, in the same processes: PyTorch and "
                     "DeepSpeed load once. --check, --ranks and --list-ranks apply to every run.")
    return parser


def parse_runs(parser, argv):
    """Each run's options, the runs separated by --then; the whole command's --check, --ranks
    and --list-ranks given to every run, wherever they stand."""
    groups = [[]]
    for arg in argv:
        if arg == "--then":
            groups.append([])
        else:
            groups[-1].append(arg)
    runs = [parser.parse_args(group) for group in groups]
    check = any(r.check for r in runs)
    list_ranks = any(r.list_ranks for r in runs)
    ranks = next((r.ranks for r in runs if r.ranks is not None), None)
    for run, group in zip(runs, groups):
        run.check, run.list_ranks, run.ranks = check, list_ranks, ranks
        run.argv = group
    return runs


class Planned:
    """A run's config and the points it runs on the launched ranks."""

    def __init__(self, args, cfg, points, skipped):
        self.args, self.cfg, self.points, self.skipped = args, cfg, points, skipped
        self.train = not cfg["experiment"]
        self.trained = self.train or cfg["experiment"] in TRAINED_EXPERIMENTS  # rows per step


def plan_run(args, said):
    """The run's Planned, or None for --check and --list-ranks, whose answer is appended to
    `said` (lines, printed once every run has passed). Raises ted_config.ConfigError on bad
    input."""
    overrides = list(args.set)
    for key, value in (("run.iters", args.iters), ("training.steps", args.steps),
                       ("run.dtype", args.dtype), ("run.backend", args.backend),
                       ("run.csv", args.csv)):
        if value is not None:
            overrides.append(f"{key}={value}")
    cfg = ted_config.load(args.config, overrides)
    args.resolved_backend = cfg["run"]["backend"]
    stem = Path(args.config).stem
    train = not cfg["experiment"]
    trained = train or cfg["experiment"] in TRAINED_EXPERIMENTS  # rows per step
    args.csv = cfg["run"]["csv"] or (cfg["training"]["csv"] if train else "") or \
        f"results/local/{cfg['experiment'] or 'train'}/deepspeed_{stem}.csv"
    columns = TRAIN_COLUMNS if train else \
        CONVERGENCE_COLUMNS if trained else EXPERIMENT_COLUMNS
    if args.loads and not train:
        raise ted_config.ConfigError("--loads is for ted_train configs (one row per step)")
    systems = None
    if args.systems:
        if train:
            raise ted_config.ConfigError("--systems is for experiments (a ted_train config "
                                         "runs its parallel.* switches)")
        systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not train:
        check_appendable(args.csv, columns)
    elif Path(args.csv).is_dir():
        raise ted_config.ConfigError(f"key 'training.csv': '{args.csv}' is a directory")
    if args.list_ranks:
        ranks = args.ranks or int(os.environ.get("SLURM_NTASKS", "1"))
        counts = sorted({p.G for p in ted_config.all_points(cfg, ranks, systems)
                         if p.G <= ranks})
        if not counts:
            raise ted_config.ConfigError(f"{cfg['where']}: no point runs on {ranks} ranks")
        said.append(" ".join(map(str, counts)))
        return None
    if args.check:
        ranks = args.ranks or int(os.environ.get("SLURM_NTASKS", "1"))
        if ranks < 1:
            raise ted_config.ConfigError(f"--ranks must be positive, got {ranks}")
        points, skipped = ted_config.plan(cfg, ranks, systems)
        if not points:
            raise ted_config.ConfigError(f"{cfg['where']}: no point runs on {ranks} ranks")
        said.extend(f"# {line}" for line in skipped)
        said.append(f"{PROGRAM}: check passed: {cfg['where']} on {ranks} ranks: {len(points)} "
                    f"point(s)")
        return None
    os.environ.setdefault("DS_ACCELERATOR", cfg["run"]["backend"])
    _, world = distributed_environment()
    points, skipped = ted_config.plan(cfg, world, systems)
    if not points:
        raise ted_config.ConfigError(f"{cfg['where']}: no point runs on {world} ranks: "
                                     + "; ".join(skipped))
    return Planned(args, cfg, points, skipped)


def main():
    faulthandler.enable()  # a rank that dies on a signal prints its Python stacks
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    # Every run is checked before the first starts: bad input anywhere runs nothing.
    try:
        runs = parse_runs(make_parser(), sys.argv[1:])
        said = []
        planned = [plan_run(args, said) for args in runs]
        backends = {args.resolved_backend for args in runs}
        if len(backends) > 1:
            raise ted_config.ConfigError("the runs of one launch need one run.backend, not "
                                         + " and ".join(sorted(backends)))
        if any(p is None for p in planned):  # --check or --list-ranks
            print("\n".join(said))
            return 0
        rank, world = distributed_environment()
    except ted_config.ConfigError as error:
        if rank == 0:
            print(f"{PROGRAM}: {error}", file=sys.stderr)
        return 2

    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator

    if backends == {"cuda"} and not torch.cuda.is_available():
        if rank == 0:
            print(f"{PROGRAM}: {planned[0].cfg['where']}: run.backend cuda, but no GPU here",
                  file=sys.stderr)
        return 2
    threads = os.environ.get("TED_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's chatter off the result lines
        deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())
    revision = git_revision()
    status = 0
    for run in planned:
        args, cfg, points = run.args, run.cfg, run.points
        command = " ".join(shlex.quote(a) for a in ["baselines/deepspeed/run.py"] + args.argv)
        if rank == 0:
            print(f"# {PROGRAM} deepspeed {deepspeed.__version__}, torch {torch.__version__}: "
                  f"{cfg['where']}, {len(points)} point(s) on {world} ranks, "
                  f"{torch.get_num_threads()} thread(s) per rank", flush=True)
            for line in run.skipped:
                print(f"# {line}", flush=True)
        appended = 0
        try:
            for point in points:
                if run.trained:
                    appended += run_training(point, cfg, args, command, revision) or 0
                else:
                    run_experiment_point(point, cfg, args, command, revision)
        except RuntimeError as error:  # a non-finite loss: one line; the rows before it kept
            if rank == 0:
                print(f"{PROGRAM}: {error}", file=sys.stderr)
            status = 1
            break
        if rank == 0 and not run.train:
            print(f"# CSV: {args.csv} ({appended if run.trained else len(points)} row(s) "
                  "appended)", flush=True)
    # Gloo's threads (a tcp loop and two run loops per process group) outlive
    # destroy_process_group(): DeepSpeed's expert and data groups are still referenced from its
    # module state, so they would be torn down with the interpreter, where now and then one
    # aborts a rank after all its work is done ("terminate called without an active exception",
    # exit -6; seen in CI on 4 ranks). Nothing is left to do once the rows are written, so the
    # rank leaves without the interpreter's teardown.
    torch.distributed.destroy_process_group()
    return status


def leave(status):
    """Exits with `status` after flushing the output, skipping the interpreter's teardown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    leave(main())
