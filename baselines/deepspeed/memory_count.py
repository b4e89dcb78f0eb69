"""What DeepSpeed holds on a CPU rank, by our memory categories (lib/ted/backend/memory.hpp),
counted off its own tensors: PyTorch has no allocator statistics on the CPU, so the runner reads
the engine's and the ZeRO-1 optimizer's buffers at the points where they are largest, and the
autograd graph's saved tensors as they live.

- parameters: the flat buffers ZeRO keeps the model's weights in (bit16_groups_flat: the module's
  parameters are views into them), in their type (fp32 on the CPU, bf16/fp16 on GPUs);
- gradients: the parameters' .grad and ZeRO's averaged_gradients (its partition of the reduced
  gradients), at their largest: after each micro-batch's backward and inside the step;
- communication: the reduce buckets (ipg_buckets: contiguous buffers of reduce_bucket_size
  elements the gradients are copied into before each all-reduce);
- optimizer_state: the fp32 partitions (single_partition_of_fp32_groups: the master copy ZeRO keeps
  even of fp32 weights) and Adam's exp_avg and exp_avg_sq of them;
- optimizer_temporaries: the fp32 gradient partition the step builds (the partitions' .grad
  while the optimizer runs): the spike our tiled step bounds;
- activations: the tensors autograd saves for backward (SavedActivations), live bytes at their
  peak within a micro-batch, parameters excluded; with reentrant checkpointing the forward saves
  the block inputs and the recompute a block's internals for its backward, so the peak is the
  checkpoints plus one block's internals plus the head, as it happens;
- cac_stash: none (DeepSpeed has no CAC).
A storage is counted once, in the first category that claims it (the order above). Temporaries
of single operations (a GEMM's output before it is saved, a collective's staging) are not
tensors anyone keeps, and are not counted; neither are the gradients of activations in backward.
"""
import contextlib
import weakref

import torch

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "communication",
              "cac_stash", "optimizer_temporaries")


def tensors_in(value, seen=None, depth=0):
    """Every tensor reachable from `value` through lists, tuples, dicts and plain objects."""
    seen = set() if seen is None else seen
    if depth > 6 or id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple, set)):
        items = list(value)
    elif hasattr(value, "__dict__") and type(value).__module__.startswith("deepspeed"):
        items = list(vars(value).values())
    else:
        return []
    found = []
    for item in items:
        found += tensors_in(item, seen, depth + 1)
    return found


def storage_key(t):
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class EngineMemory:
    """Peaks per category of one rank's engine (see the module's text)."""

    def __init__(self, engine):
        self.engine = engine
        self.optimizer = engine.optimizer
        self.peak = dict.fromkeys(CATEGORIES, 0)
        self._in_step = False
        inner = getattr(self.optimizer, "_optimizer_step", None)
        if inner is not None:
            memory = self

            def counted_step(group_no, _inner=inner):
                memory.snapshot(in_step=True)
                return _inner(group_no)

            self.optimizer._optimizer_step = counted_step

    def claims(self, in_step):
        o = self.optimizer
        module = self.engine.module
        parameters = tensors_in(getattr(o, "bit16_groups_flat", None)) or \
            [p.data for p in module.parameters()]
        fp32 = getattr(o, "single_partition_of_fp32_groups", [])
        gradients = [p.grad for p in module.parameters() if p.grad is not None]
        gradients += tensors_in(getattr(o, "averaged_gradients", None))
        state = [t.data for t in fp32] + tensors_in(getattr(getattr(o, "optimizer", o),
                                                            "state", {}))
        temporaries = [t.grad for t in fp32 if t.grad is not None] if in_step else []
        communication = tensors_in(getattr(o, "ipg_buckets", None))
        return [("parameters", parameters), ("gradients", gradients),
                ("optimizer_state", state), ("communication", communication),
                ("optimizer_temporaries", temporaries)]

    def snapshot(self, in_step=False):
        """Bytes per category now; the peaks keep the largest."""
        seen = set()
        for category, tensors in self.claims(in_step):
            total = 0
            for t in tensors:
                if t is None or not t.numel():
                    continue
                key = storage_key(t)
                if key in seen:
                    continue
                seen.add(key)
                total += key[1]
            self.peak[category] = max(self.peak[category], total)
        return seen

    def parameter_storages(self):
        return {storage_key(t)[0] for _, tensors in self.claims(False)[:1] for t in tensors} | \
            {storage_key(p)[0] for p in self.engine.module.parameters()}


class SavedActivations:
    """Live bytes of the tensors autograd saves for backward, through
    torch.autograd.graph.saved_tensors_hooks: each saved tensor is packed into a holder whose
    lifetime is the saved tensor's (autograd frees it with its node after that node's backward),
    storages counted once while any holder of theirs lives; parameters' storages excluded. The
    peak over a micro-batch's forward and backward is its activation memory."""

    class _Holder:
        __slots__ = ("tensor", "__weakref__")

        def __init__(self, tensor):
            self.tensor = tensor

    def __init__(self):
        self.excluded = set()
        self.live = {}  # storage pointer -> [bytes, holders, owner]
        self.current = 0
        self.peak = 0  # the largest micro-batch peak so far
        self.micro_peak = 0
        # Where the bytes at the peak come from (attribute()): module name -> bytes.
        self.names, self.stack, self.at_peak = None, [], {}

    def attribute(self, model):
        """Keep, at each new peak, the live bytes by the module that saved them (the innermost
        one running; for reading, not for the CSV): forward hooks on every module."""
        self.names = {id(m): n or "model" for n, m in model.named_modules()}

        def enter(module, args):
            self.stack.append(self.names[id(module)])

        def leave(module, args, output):  # returns None: the output stays the module's
            self.stack.pop()

        for module in model.modules():
            module.register_forward_pre_hook(enter)
            module.register_forward_hook(leave)

    def _release(self, key):
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def _pack(self, tensor):
        holder = SavedActivations._Holder(tensor)
        if tensor.device.type == "meta":
            return holder
        ptr, nbytes = storage_key(tensor)
        if ptr in self.excluded or nbytes == 0:
            return holder
        entry = self.live.get(ptr)
        if entry is None:
            self.live[ptr] = [nbytes, 1, self.stack[-1] if self.stack else "outside modules"]
            self.current += nbytes
            if self.current > self.micro_peak:
                self.micro_peak = self.current
                if self.names is not None and self.current > self.peak:
                    self.at_peak = {}
                    for size, _, owner in self.live.values():
                        self.at_peak[owner] = self.at_peak.get(owner, 0) + size
        else:
            entry[1] += 1
        weakref.finalize(holder, self._release, ptr)
        return holder

    @staticmethod
    def _unpack(holder):
        return holder.tensor

    @contextlib.contextmanager
    def tracking(self):
        self.micro_peak = self.current
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield
        self.peak = max(self.peak, self.micro_peak)
