"""DeepSpeed-TED: the paper's own implementation, as DeepSpeed 0.19 ships it, on our configs at
T >= 1. The tensor-parallel GPT of gpt_ted.py under deepspeed.initialize(mpu=...), ZeRO stage 1
as the T = 1 baseline runs it; each of DeepSpeed's configurations (CONFIGS) is one `system`
value in our CSVs. What it counts per step, as ours does: every collective by operation and group
(tensor_parallel.Ledger, in our ledger's bytes), the per-expert loads and drops (routing_probe.py), and
the memory by category (memory_count.py).

The run refuses to start (RuntimeError, one line) wherever DeepSpeed would silently train
something else: without the mpu registered, or with other groups than the ones it was built for.
"""
import os

import torch

import gpt_ted
import tensor_parallel
import memory_count

# DeepSpeed's configurations at T > 1: (experts, DTD) and the system of ours each one equals.
CONFIGS = {
    # MoE(enable_expert_tensor_parallelism=True): experts split over T; DeepSpeed's own Duplicate
    # Token Dropping (drop_tokens / gather_tokens around both all-to-alls)
    "ted": {"experts": "tensor", "dtd": True, "ours": "ted+dtd"},
    # the same with drop_tokens and gather_tokens replaced by the identity: every tensor rank
    # sends the whole dispatch buffer (DeepSpeed before DTD; 0.19.8 has no switch for it)
    "ted-nodtd": {"experts": "tensor", "dtd": False, "ours": "ted-baseline"},
    # MoE(enable_expert_tensor_parallelism=False): whole experts, each rank running its 1/T of
    # the capacity (DeepSpeed drops the duplicates here too; without dropping this mode would
    # run every token T times and sum T copies of the expert gradients)
    "ted-whole": {"experts": "whole", "dtd": True,
                  "ours": "ted+dtd (parallel.split_experts=false)"},
}


def system_name(version, config):
    return f"deepspeed-{version}-{config}"


def _identity(x, dim=0):
    return x


def _gather_tokens_shaped(input_, dim=0):
    """deepspeed/moe/mappings.py _gather_tokens with the gathered buffer shaped [T * d0, ...]
    instead of flat: gloo's all_gather_into_tensor refuses an output whose shape is not the
    input's with the first dimension multiplied (DeepSpeed's CPU backend is gloo). The same
    values in the same order; the concatenation along `dim` as DeepSpeed's."""
    import deepspeed
    from deepspeed.utils.bwc import (bwc_tensor_model_parallel_group,
                                     bwc_tensor_model_parallel_world_size)
    mpu = deepspeed.utils.groups.mpu
    input_ = input_.contiguous()
    world = bwc_tensor_model_parallel_world_size(mpu)
    if world == 1:
        return input_
    shape = list(input_.shape)
    gathered = torch.empty([world * shape[0]] + shape[1:], dtype=input_.dtype,
                           device=input_.device)
    deepspeed.comm.all_gather_into_tensor(gathered, input_,
                                          group=bwc_tensor_model_parallel_group(mpu))
    if dim == 0:
        return gathered
    return torch.cat(gathered.chunk(world, dim=0), dim=dim).contiguous()


_ORIGINAL = {}


def reset_deepspeed_state():
    """Between two points of one launch: DeepSpeed keeps its expert groups (by the name
    ep_size_<Ep>), the mpu and the experts' tensor-parallel size in module state, so a point
    laid out otherwise would take the last one's groups. Forget them (the old process groups
    stay alive, unused) and undo the patches of patch_deepspeed."""
    from deepspeed.moe import mappings, sharded_moe
    from deepspeed.utils import groups
    for table in (groups._EXPERT_PARALLEL_GROUP, groups._EXPERT_PARALLEL_GROUP_RANKS,
                  groups._EXPERT_DATA_PARALLEL_GROUP, groups._EXPERT_DATA_PARALLEL_GROUP_RANKS):
        table.clear()
    groups.mpu = None
    groups.expert_tensor_parallel_world_size = 1
    _ORIGINAL.setdefault("drop", sharded_moe.drop_tokens)
    _ORIGINAL.setdefault("gather", sharded_moe.gather_tokens)
    _ORIGINAL.setdefault("_gather", mappings._gather_tokens)
    sharded_moe.drop_tokens, sharded_moe.gather_tokens = _ORIGINAL["drop"], _ORIGINAL["gather"]
    mappings._gather_tokens = _ORIGINAL["_gather"]


def patch_deepspeed(dtd, gloo):
    """DTD off: sharded_moe's drop_tokens and gather_tokens become the identity (the module
    imported them by name). gloo: the shaped gather of _gather_tokens_shaped."""
    from deepspeed.moe import mappings, sharded_moe
    if not dtd:
        sharded_moe.drop_tokens = _identity
        sharded_moe.gather_tokens = _identity
    if gloo:
        mappings._gather_tokens = _gather_tokens_shaped


class TedEngine:
    """Builds the groups, the model (our initial values), the engine, and checks DeepSpeed took
    the layout it was given. run.py's Run drives it."""

    def __init__(self, point, cfg, optimizer_groups, make_optimizer, ds_config, schedule):
        import deepspeed
        import torch.distributed as dist
        from deepspeed.moe import sharded_moe
        from deepspeed.utils import groups as ds_groups

        from routing_probe import RoutingProbe

        self.config = CONFIGS[point.ds_config]
        self.T, self.Ep = point.T, point.Ep
        self.groups = tensor_parallel.Groups(dist, point.T, point.Ep)
        tensor_parallel.set_groups(self.groups)
        self.mpu = tensor_parallel.Mpu(self.groups)
        patch_deepspeed(self.config["dtd"], dist.get_backend() == "gloo")
        tied = cfg["model"].get("tie_embeddings", False)
        self.model = gpt_ted.GptTed(cfg, point.Ep, self.config["experts"], tied)
        gpt_ted.initialise(self.model, cfg, self.groups)
        self.probe = RoutingProbe(self.model, cfg, sharded_moe, torch)
        self.activations = memory_count.SavedActivations()
        optimizer = make_optimizer(optimizer_groups(self.model))
        self.engine, _, _, _ = deepspeed.initialize(model=self.model, optimizer=optimizer,
                                                    lr_scheduler=schedule, config=ds_config,
                                                    mpu=self.mpu)
        self._check_layout(ds_groups)
        name = f"ep_size_{point.Ep}"
        roles = [("tensor", self.groups.tensor, self.groups.tensor_ranks),
                 ("expert", ds_groups._get_expert_parallel_group(name),
                  list(ds_groups._get_expert_parallel_group_ranks(name))),
                 ("expert_data", ds_groups._get_expert_data_parallel_group(name),
                  list(ds_groups._get_expert_data_parallel_group_ranks(name))),
                 ("nonexpert_data", self.groups.data, self.groups.data_ranks)]
        self.deepspeed_groups = {kind: ranks for kind, _, ranks in roles}
        self.ledger = tensor_parallel.Ledger(dist, roles)
        import deepspeed.comm.comm as ds_comm
        self.ledger.install(ds_comm.cdb)
        self.memory = memory_count.EngineMemory(self.engine)
        self.activations.excluded = self.memory.parameter_storages()
        if os.environ.get("TED_DS_MEMORY_DETAIL"):  # the saved bytes at the peak by module
            self.activations.attribute(self.model)

    def _check_layout(self, ds_groups):
        """DeepSpeed without the mpu treats every rank as a data-parallel copy: it broadcasts
        rank 0's tensor shards over the others and averages different shards' gradients. Refuse
        anything but the layout the model was built for."""
        world = self.groups.world
        if ds_groups.mpu is not self.mpu:
            raise RuntimeError("DeepSpeed did not register the mpu (deepspeed.initialize(mpu=...))"
                               ": it would train the tensor ranks as data-parallel copies")
        if self.engine.dp_world_size != world // self.T:
            raise RuntimeError(f"DeepSpeed's data-parallel world is {self.engine.dp_world_size}, "
                               f"not {world // self.T} = G / T: its groups are not the layout's")
        name = f"ep_size_{self.Ep}"
        ranks = list(ds_groups._get_expert_parallel_group_ranks(name))
        expected = gpt_ted.expert_rank(self.groups, self.config["experts"])
        if len(ranks) != self.Ep or ranks.index(self.groups.rank) != expected:
            raise RuntimeError(f"DeepSpeed's expert group {ranks} does not place rank "
                               f"{self.groups.rank} at slot {expected}, where its experts were "
                               "initialised")

    def forward_backward(self, tokens, targets, aux_coeff):
        """One micro-batch through the engine, its saved activations tracked, the engine's
        buffers read after its backward."""
        with self.activations.tracking():
            lm, aux = self.engine(tokens, targets)
            self.engine.backward(lm + aux_coeff * aux)
        self.memory.snapshot()
        return lm, aux

    def after_step(self):
        self.memory.snapshot()

    def print_memory_detail(self):
        """rank 0, with TED_DS_MEMORY_DETAIL: the saved activations at the peak by module."""
        if self.groups.rank != 0 or not self.activations.at_peak:
            return
        import sys
        total = sum(self.activations.at_peak.values())
        print(f"# saved activations at the peak on rank 0: {total} B", file=sys.stderr)
        for owner, size in sorted(self.activations.at_peak.items(), key=lambda kv: -kv[1]):
            print(f"#   {size:10d} B  {owner}", file=sys.stderr)

    def memory_peaks(self):
        """Bytes per category (memory_count.CATEGORIES) at their peak so far on this rank."""
        peaks = dict(self.memory.peak)
        peaks["activations"] = self.activations.peak
        peaks["cac_stash"] = 0
        return peaks

    def describe_groups(self):
        """Our groups beside DeepSpeed's, for the log: ranks per kind."""
        g = self.groups
        ours = {"tensor": g.tensor_ranks, "expert": g.expert_ranks,
                "expert_data": g.expert_data_ranks, "nonexpert_data": g.data_ranks}
        return ours, self.deepspeed_groups
