"""``fair``: max Σ T_i(d_i) subject to T_i(d_i) ≥ α·b_i for every job (sharing incentive).

b_i = min(B_i·μ_i, λ(bal_i; D_bal)) is job i's rate under ``balance`` (an even split,
D_bal = Σ bal_i = C). Exact, like ``optimal``: for a node total D, job i needs
d_i ≥ lo_i(D) = min{d : λ(d; D) ≥ α·b_i}; a plan solved with λ(·; D) and Σd ≤ D stays fair
and is worth at least as much at its own total (λ never grows with D), so the best D wins.
Per D: marginal gains from the lower bounds on concave rows (O(N log N + D)), masked DP
otherwise. D's are visited by descending upper bound U(D) ≥ V(D) (``_bounds``: a linear
relaxation λ(d; D) ≤ e(D)·d, exact when λ is linear in d as the TPM's is) and the loop stops
once U(D) is below the best plan found: exact pruning, usually one D solved. A previous
plan's total only breaks ties between equal bounds. Balance is fair at D = C when α ≤ 1, so
a plan exists; balance is the numerical fallback.

Pure: numpy only. Jobs are read through ``.name`` and ``.training_rate`` (B·μ).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adloader.errors import InputError

DEFAULT_ALPHA = 0.95


def check_alpha(alpha: float) -> float:
    """α as a float in [0, 1], or a clear InputError."""
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise InputError(f"fair: α must be a number in [0, 1], not {alpha!r}") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise InputError(f"fair: α must be in [0, 1], not {alpha!r}")
    return value


def balance_plan(n: int, capacity: int) -> np.ndarray:
    """``balance``'s allocation for C ≥ N: C // N each, one more for the first C mod N."""
    plan = np.full(n, capacity // n, dtype=np.int64)
    plan[: capacity % n] += 1
    return plan


def balance_rates(mu: np.ndarray, capacity: int, loading) -> np.ndarray:
    """b_i = min(B_i·μ_i, λ(bal_i; D_bal)), each job's rate under balance (D_bal = C)."""
    return np.minimum(mu, loading[capacity, balance_plan(len(mu), capacity)])


def fair_targets(base: np.ndarray, alpha: float) -> np.ndarray:
    """α·b_i less a 1e-12 relative slack, so balance itself passes at α = 1."""
    return alpha * base - 1e-12 * (1.0 + np.abs(base))


@dataclass(frozen=True)
class _Row:
    """λ(·; D) prepared for the threshold method."""

    values: np.ndarray  # λ(0..D; D)
    r: np.ndarray  # running maximum of values
    fast: bool  # concave on 1..D: marginal gains are exact
    delta: np.ndarray  # quantised Δr(k) = r(k+1) − r(k), k = 1..D−1, non-increasing
    top: int  # steps with Δr > 0 (a prefix)
    quantum: float


def _prepare(values: np.ndarray) -> _Row:
    r = np.maximum.accumulate(values)
    inner = values[1:]
    fast = True
    if len(inner) > 2:
        bend = np.diff(inner, 2)
        fast = bool(np.all(bend <= 1e-9 * (1.0 + np.abs(inner).max())))
    quantum = max(float(r[-1]), 1.0) * 1e-9  # equal gains must tie, not differ in the last bit
    delta = np.minimum.accumulate(np.round(np.diff(r)[1:] / quantum) * quantum)
    return _Row(values, r, fast, delta, int(np.count_nonzero(delta > 0)), quantum)


def _threshold_plan(mu: np.ndarray, t: np.ndarray, row: _Row, node: int) -> np.ndarray | None:
    """argmax Σ min(μ_i, r(d_i)), d_i ≥ lo_i, Σd ≤ D for a concave row, or None if no fit.

    Job i's gains past lo_i are Δr(lo_i..m_i) (r stays under μ_i), one partial μ_i − r(m_i+1),
    then zeros: a non-increasing run, so the D − Σlo largest gains are optimal. Full gains are
    counted per step k (Δr(k) with multiplicity #{i: lo_i ≤ k ≤ m_i}) and merged with the
    sorted partials by rank, with ties to full gains, then within a step to job order.
    """
    r, delta, top = row.r, row.delta, row.top
    lo = np.maximum(np.searchsorted(r, t, side="left"), 1)
    extra = node - int(lo.sum())
    if extra < 0 or int(lo.max()) > node:
        return None
    if extra == 0 or top == 0:
        return lo
    m = np.maximum(np.searchsorted(r, mu, side="right") - 2, 0)  # full gains: r(k+1) ≤ μ
    m_full = np.minimum(m, top)
    has = m_full >= lo
    step = np.bincount(lo[has], minlength=node + 2) - np.bincount(m_full[has] + 1,
                                                                  minlength=node + 2)
    cum = np.zeros(top + 1, dtype=np.int64)  # cum[k]: full gains in steps 1..k
    np.cumsum(np.cumsum(step)[1 : top + 1], out=cum[1:])
    kp = np.minimum(m + 1, node)  # the partial gain sits at step m + 1, if r(m+1) < μ < r(m+2)
    valid = (m + 1 <= node - 1) & (r[kp] < mu) & (lo <= m + 1)
    partial = np.where(valid, np.round((mu - r[kp]) / row.quantum) * row.quantum, 0.0)
    jobs = np.flatnonzero(partial > 0)
    jobs = jobs[np.argsort(-partial[jobs], kind="stable")]
    # rank of the j-th partial: j + the full gains at least as large
    rank = np.arange(len(jobs)) + cum[np.searchsorted(-delta[:top], -partial[jobs], side="right")]
    taken = int(np.searchsorted(rank, extra, side="left"))
    q = min(extra - taken, int(cum[-1]))
    k = int(np.searchsorted(cum, q, side="left"))  # steps 1..k−1 whole, step k in job order
    d = lo + np.clip(np.minimum(m_full, k - 1) - lo + 1, 0, None)
    if k >= 1:
        active = (lo <= k) & (k <= m_full)
        d += active & (np.cumsum(active) <= q - cum[k - 1])
    d[jobs[:taken]] += 1
    return d


def _masked_dp(mu: np.ndarray, t: np.ndarray, values: np.ndarray, node: int) -> np.ndarray | None:
    """Exact DP for any row: max Σ min(μ_i, λ(d_i; D)) over d_i with λ(d_i; D) ≥ t_i."""
    n = len(mu)
    width = node - n + 1
    row = values[1 : width + 1]
    gain = np.minimum(mu[:, None], row[None, :])
    gain[row[None, :] < t[:, None]] = -np.inf
    best = np.full(node + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros((n, node + 1), dtype=np.int64)
    for i in range(n):
        new = np.full(node + 1, -np.inf)
        for k in np.flatnonzero(np.isfinite(gain[i])) + 1:
            cand = np.full(node + 1, -np.inf)
            cand[k:] = best[: node + 1 - k] + gain[i, k - 1]
            better = cand > new
            new[better] = cand[better]
            choice[i, better] = k
        best = new
    if not np.isfinite(best).any():
        return None
    c = int(np.argmax(best))  # the first maximum: fewest workers
    out = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        out[i] = choice[i, c]
        c -= out[i]
    return out


def _bounds(mu: np.ndarray, t: np.ndarray, e: np.ndarray, top: np.ndarray,
            chunk: int = 1 << 16) -> np.ndarray:
    """U(D) ≥ V(D) for D = N..C: max Σ min(c_i, e·d_i), d_i ≥ ℓ_i = ⌈t_i/e⌉, Σd ≤ D, where
    λ(d; D) ≤ min(e·d, M) on d ≤ D − N + 1 and c_i = min(μ_i, M); −∞ where no plan fits.

    Exact when λ(·; D) is linear in d (the TPM's λ = d/D·L(D)). Jobs past ℓ_i gain e a
    worker up to ⌊c_i/e⌋, then one partial; the D − Σℓ largest gains are summed.
    """
    n, count = len(mu), len(e)
    out = np.empty(count)
    rows = max(1, chunk // n)
    for a in range(0, count, rows):
        b = min(count, a + rows)
        ee = e[a:b, None]
        inv = 1.0 / np.maximum(ee, 1e-300)
        c = np.minimum(mu[None, :], top[a:b, None])
        need = np.maximum(np.ceil(t[None, :] * (inv * (1 - 1e-12)) - 1e-9), 1.0)
        k = np.floor(c * inv)
        full = np.maximum(k - need, 0.0).sum(axis=1)
        extra = np.arange(a, b) + n - need.sum(axis=1)
        value = np.minimum(c, ee * need).sum(axis=1) + e[a:b] * np.clip(extra, 0.0, full)
        short = np.flatnonzero(extra > full)
        if short.size:
            part = np.maximum(c[short] - ee[short] * np.maximum(k[short], need[short]), 0.0)
            cum = np.zeros((short.size, n + 1))
            np.cumsum(-np.sort(-part, axis=1), axis=1, out=cum[:, 1:])
            take = np.minimum(extra[short] - full[short], n).astype(np.int64)
            value[short] += cum[np.arange(short.size), take]
        value[extra < 0] = -np.inf
        value[e[a:b] <= 0] = 0.0  # λ⁺ = 0: nothing loads
        out[a:b] = value
    return out


def _caps(loading: np.ndarray, n: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """e(D) ≥ max λ⁺(d; D)/d and M(D) ≥ max λ⁺(d; D) over d ≤ D − N + 1, for D = N..C.

    Each row is read over d ≤ C − N + 1 (a superset: only looser), an O((C − N)²) block.
    """
    width = capacity - n + 1
    block = loading[n : capacity + 1, 1 : width + 1]  # max(x⁺) = max(x)⁺
    return (np.maximum((block / np.arange(1, width + 1)).max(axis=1), 0.0),
            np.maximum(block.max(axis=1), 0.0))


class FairAllocator:
    """``fair`` for one loading table, keeping what depends on the table alone between calls.

    ``allocate(jobs, C, previous=...)`` re-solves exactly; the cache holds each D's prepared
    row λ(·; D) — never a previous answer. The table must not change while the solver
    lives (make a new one for a new table).
    """

    def __init__(self, loading, alpha: float = DEFAULT_ALPHA):
        self.loading = np.asarray(loading, dtype=float)
        self.alpha = check_alpha(alpha)
        self._rows: dict[int, _Row] = {}

    def _row(self, node: int) -> _Row:
        row = self._rows.get(node)
        if row is None:
            row = self._rows[node] = _prepare(self.loading[node, : node + 1])
        return row

    def allocate(self, jobs: Sequence, capacity: int,
                 previous: Mapping[str, int] | None = None) -> dict[str, int]:
        """{name: d_i}; C < N queues as every policy does (one worker for the first C)."""
        names = [j.name for j in jobs]
        if capacity < len(names):
            return {name: int(i < capacity) for i, name in enumerate(names)}
        if not names:
            return {}
        mu = np.fromiter((j.training_rate for j in jobs), float, len(names))
        hint = sum(previous.values()) if previous else None
        plan = self.solve(mu, capacity, hint)
        return dict(zip(names, plan.tolist(), strict=True))

    def solve(self, mu: np.ndarray, capacity: int, hint: int | None = None) -> np.ndarray:
        """The plan as an array (C ≥ N ≥ 1); ``hint``: a node total to prefer among ties."""
        n, table = len(mu), self.loading
        t = fair_targets(balance_rates(mu, capacity, table), self.alpha)
        pos = np.maximum(mu, 0.0)  # min(μ, λ) ≤ min(μ⁺, λ⁺): bounds on the clipped values
        e, top = _caps(table, n, capacity)
        bounds = _bounds(pos, t, e, top)
        slack = 1e-9 * max(1.0, float(pos.sum()))
        order = np.argsort(-np.floor(bounds / slack), kind="stable")  # ties: smaller D first
        if hint is not None:  # a tie-break: the previous total first if its bound is the best
            h = min(max(int(hint), n), capacity) - n
            if bounds[h] >= bounds[order[0]] - slack:
                order = np.concatenate([[h], order[order != h]])
        best, best_plan, best_total = -math.inf, None, 0
        for k in order.tolist():
            node = n + k
            if best_plan is not None:
                if bounds[k] < best - 2 * slack:
                    break  # the rest are sorted by bound (to a slack): none beats the best
                if bounds[k] <= best + slack and node >= best_total:
                    continue  # at most a tie, and with no fewer workers
            elif bounds[k] == -math.inf:
                break  # no D fits (only when λ grows with D somewhere): balance
            row = self._row(node)
            plan = (_threshold_plan(mu, t, row, node) if row.fast
                    else _masked_dp(mu, t, row.values, node))
            if plan is None:
                continue
            total = int(plan.sum())
            rates = np.minimum(mu, table[total, plan])
            if total > capacity or np.any(rates < t):
                continue  # only if λ grows with D somewhere: never return an unfair plan
            value = float(rates.sum())
            scale = max(1.0, abs(best)) if best_plan is not None else 1.0
            if (best_plan is None or value > best + 1e-12 * scale
                    or (abs(value - best) <= 1e-9 * scale and total < best_total)):
                best, best_plan, best_total = value, plan, total
        return best_plan if best_plan is not None else balance_plan(n, capacity)


def fair(jobs: Sequence, capacity: int, loading, alpha: float = DEFAULT_ALPHA, *,
         previous: Mapping[str, int] | None = None) -> dict[str, int]:
    """max Σ min(B_i·μ_i, λ(d_i; Σd)) s.t. each T_i ≥ α·b_i (b_i: its rate under balance).

    Exact; ties go to fewer workers. ``previous``: the last allocation, whose node total is
    tried first when no other D has a higher bound. For repeated calls on one table keep a
    :class:`FairAllocator` (it keeps each λ(·; D) prepared).
    """
    return FairAllocator(loading, alpha).allocate(jobs, capacity, previous)
