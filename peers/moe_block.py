#!/usr/bin/env python3
"""The paper's MoE block in the systems a user would pick instead of ours, timed as
tests/cuda/torch_moe_block.py times PyTorch eager: the same block (pre-LN causal attention, a
top-2 gate with the capacity ceil(2 * cf * tokens / experts), experts h -> 4h -> h with tanh GeLU),
the same sizes (h 4096, 32 heads, 8 experts, 4 x 2048 tokens, bf16, forward + backward), the same
FLOP count (torch_moe_block.block_flops at our capacity), CUDA events around each step, the median
of the timed steps after warm-up, and the systems alternating round by round in one process.

Systems (--systems, any of them; one that cannot load is a row saying why, not an error):
  eager          PyTorch eager, F.scaled_dot_product_attention (torch_moe_block's "sdpa" block)
  compile        the same function through torch.compile (Inductor; Triton on a GPU)
  deepspeed      attention as eager, then DeepSpeed-MoE's layer (deepspeed.moe.layer.MoE, top-2,
                 no random token selection, no second-expert sampling, expert-parallel size 1)
  megatron       Megatron-Core's TransformerLayer with its MoE layer, local (non-Transformer-
                 Engine) spec: its own unfused attention, SequentialMLP experts, no biases
  megatron-sdpa  the same layer with its core attention swapped for F.scaled_dot_product_attention
                 (what Transformer Engine's fused attention would give; TE is not carried)
  tutel          attention as eager, then Tutel's moe_layer (top-2, its fast dispatch)

Before timing, every system checks itself at the tiny size in fp32 on the same device: our
weights copied into it, its block output against torch_moe_block's block on the same input
(relative L2 error, bound 1e-4). DeepSpeed's gate routes as ours does (second choices queued after
first choices, weights renormalised after the drops), so it is checked at capacity factor 1.0;
Megatron and Tutel drop and weight differently by design, so they are checked with room for every
token (no drop), which checks the rest of their block. --check-only runs the checks alone (what
CTest runs on the CPU).

  python3 peers/moe_block.py --systems eager,compile,deepspeed,megatron,megatron-sdpa,tutel
  python3 peers/moe_block.py --tiny --device cpu --dtype fp32 --check-only   # anywhere

Prints CSV (header first): one row per system with its version, ms per step, TFLOP/s, the
capacity it ran at, its check's error and verdict, and a note. Exit 0 when every loaded system
passed its check (systems that did not load are named in their rows), 1 when a check failed or
nothing loaded, 2 on bad arguments.
"""
import argparse
import contextlib
import math
import os
import socket
import statistics
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cuda"))
import torch_moe_block as ref  # noqa: E402  (the reference block, its sizes, FLOPs and timer)

SYSTEMS = ("eager", "compile", "deepspeed", "megatron", "megatron-sdpa", "tutel")
CHECK_BOUND = 1e-4


def init_distributed(device):
    """A one-rank process group (DeepSpeed's and Megatron's layers look up their groups)."""
    import torch.distributed as dist
    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", rank=0, world_size=1)


class Case:
    """One size on one device in one dtype: our parameters, the input and the output gradient."""

    def __init__(self, name, dtype, device, seed=1234):
        self.name = name
        self.h, self.heads, self.experts, self.top_k, self.sequences, self.seq = ref.SIZES[name]
        self.n = self.sequences * self.seq
        self.dtype, self.device = dtype, device
        torch.manual_seed(seed)
        self.params = ref.make_params(self.h, self.experts, dtype, device)
        self.x = torch.randn(self.n, self.h, device=device).to(dtype)
        self.d_out = (torch.randn(self.n, self.h, device=device) * 1e-3).to(dtype)
        self.capacity = max(math.ceil(self.top_k * 1.0 * self.n / self.experts - 1e-9), 4)

    def reference(self, capacity_factor=1.0):
        with torch.no_grad():
            y, _, _ = ref.block(self.x, self.params, self.heads, self.sequences, self.seq,
                                self.experts, self.top_k, capacity_factor, fused=True)
        return y


class System:
    """forward(x) -> (block output [n, h], aux loss or None); parameters() for the step."""
    version = ""
    note = ""
    capacity = None

    def step(self, case):
        y, aux = self.forward(case.x)
        outputs, grads = [y], [case.d_out]
        if aux is not None and aux.requires_grad:
            outputs.append(aux * 0.01)
            grads.append(None)
        torch.autograd.backward(outputs, grads)
        for p in self.parameters():
            p.grad = None


class Eager(System):
    def __init__(self, case, capacity_factor=1.0, compiled=False):
        self.case, self.cf = case, capacity_factor
        self.version = torch.__version__
        self.capacity = case.capacity if capacity_factor == 1.0 else None

        def run(x):
            return ref.block(x, case.params, case.heads, case.sequences, case.seq, case.experts,
                             case.top_k, capacity_factor, fused=True)[:2]
        self.run = run
        if compiled:
            # The gate's boolean indexing has data-dependent shapes: let Dynamo capture them
            # rather than break the graph there.
            torch._dynamo.config.capture_dynamic_output_shape_ops = True
            torch._dynamo.config.capture_scalar_outputs = True
            self.run = torch.compile(run)
            self.note = "torch.compile (Inductor), default mode"

    def forward(self, x):
        return self.run(x)

    def parameters(self):
        return self.case.params.values()


class AttentionThenMoE(torch.nn.Module):
    """Our attention half (torch_moe_block.attention_half, SDPA) and a peer's MoE layer on ln2."""

    def __init__(self, case, moe):
        super().__init__()
        self.case, self.moe = case, moe

    def forward(self, x):
        c = self.case
        mid, ln2 = ref.attention_half(x, c.params, c.heads, c.sequences, c.seq, fused=True)
        y, aux = self.moe(ln2)
        return y + mid, aux


class DeepSpeedMoE(System):
    def __init__(self, case, capacity_factor=1.0):
        if not case.device.startswith("cuda"):
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed
        from deepspeed.moe.layer import MoE
        from deepspeed.moe.sharded_moe import _capacity
        init_distributed(case.device)
        deepspeed.init_distributed(dist_backend="nccl" if case.device.startswith("cuda") else "gloo")
        c = case
        self.case, self.version = case, deepspeed.__version__
        expert = torch.nn.Sequential(torch.nn.Linear(c.h, 4 * c.h), torch.nn.GELU(approximate="tanh"),
                                     torch.nn.Linear(4 * c.h, c.h))
        layer = MoE(hidden_size=c.h, expert=expert, num_experts=c.experts, ep_size=1, k=c.top_k,
                    capacity_factor=capacity_factor, eval_capacity_factor=capacity_factor,
                    min_capacity=4, drop_tokens=True, use_rts=False,
                    top2_2nd_expert_sampling=False)
        layer.set_deepspeed_parallelism()
        with torch.no_grad():  # our weights: gate [h, E] -> [E, h], experts' [h, f] -> [f, h]
            layer.deepspeed_moe.gate.wg.weight.copy_(c.params["gate_w"].float().t())
            for e, ex in enumerate(layer.deepspeed_moe.experts.deepspeed_experts):
                ex[0].weight.copy_(c.params["w1"][e].t())
                ex[0].bias.copy_(c.params["b1"][e, 0])
                ex[2].weight.copy_(c.params["w2"][e].t())
                ex[2].bias.copy_(c.params["b2"][e, 0])
        layer = layer.to(device=c.device, dtype=c.dtype)  # its gate casts itself back to fp32
        self.layer = layer
        gates = torch.zeros(c.n, c.experts)
        self.capacity = int(_capacity(gates, torch.tensor(capacity_factor * c.top_k),
                                      torch.tensor(4)))
        self.note = "DeepSpeed-MoE layer (einsum dispatch/combine, experts in a loop)"

        def moe(ln2):
            out, aux, _ = layer(ln2.view(c.sequences, c.seq, c.h))
            return out.reshape(c.n, c.h), aux
        self.module = AttentionThenMoE(case, moe)

    def forward(self, x):
        return self.module(x)

    def parameters(self):
        return list(self.layer.parameters()) + list(self.case.params.values())


class SdpaCoreAttention(torch.nn.Module):
    """Megatron's core-attention interface (query, key, value [s, b, heads, d] -> [s, b, h]) over
    F.scaled_dot_product_attention, causal: the fused attention a local spec lacks."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type, **kwargs):
        super().__init__()
        self.config = config

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None,
                attention_bias=None, packed_seq_params=None, **kwargs):
        s, b, heads, d = query.shape
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, d]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.permute(2, 0, 1, 3).reshape(s, b, heads * d)


def megatron_config(case, capacity_factor, num_layers=1, **extra):
    """Megatron-Core's TransformerConfig for our block: LayerNorm, tanh GeLU, no dropout, no
    bias (its MoE layer with add_bias_linear fails: docs/gpu_peers.md), top-2 with the
    auxiliary loss, capacity with drops in token order, its default (all-gather) dispatcher,
    which on one rank only permutes."""
    from megatron.core.transformer.transformer_config import TransformerConfig
    on_gpu = case.device.startswith("cuda")
    dtype = case.dtype
    return TransformerConfig(
        num_layers=num_layers, hidden_size=case.h, num_attention_heads=case.heads,
        ffn_hidden_size=4 * case.h, num_moe_experts=case.experts, moe_router_topk=case.top_k,
        moe_expert_capacity_factor=capacity_factor, moe_token_drop_policy="position",
        moe_pad_expert_input_to_capacity=False, moe_aux_loss_coeff=0.01,
        moe_router_load_balancing_type="aux_loss", moe_token_dispatcher_type="allgather",
        moe_router_dtype="fp32", add_bias_linear=False, gated_linear_unit=False,
        activation_func=lambda t: F.gelu(t, approximate="tanh"), normalization="LayerNorm",
        layernorm_epsilon=1e-5, hidden_dropout=0.0, attention_dropout=0.0,
        bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16, params_dtype=dtype,
        pipeline_dtype=dtype, use_cpu_initialization=not on_gpu, perform_initialization=True,
        **extra)


def megatron_parallel(device):
    """Megatron's parallel state on one rank. Megatron-Core's MoE is written for CUDA only: its
    router moves its weights to torch.cuda.current_device() at every forward and makes its
    buffers there, and the attention forks the CUDA RNG tracker around its dropout. For the CPU
    check alone, current_device() answers "cpu" and the fork is a no-op context (dropout is 0):
    every computation of Megatron's layer then runs as written, on the CPU."""
    from megatron.core import parallel_state, tensor_parallel
    if not device.startswith("cuda"):
        torch.cuda.current_device = lambda: "cpu"
        tracker = tensor_parallel.get_cuda_rng_tracker()
        tracker.fork = lambda *args, **kwargs: contextlib.nullcontext()
    init_distributed(device)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    if device.startswith("cuda"):
        tensor_parallel.model_parallel_cuda_manual_seed(1234)


class MegatronLayer(System):
    def __init__(self, case, capacity_factor=1.0, sdpa=False):
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.transformer.moe.moe_utils import get_capacity
        from megatron.core.transformer.spec_utils import build_module
        megatron_parallel(case.device)
        c = case
        # Its distribution's version: megatron.core.__version__ appends the hash of any git tree
        # it happens to be installed in.
        self.case, self.version = case, _dist_version("megatron-core")
        config = megatron_config(case, capacity_factor)
        spec = get_gpt_layer_local_spec(num_experts=c.experts, moe_grouped_gemm=False)
        if sdpa:
            spec.submodules.self_attention.submodules.core_attention = SdpaCoreAttention
        layer = build_module(spec, config=config, layer_number=1)
        layer = layer.to(device=c.device, dtype=c.dtype)
        copy_into_megatron(layer, c)
        self.layer = layer
        # The causal mask handed in (True: masked), as a GPT model hands it; left out, the
        # unfused attention would make its own on "cuda" (the SDPA variant ignores it).
        self.mask = torch.ones(c.seq, c.seq, dtype=torch.bool, device=c.device).triu(1)[None, None]
        self.capacity = get_capacity(c.n * c.top_k, c.experts, capacity_factor)
        self.note = ("Megatron-Core local spec, " + ("core attention F.scaled_dot_product_attention"
                                                     if sdpa else "its unfused attention") +
                     ", SequentialMLP experts, no biases, drops in [seq, batch] token order")

    def forward(self, x):
        c = self.case
        hidden = x.view(c.sequences, c.seq, c.h).transpose(0, 1)  # Megatron's [s, b, h]
        out, _ = self.layer(hidden, attention_mask=self.mask)
        return out.transpose(0, 1).reshape(c.n, c.h), None  # its aux loss rides on the output

    def parameters(self):
        return self.layer.parameters()


def copy_into_megatron(layer, c):
    """Our block's weights into Megatron's layer (the biases are ours' zeros: it has none)."""
    p, h, heads, d = c.params, c.h, c.heads, c.h // c.heads
    with torch.no_grad():
        layer.input_layernorm.weight.copy_(p["ln1_g"])
        layer.input_layernorm.bias.copy_(p["ln1_b"])
        # Ours: qkv columns as (q|k|v, head, d); Megatron's rows as (head, q|k|v, d).
        w = p["qkv_w"].view(h, 3, heads, d).permute(2, 1, 3, 0).reshape(3 * h, h)
        layer.self_attention.linear_qkv.weight.copy_(w)
        layer.self_attention.linear_proj.weight.copy_(p["proj_w"].t())
        layer.pre_mlp_layernorm.weight.copy_(p["ln2_g"])
        layer.pre_mlp_layernorm.bias.copy_(p["ln2_b"])
        layer.mlp.router.weight.copy_(p["gate_w"].float().t())
        for e, expert in enumerate(layer.mlp.experts.local_experts):
            expert.linear_fc1.weight.copy_(p["w1"][e].t())
            expert.linear_fc2.weight.copy_(p["w2"][e].t())


class TutelMoE(System):
    def __init__(self, case, capacity_factor=1.0):
        import tutel
        from tutel import moe as tutel_moe
        c = case
        self.case = case
        self.version = getattr(tutel, "__version__", "") or _dist_version("tutel")
        layer = tutel_moe.moe_layer(
            gate_type={"type": "top", "k": c.top_k, "capacity_factor": capacity_factor,
                       "fp32_gate": True},
            model_dim=c.h,
            experts={"type": "ffn", "count_per_node": c.experts, "hidden_size_per_expert": 4 * c.h,
                     "activation_fn": lambda t: F.gelu(t, approximate="tanh")},
            scan_expert_func=None, seeds=(1, 1, 1), batch_prioritized_routing=False)
        layer = layer.to(device=c.device, dtype=c.dtype)
        with torch.no_grad():
            layer.gates[0].wg.weight.copy_(c.params["gate_w"].float().t())
            experts = layer.experts[0]  # one module holding every local expert's batched weights
            experts.batched_fc1_w.copy_(c.params["w1"].transpose(1, 2))
            experts.batched_fc2_w.copy_(c.params["w2"])
            experts.batched_fc1_bias.copy_(c.params["b1"][:, 0])
            experts.batched_fc2_bias.copy_(c.params["b2"][:, 0])
        self.layer = layer
        self.note = "Tutel moe_layer (its fast dispatch, batched experts)"

        def moe(ln2):
            out = layer(ln2.view(c.sequences, c.seq, c.h))
            return out.reshape(c.n, c.h), layer.l_aux
        self.module = AttentionThenMoE(case, moe)

    def forward(self, x):
        return self.module(x)

    def parameters(self):
        return list(self.layer.parameters()) + list(self.case.params.values())


def _dist_version(name):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def build(system, case, for_check=False):
    """The system on the case; for_check: the capacity its check runs at (see the docstring)."""
    no_drop = float(case.experts) / case.top_k  # capacity = every token
    if system == "eager":
        return Eager(case)
    if system == "compile":
        return Eager(case, compiled=True)
    if system == "deepspeed":
        return DeepSpeedMoE(case)
    if system in ("megatron", "megatron-sdpa"):
        return MegatronLayer(case, no_drop if for_check else 1.0, sdpa=system == "megatron-sdpa")
    if system == "tutel":
        return TutelMoE(case, no_drop if for_check else 1.0)
    raise ValueError(system)


def check(system, device):
    """The system's block output against ours at the tiny size in fp32: relative L2 error."""
    case = Case("tiny_h64_E4_top2_256tok", torch.float32, device, seed=99)
    peer = build(system, case, for_check=True)
    no_drop = system in ("megatron", "megatron-sdpa", "tutel")
    want = case.reference(float(case.experts) / case.top_k if no_drop else 1.0)
    got, _ = peer.forward(case.x)
    error = ((got.detach().float() - want.float()).norm() / want.float().norm()).item()
    peer.step(case)  # the backward runs too
    return error, peer.version


def main():
    # The libraries print to stdout (DeepSpeed's groups, its op builds): stdout is the CSV alone.
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        rows, systems, name, args, code = measure_all()
    if rows is None:
        return code
    print("size,dtype,device,system,version,ms_per_iter,tflops,capacity,check_rel_err,check,note",
          file=real_stdout)
    for s in systems:
        r = rows[s]
        note = r["note"].replace('"', "'")
        print(f"{name},{args.dtype},{args.device},{s},{r['version']},{r['ms']},{r['tflops']},"
              f"{r['capacity']},{r['check_rel_err']},{r['check']},\"{note}\"", file=real_stdout)
    if code == 1 and not any(r["check"].startswith("passed") for r in rows.values()):
        print("moe_block: no system loaded", file=sys.stderr)
    return code


def measure_all():
    """(rows by system, systems, size name, args, exit code); rows None on bad arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="eager,compile,deepspeed,megatron,megatron-sdpa,tutel")
    parser.add_argument("--tiny", action="store_true", help="the tiny size (h 64, 4 experts)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds of every system")
    parser.add_argument("--check-only", action="store_true", help="the checks, no timing")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            print(f"moe_block: unknown system '{s}' (one of {', '.join(SYSTEMS)})", file=sys.stderr)
            return None, None, None, None, 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible to PyTorch (use --device cpu for a smoke run)",
              file=sys.__stdout__)
        return None, None, None, None, 77
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    name = "tiny_h64_E4_top2_256tok" if args.tiny else "paper_h4096_E8_top2_8192tok"
    rows, failed, loaded = {}, False, {}
    for s in systems:
        row = rows[s] = {"system": s, "version": "", "ms": "", "tflops": "", "capacity": "",
                         "check_rel_err": "", "check": "", "note": ""}
        try:
            error, row["version"] = check(s, args.device)
            row["check_rel_err"] = f"{error:.2e}"
            row["check"] = "passed" if error <= CHECK_BOUND else "FAILED"
            failed |= error > CHECK_BOUND
        except Exception as e:  # not loaded: its row says why
            row["check"] = "not loaded"
            row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            print(f"# {s}: not loaded:", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            continue
        if args.check_only:
            loaded[s] = None
            continue
        case = Case(name, dtype, args.device)
        try:
            peer = build(s, case)
            for _ in range(args.warmup):  # kernels chosen, graphs compiled before timing
                peer.step(case)
        except Exception as e:
            row["check"] += ", did not run at this size"
            row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            traceback.print_exc(file=sys.stderr)
            failed = True
            continue
        loaded[s] = (peer, case, [])
        row.update(version=peer.version, note=peer.note,
                   capacity=str(peer.capacity) if peer.capacity else "")
    measure = ref.timer(args.device)
    if not args.check_only:
        for _ in range(max(1, args.rounds)):
            for s, (peer, case, times) in loaded.items():
                times += [measure(lambda: peer.step(case)) for _ in range(args.iters)]
        for s, (peer, case, times) in loaded.items():
            if not times:
                continue
            seconds = statistics.median(times)
            flops = ref.block_flops(case.n, case.h, case.seq, case.experts, case.capacity)
            rows[s]["ms"] = f"{seconds * 1e3:.3f}"
            rows[s]["tflops"] = f"{flops / seconds * 1e-12:.3f}"
    return rows, systems, name, args, 1 if failed or not loaded else 0


if __name__ == "__main__":
    sys.exit(main())
