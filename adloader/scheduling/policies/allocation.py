"""Worker allocation: {job: workers} maximising Σ T_i(d_i) (A-Dloader eq. 1, Algorithm 1).

The paper's rules and the exact optimum, each a pure function
``rule(jobs, capacity, loading) -> {name: workers}`` (``scheduling.policies.registry`` makes
each a ``Policy`` by name):

- ``jobs``: :class:`JobDemand` — each job's ceiling B·F_μ (samples/s), model size, request;
- ``capacity``: C, the node's loading workers;
- ``loading``: the (C+1, C+1) table λ(d; D) of samples/s a job with d workers loads while the
  node runs D in all (``ThroughputModel.loading_table``), non-increasing in D.

T_i(d_i) = min(B_i·μ_i, λ(d_i; Σd)). When C ≥ N every job gets at least one worker; when
C < N the first C jobs (queue order) get one and the rest none — they wait.

Exact: ``optimal`` (max Σ T_i), ``fair`` / ``fair:α`` (max Σ T_i with every T_i ≥ α·b_i,
b_i the job's rate under ``balance``; ``adloader.scheduling.policies.fair``) and the exhaustive
``oracle`` / ``oracle_fair`` the tests hold them to (``scheduling.bounds.fair_frontier``, with
``pareto_frontier``). Heuristics: ``waa`` (Algorithm 1) and the paper's manual rules
``balance``, ``proportion``, ``inverse``, ``requested``. The exact ones break ties towards
fewer workers only up to 1e-9 relative, and quantise gains to 1e-9.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adloader.errors import InputError


@dataclass(frozen=True)
class JobDemand:
    """What the allocator knows of a job: its training ceiling B·F_μ and its size M."""

    name: str
    training_rate: float  # B·F_μ samples/s, the most loading can buy (GPU sharing included)
    model_size: float = 1.0  # M, used by proportion / inverse
    requested: int | None = None  # the user's own num_workers
    remaining: float = 0.0  # S_i, samples left (for ``jct``; 0 when unknown)
    deadline: float | None = None  # D_i, s from now (``ftf``; None: projected from balance)


Allocation = dict[str, int]


def total_throughput(jobs: Sequence[JobDemand], alloc: Mapping[str, int], loading) -> float:
    """Σ T_i(d_i) = Σ min(B_i·μ_i, λ(d_i; D)), D = Σ d_i (eq. 1's objective)."""
    node = sum(alloc.get(j.name, 0) for j in jobs)
    return float(sum(min(j.training_rate, loading[node, alloc.get(j.name, 0)]) for j in jobs))


def _queue(jobs: Sequence[JobDemand], capacity: int) -> Allocation | None:
    """C < N: one worker for the first C jobs, none for the rest; None when C ≥ N."""
    if capacity >= len(jobs):
        return None
    return {j.name: int(i < capacity) for i, j in enumerate(jobs)}


def _apportion(weights: Sequence[float], total: int) -> list[int]:
    """Integers ≥ 1 proportional to weights summing to total (largest remainder)."""
    n = len(weights)
    w = np.asarray(weights, float)
    w = w / w.sum() if w.sum() > 0 else np.full(n, 1.0 / n)
    extra = total - n
    share = w * extra
    out = np.floor(share).astype(int)
    for i in np.argsort(-(share - out), kind="stable")[: extra - int(out.sum())]:
        out[i] += 1
    return [int(x) + 1 for x in out]


def balance(jobs, capacity, loading=None) -> Allocation:
    """The same number of workers for every job (C // N, remainder to the first)."""
    if (q := _queue(jobs, capacity)) is not None:
        return q
    return dict(zip([j.name for j in jobs], _apportion([1.0] * len(jobs), capacity), strict=True))


def proportion(jobs, capacity, loading=None) -> Allocation:
    """Workers proportional to model size M (Fig. 3's *proportion*)."""
    if (q := _queue(jobs, capacity)) is not None:
        return q
    shares = _apportion([j.model_size for j in jobs], capacity)
    return dict(zip([j.name for j in jobs], shares, strict=True))


def inverse(jobs, capacity, loading=None) -> Allocation:
    """Workers inversely proportional to model size M (Fig. 3's *inverse-proportion*)."""
    if (q := _queue(jobs, capacity)) is not None:
        return q
    shares = _apportion([1.0 / max(j.model_size, 1e-12) for j in jobs], capacity)
    return dict(zip([j.name for j in jobs], shares, strict=True))


def requested(jobs, capacity, loading=None) -> Allocation:
    """Each job's own ``workers`` (an even share when it gave none), scaled down to fit C."""
    if (q := _queue(jobs, capacity)) is not None:
        return q
    even = max(1, capacity // len(jobs))
    want = [max(1, j.requested) if j.requested else even for j in jobs]
    if sum(want) > capacity:
        want = _apportion([w - 1 for w in want] if sum(want) > len(want) else want, capacity)
    return dict(zip([j.name for j in jobs], want, strict=True))


def _inverse_loading(row: np.ndarray, rate: float) -> float:
    """d' with λ(d') = rate on one row of the loading table (linear between integers)."""
    top = len(row) - 1
    if rate <= 0:
        return 0.0
    if rate >= row[top]:
        return float(top)
    hi = int(np.searchsorted(row, rate, side="left"))
    lo = hi - 1
    span = row[hi] - row[lo]
    return lo + (rate - row[lo]) / span if span > 0 else float(hi)


def waa(jobs, capacity, loading) -> Allocation:
    """Algorithm 1 (Worker Allocation Algorithm).

    d'_i solves B_i·μ_i = λ(d'_i) with the node full (D = C), d_i = ⌈d'_i⌉; then, from the
    most over-provisioned job (d_i − d'_i descending), take one worker a pass from each job
    with more than one until Σd ≤ C. The written line 11 tests ``sum < C``, which would trim
    one worker too many; the paper's own Fig. 7 (2 + 8 + 8 = 18 = C) shows the intent, ≤ C.
    Lines 1–2 (C ≤ N → one each) hold when C = N; with C < N the queue rule applies.
    """
    if (q := _queue(jobs, capacity)) is not None:
        return q
    if capacity == len(jobs):
        return {j.name: 1 for j in jobs}
    row = np.maximum.accumulate(loading[capacity, : capacity + 1])
    d_real = [_inverse_loading(row, j.training_rate) for j in jobs]
    d = [max(1, math.ceil(x - 1e-9)) for x in d_real]
    order = sorted(range(len(jobs)), key=lambda i: -(d[i] - d_real[i]))  # stable
    total = sum(d)
    while total > capacity:
        for i in order:
            if total <= capacity:
                break
            if d[i] > 1:
                d[i] -= 1
                total -= 1
    return {j.name: d[i] for i, j in enumerate(jobs)}


def _is_concave(values: np.ndarray) -> bool:
    gains = np.diff(values, axis=-1)
    return bool(np.all(np.diff(gains, axis=-1) <= 1e-9 * (1.0 + np.abs(values).max())))


def separable_max(values: np.ndarray, capacity: int) -> list[int]:
    """argmax Σ values[i, d_i] with Σ d_i ≤ C, d_i ≥ 1 (C ≥ N), for an (N, C+1) array.

    Concave rows: marginal gain — the C−N largest positive gains, a prefix of each row.
    Otherwise exact dynamic programming over (job, workers used).
    """
    n = values.shape[0]
    width = min(values.shape[1] - 1, capacity - n + 1)  # most workers any job can get
    values = values[:, : width + 1]
    if _is_concave(values[:, 1:]):
        gains = np.diff(values[:, 1:], axis=1)
        extra = capacity - n
        flat = gains.ravel()
        positive = np.flatnonzero(flat > 0)
        if len(positive) > extra:
            top = positive[np.argpartition(-flat[positive], extra - 1)[:extra]] if extra else []
        else:
            top = positive
        counts = np.bincount(np.asarray(top, int) // max(gains.shape[1], 1), minlength=n)
        return [1 + int(c) for c in counts]
    # DP: best[c] = best value of the jobs so far using c workers.
    neg = -np.inf
    best = np.full(capacity + 1, neg)
    best[0] = 0.0
    choice = np.zeros((n, capacity + 1), int)
    for i in range(n):
        new = np.full(capacity + 1, neg)
        for k in range(1, width + 1):
            cand = np.full(capacity + 1, neg)
            cand[k:] = best[: capacity + 1 - k] + values[i, k]
            better = cand > new
            new[better] = cand[better]
            choice[i, better] = k
        best = new
    c = int(np.argmax(best))
    out = [0] * n
    for i in range(n - 1, -1, -1):
        out[i] = int(choice[i, c])
        c -= out[i]
    return out


def optimal(jobs, capacity, loading) -> Allocation:
    """Provably maximises Σ min(B_i·μ_i, λ(d_i; Σd)) over integers, d_i ≥ 1, Σd ≤ C.

    For each node total D it solves the separable problem with λ(·; D) (marginal gain when
    the curves are concave, DP otherwise); since λ never grows with D, the plan found for
    D is worth at least that much at its own total, and the best D's plan is optimal.
    Ties go to the plan with fewer workers.
    """
    if (q := _queue(jobs, capacity)) is not None:
        return q
    mu = np.array([j.training_rate for j in jobs], float)
    best_value, best_plan = -math.inf, None
    for node in range(len(jobs), capacity + 1):
        row = loading[node, : node + 1]
        if _is_concave(row[1:]):
            plan = np.asarray(_fast_plan(mu, row, node))
        else:
            plan = np.asarray(separable_max(np.minimum(mu[:, None], row[None, :]), node))
        value = float(np.minimum(mu, loading[int(plan.sum()), plan]).sum())
        if best_plan is None or value > best_value + 1e-12 * max(1.0, abs(best_value)):
            best_value, best_plan = value, plan
        if value >= mu.sum() * (1 - 1e-12):  # every job reaches B·μ: nothing can do better
            break
    return {j.name: int(best_plan[i]) for i, j in enumerate(jobs)}


def _fast_plan(mu: np.ndarray, row: np.ndarray, capacity: int) -> list[int]:
    """Marginal gain for rows min(μ_i, r(d)) sharing one concave increasing r, in O(N log C).

    Job i's gains past its first worker are Δr(1..m_i) — r's own increments while r stays
    under μ_i — then one partial gain μ_i − r(m_i + 1), then zeros; the C−N largest are
    found by a threshold τ instead of listing every gain.
    """
    n = len(mu)
    r = np.maximum.accumulate(row)
    quantum = max(float(r[-1]), 1.0) * 1e-9  # equal gains must tie, not differ in the last bit
    delta = np.round(np.diff(r)[1:] / quantum) * quantum  # Δr(k) = r(k+1) − r(k), k = 1..C−1
    m = np.maximum(np.searchsorted(r, mu, side="right") - 2, 0)  # full gains: r(k+1) ≤ μ
    kp = m + 1  # where the partial gain μ − r(kp) sits, if r(kp) < μ < r(kp + 1)
    valid = (kp <= len(delta)) & (r[np.minimum(kp, len(r) - 1)] < mu)
    partial = np.where(valid, mu - r[np.minimum(kp, len(r) - 1)], 0.0)
    partial = np.round(partial / quantum) * quantum
    extra = capacity - n

    def count_above(tau: float) -> tuple[np.ndarray, np.ndarray]:
        above = int(np.sum(delta > tau))  # Δr is non-increasing, so these are a prefix
        return np.minimum(m, above), (partial > tau) & (m <= above)

    cands = np.unique(np.concatenate([delta, partial, [0.0]]))
    lo, hi = 0, len(cands) - 1  # smallest τ whose count of larger gains fits in `extra`
    while lo < hi:
        mid = (lo + hi) // 2
        full, part = count_above(cands[mid])
        if full.sum() + part.sum() <= extra:
            hi = mid
        else:
            lo = mid + 1
    tau = cands[lo]
    full, part = count_above(tau)
    left = extra - int(full.sum() + part.sum())
    if tau > 0 and left > 0:  # ties at τ, in job order
        ties_full = int(np.sum(delta == tau))
        for i in range(n):
            if left == 0:
                break
            if full[i] < m[i] and ties_full:
                take = min(left, m[i] - full[i], ties_full)
                full[i] += take
                left -= take
            if left and not part[i] and full[i] == m[i] and partial[i] == tau:
                part[i] = True
                left -= 1
    return [1 + int(full[i]) + int(part[i]) for i in range(n)]


def oracle(jobs, capacity, loading) -> Allocation:
    """Exhaustive search over every allocation (small instances only; for tests)."""
    if (q := _queue(jobs, capacity)) is not None:
        return q
    n = len(jobs)
    if math.comb(capacity, n) > 2_000_000:
        raise InputError(f"oracle: {n} jobs over {capacity} workers is too many to enumerate")
    best_value, best_plan = -math.inf, None
    for plan in itertools.product(range(1, capacity - n + 2), repeat=n):
        if sum(plan) > capacity:
            continue
        alloc = {j.name: plan[i] for i, j in enumerate(jobs)}
        value = total_throughput(jobs, alloc, loading)
        if best_plan is None or value > best_value + 1e-12 * max(1.0, abs(best_value)) or (
            abs(value - best_value) <= 1e-9 * max(1.0, best_value)
            and sum(plan) < sum(best_plan.values())
        ):
            best_value, best_plan = value, alloc
    return best_plan
