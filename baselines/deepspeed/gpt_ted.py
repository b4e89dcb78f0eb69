"""The suite's MoE GPT split Megatron-style over a tensor group, for DeepSpeed-TED: DeepSpeed's
MoE layer (deepspeed.moe.layer.MoE) every expert_interval-th FFN, the rest tensor-parallel
(tensor_parallel.py), run at T >= 1 under deepspeed.initialize(mpu=...).

The shapes, biases, tanh GeLU and parameter roles are lib/ted/model/gpt.cpp's, and so are the
initial values: every tensor is drawn whole from our counter-based generator, keyed by our tensor
names (counter_random.init_normal), and this rank keeps its slice, so DeepSpeed starts from the
very weights ours starts from on every layout (ours stores x W with W [in, out]; torch's linear
keeps W^T). Tensor parallelism as ours splits it: QKV and the FFN's first layer column-parallel
(this rank's heads, its f / T), the attention's output and the FFN's second layer row-parallel;
LayerNorms, the gate, the row-parallel biases and the position embedding whole on every rank.

Experts, three ways (DeepSpeed's configurations, docs/deepspeed.md "DeepSpeed-TED"):
- tensor-parallel (MoE(enable_expert_tensor_parallelism=True)): each expert split over T as the
  dense FFN is; DeepSpeed drops the tensor group's duplicate tokens before the all-to-all and
  gathers them after it (and before the return all-to-all drops, after it gathers): our ted+dtd;
- the same with DeepSpeed's dropping and gathering taken out (run.py replaces the two functions
  by the identity): every tensor rank sends the whole dispatch buffer: our ted-baseline;
- whole (the default, False): each rank holds whole experts and runs them on its 1/T of the
  capacity: our ted+dtd with parallel.split_experts=false.

The embedding, two ways (`tied`):
- untied (ours today): the token embedding and the LM head whole on every tensor rank, the
  logits and the cross-entropy computed whole on each;
- tied, vocabulary-parallel (Megatron's GPT): the token embedding split by vocabulary rows over
  T, used again as the output layer, and the cross-entropy computed on the vocabulary slices
  (tensor_parallel.VocabParallelEmbedding, vocab_parallel_cross_entropy); no LM head tensor.

Dropout (model.dropout > 0), where ours has it: on the attention probabilities of this rank's
heads and on each sub-layer's h-wide output (after the all-reduce) before its residual. Given
its keys (use_dropout_keys: run.py does so for ted_train configs) the model drops with our
masks, ported bit for bit (dropout_masks.py: keyed by seed, step, layer, global token, feature
and global head), so it trains step by step as ours does; the attention then runs materialized
(the softmax, our mask on the probabilities, @ v), since SDPA draws its own. Without keys, and
with dropout 0, as before: PyTorch's masks (F.dropout, SDPA's dropout_p).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from deepspeed.moe.layer import MoE

import counter_random
import dropout_masks
import tensor_parallel


class Attention(nn.Module):
    def __init__(self, hidden, heads, fused, dropout):
        super().__init__()
        self.dropout = dropout
        T = tensor_parallel.groups().T
        self.local_hidden, self.local_heads, self.fused = hidden // T, heads // T, fused
        self.first_head = tensor_parallel.groups().t * self.local_heads  # ours' DropoutKey::first_head
        self.keys = None  # this block's dropout_masks.LayerKeys (GptTed.use_dropout_keys)
        self.qkv = tensor_parallel.ColumnParallelLinear(hidden, 3 * self.local_hidden)
        self.proj = tensor_parallel.RowParallelLinear(self.local_hidden, hidden)

    def forward(self, x):
        batch, seq, _ = x.shape
        hl, heads = self.local_hidden, self.local_heads
        q, k, v = self.qkv(x).split(hl, dim=-1)
        shape = (batch, seq, heads, hl // heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        ours = self.keys is not None and self.training and self.dropout > 0
        if self.fused and not ours:
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        else:  # materialized; with our masks always (SDPA takes no mask of ours)
            scores = q @ k.transpose(-2, -1) / math.sqrt(hl // heads)
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
            if ours:
                probs = self.keys.drop_probs(probs, self.first_head)
            else:
                probs = F.dropout(probs, self.dropout, self.training)
            out = probs @ v
        return self.proj(out.transpose(1, 2).reshape(batch, seq, hl))


def parallel_ffn(hidden, width):
    """h -> width -> h, tensor-parallel: this rank's width / T."""
    T = tensor_parallel.groups().T
    return nn.Sequential(tensor_parallel.ColumnParallelLinear(hidden, width // T),
                         nn.GELU(approximate="tanh"),
                         tensor_parallel.RowParallelLinear(width // T, hidden))


def whole_ffn(hidden, width):
    return nn.Sequential(nn.Linear(hidden, width), nn.GELU(approximate="tanh"),
                         nn.Linear(width, hidden))


EXPERT_MODES = ("tensor", "whole")


class Block(nn.Module):
    def __init__(self, cfg, moe, ep_size, experts):
        super().__init__()
        m, g = cfg["model"], cfg["gating"]
        h, f = m["hidden"], m["ffn_mult"] * m["hidden"]
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.attn = Attention(h, m["heads"], m["attention"] != "materialized", m["dropout"])
        self.dropout = m["dropout"]
        self.keys = None  # dropout_masks.LayerKeys of this block (GptTed.use_dropout_keys)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.moe = moe
        if moe:
            expert = parallel_ffn(h, f) if experts == "tensor" else whole_ffn(h, f)
            self.ffn = MoE(hidden_size=h, expert=expert, num_experts=m["experts"], ep_size=ep_size,
                           k=g["top_k"], capacity_factor=g["capacity_factor"],
                           eval_capacity_factor=g["capacity_factor"],
                           min_capacity=g["min_capacity"], drop_tokens=not g["dropless"],
                           use_rts=g["random_token_selection"],
                           top2_2nd_expert_sampling=g["second_choice_noise"],
                           enable_expert_tensor_parallelism=experts == "tensor")
        else:
            self.ffn = parallel_ffn(h, f)

    def forward(self, x):
        # Dropout where ours has it (each sub-layer's output before its residual, and the
        # attention probabilities): ours' masks when the model was given its keys (run.py does
        # for ted_train configs), else PyTorch's random numbers (equal to ours in distribution
        # only).
        if self.keys is not None and self.training and self.dropout > 0:
            drop = self.keys.drop_output
        else:
            drop = lambda t, site: F.dropout(t, self.dropout, self.training)  # noqa: E731
        x = x + drop(self.attn(self.ln1(x)), dropout_masks.ATTENTION_OUTPUT)
        if self.moe:
            out, aux, _ = self.ffn(self.ln2(x))
            return x + drop(out, dropout_masks.FFN_OUTPUT), aux.float()
        return x + drop(self.ffn(self.ln2(x)), dropout_masks.FFN_OUTPUT), \
            torch.zeros((), dtype=torch.float32, device=x.device)


class GptTed(nn.Module):
    """forward(tokens, targets) -> (lm loss, summed aux loss) of one micro-batch; the same on
    every rank of a tensor group."""

    def __init__(self, cfg, ep_size, experts, tied):
        super().__init__()
        m = cfg["model"]
        h, vocab = m["hidden"], m["vocab"]
        self.tied, self.experts = tied, experts
        if tied:
            self.tok_emb = tensor_parallel.VocabParallelEmbedding(vocab, h)
        else:
            self.tok_emb = nn.Embedding(vocab, h)
        self.pos_emb = nn.Embedding(m["seq_len"], h)
        self.blocks = nn.ModuleList(
            Block(cfg, (layer + 1) % m["expert_interval"] == 0, ep_size, experts)
            for layer in range(m["layers"]))
        self.lnf = nn.LayerNorm(h, eps=1e-5)
        self.lm_head = None if tied else nn.Linear(h, vocab, bias=False)
        self.checkpoint = m["checkpoint"]
        # DeepSpeed's Experts deep-copies the expert module once per local expert, and the copies'
        # parameters lose the tensor-parallel mark: set again here, else DeepSpeed's gradient
        # norm counts the tensor-parallel experts on tensor rank 0 alone.
        for name, p in self.named_parameters():
            if ".deepspeed_experts." not in name:
                continue
            if experts == "whole" or name.endswith((".0.weight", ".0.bias", ".2.weight")):
                # Whole experts differ between the tensor ranks too (DeepSpeed's expert groups
                # are consecutive ranks): each rank's count in the norm.
                tensor_parallel.mark_tensor_parallel(p)

    def use_dropout_keys(self, keys):
        """Our dropout masks from now on (dropout_masks.DropoutKeys, moved to each micro-batch by
        keys.at(step, first sample)) in place of PyTorch's; the attention runs materialized."""
        for layer, block in enumerate(self.blocks):
            block.keys = block.attn.keys = keys.layer(layer)

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        aux = torch.zeros((), dtype=torch.float32, device=x.device)
        for block in self.blocks:
            if self.checkpoint and self.training:
                # Full checkpointing, reentrant (as Megatron-DeepSpeed's): the forward keeps the
                # block's input, the backward runs the block again, every collective included
                # (DeepSpeed has no CAC), with the forward's RNG state; the saved-activation
                # hooks (memory_count.py) see the recompute's tensors as they are held.
                x, layer_aux = checkpoint(block, x, use_reentrant=True)
            else:
                x, layer_aux = block(x)
            aux = aux + layer_aux
        y = self.lnf(x).reshape(-1, x.shape[-1])
        if self.tied:
            logits = F.linear(tensor_parallel.copy_to_tensor(y), self.tok_emb.weight)
            lm = tensor_parallel.vocab_parallel_cross_entropy(logits, targets.reshape(-1),
                                                       self.tok_emb.first)
        else:
            logits = self.lm_head(y)
            lm = F.cross_entropy(logits.float(), targets.reshape(-1))
        return lm, aux


def expert_rank(groups, experts):
    """This rank's place in DeepSpeed's expert group, so which experts it holds: with
    tensor-parallel experts DeepSpeed builds the groups from the mpu's data groups
    (utils/groups.py _get_expert_parallel_ranks), our expert groups, so e; with whole experts
    it takes consecutive ranks without asking the mpu (_create_expert_and_data_parallel), so
    rank mod Ep. run.py checks this against the groups DeepSpeed made."""
    return groups.e if experts == "tensor" else groups.rank % groups.Ep


def initialise(model, cfg, groups):
    """Our initial values (lib/ted/model/gpt.cpp's tensors and names), this rank's slices."""
    m = cfg["model"]
    seed, std = cfg["training"]["seed"], m["init_std"]
    h, f, E, V = m["hidden"], m["ffn_mult"] * m["hidden"], m["experts"], m["vocab"]
    T, t = groups.T, groups.t
    El = E // groups.Ep
    first_expert = expert_rank(groups, model.experts) * El
    cache = {}

    def ours(name, shape):
        if name not in cache:
            cache[name] = counter_random.init_normal(seed, name, int(np.prod(shape)),
                                                     std).reshape(shape)
        return cache[name]

    def part(width):
        return slice(t * (width // T), (t + 1) * (width // T))

    def put(p, value):
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.ascontiguousarray(value)))

    def layer_norm(ln):
        put(ln.weight, np.ones(h, np.float32))
        put(ln.bias, np.zeros(h, np.float32))

    tok = ours("tok_emb", (V, h))
    put(model.tok_emb.weight, tok[part(V)] if model.tied else tok)
    put(model.pos_emb.weight, ours("pos_emb", (m["seq_len"], h)))
    for layer, block in enumerate(model.blocks):
        p = f"block{layer}."
        layer_norm(block.ln1)
        layer_norm(block.ln2)
        qkv = ours(p + "attn.qkv.w", (h, 3 * h))
        hl = h // T
        cols = np.concatenate([np.arange(j * h + t * hl, j * h + (t + 1) * hl) for j in range(3)])
        put(block.attn.qkv.weight, qkv[:, cols].T)
        put(block.attn.qkv.bias, np.zeros(3 * hl, np.float32))
        put(block.attn.proj.weight, ours(p + "attn.proj.w", (h, h))[part(h)].T)
        put(block.attn.proj.bias, np.zeros(h, np.float32))
        if block.moe:
            moe = block.ffn.deepspeed_moe
            put(moe.gate.wg.weight, ours(p + "moe.gate.w", (h, E)).T)
            w1, w2 = ours(p + "moe.w1", (E, h, f)), ours(p + "moe.w2", (E, f, h))
            cut = part(f) if model.experts == "tensor" else slice(0, f)
            for j, expert in enumerate(moe.experts.deepspeed_experts):
                index = first_expert + j
                put(expert[0].weight, w1[index][:, cut].T)
                put(expert[0].bias, np.zeros(expert[0].bias.shape, np.float32))
                put(expert[2].weight, w2[index][cut].T)
                put(expert[2].bias, np.zeros(h, np.float32))
        else:
            put(block.ffn[0].weight, ours(p + "ffn.fc1.w", (h, f))[:, part(f)].T)
            put(block.ffn[0].bias, np.zeros(f // T, np.float32))
            put(block.ffn[2].weight, ours(p + "ffn.fc2.w", (f, h))[part(f)].T)
            put(block.ffn[2].bias, np.zeros(h, np.float32))
    layer_norm(model.lnf)
    if not model.tied:
        put(model.lm_head.weight, ours("lm_head.w", (h, V)).T)


def parameter_count(cfg, tied):
    """Parameters of the whole model (every expert once; tied: no LM head)."""
    m = cfg["model"]
    h, v, s, e, f = m["hidden"], m["vocab"], m["seq_len"], m["experts"], m["ffn_mult"] * m["hidden"]
    total = v * h + s * h + 2 * h + (0 if tied else h * v)
    for layer in range(m["layers"]):
        total += 4 * h + 3 * h * h + 3 * h + h * h + h
        mlp = h * f + f + f * h + h
        total += h * e + e * mlp if (layer + 1) % m["expert_interval"] == 0 else mlp
    return total


def fingerprint(model, groups, dist):
    """Sum of squares of every parameter of the whole model, each element once, as ours: a
    tensor-parallel slice counted by every rank of one tensor group, a whole tensor by its tensor
    rank 0; experts by the ranks of one expert group (one data index)."""
    total = torch.zeros(1, dtype=torch.float64)
    whole_experts = model.experts == "whole"
    for name, p in model.named_parameters():
        expert = ".deepspeed_experts." in name
        split = getattr(p, "tensor_model_parallel", False)
        if expert:
            # Every expert once: tensor-parallel experts over one expert group's ranks (one d)
            # and their T slices; whole experts over DeepSpeed's consecutive group (one slot).
            if whole_experts:
                keep = groups.rank < groups.Ep
            else:
                keep = groups.d == 0 and (split or groups.t == 0)
        else:
            keep = groups.e == 0 and groups.d == 0 and (split or groups.t == 0)
        if keep:
            total += p.detach().double().pow(2).sum().cpu()
    dist.all_reduce(total)
    return total.item()
