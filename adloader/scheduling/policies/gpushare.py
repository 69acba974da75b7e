"""GPU time-sharing between jobs placed on the same GPUs (max-min fair water-filling).

A job j with step time s_j (seconds of each of its GPUs per iteration) running r_j
iterations/s takes the share u_j = r_j·s_j of every GPU it uses; a GPU's shares sum to at
most 1. Shares rise together until a job reaches its cap (what its loading allows, or 1)
or one of its GPUs fills; those freeze, the rest go on. Used for the simulator's ground
truth and, on predicted step times, for what the scheduler expects a shared job to reach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

EPS = 1e-9


def fair_shares(
    gpu_ids: Mapping[str, Sequence[int]], caps: Mapping[str, float]
) -> dict[str, float]:
    """u_j for each job, given the GPUs it runs on and its cap on u (0..1)."""
    caps = {n: min(1.0, max(0.0, c)) for n, c in caps.items()}
    share = dict.fromkeys(caps, 0.0)
    active = {n for n, c in caps.items() if c > EPS}
    on_gpu: dict[int, list[str]] = {}
    for name, ids in gpu_ids.items():
        for g in ids:
            on_gpu.setdefault(g, []).append(name)
    while active:
        level = min(caps[n] for n in active)
        for names in on_gpu.values():
            free = [n for n in names if n in active]
            if free:
                used = sum(share[n] for n in names if n not in active)
                level = min(level, (1.0 - used) / len(free))
        for n in active:
            share[n] = level
        frozen = {n for n in active if caps[n] <= level + EPS}
        for names in on_gpu.values():
            if sum(share[n] for n in names) >= 1.0 - EPS:
                frozen |= {n for n in names if n in active}
        active -= frozen
    return share


def gpu_ceilings(
    gpu_ids: Mapping[str, Sequence[int]], solo: Mapping[str, float], most: float,
    loads: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Each job's ceiling: its solo rate ``solo`` (B·F_μ alone on its GPUs, samples/s) times
    its predicted fair share of the GPUs. Each partner is taken to load as fast as any job
    could (``most``, samples/s) — or, given ``loads`` (what each job's workers load), as fast
    as that: a starved partner leaves the GPU free. The planner's ceilings and balance's
    shadow run (``shadow_balance``) both come from here."""
    caps = {k: most / solo[k] if solo[k] > EPS else 1.0 for k in gpu_ids}
    shares = fair_shares(gpu_ids, caps)
    if loads is not None:
        held = {k: loads.get(k, 0.0) / solo[k] if solo[k] > EPS else 1.0 for k in gpu_ids}
        for group in _sharing(gpu_ids):  # max-min fair shares: each group on its own
            ids = {k: gpu_ids[k] for k in group}
            for name in group:
                shares[name] = fair_shares(ids, {**{k: held[k] for k in group},
                                                 name: caps[name]})[name]
    return {k: shares[k] * solo[k] for k in gpu_ids}


def _sharing(gpu_ids: Mapping[str, Sequence[int]]) -> list[list[str]]:
    """The groups of two or more jobs linked through GPUs they share (alone: none)."""
    group_of: dict[int, list[str]] = {}
    for name, ids in gpu_ids.items():
        group = [name]
        for g in ids:
            other = group_of.get(g)
            if other is not None and other is not group:
                group += [k for k in other if k not in group]
        for k in group:
            for g in gpu_ids[k]:
                group_of[g] = group
    unique = {id(g): g for g in group_of.values()}
    return [g for g in unique.values() if len(g) > 1]


def iteration_rates(
    gpu_ids: Mapping[str, Sequence[int]],
    step_s: Mapping[str, float],
    batch_size: Mapping[str, int],
    loading: Mapping[str, float],
) -> dict[str, float]:
    """Iterations/s of each job: its fair GPU share over its step, loading λ_j capping it."""
    caps = {n: loading[n] * step_s[n] / batch_size[n] for n in gpu_ids}
    shares = fair_shares(gpu_ids, caps)
    return {n: shares[n] / step_s[n] for n in gpu_ids}
