"""Megatron-style tensor parallelism in PyTorch for the DeepSpeed-TED baseline: the process groups
laid out as ours (docs/algorithm.md section 3), the `mpu` object DeepSpeed takes through
deepspeed.initialize(mpu=...), column- and row-parallel linears, the vocabulary-parallel
embedding and cross-entropy, and the ledger that counts every collective DeepSpeed and these
layers make, per operation and group, by our ledger's byte convention (lib/ted/comm/ledger.hpp).

Rank r has t = r mod T, e = (r / T) mod Ep, d = r / (T Ep), tensor fastest, as ours and as
Megatron orders ranks. The groups' process-group objects live here, never on a module: DeepSpeed's
MoE layer deep-copies the expert module once per local expert, and a process group cannot be
copied.

Written from the published descriptions of Megatron-LM's tensor parallelism (Shoeybi et al.,
arXiv 1909.08053: f and g, the conjugate identity / all-reduce pair; the vocabulary-parallel
embedding and cross-entropy); no code of Megatron's is used.
"""
import torch
import torch.nn.functional as F
from torch import nn

_STATE = None  # the Groups of this process (set_groups)


class Groups:
    """The TED groups of this rank, as torch.distributed groups, and their rank lists."""

    def __init__(self, dist, tensor, expert):
        world, rank = dist.get_world_size(), dist.get_rank()
        if world % (tensor * expert):
            raise ValueError(f"T x Ep = {tensor * expert} does not divide {world} ranks")
        self.world, self.rank = world, rank
        self.T, self.Ep, self.D = tensor, expert, world // (tensor * expert)
        self.t, self.e, self.d = rank % tensor, rank // tensor % expert, rank // (tensor * expert)

        def build(key):
            """Every rank makes every group in the same order (new_group is collective)."""
            mine = None
            for ranks in sorted({tuple(r for r in range(world) if key(r) == key(q))
                                 for q in range(world)}):
                group = dist.new_group(list(ranks))
                if rank in ranks:
                    mine = (group, list(ranks))
            return mine

        coords = lambda r: (r % tensor, r // tensor % expert, r // (tensor * expert))  # noqa: E731
        self.tensor, self.tensor_ranks = build(lambda r: coords(r)[1:])
        self.expert, self.expert_ranks = build(lambda r: (coords(r)[0], coords(r)[2]))
        self.expert_data, self.expert_data_ranks = build(lambda r: coords(r)[:2])
        self.data, self.data_ranks = build(lambda r: coords(r)[0])  # non-expert data: same t


def set_groups(groups):
    global _STATE
    _STATE = groups


def groups():
    return _STATE


class Mpu:
    """What DeepSpeed asks a Megatron `mpu` for (deepspeed/utils/bwc.py, groups.py, the engine
    and ZeRO): the tensor (= model) parallel group, and the data-parallel group, which for the
    non-expert parameters is ours (same t: Ep x D ranks). No pipeline, no sequence parallelism:
    it defines none of their methods (an mpu with initialize_sequence_parallel is taken for a
    sequence-parallel one)."""

    def __init__(self, g):
        self.g = g

    def get_tensor_model_parallel_world_size(self):
        return self.g.T

    def get_tensor_model_parallel_rank(self):
        return self.g.t

    def get_tensor_model_parallel_group(self):
        return self.g.tensor

    def get_tensor_model_parallel_src_rank(self):
        return self.g.tensor_ranks[0]

    get_model_parallel_world_size = get_tensor_model_parallel_world_size
    get_model_parallel_rank = get_tensor_model_parallel_rank
    get_model_parallel_group = get_tensor_model_parallel_group

    def get_data_parallel_world_size(self):
        return len(self.g.data_ranks)

    def get_data_parallel_rank(self):
        return self.g.data_ranks.index(self.g.rank)

    def get_data_parallel_group(self):
        return self.g.data

    def get_data_parallel_group_ranks(self):
        return list(self.g.data_ranks)


# ---- Megatron's f and g ------------------------------------------------------------------

def _all_reduce(x):
    import deepspeed.comm as dist
    dist.all_reduce(x, group=_STATE.tensor)
    return x


class _CopyToTensor(torch.autograd.Function):
    """f: identity forward, the input gradient summed over the tensor group backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.contiguous().clone())


class _ReduceFromTensor(torch.autograd.Function):
    """g: the partial outputs summed over the tensor group forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return _all_reduce(x.contiguous().clone())

    @staticmethod
    def backward(ctx, grad):
        return grad


def copy_to_tensor(x):
    return _CopyToTensor.apply(x) if _STATE.T > 1 else x


def reduce_from_tensor(x):
    return _ReduceFromTensor.apply(x) if _STATE.T > 1 else x


def mark_tensor_parallel(parameter):
    """DeepSpeed's gradient norm counts a parameter on every tensor rank only when it is marked
    so (runtime/utils.py is_model_parallel_parameter); the rest on tensor rank 0 alone."""
    parameter.tensor_model_parallel = True
    return parameter


class ColumnParallelLinear(nn.Module):
    """y_t = f(x) W_t^T + b_t: this rank's `width` output columns of the whole layer (the input
    is the same on every tensor rank, its gradient summed over them)."""

    def __init__(self, in_features, width, bias=True):
        super().__init__()
        self.weight = mark_tensor_parallel(nn.Parameter(torch.empty(width, in_features)))
        self.bias = mark_tensor_parallel(nn.Parameter(torch.zeros(width))) if bias else None

    def forward(self, x):
        return F.linear(copy_to_tensor(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = g(x_t W_t^T) + b: this rank's `width` input rows, the partial outputs summed over the
    tensor group, then the bias (whole on every rank) added once."""

    def __init__(self, width, out_features, bias=True):
        super().__init__()
        self.weight = mark_tensor_parallel(nn.Parameter(torch.empty(out_features, width)))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x):
        y = reduce_from_tensor(F.linear(x, self.weight))
        return y + self.bias if self.bias is not None else y


# ---- the vocabulary-parallel embedding and cross-entropy ------------------------------------

class VocabParallelEmbedding(nn.Module):
    """This rank's vocab / T rows of the token embedding; a token outside them looks up zeros,
    and the lookups are summed over the tensor group (g)."""

    def __init__(self, vocab, hidden):
        super().__init__()
        T, t = _STATE.T, _STATE.t
        self.rows = vocab // T
        self.first = t * self.rows
        self.weight = mark_tensor_parallel(nn.Parameter(torch.empty(self.rows, hidden)))

    def forward(self, tokens):
        local = tokens - self.first
        outside = (local < 0) | (local >= self.rows)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tensor(out)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Mean over the tokens of the cross-entropy of logits split by vocabulary over the tensor
    group ([N, V/T] here), without gathering them: the row maximum, the sum of exponentials and
    the target's logit are all-reduced ([N] each); the gradient is local."""

    @staticmethod
    def forward(ctx, logits, targets, first):
        import deepspeed.comm as dist
        logits = logits.float()
        row_max = logits.max(dim=-1).values
        if _STATE.T > 1:
            dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=_STATE.tensor)
        shifted = logits - row_max.unsqueeze(-1)
        local = targets - first
        inside = (local >= 0) & (local < logits.shape[-1])
        picked = shifted.gather(-1, local.clamp(0, logits.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
        picked = picked * inside
        exp = shifted.exp()
        total = exp.sum(dim=-1)
        if _STATE.T > 1:
            dist.all_reduce(picked, group=_STATE.tensor)
            dist.all_reduce(total, group=_STATE.tensor)
        loss = total.log() - picked
        softmax = exp / total.unsqueeze(-1)
        ctx.save_for_backward(softmax, local.clamp(0, logits.shape[-1] - 1), inside)
        return loss.mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local, inside = ctx.saved_tensors
        d = softmax.clone()
        rows = torch.arange(d.shape[0], device=d.device)
        d[rows, local] -= inside.to(d.dtype)
        return d * (grad / d.shape[0]), None, None


def vocab_parallel_cross_entropy(logits, targets, first):
    """logits [N, V/T] (this rank's vocabulary from `first`), targets [N] global ids."""
    return _VocabParallelCrossEntropy.apply(logits, targets, first)


# ---- the ledger -----------------------------------------------------------------------------

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")
KINDS = ("tensor", "expert", "expert_data", "nonexpert_data", "world", "other", "control")


_ACTIVE = None  # the Ledger the wrapped collectives count in (Ledger.install)


class Ledger:
    """Every collective deepspeed.comm makes (DeepSpeed's engine, ZeRO, its MoE layer, and the
    layers above), by operation and by which of the rank's groups it ran in, in our ledger's
    bytes sent (lib/ted/comm/ledger.hpp): all-reduce the buffer, all-gather the rank's input,
    reduce-scatter the whole input, all-to-all the send buffer, broadcast the root's buffer (0
    elsewhere), reduce the buffer. It wraps the methods of deepspeed.comm's backend object (cdb),
    which every deepspeed.comm call reaches, so each call is counted once. A group is named by
    identity first (the mpu's and DeepSpeed's own group objects), then by its rank set: where two
    of our groups have the same ranks (DeepSpeed's expert group made of consecutive ranks is a
    tensor group of ours) the object says which role it plays."""

    def __init__(self, dist_module, roles):
        """roles: [(kind, group object, rank list)] in order of preference."""
        self.bytes = {}
        self.calls = {}
        self.seconds = {}
        self.enabled = True
        self._roles = roles
        self._dist = dist_module
        self._by_id = {}

    def kind_of(self, group):
        if group is None:
            return "world"
        key = id(group)
        if key not in self._by_id:
            kind = None
            for name, obj, _ in self._roles:
                if obj is group:
                    kind = name
                    break
            if kind is None:
                import torch.distributed as tdist
                ranks = sorted(tdist.get_process_group_ranks(group))
                for name, _, rank_list in self._roles:
                    if sorted(rank_list) == ranks:
                        kind = name
                        break
                if kind is None:
                    kind = "world" if len(ranks) == tdist.get_world_size() else "other"
            self._by_id[key] = kind
        return self._by_id[key]

    def record(self, op, group, nbytes, seconds):
        """A call of at most 8 bytes is a control scalar (the gradient norm, ZeRO's overflow
        flag, the dropless capacity): ours passes those on host communicators outside its
        ledger, so they are kept apart, as the kind "control"."""
        if not self.enabled:
            return
        key = (op, "control" if 0 < nbytes <= 8 else self.kind_of(group))
        self.bytes[key] = self.bytes.get(key, 0) + int(nbytes)
        self.calls[key] = self.calls.get(key, 0) + 1
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def clear(self):
        self.bytes.clear()
        self.calls.clear()
        self.seconds.clear()

    def total(self, op, kind=None):
        """Bytes of `op` in group `kind`, or in all groups (control scalars left out)."""
        return sum(v for (o, k), v in self.bytes.items()
                   if o == op and (k == kind if kind else k != "control"))

    def install(self, cdb):
        """Makes this the ledger cdb's collectives are counted in (deepspeed/comm/torch.py
        TorchBackend), wrapping them the first time: their arguments come by position or by
        name, so each call's are bound to the method's signature first."""
        import inspect
        import time

        import torch.distributed as tdist

        global _ACTIVE
        _ACTIVE = self
        if getattr(cdb, "_ted_counted", False):
            return
        cdb._ted_counted = True

        def size(t):
            return t.numel() * t.element_size()

        # operation, the bytes sent from the bound arguments
        counted = {
            "all_reduce": ("all_reduce", lambda a: size(a["tensor"])),
            "inference_all_reduce": ("all_reduce", lambda a: size(a["tensor"])),
            "all_reduce_coalesced": ("all_reduce", lambda a: sum(map(size, a["tensors"]))),
            "all_gather_into_tensor": ("all_gather", lambda a: size(a["input_tensor"])),
            "all_gather": ("all_gather", lambda a: size(a["tensor"])),
            "all_gather_coalesced": ("all_gather", lambda a: sum(map(size, a["input_tensors"]))),
            "reduce_scatter_tensor": ("reduce_scatter", lambda a: size(a["input_tensor"])),
            "reduce_scatter": ("reduce_scatter", lambda a: sum(map(size, a["input_list"]))),
            "all_to_all_single": ("all_to_all", lambda a: size(a["input"])),
            "all_to_all": ("all_to_all", lambda a: sum(map(size, a["input_tensor_list"]))),
            "broadcast": ("broadcast", lambda a: size(a["tensor"])
                          if tdist.get_rank() == a["src"] else 0),
            "reduce": ("reduce", lambda a: size(a["tensor"])),
        }
        def innermost(function, name):
            """The method as written: DeepSpeed's decorators (stage_on_cpu) take (self, *args,
            **kwargs) and keep the function in their closure, without functools.wraps."""
            queue, seen = [function], set()
            while queue:
                current = queue.pop(0)
                if id(current) in seen:
                    continue
                seen.add(id(current))
                if current.__name__ == name:
                    return current
                queue += [c.cell_contents for c in current.__closure__ or ()
                          if inspect.isfunction(c.cell_contents)]
            return function

        for name, (op, nbytes) in counted.items():
            real = getattr(cdb, name, None)
            if real is None:
                continue
            signature = inspect.signature(innermost(real.__func__, name))

            def wrapper(*args, _real=real, _signature=signature, _op=op, _nbytes=nbytes,
                        **kwargs):
                bound = _signature.bind(None, *args, **kwargs)
                bound.apply_defaults()
                start = time.perf_counter()
                result = _real(*args, **kwargs)
                _ACTIVE.record(_op, bound.arguments.get("group"), _nbytes(bound.arguments),
                               time.perf_counter() - start)
                return result

            setattr(cdb, name, wrapper)
