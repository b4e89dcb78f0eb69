"""Our forced routing workloads (lib/ted/routing/workload.hpp, docs/algorithm.md "Routing
workloads"), ported so that DeepSpeed's gate takes the very experts ours takes: each token's
top-k distinct experts decided from (workload, its parameters, seed, step, layer, global token
index) alone. The keys, defaults and rules are routing.* of our YAML (ted_config.py reads them);
the shares, the draws without replacement and their inverse CDF follow workload.cpp operation
for operation in doubles, on the counter-based uniforms of counter_random.py, so the choices are
equal bit for bit (tests/apps/deepspeed_baseline.sh compares them with the C++ on every
workload).
"""
import math

import numpy as np

import counter_random

KINDS = ("learned", "balanced", "hot_experts", "hot_rank", "zipf", "zero_load", "rotating")
DEFAULTS = {"workload": "learned", "hot_experts": 0, "hot_share": 0.5, "zipf_s": 1.0,
            "zero_experts": 0}


class WorkloadError(ValueError):
    pass


def forced(routing):
    return routing["workload"] != "learned"


def hot_count(routing, experts):
    return routing["hot_experts"] if routing["hot_experts"] > 0 else max(1, experts // 4)


def zero_count(routing, experts):
    return routing["zero_experts"] if routing["zero_experts"] > 0 else max(1, experts // 4)


def validate(routing, experts, top_k):
    """WorkloadError naming the routing.* key, by workload.cpp validate()'s rules."""
    if routing["workload"] not in KINDS:
        raise WorkloadError(f"key 'routing.workload' must be {', '.join(KINDS[:-1])} or "
                            f"{KINDS[-1]}, got '{routing['workload']}'")
    for key in ("hot_experts", "zero_experts"):
        if not 0 <= routing[key] <= experts:
            raise WorkloadError(f"routing.{key} must be in [0, model.experts = {experts}] (0: a "
                                f"quarter of them), got {routing[key]}")
    if not 0 <= routing["hot_share"] <= 1:
        raise WorkloadError(f"routing.hot_share must be in [0, 1], got {routing['hot_share']}")
    if not 0 <= routing["zipf_s"] <= 8:
        raise WorkloadError(f"routing.zipf_s must be in [0, 8], got {routing['zipf_s']}")
    left = experts - zero_count(routing, experts)
    if routing["workload"] == "zero_load" and left < top_k:
        raise WorkloadError(f"routing.workload zero_load leaves {left} experts with load, fewer "
                            f"than gating.top_k ({top_k}): lower routing.zero_experts")


def _hot_set(routing, experts, step):
    H = hot_count(routing, experts)
    hot = [False] * experts
    for i in range(H):
        e = i
        if routing["workload"] == "hot_experts":
            e = i * experts // H
        if routing["workload"] == "rotating":
            e = (step * H + i) % experts
        hot[e] = True
    return hot


def expert_shares(routing, experts, step):
    """Each expert's share of the first choice at `step`, as expert_shares() computes it."""
    kind = routing["workload"]
    share = [1.0 / experts] * experts
    if kind in ("hot_experts", "hot_rank", "rotating"):
        H = hot_count(routing, experts)
        hot = _hot_set(routing, experts, step)
        p = routing["hot_share"]
        share = [1.0 / experts if H == experts else p / H if hot[e] else (1 - p) / (experts - H)
                 for e in range(experts)]
    elif kind == "zipf":
        total = 0.0
        for e in range(experts):  # summed in order, as the C++ loop
            share[e] = math.pow(float(e + 1), -routing["zipf_s"])
            total += share[e]
        share = [s / total for s in share]
    elif kind == "zero_load":
        Z = zero_count(routing, experts)
        share = [0.0 if e >= experts - Z else 1.0 / (experts - Z) for e in range(experts)]
    return share


def assign_experts(routing, experts, top_k, seed, step, layer, first_token, tokens):
    """[tokens, top_k] int64: the chosen experts of global tokens first_token ..
    first_token + tokens - 1 (assign_experts() of workload.cpp), vectorised over the tokens."""
    if not forced(routing):
        raise WorkloadError("assign_experts: the learned gate chooses for itself")
    token = first_token + np.arange(tokens, dtype=np.int64)
    out = np.empty((tokens, top_k), dtype=np.int64)
    if routing["workload"] == "balanced":
        for j in range(top_k):
            out[:, j] = (token * top_k + j) % experts
        return out
    share = expert_shares(routing, experts, step)
    taken = np.zeros((tokens, experts), dtype=bool)
    for j in range(top_k):
        # What is left over the free experts, summed in expert order (adding a taken expert's
        # 0.0 leaves a double as it is, so this is the C++ loop's sum exactly).
        left = np.zeros(tokens)
        for e in range(experts):
            left = left + np.where(taken[:, e], 0.0, share[e])
        u = counter_random.uniform_array(counter_random.hash_last(
            seed, counter_random.WORKLOAD, step, layer, token * top_k + j))
        target = u * left
        # Inverse CDF over the free experts: the first whose running sum passes u * left; if
        # rounding leaves none, the last free one with a share; with no share left at all, the
        # lowest free expert.
        chosen = np.full(tokens, -1, dtype=np.int64)
        last = np.full(tokens, -1, dtype=np.int64)
        acc = np.zeros(tokens)
        for e in range(experts):
            active = (chosen < 0) & ~taken[:, e]
            if share[e] > 0:
                last = np.where(active, e, last)
            acc = np.where(active, acc + share[e], acc)
            hit = active & (left > 0) & (share[e] > 0) & (target < acc)
            chosen = np.where(hit, e, chosen)
        chosen = np.where(chosen < 0, last, chosen)
        chosen = np.where(chosen < 0, np.argmax(~taken, axis=1), chosen)
        taken[np.arange(tokens), chosen] = True
        out[:, j] = chosen
    return out
