"""Checks, on the installed DeepSpeed, what the DeepSpeed-TED baseline relies on or works
around (docs/deepspeed.md, "DeepSpeed-TED: what was checked"). Each fact prints one line,
"confirmed" or "REFUTED", and the run exits 1 if any is refuted, so an upgrade of DeepSpeed that
changes one of them shows here first. 4 ranks (T = 2, Ep = 2), gloo, with the environment of
baselines/deepspeed/setup.sh (tests/apps/deepspeed_ted.sh runs it so):
    DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=<venv>/torch_extensions \
        <venv>/bin/python -m torch.distributed.run --standalone --nproc_per_node 4 \
        baselines/deepspeed/facts.py
"""
import contextlib
import io
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

RESULTS = []


def fact(name, holds, detail=""):
    RESULTS.append((name, bool(holds)))
    if dist.get_rank() == 0:
        print(f"{'confirmed' if holds else 'REFUTED  '}  {name}{': ' + detail if detail else ''}",
              flush=True)


def quiet():
    return contextlib.redirect_stdout(io.StringIO())


class RecordingMpu:
    """The baseline's mpu, recording which of its methods DeepSpeed calls."""

    def __init__(self, inner):
        self._inner, self.called = inner, set()

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if callable(value):
            self.called.add(name)
        return value


def tiny_cfg(checkpoint=False):
    import ted_config
    cfg = ted_config.load(os.path.join(os.path.dirname(__file__), "../../experiments/train/"
                                       "tiny-cpu.yaml"),
                          ["parallel.tp=2", "parallel.ep=2", "gating.capacity_factor=4"])
    cfg["model"]["checkpoint"] = checkpoint
    return cfg


def engine(cfg, experts, mpu):
    import deepspeed
    import gpt_ted
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
    import gpt_moe
    import deepspeed_ted
    deepspeed_ted.reset_deepspeed_state()
    deepspeed_ted.patch_deepspeed(True, dist.get_backend() == "gloo")
    model = gpt_ted.GptTed(cfg, 2, experts, False)
    gpt_ted.initialise(model, cfg, megatron_groups())
    optimizer = torch.optim.AdamW(split_params_into_different_moe_groups_for_optimizer(
        gpt_moe.optimizer_groups(model)), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
              "train_batch_size": 8 * (4 // 2 if mpu is not None else 4),
              "zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True,
              "steps_per_print": 1 << 30}
    with quiet():
        result = deepspeed.initialize(model=model, optimizer=optimizer, config=config, mpu=mpu)
    return model, result[0]


def megatron_groups():
    import tensor_parallel
    return tensor_parallel.groups()


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.moe import mappings, sharded_moe
    from deepspeed.utils import groups

    import deepspeed_ted
    import tensor_parallel

    with quiet():
        deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())
    rank = dist.get_rank()
    g = tensor_parallel.Groups(dist, 2, 2)
    tensor_parallel.set_groups(g)
    mpu = tensor_parallel.Mpu(g)
    if rank == 0:
        print(f"# DeepSpeed {deepspeed.__version__}, torch {torch.__version__}, "
              f"{dist.get_backend()}, {dist.get_world_size()} ranks, T = 2, Ep = 2", flush=True)

    # 1. groups.initialize is gone: the mpu reaches DeepSpeed through deepspeed.initialize only.
    try:
        groups.initialize(ep_size=2, mpu=mpu)
        raised = False
    except Exception as error:  # DeprecatedException
        raised = type(error).__name__
    fact("deepspeed.utils.groups.initialize raises: the mpu is registered only through "
         "deepspeed.initialize(mpu=...)", raised, str(raised))

    # 2. An mpu with initialize_sequence_parallel is taken for a sequence-parallel one.
    class SequenceMpu(tensor_parallel.Mpu):
        def initialize_sequence_parallel(self):
            pass

    groups.mpu = SequenceMpu(g)
    size = groups._get_data_parallel_world_size()
    groups.mpu = None
    fact("an mpu defining initialize_sequence_parallel is taken as sequence-parallel (DeepSpeed "
         "then asks it for no data-parallel group)", size is None, f"data-parallel size {size}")

    # 3. gloo refuses the flat buffer of mappings._gather_tokens; a shaped one works.
    groups.mpu = mpu
    x = torch.full((2, 3, 4), float(rank))
    try:
        mappings._gather_tokens(x, dim=1)
        refused = ""
    except Exception as error:
        refused = str(error).splitlines()[0][:100]
    shaped = deepspeed_ted._gather_tokens_shaped(x, dim=1)
    t0, t1 = g.tensor_ranks
    right = shaped.shape == (2, 6, 4) and bool((shaped[:, :3] == t0).all()) and \
        bool((shaped[:, 3:] == t1).all())
    fact("gloo refuses _gather_tokens' flat all_gather_into_tensor buffer; a shaped one works",
         refused and right, refused)

    # 4. drop_tokens asserts that T divides the capacity.
    try:
        mappings._drop_tokens(torch.zeros(4, 5, 8), dim=1)
        asserted = False
    except AssertionError:
        asserted = True
    fact("drop_tokens asserts that T divides the capacity (a capacity of 5 at T = 2)", asserted)

    # 5. Dropless: the capacity is padded to a multiple of T only for experts that are not
    # tensor-parallel; with tensor-parallel experts it stays the largest load.
    logits = torch.full((6, 2), -5.0)
    logits[:5, 0] = 5.0
    logits[5, 1] = 5.0  # loads 5 and 1
    capacities = {}
    for size in (1, 2):
        groups.expert_tensor_parallel_world_size = size
        capacities[size] = int(sharded_moe.top1gating(logits.clone(), 1.0, 1, drop_tokens=False,
                                                      use_rts=False, sparse_routes=True)[1])
    groups.expert_tensor_parallel_world_size = 1
    fact("dropless: the capacity is rounded up to a multiple of T for whole experts only",
         capacities == {1: 6, 2: 5}, f"largest load 5: whole {capacities[1]}, tensor-parallel "
         f"{capacities[2]}")
    groups.mpu = None

    cfg = tiny_cfg()
    # 6. Without an mpu the tensor ranks are data-parallel copies: rank 0's shards everywhere.
    deepspeed_ted.reset_deepspeed_state()
    model, eng = engine(cfg, "whole", None)
    mine = model.blocks[0].attn.qkv.weight.detach().clone()
    other = mine.clone()
    dist.broadcast(other, g.tensor_ranks[0], group=g.tensor)
    copied = bool(torch.equal(mine, other))
    fact("without an mpu DeepSpeed takes every rank for a data-parallel copy: its data-parallel "
         "world is G, and it broadcasts rank 0's tensor shards over the tensor ranks",
         eng.dp_world_size == 4 and copied,
         f"data-parallel world {eng.dp_world_size}, tensor rank 1's QKV shard = rank 0's: "
         f"{copied}")

    # 7. The methods DeepSpeed asks of the mpu (initialise and one step, both expert modes).
    used = set()
    for experts in ("tensor", "whole"):
        deepspeed_ted.reset_deepspeed_state()
        recording = RecordingMpu(mpu)
        model, eng = engine(tiny_cfg(), experts, recording)
        name = "ep_size_2"
        ep_ranks = list(groups._get_expert_parallel_group_ranks(name))
        edp_ranks = list(groups._get_expert_data_parallel_group_ranks(name))
        tokens = torch.randint(0, 32, (8, 16))
        lm, aux = eng(tokens, tokens)
        eng.backward(lm + 0.01 * aux)
        eng.step()
        used |= recording.called
        if experts == "tensor":
            fact("tensor-parallel experts: DeepSpeed builds the expert groups from the mpu's "
                 "data groups, ours", ep_ranks == g.expert_ranks and edp_ranks ==
                 g.expert_data_ranks, f"expert {ep_ranks}, expert-data {edp_ranks}")
        else:
            consecutive = list(range(rank // 2 * 2, rank // 2 * 2 + 2))
            fact("whole experts: DeepSpeed builds the expert groups from consecutive ranks "
                 "without asking the mpu (here: our tensor groups)",
                 ep_ranks == consecutive and ep_ranks == g.tensor_ranks,
                 f"expert {ep_ranks} (our tensor group {g.tensor_ranks}, our expert group "
                 f"{g.expert_ranks}), expert-data {edp_ranks}")
    needed = {"get_tensor_model_parallel_world_size", "get_tensor_model_parallel_rank",
              "get_tensor_model_parallel_group", "get_data_parallel_group",
              "get_data_parallel_world_size", "get_model_parallel_group",
              "get_model_parallel_world_size", "get_model_parallel_rank"}
    fact("the mpu methods DeepSpeed calls are the tensor, model and data-parallel getters",
         needed <= used, ", ".join(sorted(used)))

    # 8. In 0.19.8 the tokens are dropped whenever T > 1, whichever expert mode: the MoE layer
    # calls drop_tokens for both.
    calls = {}
    real = sharded_moe.drop_tokens
    for experts in ("tensor", "whole"):
        deepspeed_ted.reset_deepspeed_state()
        count = [0]

        def counting(x, dim=0, _count=count):
            _count[0] += 1
            return real(x, dim)

        model, eng = engine(tiny_cfg(), experts, mpu)
        sharded_moe.drop_tokens = counting
        tokens = torch.randint(0, 32, (8, 16))
        with torch.no_grad():
            eng(tokens, tokens)
        sharded_moe.drop_tokens = real
        calls[experts] = count[0]
    fact("the duplicate tokens are dropped at T > 1 whichever expert mode (drop_tokens calls in "
         "one forward of one MoE layer)", calls["tensor"] == 2 and calls["whole"] == 1,
         f"tensor-parallel experts {calls['tensor']} (before both all-to-alls), whole "
         f"{calls['whole']} (before the first)")

    refuted = [name for name, holds in RESULTS if not holds]
    if rank == 0:
        print(f"# {len(RESULTS) - len(refuted)} of {len(RESULTS)} confirmed", flush=True)
    dist.barrier()
    return 1 if refuted else 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    os._exit(status)
