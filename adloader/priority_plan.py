"""The priority plan behind ``ftf``: max Σ ρ^k·T_k(d_k; Σd) over the jobs in priority order.

T_k(d; D) = min(B_k·μ_k, λ(d; D)), k the job's rank, one worker each at least. Near 1, ρ
keeps the node's total nearly the most it can be and, among such plans, gives the earlier
job more. Two exact ways, chosen per table:

- **any concave rows** (``general_plan``): per node total D the D − N largest weighted
  gains ρ^k·ΔT_k(d; D) (a prefix of each job's row) — every D at once, one sort of
  N·(C − N) gains a D — and the best D wins, ties to fewer workers;
- **rows linear in d** (``linear_plan``; the staged TPM's proportional share
  λ(d; D) = d/D·L(D) is): λ(d; D) = a(D) + g(D)·(d − 1), so job k's gains are ⌊(μ_k − a)/g⌋
  equal steps ρ^k·g and one partial step — 2N groups a D instead of N·(C − N) gains.

``PlanCache`` keeps the plans asked for on one table: ``ftf``'s forward runs ask for the
plan of the same jobs again and again (each completion leaves a set that the next order,
the next decision and the planner's GPU-share passes ask for too).
"""

from __future__ import annotations

import weakref

import numpy as np

EPS = 1e-9
LINEAR_TOL = 1e-9  # relative: a row is linear when every step equals its first within this


def linear_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, g) with λ(d; D) = a[D] + g[D]·(d − 1) for 1 ≤ d ≤ D and g ≥ 0, or None when any
    row D ≥ 2 is not so."""
    size = table.shape[0]
    if size < 3 or table.shape[1] < size:
        return None
    a = table[:, 1].astype(float).copy()
    g = np.zeros(size)
    g[2:] = table[2:, 2] - table[2:, 1]
    d = np.arange(size)[None, :]
    node = np.arange(size)[:, None]
    inside = (d >= 1) & (d <= node)
    expect = a[:, None] + g[:, None] * (d - 1)
    scale = LINEAR_TOL * (1.0 + np.abs(table).max())
    if (g < -scale).any() or (np.abs(np.where(inside, table - expect, 0.0)) > scale).any():
        return None
    return a, np.maximum(g, 0.0)


def general_plan(mu: np.ndarray, table: np.ndarray, capacity: int,
                 rho: float = 0.99) -> np.ndarray:
    """The priority plan on any concave rows (see the module); exact there."""
    n = len(mu)
    if capacity < n:
        return (np.arange(n) < capacity).astype(np.int64)
    w = rho ** np.arange(n)
    width = capacity - n + 1  # the most workers one job can have
    rows = table[n : capacity + 1, 1 : width + 1]  # λ(d; D), D = N..C, d = 1..width
    rate = np.minimum(mu[None, :, None], rows[:, None, :])
    base = (w[None, :] * rate[:, :, 0]).sum(axis=1)  # one worker each
    if width > 1:  # every D at once: the D − N largest weighted gains, valued at λ(·; D)
        gain = w[None, :, None] * np.diff(rate, axis=2)
        k = np.arange(len(rows))
        gain = np.where(np.arange(width - 1)[None, None, :] < k[:, None, None], gain, 0.0)
        top = -np.sort(-np.maximum(gain.reshape(len(rows), -1), 0.0), axis=1)
        cum = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(top, axis=1)], axis=1)
        base = base + cum[k, np.minimum(k, cum.shape[1] - 1)]
    node = n + _best(base)
    rate = np.minimum(mu[:, None], table[node, 1 : node + 1][None, :])  # that D's plan
    gain = w[:, None] * np.diff(rate, axis=1)
    d = np.ones(n, dtype=np.int64)
    if gain.size:  # equal gains: the smaller d first, so each job's taken is a prefix
        gain -= np.arange(gain.shape[1])[None, :] * 1e-12 * (1.0 + abs(gain).max())
        flat = gain.ravel()
        take = min(node - n, int(np.count_nonzero(flat > EPS)))
        if take > 0:
            chosen = np.argpartition(-flat, take - 1)[:take]
            d += np.bincount(chosen // gain.shape[1], minlength=n)
    return d


def linear_plan(mu: np.ndarray, a: np.ndarray, g: np.ndarray, capacity: int,
                rho: float = 0.99) -> np.ndarray:
    """The priority plan on rows λ(d; D) = a[D] + g[D]·(d − 1) (``linear_rows``); exact."""
    n = len(mu)
    if capacity < n:
        return (np.arange(n) < capacity).astype(np.int64)
    w = rho ** np.arange(n)
    a, g = a[n : capacity + 1, None], g[n : capacity + 1, None]  # D = N..C
    extra = np.arange(capacity - n + 1)  # workers beyond one each at D
    room = np.maximum(mu[None, :] - a, 0.0)  # what one job could still gain over a
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.where(g > EPS, np.floor(room / np.where(g > EPS, g, 1.0)), 0.0)
    steps = np.minimum(steps, extra[:, None])
    partial = np.where(steps < extra[:, None], room - steps * g, 0.0)
    partial = np.where(g > EPS, np.minimum(partial, g), 0.0)
    value = np.concatenate([np.broadcast_to(w * g, steps.shape), w * partial], axis=1)
    count = np.concatenate([steps, (partial > EPS).astype(float)], axis=1)
    count = np.where(value > EPS, count, 0.0)
    order = np.argsort(-value, axis=1, kind="stable")  # earlier rank first among equals
    value = np.take_along_axis(value, order, axis=1)
    count = np.take_along_axis(count, order, axis=1)
    before = np.cumsum(count, axis=1) - count  # steps of the groups ahead of each
    taken = np.clip(extra[:, None] - before, 0.0, count)
    total = (w * np.minimum(mu[None, :], a)).sum(axis=1) + (taken * value).sum(axis=1)
    best = _best(total)
    d = np.ones(n, dtype=np.int64)
    np.add.at(d, order[best] % n, taken[best].astype(np.int64))
    return d


def _best(total: np.ndarray) -> int:
    """The first (fewest workers) index within 1e-9 of the most."""
    top = float(total.max())
    return int(np.argmax(total >= top - 1e-9 * max(1.0, abs(top))))


def priority_plan(mu: np.ndarray, table: np.ndarray, capacity: int,
                  rho: float = 0.99) -> np.ndarray:
    """Workers for jobs given in priority order: max Σ ρ^k·T_k, one worker each (the first
    C when C < N). Exact on concave rows; linear ones take the fast way."""
    return PlanCache.of(np.asarray(table, dtype=float), capacity).plan(mu, rho)


class PlanCache:
    """Priority plans on one table and capacity, by (ρ, μ in priority order); at most
    ``LIMIT`` kept (then started afresh). ``of`` keeps one a table while the table lives."""

    LIMIT = 4096
    _by_table: dict[int, tuple[weakref.ref, tuple, PlanCache]] = {}

    def __init__(self, table: np.ndarray, capacity: int):
        self.table, self.capacity = table, int(capacity)
        size = min(table.shape[0], self.capacity + 1)
        self.rows = linear_rows(table[:size, :size]) if size == self.capacity + 1 else None
        self._plans: dict[tuple[float, bytes], np.ndarray] = {}

    @classmethod
    def of(cls, table: np.ndarray, capacity: int) -> PlanCache:
        """The cache of this very array (same object, shape, capacity and sum), made anew
        when the array was freed or changed."""
        stamp = (table.shape, int(capacity), float(table.sum()))
        held = cls._by_table.get(id(table))
        if held is not None and held[0]() is table and held[1] == stamp:
            return held[2]
        cache = cls(table, capacity)
        cls._by_table = {k: v for k, v in cls._by_table.items() if v[0]() is not None}
        cls._by_table[id(table)] = (weakref.ref(table), stamp, cache)
        return cache

    def plan(self, mu: np.ndarray, rho: float = 0.99) -> np.ndarray:
        mu = np.ascontiguousarray(mu, dtype=float)
        key = (float(rho), mu.tobytes())
        got = self._plans.get(key)
        if got is None:
            if len(self._plans) >= self.LIMIT:
                self._plans.clear()
            if self.rows is not None:
                got = linear_plan(mu, *self.rows, self.capacity, rho)
            else:
                got = general_plan(mu, self.table, self.capacity, rho)
            got.setflags(write=False)
            self._plans[key] = got
        return got
