"""The suite's MoE GPT (docs/algorithm.md section 1) in PyTorch, with DeepSpeed's MoE layer
(deepspeed.moe.layer.MoE) for every expert_interval-th FFN; the suite's data sources (synthetic,
a token file, a Megatron indexed dataset); the model FLOPs of README's formula.

The shapes, parameter names' roles and initialisation follow lib/ted/model/gpt.cpp: token and
position embeddings, pre-LN blocks (causal multi-head attention with a fused QKV projection and
an output projection, both with biases; an FFN h -> ffn_mult*h -> h with tanh GeLU, or the MoE
layer of E such experts and a bias-free fp32 gate), a final LayerNorm and the LM head: the token
embedding's table itself when model.tie_embeddings (ours by default; one table at T = 1 is the
vocabulary-parallel one of Megatron's GPT), else a matrix of its own.
Matrices and embeddings are drawn from N(0, init_std), biases are 0, LayerNorm gains 1; weight
decay applies to the matrices only. The parameter count equals ours exactly (the test checks).
What differs is DeepSpeed's by design: its gating (README, "Gating, and how it differs from
DeepSpeed-MoE"), its random numbers, and the order of its sums. Dropout takes our masks where
run.py gives the model their keys (ted_train configs: use_dropout_keys, dropout_masks.py), else
PyTorch's.
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


class Attention(nn.Module):
    def __init__(self, hidden, heads, fused, dropout):
        super().__init__()
        self.dropout = dropout
        self.heads, self.fused = heads, fused
        self.keys = None  # this block's dropout_masks.LayerKeys (GptMoe.use_dropout_keys)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=-1)
        shape = (batch, seq, self.heads, hidden // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        ours = self.keys is not None and self.training and self.dropout > 0
        if self.fused and not ours:  # PyTorch's fused causal attention (fused, auto)
            out = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        else:  # the [seq, seq] probabilities kept per head (materialized, or our dropout masks)
            scores = q @ k.transpose(-2, -1) / math.sqrt(hidden // self.heads)
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
            probs = self.keys.drop_probs(probs, 0) if ours else \
                F.dropout(probs, self.dropout, self.training)
            out = probs @ v
        return self.proj(out.transpose(1, 2).reshape(batch, seq, hidden))


def ffn(hidden, width):
    return nn.Sequential(nn.Linear(hidden, width), nn.GELU(approximate="tanh"),
                         nn.Linear(width, hidden))


class Block(nn.Module):
    def __init__(self, cfg, moe, ep_size):
        super().__init__()
        m, g = cfg["model"], cfg["gating"]
        h = m["hidden"]
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        # auto: PyTorch's fused attention, its fastest on every device it runs on here
        self.attn = Attention(h, m["heads"], m["attention"] != "materialized", m["dropout"])
        self.dropout = m["dropout"]
        self.keys = None  # dropout_masks.LayerKeys of this block (GptMoe.use_dropout_keys)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.moe = moe
        expert = ffn(h, m["ffn_mult"] * h)
        if moe:
            self.ffn = MoE(hidden_size=h, expert=expert, num_experts=m["experts"], ep_size=ep_size,
                           k=g["top_k"], capacity_factor=g["capacity_factor"],
                           eval_capacity_factor=g["capacity_factor"],
                           min_capacity=g["min_capacity"], drop_tokens=not g["dropless"],
                           use_rts=g["random_token_selection"],
                           top2_2nd_expert_sampling=g["second_choice_noise"])
        else:
            self.ffn = expert

    def forward(self, x):
        # Dropout where ours has it (each sub-layer's output before its residual, and the
        # attention probabilities): ours' masks when given their keys (gpt_ted.py says how),
        # else PyTorch's random numbers (equal to ours in distribution only).
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


class GptMoe(nn.Module):
    """forward(tokens, targets) -> (lm loss, summed aux loss) of one micro-batch."""

    def __init__(self, cfg, ep_size):
        super().__init__()
        m = cfg["model"]
        h, vocab = m["hidden"], m["vocab"]
        self.tok_emb = nn.Embedding(vocab, h)
        self.pos_emb = nn.Embedding(m["seq_len"], h)
        self.blocks = nn.ModuleList(
            Block(cfg, (layer + 1) % m["expert_interval"] == 0, ep_size)
            for layer in range(m["layers"]))
        self.lnf = nn.LayerNorm(h, eps=1e-5)
        self.tied = m["tie_embeddings"]
        self.lm_head = None if self.tied else nn.Linear(h, vocab, bias=False)
        self.checkpoint = m["checkpoint"]

    def use_dropout_keys(self, keys):
        """Our dropout masks in place of PyTorch's (gpt_ted.GptTed.use_dropout_keys)."""
        for layer, block in enumerate(self.blocks):
            block.keys = block.attn.keys = keys.layer(layer)

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        aux = torch.zeros((), dtype=torch.float32, device=x.device)
        for block in self.blocks:
            # Full activation checkpointing keeps each block's input; the recompute runs the
            # block again, its all-to-alls included (DeepSpeed-MoE has no CAC), with the RNG
            # state of the forward restored, so RTS picks the same tokens.
            if self.checkpoint and self.training:
                x, layer_aux = checkpoint(block, x, use_reentrant=False)
            else:
                x, layer_aux = block(x)
            aux = aux + layer_aux
        x = self.lnf(x)
        logits = F.linear(x, self.tok_emb.weight) if self.tied else self.lm_head(x)
        lm = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        return lm, aux


def initialise(model, init_std, seed, ep_rank, experts_per_rank):
    """N(0, init_std) matrices and embeddings, zero biases, unit LayerNorm gains: dense
    parameters from `seed` (the same on every rank), each expert from its global index, so an
    expert's weights do not depend on the layout."""
    def fill(module, generator):
        for name, p in module.named_parameters():
            with torch.no_grad():
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() == 1:  # LayerNorm gain
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=generator) * init_std)

    dense = torch.Generator().manual_seed(seed)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)) and \
                ".deepspeed_experts." not in name:
            fill(module, dense)
    for layer, block in enumerate(model.blocks):
        if not block.moe:
            continue
        local = block.ffn.deepspeed_moe.experts.deepspeed_experts
        for j, expert in enumerate(local):
            index = ep_rank * experts_per_rank + j
            fill(expert, torch.Generator().manual_seed(seed * 1000003 + layer * 65537 + index))


def optimizer_groups(model):
    """Weight decay on matrices only (not embeddings, biases, LayerNorms), as lib/ted/train."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "emb" not in name else plain).append(p)
    return [{"params": decay, "name": "decay"}, {"params": plain, "name": "no_decay",
                                                 "weight_decay": 0.0}]


# The suite's synthetic source (lib/ted/train/data.cpp), on the counter-based random numbers
# (counter_random.py): a seeded Markov chain keyed by (seed, sample, position), so DeepSpeed
# trains on the very tokens ours does.
class SyntheticSource:
    def __init__(self, vocab, seed, noise):
        self.vocab, self.seed, self.noise = vocab, seed, noise
        self.successor = list(range(vocab))
        for i in range(vocab - 1, 0, -1):  # seeded Fisher-Yates
            j = counter_random.hash_key(seed, counter_random.DATA, counter_random.MASK, i) % (i + 1)
            self.successor[i], self.successor[j] = self.successor[j], self.successor[i]

    def sample(self, index, seq_len):
        tokens, targets = [0] * seq_len, [0] * seq_len
        current = counter_random.hash_key(self.seed, counter_random.DATA, index, 0) % self.vocab
        for p in range(seq_len + 1):
            if p < seq_len:
                tokens[p] = current
            if p > 0:
                targets[p - 1] = current
            bits = counter_random.hash_key(self.seed, counter_random.DATA, index, p + 1)
            if counter_random.uniform(bits) < self.noise:
                current = counter_random.hash_key(bits, 0, 0) % self.vocab
            else:
                current = self.successor[current]
        return tokens, targets


class TokenFileSource:
    """A flat little-endian file of uint16 or uint32 token ids; sample i is the window at
    (i * seq_len) mod (tokens - seq_len), as lib/ted/train/data.cpp."""

    def __init__(self, path, token_bytes, vocab, seq_len):
        self.tokens = np.fromfile(path, dtype="<u2" if token_bytes == 2 else "<u4").astype(np.int64)
        if self.tokens.size < seq_len + 1:
            raise ValueError(f"data.path: '{path}' has {self.tokens.size} tokens, fewer than "
                             f"model.seq_len + 1 = {seq_len + 1}")
        if self.tokens.size and int(self.tokens.max()) >= vocab:
            raise ValueError(f"data.path: '{path}' holds a token id not below model.vocab {vocab}")

    def sample(self, index, seq_len):
        start = index * seq_len % (self.tokens.size - seq_len)
        window = self.tokens[start:start + seq_len + 1]
        return window[:-1].tolist(), window[1:].tolist()


def window_permutation(windows, seed, epoch):
    """The order in which epoch `epoch` visits `windows` windows (lib/ted/train/megatron_data.cpp
    window_permutation): p = [0, ..., W - 1], then for m from W - 1 down to 1 swap p[m] and p[r],
    r = hash_key(seed, SHUFFLE, epoch, m) mod (m + 1). The draws at once in numpy, the swaps in
    their order."""
    order = list(range(windows))
    places = np.arange(windows - 1, 0, -1, dtype=np.uint64)
    draws = counter_random.hash_middle(seed, counter_random.SHUFFLE, epoch, places) % \
        (places + np.uint64(1))
    for m, r in zip(range(windows - 1, 0, -1), draws.tolist()):
        order[m], order[r] = order[r], order[m]
    return order


def validation_documents(fraction, documents):
    """The last documents data.valid_fraction f makes the validation split: 0 when f is 0, else
    max(1, round(f x documents)), a half to the even neighbour as Python's round and Megatron's
    split take it (C++: std::nearbyint, lib/ted/train/megatron_data.cpp)."""
    if not fraction > 0:
        return 0
    return max(1, round(fraction * documents))


class MegatronSource:
    """Documents [first, end) of a Megatron-Core indexed dataset (<prefix>.bin/.idx, read by its
    own IndexedDataset), as lib/ted/train/megatron_data.hpp: document d is sequences
    document_indices[d] .. document_indices[d + 1] - 1, the split's token stream its sequences in
    file order, window j the stream's tokens [j x seq_len, j x seq_len + seq_len] (inputs the
    first seq_len, targets the last), W = (tokens - 1) // seq_len of them. Training (shuffle):
    sample i is window window_permutation(W, seed, e)[i mod W] of epoch e = i // W; validation:
    sample v is window v mod W, in order. The split's tokens are read into memory."""

    def __init__(self, dataset, key, first, end, vocab, seq_len, seed, shuffle):
        indices = dataset.document_indices
        begin, stop = int(indices[first]), int(indices[end])
        parts = dataset[begin:stop] if stop > begin else []
        self.tokens = np.concatenate(parts) if parts else np.zeros(0, dataset.index.dtype)
        self.prefix, self.documents, self.dtype = dataset.path_prefix, end - first, \
            dataset.index.dtype.__name__
        total = len(indices) - 1
        self.what, hold = (f"'{self.prefix}'", "holds") if end - first == total else \
            (f"the {'last' if end == total else 'first'} {end - first} of the {total} documents "
             f"of '{self.prefix}'", "hold")
        if self.tokens.size < seq_len + 1:
            raise ValueError(f"{key}: {self.what} {hold} {self.tokens.size} tokens, fewer than "
                             f"model.seq_len + 1 = {seq_len + 1}")
        low, high = int(self.tokens.min()), int(self.tokens.max())
        if low < 0 or high >= vocab:
            raise ValueError(f"{key}: {self.what} {hold} the token id {low if low < 0 else high}, "
                             f"not in [0, model.vocab {vocab})")
        self.seq_len, self.seed, self.shuffle = seq_len, seed, shuffle
        self.windows = (self.tokens.size - 1) // seq_len
        self._epoch, self._order = None, None

    def window(self, index):
        """The window sample `index` reads."""
        if not self.shuffle:
            return index % self.windows
        epoch, k = divmod(index, self.windows)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, window_permutation(self.windows, self.seed, epoch)
        return self._order[k]

    def sample(self, index, seq_len):
        assert seq_len == self.seq_len, (seq_len, self.seq_len)
        start = self.window(index) * seq_len
        window = self.tokens[start:start + seq_len + 1].astype(np.int64)
        return window[:-1].tolist(), window[1:].tolist()

    def describe(self):
        return (f"megatron dataset {self.what} ({self.dtype}, {self.documents} documents, "
                f"{self.tokens.size} tokens, {self.windows} windows of {self.seq_len}+1"
                f"{'' if self.shuffle else ', in order'})")


def megatron_core_indexed_dataset():
    """Megatron-Core's megatron.core.datasets.indexed_dataset, imported on first use (it takes
    seconds), without what the package says of Transformer Engine and Apex."""
    import importlib
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module("megatron.core.datasets.indexed_dataset")


def megatron_dataset(prefix, key):
    """Megatron-Core's IndexedDataset of `prefix`; ValueError naming `key` without the pair."""
    IndexedDataset = megatron_core_indexed_dataset().IndexedDataset
    if not IndexedDataset.exists(prefix):
        raise ValueError(f"{key}: '{prefix}' is not the prefix of a Megatron dataset (no "
                         f"{prefix}.bin and {prefix}.idx)")
    return IndexedDataset(prefix)


def megatron_source(cfg, validation):
    """data.source megatron's training split, or its validation split (None without one): with
    data.valid_path all of that dataset, else with data.valid_fraction the last
    validation_documents() documents of data.path, the training split the rest."""
    m, d = cfg["model"], cfg["data"]
    spec = {"vocab": m["vocab"], "seq_len": m["seq_len"], "seed": cfg["training"]["seed"],
            "shuffle": not validation}
    valid_path = d.get("valid_path", "")
    if valid_path:
        prefix, key = (valid_path, "data.valid_path") if validation else (d["path"], "data.path")
        dataset = megatron_dataset(prefix, key)
        return MegatronSource(dataset, key, 0, len(dataset.document_indices) - 1, **spec)
    dataset = megatron_dataset(d["path"], "data.path")
    documents = len(dataset.document_indices) - 1
    if documents == 0:
        raise ValueError(f"data.path: '{d['path']}' has no documents")
    fraction = d.get("valid_fraction", 0.0)
    valid = validation_documents(fraction, documents)
    if valid >= documents:
        raise ValueError(f"data.valid_fraction {fraction:g} leaves no document for training: "
                         f"'{d['path']}' has {documents} documents, and {valid} would be the "
                         "validation split")
    if validation:
        return MegatronSource(dataset, "data.path", documents - valid, documents, **spec) \
            if valid else None
    return MegatronSource(dataset, "data.path", 0, documents - valid, **spec)


def make_source(cfg):
    m, d = cfg["model"], cfg["data"]
    if d["source"] == "file":
        return TokenFileSource(d["path"], d["token_bytes"], m["vocab"], m["seq_len"])
    if d["source"] == "megatron":
        return megatron_source(cfg, validation=False)
    return SyntheticSource(m["vocab"], cfg["training"]["seed"], d["noise"])


class OffsetSource:
    """Another source's samples from index `offset` on (lib/ted/train/trainer.cpp OffsetSource)."""

    def __init__(self, inner, offset):
        self.inner, self.offset = inner, offset

    def sample(self, index, seq_len):
        return self.inner.sample(self.offset + index, seq_len)


def make_validation_source(cfg):
    """The held-out samples (lib/ted/train/trainer.cpp make_validation_source): Megatron data's
    validation split (data.valid_fraction or data.valid_path), the synthetic chain's samples from
    index 2^40 on (never trained on), or None."""
    source = cfg["data"]["source"]
    if source == "megatron":
        return megatron_source(cfg, validation=True)
    if source == "synthetic":
        return OffsetSource(make_source(cfg), 1 << 40)
    return None


def micro_batch(source, first_sample, sequences, seq_len, device):
    """Sequences first_sample .. first_sample + sequences - 1 as (tokens, targets) tensors."""
    pairs = [source.sample(first_sample + s, seq_len) for s in range(sequences)]
    tokens = torch.tensor([p[0] for p in pairs], dtype=torch.long, device=device)
    targets = torch.tensor([p[1] for p in pairs], dtype=torch.long, device=device)
    return tokens, targets


def parameter_count(cfg):
    """Parameters of the whole model (every expert), as lib/ted/model/gpt.cpp lays them out."""
    m = cfg["model"]
    h, v, s, e, f = m["hidden"], m["vocab"], m["seq_len"], m["experts"], m["ffn_mult"] * m["hidden"]
    total = v * h + s * h + 2 * h + (0 if m["tie_embeddings"] else h * v)
    for layer in range(m["layers"]):
        total += 4 * h + 3 * h * h + 3 * h + h * h + h
        mlp = h * f + f + f * h + h
        total += h * e + e * mlp if (layer + 1) % m["expert_interval"] == 0 else mlp
    return total


def model_flops(cfg, tokens):
    """Model FLOPs of one optimizer step over `tokens` tokens, by README's formula (Narayanan et
    al., SC'21): per token and layer forward 8 h^2 + 4 S h for attention and 4 h f for an FFN
    (24 h^2 + 4 S h with f = 4h), an MoE FFN as top_k FFNs plus its gate (2 h E), the LM head
    2 h V; x3 for forward and backward, the blocks x4 with activation checkpointing."""
    m, g = cfg["model"], cfg["gating"]
    h, s, f = m["hidden"], m["seq_len"], m["ffn_mult"] * m["hidden"]
    blocks = 0.0
    for layer in range(m["layers"]):
        blocks += 8 * h * h + 4 * s * h
        if (layer + 1) % m["expert_interval"] == 0:
            blocks += g["top_k"] * 4 * h * f + 2 * h * m["experts"]
        else:
            blocks += 4 * h * f
    per_token = blocks * (4 if m["checkpoint"] else 3) + 3 * 2 * h * m["vocab"]
    return per_token * tokens
