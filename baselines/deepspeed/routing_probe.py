"""What DeepSpeed's MoE gate routes, and a forced workload's experts put in its hands.

Counting: each MoE layer's per-expert load (the gate's exp_counts: choices before drops) and its
dropped choices (routes the gate flags -1 for capacity), per micro-batch, read off the gate's
output by a forward hook; a checkpointed block's recompute routes again and writes the same
micro-batch's entry again, so nothing is counted twice.

Forcing (routing.workload other than learned): DeepSpeed 0.19's gate (deepspeed.moe.sharded_moe,
TopKGate.forward) takes no assignment. It chooses with torch.argmax in the module's functions:
top1gating takes argmax(gates, dim=1), top2gating argmax(gates, dim=1) for the first choice and
then argmax over the other experts' logits (Gumbel noise added first when
top2_2nd_expert_sampling). So the module's `torch` is replaced by one whose argmax, during a gate
call with forced choices pending, answers its j-th call with the workload's j-th choices
(ted_workload.assign_experts, keyed as our trainer keys them: seed, step, the block's index, the
micro-batch's global tokens); every other torch function is the real one, and argmax itself
outside such a call. The rest of the gate runs as DeepSpeed wrote it on the real logits: the
softmax probabilities weight the chosen experts (top-2: normalised over the two), the aux loss
counts the forced first choices, capacity, drops, RTS and dropless capacity follow, and the
gradients flow through the probabilities. Each forced call is checked: exactly top_k argmax
calls, and every route it kept is on the forced expert (an upgrade of DeepSpeed that chose
another way fails here, not silently). docs/deepspeed.md, "Forced routing workloads", says
what this cannot reach.

Random token selection (gating.random_token_selection, top-1): which tokens a full expert keeps
is ours' choice too. Ours keeps, per expert, the tokens of highest priority hash(seed,
kTokenSelection, step, layer, global token) (lib/ted/kernels/cpu/gating.cpp); DeepSpeed's
top1gating with use_rts keeps torch.topk(mask1 x uniform(mask1.shape)) per expert, uniform being
sharded_moe.exp_selection_uniform_map[device]. Before each gate call the probe places there a
function that returns, for [tokens, experts], each token's counter_random.uniform of that hash
(float64, the top 53 bits: monotone in our hash) broadcast over the experts, keyed as the
forced workloads are (the block's index, the step, the micro-batch's first global token), so
topk keeps the very tokens ours keeps. It refuses (RuntimeError) a draw outside a gate call or of
another shape.
"""
import functools

import numpy as np

import counter_random
import ted_workload

TOKEN_SELECTION = 2  # random.hpp kTokenSelection: RTS priorities, (step, layer, global token)


class RoutingProbe:
    def __init__(self, model, cfg, sharded_moe, torch):
        m, g = cfg["model"], cfg["gating"]
        self.torch, self.routing = torch, cfg["routing"]
        self.experts, self.top_k, self.seq_len = m["experts"], g["top_k"], m["seq_len"]
        self.seed = cfg["training"]["seed"]
        self.forced = ted_workload.forced(self.routing)
        # top2gating has no RTS (use_rts is top1gating's only)
        self.rts = g["random_token_selection"] and g["top_k"] == 1
        self.sharded_moe, self._priorities = sharded_moe, None
        self.moe_layers = [layer for layer, block in enumerate(model.blocks) if block.moe]
        self.step, self.first_token = 0, 0
        self._loads, self._dropped, self._choices = {}, {}, {}
        self._pending, self._calls = None, 0
        for layer, block in enumerate(model.blocks):
            if block.moe:
                gate = block.ffn.deepspeed_moe.gate
                gate.register_forward_pre_hook(functools.partial(self._before_gate, layer))
                gate.register_forward_hook(functools.partial(self._after_gate, layer))
        if self.forced:
            real, probe = sharded_moe.torch, self

            class TorchWithForcedArgmax:
                def __getattr__(self, name):
                    return getattr(real, name)

                def argmax(self, input, dim=None, keepdim=False):
                    if probe._pending is None:
                        return real.argmax(input, dim=dim, keepdim=keepdim)
                    return probe._forced_argmax(input, dim, keepdim)

            sharded_moe.torch = TorchWithForcedArgmax()

    def begin_step(self, step):
        self.step = step
        self._loads.clear()
        self._dropped.clear()
        self._choices.clear()

    def begin_micro_batch(self, first_sample):
        """The micro-batch's first sequence's global index (trainer.cpp's `first`)."""
        self.first_token = first_sample * self.seq_len

    def _before_gate(self, layer, gate, args):
        tokens = args[0].shape[0]
        if self.rts:  # our priorities for this layer and micro-batch, read by top1gating
            bits = counter_random.hash_last(
                self.seed, TOKEN_SELECTION, self.step, layer,
                np.uint64(self.first_token) + np.arange(tokens, dtype=np.uint64))
            self._priorities = self.torch.from_numpy(
                counter_random.uniform_array(bits)).to(args[0].device)
            self.sharded_moe.exp_selection_uniform_map[args[0].device] = self._uniform
        if not self.forced:
            return
        key = (layer, self.first_token, tokens)
        if key not in self._choices:  # a checkpointed block's recompute takes the same ones
            choices = ted_workload.assign_experts(self.routing, self.experts, self.top_k,
                                                  self.seed, self.step, layer, self.first_token,
                                                  tokens)
            self._choices[key] = self.torch.from_numpy(choices).to(args[0].device)
        self._pending, self._calls = self._choices[key], 0

    def _uniform(self, shape):
        """DeepSpeed's RTS draw for mask1 [tokens, experts]: our priorities, per token."""
        priorities, self._priorities = self._priorities, None
        if priorities is None or len(shape) != 2 or shape[0] != priorities.shape[0]:
            raise RuntimeError(f"random token selection: DeepSpeed's gate drew {tuple(shape)} "
                               "outside a gate call this probe keyed")
        return priorities[:, None].expand(tuple(shape))

    def _forced_argmax(self, input, dim, keepdim):
        j = self._calls
        self._calls += 1
        if dim != 1 or keepdim or j >= self.top_k or \
                tuple(input.shape) != (self._pending.shape[0], self.experts):
            raise RuntimeError(f"forced routing: DeepSpeed's gate made an argmax this probe does "
                               f"not know (call {j + 1}, dim {dim}, shape {tuple(input.shape)})")
        return self._pending[:, j].clone()

    def _after_gate(self, layer, gate, args, output):
        indices, exp_counts = output[3], output[6]  # [k, tokens], -1 where dropped; [E]
        if self._pending is not None:
            pending, calls = self._pending, self._calls
            self._pending = None
            if calls != self.top_k:
                raise RuntimeError(f"forced routing: DeepSpeed's gate chose with {calls} argmax "
                                   f"calls, not top_k = {self.top_k}")
            kept = indices >= 0
            if not bool((indices.long()[kept] == pending.t()[kept]).all()):
                raise RuntimeError("forced routing: a route of DeepSpeed's gate is not on the "
                                   "forced expert")
        key = (layer, self.first_token)
        self._loads[key] = exp_counts.detach().cpu().numpy().astype(np.int64)
        self._dropped[key] = int((indices < 0).sum())

    def step_counts(self):
        """This rank's ([MoE layers, E] loads, dropped choices) over the step's micro-batches."""
        loads = np.zeros((len(self.moe_layers), self.experts), dtype=np.int64)
        for (layer, _), counts in self._loads.items():
            loads[self.moe_layers.index(layer)] += counts
        return loads, sum(self._dropped.values())
