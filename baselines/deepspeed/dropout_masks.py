"""Our dropout masks (lib/ted/kernels/elementwise.hpp DropoutKey, dropout_keep), ported bit for bit
so that DeepSpeed drops the very elements ours drops: the masks are data, like the tokens, and
DeepSpeed's engine, MoE layer and ZeRO run untouched on them.

An element's mask is a pure function of (seed, step, site, global token, feature), as ours draws
it (docs/algorithm.md section 2): one hash per token row, random.hpp hash(seed, kDropout, step,
layer * 3 + site, global token), then one splitmix64 mix per element of the row key xor the
feature; the element is kept when the top 32 bits of that are at or above floor(p x 2^32), and a
kept element is multiplied by 1 / (1 - p) rounded to the compute type. The sites and their
features (ours' kernels, lib/ted/kernels/cpu/attention.cpp, elementwise.cpp and flash_attention.hpp):
- the attention block's output and the FFN's (or MoE layer's) output, before the residual: the
  token's row, feature = the column of the h-wide output (the same on every tensor rank: full
  width after the all-reduce);
- the attention probabilities: the query token's row (one key for all heads), feature = global
  head x seq_len + key position, the global head being this tensor rank's first head
  (t x heads / T) plus the local one.
The global token of row b x seq_len + i of a micro-batch is its first sample x seq_len + that
row; the step counts optimizer steps from 0 (lib/ted/model/gpt.cpp dropout_key).
"""
import numpy as np
import torch

import counter_random

DROPOUT = 6  # random.hpp kDropout: dropout masks, (step, layer's site, global token), the feature
ATTENTION_PROBS, ATTENTION_OUTPUT, FFN_OUTPUT = 0, 1, 2  # elementwise.hpp DropoutSite
SITES = 3  # kDropoutSites


class DropoutKeys:
    """The keys of one run (seed, p, seq_len), moved to each micro-batch by at(step, first
    sample) before its forward; the backward (and a checkpointed block's recompute) draws the
    same masks as long as the micro-batch is not moved on."""

    def __init__(self, seed, p, seq_len):
        self.seed, self.p, self.seq_len = seed, p, seq_len
        self.threshold = np.uint64(int(p * 4294967296.0))  # DropoutKey::threshold
        self.scale = 1.0 / (1.0 - p)  # DropoutKey::scale, rounded to the tensor's type in apply
        self.step = self.first_token = 0

    def at(self, step, first_sample):
        self.step, self.first_token = step, first_sample * self.seq_len

    def layer(self, layer):
        return LayerKeys(self, layer)

    def keep(self, site, rows, features):
        """Whether each element is kept: rows [..., 1] (token rows of the micro-batch) against
        features [..., n] (uint64 arrays, broadcast), as dropout_keep."""
        row_keys = counter_random.hash_last(self.seed, DROPOUT, self.step, site,
                                            np.uint64(self.first_token) + rows)
        # dropout_keep: the top 32 bits of mix64(row key ^ feature) against the threshold (the
        # port's array mix64, which init_normal's elements use too).
        bits = counter_random._mix64_array(row_keys ^ features)
        return (bits >> np.uint64(32)) >= self.threshold


class LayerKeys:
    """The keys of one block (layer), for its three sites."""

    def __init__(self, keys, layer):
        self.keys, self.layer = keys, layer

    def drop_output(self, x, site):
        """x [batch, seq, h] (a sub-layer's output, its bias added) times its mask and scale."""
        tokens, width = x.shape[0] * x.shape[1], x.shape[2]
        keep = self.keys.keep(self.layer * SITES + site,
                              np.arange(tokens, dtype=np.uint64)[:, None],
                              np.arange(width, dtype=np.uint64)[None, :])
        return apply(x, keep.reshape(x.shape), self.keys.scale)

    def drop_probs(self, probs, first_head):
        """probs [batch, local heads, seq, seq] (softmax over the keys) times their mask and
        scale; the local head i is the global head first_head + i."""
        batch, heads, seq, _ = probs.shape
        rows = np.arange(batch * seq, dtype=np.uint64).reshape(batch, 1, seq, 1)
        features = ((np.uint64(first_head) + np.arange(heads, dtype=np.uint64)) *
                    np.uint64(seq)).reshape(1, heads, 1, 1) + \
            np.arange(seq, dtype=np.uint64).reshape(1, 1, 1, seq)
        keep = self.keys.keep(self.layer * SITES + ATTENTION_PROBS, rows, features)
        return apply(probs, keep, self.keys.scale)


def apply(x, keep, scale):
    """x x scale where keep, 0 elsewhere (scale in x's type, as ours' scale<C>()); autograd keeps
    the boolean mask only, as PyTorch's own dropout does."""
    keep = torch.from_numpy(np.ascontiguousarray(keep)).to(x.device)
    return torch.where(keep, x * torch.tensor(scale, dtype=x.dtype, device=x.device),
                       torch.zeros((), dtype=x.dtype, device=x.device))
