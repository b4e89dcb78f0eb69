#!/usr/bin/env python3
"""The MoE block of apps/bench_moe_block_cuda.cpp in PyTorch eager, forward + backward.

The comparison the CUDA backend is held to: the same block (pre-LN causal attention, a top-k
gate with positional capacity, dispatch and combine by index, experts as batched GEMMs, tanh
GeLU), the same sizes and the same FLOP count, timed with CUDA events (median of the timed
iterations after warm-up), with the attention both ways PyTorch eager runs it: written as matmul
+ masked softmax ("materialized"), and F.scaled_dot_product_attention ("sdpa": its flash or
cuDNN kernels). The variants alternate, round by round (--rounds). Also times torch.matmul at
the experts' GEMM shape on random data, as the C++ benchmark does with cuBLAS.

  python3 tests/cuda/torch_moe_block.py                      # h=4096, E=8, top-2, 8192 tokens, bf16
  python3 tests/cuda/torch_moe_block.py --tiny --device cpu  # runs anywhere (a smoke check)

Prints CSV (header first), one row per attention: size, dtype, device, attention, ms per
iteration, TFLOP/s, GEMM TFLOP/s, torch version, the SDPA backends PyTorch had enabled.

With --shape (what scripts/comparisons/bench_vs_pytorch.sh runs) it is instead the whole one-block model of
apps/bench_moe_block.cpp on the CPU in fp32, attention by PyTorch's fused causal
scaled_dot_product_attention (--attention materialized: matmul + masked softmax): token + position embedding (vocab 256), this block,
final LayerNorm, a 256-way LM head and the cross-entropy, forward + backward; it prints one line
per timed iteration, "ms <milliseconds>", so a caller can interleave rounds with the C++ side.
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

SIZES = {  # name: hidden, heads, experts, top_k, sequences, seq
    "paper_h4096_E8_top2_8192tok": (4096, 32, 8, 2, 4, 2048),
    "tiny_h64_E4_top2_256tok": (64, 4, 4, 2, 2, 128),
}


def make_params(h, E, dtype, device):
    f = 4 * h

    def w(*shape):
        return (torch.randn(*shape, device=device) * 0.02).to(dtype).requires_grad_()

    def const(value, *shape):
        return torch.full(shape, value, device=device, dtype=dtype, requires_grad=True)

    return dict(ln1_g=const(1.0, h), ln1_b=const(0.0, h), qkv_w=w(h, 3 * h), qkv_b=const(0.0, 3 * h),
                proj_w=w(h, h), proj_b=const(0.0, h), ln2_g=const(1.0, h), ln2_b=const(0.0, h),
                gate_w=w(h, E), w1=w(E, h, f), b1=const(0.0, E, 1, f), w2=w(E, f, h),
                b2=const(0.0, E, 1, h))


def block(x, p, heads, sequences, seq, experts, top_k, capacity_factor=1.0, fused=False):
    mid, ln2 = attention_half(x, p, heads, sequences, seq, fused)
    y, aux, capacity = moe_half(ln2, p, experts, top_k, capacity_factor)
    return y + mid, aux, capacity


def attention_half(x, p, heads, sequences, seq, fused=False):
    """The block up to the MoE FFN: (mid = x + attention, ln2 = LayerNorm(mid)); the peers'
    blocks (peers/moe_block.py) share it and put their own MoE layer on ln2."""
    n, h = x.shape
    d = h // heads
    ln1 = F.layer_norm(x, (h,), p["ln1_g"], p["ln1_b"], 1e-5)
    qkv = torch.addmm(p["qkv_b"], ln1, p["qkv_w"])
    q, k, v = qkv.view(sequences, seq, 3, heads, d).permute(2, 0, 3, 1, 4)
    if fused:  # PyTorch's own fused causal attention (its best eager path)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(n, h)
    else:
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        att = (probs @ v).transpose(1, 2).reshape(n, h)
    mid = torch.addmm(p["proj_b"], att, p["proj_w"]) + x
    return mid, F.layer_norm(mid, (h,), p["ln2_g"], p["ln2_b"], 1e-5)


def moe_half(ln2, p, experts, top_k, capacity_factor=1.0):
    """Our gating, dispatch, experts and combine on ln2 [n, h]: (moe output, aux, capacity)."""
    n, h = ln2.shape
    x = ln2
    # Gate in fp32: softmax, top-k choices, capacity filled round by round in token order.
    gate = torch.softmax((ln2 @ p["gate_w"]).float(), dim=-1)
    capacity = max(math.ceil(top_k * capacity_factor * n / experts - 1e-9), 4)
    first = gate.argmax(dim=-1)
    choices = [first]
    if top_k == 2:
        choices.append(gate.masked_fill(F.one_hot(first, experts).bool(), -1.0).argmax(dim=-1))
    fill = torch.zeros(experts, dtype=torch.long, device=x.device)
    slots, values = [], []
    for choice in choices:
        onehot = F.one_hot(choice, experts)
        position = ((onehot.cumsum(0) - 1) * onehot).sum(-1) + fill[choice]
        fill = torch.clamp(fill + onehot.sum(0), max=capacity)
        slots.append(torch.where(position < capacity, position, -1))
        values.append(gate.gather(1, choice[:, None]).squeeze(1))
    kept = [s >= 0 for s in slots]
    if top_k == 1:
        weights = [values[0] * kept[0]]
    else:
        a, b = values[0] * kept[0], values[1] * kept[1]
        denominator = torch.clamp(a + b, min=torch.finfo(torch.float32).eps)
        weights = [a / denominator, b / denominator]
    aux = experts * (gate.mean(0) * F.one_hot(first, experts).float().mean(0)).sum()

    # Dispatch by index into [E * C, h], experts as batched GEMMs, combine by index.
    tokens = torch.arange(n, device=x.device)
    rows = [(c * capacity + s)[m] for c, s, m in zip(choices, slots, kept)]
    sources = [tokens[m] for m in kept]
    buffer = ln2.new_zeros(experts * capacity, h).index_add(0, torch.cat(rows),
                                                            ln2[torch.cat(sources)])
    hidden = torch.baddbmm(p["b1"], buffer.view(experts, capacity, h), p["w1"])
    out = torch.baddbmm(p["b2"], F.gelu(hidden, approximate="tanh"), p["w2"])
    out = out.view(experts * capacity, h)
    y = torch.zeros_like(x)
    for r, src, w, m in zip(rows, sources, weights, kept):
        y = y.index_add(0, src, out[r] * w[m].to(x.dtype)[:, None])
    return y, aux, capacity


def one_block_model(tokens, targets, p, heads, sequences, seq, experts, top_k, fused):
    """bench_moe_block's model (apps/moe_block.hpp): embeddings, one MoE block, head, loss."""
    h = p["tok_emb"].shape[1]
    positions = torch.arange(seq, device=tokens.device).repeat(sequences)
    x = p["tok_emb"][tokens] + p["pos_emb"][positions]
    y, aux, _ = block(x, p, heads, sequences, seq, experts, top_k, fused=fused)
    lnf = F.layer_norm(y, (h,), p["lnf_g"], p["lnf_b"], 1e-5)
    loss = F.cross_entropy(lnf @ p["lm_head"], targets)
    return loss + 0.01 * aux


def run_shape(args):
    """--shape h,heads,experts,top_k,sequences,seq: time the one-block model (CPU, fp32)."""
    h, heads, experts, top_k, sequences, seq = (int(v) for v in args.shape.split(","))
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    vocab, n = 256, sequences * seq
    p = make_params(h, experts, torch.float32, "cpu")
    for name, shape in (("tok_emb", (vocab, h)), ("pos_emb", (seq, h)), ("lm_head", (h, vocab))):
        p[name] = (torch.randn(*shape) * 0.02).requires_grad_()
    p["lnf_g"] = torch.ones(h, requires_grad=True)
    p["lnf_b"] = torch.zeros(h, requires_grad=True)
    tokens = torch.randint(0, vocab, (n,))
    targets = torch.randint(0, vocab, (n,))

    def step():
        loss = one_block_model(tokens, targets, p, heads, sequences, seq, experts, top_k,
                               args.attention == "fused")
        loss.backward()
        for value in p.values():
            value.grad = None
        return loss

    for _ in range(args.warmup):
        step()
    for _ in range(args.iters):
        begin = time.perf_counter()
        loss = step()
        print(f"ms {(time.perf_counter() - begin) * 1e3:.3f}", flush=True)
    if not math.isfinite(loss.item()):
        print("loss is not finite", file=sys.stderr)
        return 1
    return 0


def block_flops(n, h, seq, experts, capacity):  # as GpuBlock::forward_flops, times 3
    forward = 2 * n * h * 3 * h + 2 * n * h * h + 4 * n * seq * h + 2 * n * h * experts
    forward += 4 * experts * capacity * h * 4 * h
    return 3.0 * forward


def timer(device):
    if device.startswith("cuda"):
        def measure(work):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def measure(work):
            begin = time.perf_counter()
            work()
            return time.perf_counter() - begin
    return measure


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny size (the smoke check)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--shape", help="h,heads,experts,top_k,sequences,seq: the CPU one-block "
                        "model of bench_moe_block, fp32, one 'ms' line per iteration")
    parser.add_argument("--threads", type=int, default=1, help="with --shape: torch threads")
    parser.add_argument("--attention", default="fused", choices=["fused", "materialized"],
                        help="with --shape: F.scaled_dot_product_attention (causal) or matmul + "
                        "masked softmax, as model.attention on the C++ side")
    parser.add_argument("--variants", default="materialized,sdpa",
                        help="the block's attention variants to time, alternated: materialized, "
                        "sdpa")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternated rounds of every variant (medians over all of them)")
    args = parser.parse_args()
    if args.shape:
        return run_shape(args)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible to PyTorch (use --device cpu for a smoke run)")
        return 77
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    name = "tiny_h64_E4_top2_256tok" if args.tiny else "paper_h4096_E8_top2_8192tok"
    h, heads, experts, top_k, sequences, seq = SIZES[name]
    n = sequences * seq
    torch.manual_seed(1234)
    params = make_params(h, experts, dtype, args.device)
    x = torch.randn(n, h, device=args.device).to(dtype)
    d_out = (torch.randn(n, h, device=args.device) * 1e-3).to(dtype)
    capacity = None
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("materialized", "sdpa"):
            print(f"unknown variant '{v}' (materialized, sdpa)", file=sys.stderr)
            return 2

    def step(fused):
        nonlocal capacity
        y, aux, capacity = block(x, params, heads, sequences, seq, experts, top_k, fused=fused)
        torch.autograd.backward([y, aux * 0.01], [d_out, None])
        for p in params.values():
            p.grad = None

    measure = timer(args.device)
    times = {v: [] for v in variants}
    for v in variants:  # warm-up: kernels chosen and compiled before any timing
        for _ in range(args.warmup):
            step(v == "sdpa")
    for _ in range(max(1, args.rounds)):
        for v in variants:
            times[v] += [measure(lambda: step(v == "sdpa")) for _ in range(args.iters)]

    a = torch.randn(n, h, device=args.device).to(dtype)
    b = torch.randn(h, 4 * h, device=args.device).to(dtype)
    torch.matmul(a, b)
    gemm = min(measure(lambda: torch.matmul(a, b)) for _ in range(10))
    gemm_tflops = 2.0 * n * h * 4 * h / gemm * 1e-12
    backends = "none"
    if args.device.startswith("cuda"):
        cuda = torch.backends.cuda
        backends = "+".join(name for name, on in (
            ("flash", cuda.flash_sdp_enabled()), ("cudnn", getattr(cuda, "cudnn_sdp_enabled",
                                                                     lambda: False)()),
            ("mem_efficient", cuda.mem_efficient_sdp_enabled()), ("math", cuda.math_sdp_enabled()))
            if on)
    print("size,dtype,device,attention,ms_per_iter,tflops,gemm_tflops,torch,sdpa_backends")
    for v in variants:
        seconds = statistics.median(times[v])
        tflops = block_flops(n, h, seq, experts, capacity) / seconds * 1e-12
        print(f"{name},{args.dtype},{args.device},{v},{seconds * 1e3:.3f},{tflops:.3f},"
              f"{gemm_tflops:.3f},{torch.__version__},{backends}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
