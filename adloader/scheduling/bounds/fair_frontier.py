"""Exhaustive search on small mixes: ``oracle_fair`` (the tests' reference for ``fair``) and
``pareto_frontier``, the trade-off between Σ T_i and the worst job's T_i / b_i.

Every allocation with d_i ≥ 1 and Σd ≤ C is enumerated (C(C, N) of them), so these are for
a handful of jobs only. b_i is job i's rate under ``balance`` (``fair_allocation``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from adloader.errors import InputError
from adloader.scheduling.policies.fair import (
    DEFAULT_ALPHA,
    balance_plan,
    balance_rates,
    check_alpha,
    fair_targets,
)

LIMIT = 2_000_000


def all_plans(n: int, capacity: int) -> np.ndarray:
    """Every plan d ∈ ℕ^N with d_i ≥ 1 and Σd ≤ C, as rows of a (C(C, N), N) array."""
    if math.comb(capacity, n) > LIMIT:
        raise InputError(f"{n} jobs over {capacity} workers is too many to enumerate")
    plans = np.zeros((1, 0), dtype=np.int64)
    for i in range(n):
        room = capacity - plans.sum(axis=1) - (n - i - 1)  # the most job i can take
        counts = np.maximum(room, 0)
        head = np.repeat(plans, counts, axis=0)
        tail = np.concatenate([np.arange(1, c + 1) for c in counts]) if counts.sum() else \
            np.zeros(0, dtype=np.int64)
        plans = np.column_stack([head, tail])
    return plans


def _rates(jobs: Sequence, capacity: int, loading):
    """μ, every plan, its rates T_i and each job's balance rate b_i."""
    mu = np.array([j.training_rate for j in jobs], float)
    plans = all_plans(len(jobs), capacity)
    rates = np.minimum(mu, np.asarray(loading)[plans.sum(axis=1)[:, None], plans])
    return mu, plans, rates, balance_rates(mu, capacity, loading)


def _queued(jobs: Sequence, capacity: int) -> dict[str, int] | None:
    if capacity >= len(jobs):
        return None
    return {j.name: int(i < capacity) for i, j in enumerate(jobs)}


def oracle_fair(jobs: Sequence, capacity: int, loading,
                alpha: float = DEFAULT_ALPHA) -> dict[str, int]:
    """Exhaustive max Σ T_i s.t. T_i ≥ α·b_i; ties to fewer workers (small cases, tests)."""
    alpha = check_alpha(alpha)
    if (q := _queued(jobs, capacity)) is not None:
        return q
    if not jobs:
        return {}
    _, plans, rates, base = _rates(jobs, capacity, loading)
    ok = np.all(rates >= fair_targets(base, alpha), axis=1)
    if not ok.any():
        plan = balance_plan(len(jobs), capacity)
    else:
        value = np.where(ok, rates.sum(axis=1), -np.inf)
        best = value.max()
        near = ok & (value >= best - 1e-9 * max(1.0, abs(best)))
        totals = np.where(near, plans.sum(axis=1), np.iinfo(np.int64).max)
        plan = plans[int(np.argmin(totals))]
    return {j.name: int(plan[i]) for i, j in enumerate(jobs)}


def pareto_frontier(jobs: Sequence, capacity: int, loading) -> list[dict]:
    """The Pareto set of (Σ T / Σ b, min_i T_i / b_i) over every allocation, best Σ first.

    One dict a point: ``allocation``, ``throughput`` (Σ T_i), ``throughput_ratio`` (against
    balance, Σ b_i), ``worst_ratio`` (the worst job against its balance rate; jobs with
    b_i = 0 are never worse off) and ``workers``. Equal points keep the fewest workers.
    """
    if not jobs:
        return []
    if (q := _queued(jobs, capacity)) is not None:  # the queue is balance itself: (1, 1)
        node = sum(q.values())
        value = sum(min(j.training_rate, float(loading[node, q[j.name]])) for j in jobs)
        return [{"allocation": q, "throughput": value, "throughput_ratio": 1.0,
                 "worst_ratio": 1.0, "workers": node}]
    _, plans, rates, base = _rates(jobs, capacity, loading)
    total = rates.sum(axis=1)
    ratio = total / base.sum() if base.sum() > 0 else np.full(len(total), math.inf)
    shares = np.where(base > 0, rates / np.where(base > 0, base, 1.0), math.inf)
    worst = shares.min(axis=1)
    workers = plans.sum(axis=1)
    key = np.round(total / max(1.0, float(np.abs(total).max())), 12)  # equal Σ T ties
    order = np.lexsort((workers, -worst, -key))  # Σ T desc, then worst desc, then workers
    out, best_worst = [], -math.inf
    for i in order.tolist():
        if worst[i] <= best_worst:
            continue  # dominated: an earlier point has at least this Σ T and this worst ratio
        best_worst = worst[i]
        out.append({"allocation": {j.name: int(plans[i, k]) for k, j in enumerate(jobs)},
                    "throughput": float(total[i]), "throughput_ratio": float(ratio[i]),
                    "worst_ratio": float(worst[i]), "workers": int(workers[i])})
    return out


def schedule_bounds(samples: Sequence[float], best_rate: Callable[[frozenset[int]], float],
                    own_best: Sequence[float], floor_jct: Sequence[float] | None = None) -> dict:
    """Bounds over *every* schedule of jobs all present at t = 0, allocations changing freely
    over time: the frontier of time-varying plans, bounded.

    Work: by the time the k-th job completes, at least the samples S of the first k have
    been read, at a node rate ≤ R(J) while the jobs J are present, so
    C_(k) ≥ Σ_{j≤k} S_(j) / R* with R* = max_J R(J); and C_i ≥ S_i / r_i* (its best rate).
    Hence makespan ≥ max(ΣS / R*, max_i S_i / r_i*). Σ_i S_i / C_i is at most its value
    with every C_(k) at that bound, maximised over completion orders; ``floor_jct`` (C_i
    allowed at most, e.g. balance's JCT / 0.95) drops the orders that cannot meet it.
    ``best_rate(J)`` is the most Σ T the jobs J can reach together (by any allocation)."""
    n = len(samples)
    if n > 8:
        raise InputError(f"{n} jobs: schedule_bounds enumerates orders, 8 jobs at most")
    r_star = max(best_rate(frozenset(c)) for k in range(1, n + 1)
                 for c in itertools.combinations(range(n), k))
    makespan = max(sum(samples) / r_star, max(s / r for s, r in zip(samples, own_best,
                                                                    strict=True)))
    best_sum, best_order = 0.0, None
    for order in itertools.permutations(range(n)):
        done, ends = 0.0, {}
        for i in order:
            done += samples[i]
            ends[i] = max(done / r_star, samples[i] / own_best[i], max(ends.values(), default=0))
        if floor_jct is not None and any(ends[i] > floor_jct[i] * (1 + 1e-9) for i in ends):
            continue
        total = sum(samples[i] / ends[i] for i in ends)
        if total > best_sum:
            best_sum, best_order = total, order
    return {"makespan_lb": makespan, "node_rate_max": r_star, "sum_ub": best_sum,
            "order": best_order, "feasible": best_order is not None}


def arrival_bound(arrivals: Sequence[float], samples: Sequence[float],
                  own_best: Sequence[float], node_rate_max: float) -> dict:
    """A makespan no schedule beats when jobs arrive over time (allocations free to change):
    the samples of the jobs arriving at or after a are read after a, at ≤ R* a second, and
    job i ends no sooner than a_i + S_i / r_i*, so
    makespan ≥ max(max_a (a + Σ_{a_i ≥ a} S_i / R*), max_i (a_i + S_i / r_i*)).
    ``binding``: the job (index) or arrival time the bound comes from."""
    if not len(arrivals) == len(samples) == len(own_best) or node_rate_max <= 0:
        raise InputError("arrival_bound: one arrival, sample count and best rate a job; R* > 0")
    work = [(a + sum(s for a2, s in zip(arrivals, samples, strict=True) if a2 >= a)
             / node_rate_max, ("arrival", a)) for a in sorted(set(arrivals))]
    own = [(a + s / r, ("job", i)) for i, (a, s, r) in
           enumerate(zip(arrivals, samples, own_best, strict=True))]
    (bound, binding) = max(work + own, key=lambda x: x[0])
    return {"makespan_lb": bound, "binding": binding,
            "work_lb": max(w for w, _ in work), "own_lb": max(o for o, _ in own)}
