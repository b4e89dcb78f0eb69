#!/usr/bin/env python3
"""The training step of one of our ted_train configs (experiments/train/gpu-1b.yaml: the 1.35B
MoE GPT) in a peer system, on one GPU, tokens/s per step: what scripts/gpu_peers.sh sets beside
ted_train's.

  megatron   Megatron-Core's GPTModel with its MoE layers (local, non-Transformer-Engine spec:
             its unfused attention, SequentialMLP experts, no biases; --sdpa swaps the core
             attention for F.scaled_dot_product_attention, as peers/moe_block.py's
             megatron-sdpa), wrapped in Megatron's DistributedDataParallel, stepped by
             get_megatron_optimizer (bf16 parameters with fp32 main parameters; its Adam is
             torch.optim.AdamW, since Transformer Engine's and apex's fused Adam are not carried),
             gradient clipping, our learning rate
  deepspeed  the suite's GPT with DeepSpeed's MoE layer (baselines/deepspeed/gpt_moe.py, as the
             DeepSpeed baseline runs it) under DeepSpeed's engine, configured as
             baselines/deepspeed/run.py configures it (ZeRO-1, bf16, clipping, torch AdamW)

The model is ours (docs/algorithm.md section 1): token and learned position embeddings,
pre-LN blocks, every expert_interval-th FFN an MoE of `experts` experts (top-k, the capacity
factor, the auxiliary loss coefficient of the config), a final LayerNorm, an untied LM head,
the config's micro-batches of micro_batch sequences per step, bf16. The data are random token
ids (the step's speed does not depend on them). Parameters are counted and printed beside ours.

  python3 peers/train_step.py --system megatron -c experiments/train/gpu-1b.yaml --csv FILE
  python3 peers/train_step.py --system megatron -c experiments/train/tiny-cpu.yaml \\
      --device cpu --dtype fp32 --steps 2 --csv FILE     # the CPU check (see docs/gpu_peers.md)

Writes one CSV row per step (step, loss, seconds, tokens_per_s, parameters, system, version,
device, dtype, note) and exits 0; 1 when a loss is not finite or the run failed; 2 on bad input.
"""
import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "baselines" / "deepspeed"))
sys.path.insert(0, str(ROOT / "peers"))

COLUMNS = ["step", "loss", "seconds", "tokens_per_s", "parameters", "system", "version", "device",
           "dtype", "note"]


def write(path, rows):
    with open(path, "w") as handle:
        handle.write(",".join(COLUMNS) + "\n")
        for row in rows:
            handle.write(",".join(f'"{row.get(c, "")}"' if c == "note" else str(row.get(c, ""))
                                  for c in COLUMNS) + "\n")


def ours_parameters(cfg):
    from gpt_moe import parameter_count  # the suite's count (baselines/deepspeed/gpt_moe.py)
    return parameter_count(cfg)


def megatron_step(cfg, args):
    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.transformer_config import TransformerConfig
    import moe_block  # its process group, parallel state and SDPA core attention

    m, g, o, d = cfg["model"], cfg["gating"], cfg["optimizer"], cfg["data"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    on_gpu = args.device.startswith("cuda")
    moe_block.megatron_parallel(args.device)
    torch.manual_seed(cfg["training"]["seed"])
    h = m["hidden"]
    config = TransformerConfig(
        num_layers=m["layers"], hidden_size=h, num_attention_heads=m["heads"],
        ffn_hidden_size=m["ffn_mult"] * h, num_moe_experts=m["experts"],
        # ours: block i is MoE when (i + 1) % expert_interval == 0
        moe_layer_freq=[int((i + 1) % m["expert_interval"] == 0) for i in range(m["layers"])],
        moe_router_topk=g["top_k"], moe_expert_capacity_factor=g["capacity_factor"],
        moe_token_drop_policy="position", moe_pad_expert_input_to_capacity=False,
        moe_aux_loss_coeff=g["aux_coeff"], moe_router_load_balancing_type="aux_loss",
        moe_token_dispatcher_type="allgather", moe_router_dtype="fp32", add_bias_linear=False,
        gated_linear_unit=False, activation_func=lambda t: F.gelu(t, approximate="tanh"),
        normalization="LayerNorm", layernorm_epsilon=1e-5, hidden_dropout=0.0,
        attention_dropout=0.0, bias_activation_fusion=False, bias_dropout_fusion=False,
        masked_softmax_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
        persist_layer_norm=False, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        params_dtype=dtype, pipeline_dtype=dtype, use_cpu_initialization=not on_gpu,
        init_method_std=m["init_std"],
        recompute_granularity="full" if m["checkpoint"] else None,
        recompute_method="uniform" if m["checkpoint"] else None,
        recompute_num_layers=1 if m["checkpoint"] else None)
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False)
    if args.sdpa:
        for layer_spec in spec.layer_specs:
            layer_spec.submodules.self_attention.submodules.core_attention = \
                moe_block.SdpaCoreAttention
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=m["vocab"],
                     max_sequence_length=m["seq_len"], pre_process=True, post_process=True,
                     share_embeddings_and_output_weights=False,
                     position_embedding_type="learned_absolute")
    model = model.to(device=args.device, dtype=dtype)
    parameters = sum(p.numel() for p in model.parameters())
    counts = f"{parameters} parameters (ours: {ours_parameters(cfg)}; it has no biases)"
    if on_gpu:  # Megatron's own training path: its DDP (the gradient buffer) and its mixed-
        # precision optimizer (fp32 main parameters; Adam is torch.optim.AdamW, without TE's or
        # apex's fused one)
        model = DistributedDataParallel(config, DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=False),
            module=model)
        optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=o["lr"], weight_decay=o["weight_decay"], adam_beta1=o["beta1"],
            adam_beta2=o["beta2"], adam_eps=o["eps"], clip_grad=o["grad_clip"],
            bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16, params_dtype=dtype,
            use_distributed_optimizer=False), [model])
        note = ("Megatron-Core GPTModel, local spec" + (" + SDPA core attention" if args.sdpa
                                                        else "")
                + "; its DDP and mixed-precision optimizer (torch AdamW inside); " + counts)
    else:  # the CPU check: Megatron's optimizer allocates on "cuda" by name (no CPU path)
        optimizer = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                                      eps=o["eps"], weight_decay=o["weight_decay"])
        note = ("CPU check: Megatron-Core's GPTModel forward + backward, torch AdamW with clipping "
                "(not Megatron's DDP and optimizer, which need CUDA); " + counts)
    seq, sequences = m["seq_len"], d["micro_batch"]
    generator = torch.Generator().manual_seed(cfg["training"]["seed"])
    position_ids = torch.arange(seq, device=args.device).expand(sequences, seq)
    # The causal mask handed in (True: masked), as Megatron's GPT pre-training builds it.
    mask = torch.ones(seq, seq, dtype=torch.bool, device=args.device).triu(1)[None, None]
    rows = []
    for step in range(args.steps):
        if on_gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        if on_gpu:
            model.zero_grad_buffer()
        optimizer.zero_grad()
        total = 0.0
        for _ in range(d["micro_batches"]):
            tokens = torch.randint(0, m["vocab"], (sequences, seq + 1), generator=generator)
            tokens = tokens.to(args.device)
            losses = model(tokens[:, :-1], position_ids, attention_mask=mask,
                           labels=tokens[:, 1:])  # per-token LM loss, [b, s]
            loss = losses.float().mean() / d["micro_batches"]
            loss.backward()  # the MoE aux losses ride on the activations' gradients
            total += loss.item()
        if on_gpu:
            update_ok, _, _ = optimizer.step()
            if not update_ok:
                print(f"train_step: step {step}: Megatron's optimizer skipped the update",
                      file=sys.stderr)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
            optimizer.step()
        if on_gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        tokens_per_step = d["micro_batches"] * sequences * seq
        rows.append({"step": step, "loss": f"{total:.6f}", "seconds": f"{seconds:.6f}",
                     "tokens_per_s": f"{tokens_per_step / seconds:.1f}", "parameters": parameters,
                     "system": "megatron" + ("-sdpa" if args.sdpa else ""),
                     "version": moe_block._dist_version("megatron-core"), "device": args.device,
                     "dtype": args.dtype, "note": note})
        print(f"step {step}: loss {total:.4f}, {seconds * 1e3:.1f} ms, "
              f"{tokens_per_step / seconds:.0f} tokens/s", flush=True)
        if not math.isfinite(total):
            write(args.csv, rows)
            print("train_step: loss is not finite", file=sys.stderr)
            return 1
    if on_gpu:
        peak = torch.cuda.max_memory_allocated()
        print(f"# peak memory (torch.cuda.max_memory_allocated): {peak / 2**30:.2f} GiB")
        for row in rows:
            row["note"] += f"; peak {peak / 2**30:.2f} GiB allocated"
    print(f"# {parameters} parameters")
    write(args.csv, rows)
    return 0


def deepspeed_step(cfg, args):
    """DeepSpeed-MoE on the step: the suite's GPT with DeepSpeed's MoE layer
    (baselines/deepspeed/gpt_moe.py, the model the DeepSpeed baseline runs, its parameter count
    equal to ours) under DeepSpeed's engine as baselines/deepspeed/run.py configures it (ZeRO
    stage 1 by parallel.zero1, bf16, gradient clipping, torch's AdamW with our weight-decay
    groups and MoE parameter groups), timed here: the token ids are made before the clock,
    and no routing probe or loss read-back runs inside it, as in the Megatron step."""
    import torch
    if not args.device.startswith("cuda"):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
    import gpt_moe
    import moe_block

    m, o, d = cfg["model"], cfg["optimizer"], cfg["data"]
    on_gpu = args.device.startswith("cuda")
    moe_block.init_distributed(args.device)
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    if on_gpu:
        torch.cuda.set_device(0)
    torch.manual_seed(cfg["training"]["seed"])
    model = gpt_moe.GptMoe(cfg, 1)
    gpt_moe.initialise(model, m["init_std"], cfg["training"]["seed"], 0, m["experts"])
    parameters = sum(p.numel() for p in model.parameters())
    groups = split_params_into_different_moe_groups_for_optimizer(gpt_moe.optimizer_groups(model))
    optimizer = torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]),
                                  eps=o["eps"], weight_decay=o["weight_decay"])
    config = {"train_micro_batch_size_per_gpu": d["micro_batch"],
              "gradient_accumulation_steps": d["micro_batches"],
              "train_batch_size": d["micro_batch"] * d["micro_batches"],
              "gradient_clipping": o["grad_clip"],
              "zero_optimization": {"stage": 1 if cfg["parallel"]["zero1"] else 0},
              "zero_allow_untested_optimizer": True, "steps_per_print": 1 << 30}
    if args.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    elif args.dtype == "fp16":
        config["fp16"] = {"enabled": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    device = engine.device
    seq, sequences = m["seq_len"], d["micro_batch"]
    generator = torch.Generator().manual_seed(cfg["training"]["seed"])
    batches = [torch.randint(0, m["vocab"], (sequences, seq + 1), generator=generator).to(device)
               for _ in range(d["micro_batches"] * args.steps)]
    batches = [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in batches]
    note = (f"DeepSpeed engine (ZeRO stage {config['zero_optimization']['stage']}, {args.dtype}, "
            "torch AdamW) + deepspeed.moe.layer.MoE on the suite's "
            f"GPT (baselines/deepspeed/gpt_moe.py); {parameters} parameters "
            f"(ours: {ours_parameters(cfg)})")
    rows = []
    for step in range(args.steps):
        if on_gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        losses = []
        for micro in range(d["micro_batches"]):
            inputs, targets = batches[step * d["micro_batches"] + micro]
            lm, aux = engine(inputs, targets)
            loss = lm + cfg["gating"]["aux_coeff"] * aux
            engine.backward(loss)
            engine.step()
            losses.append(lm.detach())
        if on_gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        total = float(torch.stack(losses).float().mean())
        tokens_per_step = d["micro_batches"] * sequences * seq
        rows.append({"step": step, "loss": f"{total:.6f}", "seconds": f"{seconds:.6f}",
                     "tokens_per_s": f"{tokens_per_step / seconds:.1f}", "parameters": parameters,
                     "system": "deepspeed", "version": deepspeed.__version__,
                     "device": args.device, "dtype": args.dtype, "note": note})
        print(f"step {step}: loss {total:.4f}, {seconds * 1e3:.1f} ms, "
              f"{tokens_per_step / seconds:.0f} tokens/s", flush=True)
        if not math.isfinite(total):
            write(args.csv, rows)
            print("train_step: loss is not finite", file=sys.stderr)
            return 1
    if on_gpu:
        peak = torch.cuda.max_memory_allocated()
        print(f"# peak memory (torch.cuda.max_memory_allocated): {peak / 2**30:.2f} GiB")
        for row in rows:
            row["note"] += f"; peak {peak / 2**30:.2f} GiB allocated"
    write(args.csv, rows)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", required=True, choices=["megatron", "deepspeed"])
    parser.add_argument("-c", "--config", required=True, help="a ted_train YAML")
    parser.add_argument("--set", action="append", default=[], help="section.key=value")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--sdpa", action="store_true", help="megatron: SDPA core attention")
    parser.add_argument("--csv", required=True)
    args = parser.parse_args()
    import ted_config
    try:
        cfg = ted_config.load(args.config, args.set)
    except ted_config.ConfigError as error:
        print(f"train_step: {error}", file=sys.stderr)
        return 2
    if args.steps < 1:
        print("train_step: --steps must be at least 1", file=sys.stderr)
        return 2
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible to PyTorch (use --device cpu)")
        return 77
    if args.system == "megatron":
        return megatron_step(cfg, args)
    return deepspeed_step(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
