"""The loops of ``ftf`` in plain Python: ``ftf_kernel`` (Cython) statement for statement, used
where that module was not built (an install without a C compiler). Same arguments, same
results bit for bit — the same IEEE operations in the same order (Python's float is C's
double; ``min``/``max`` keep the first of equals as Cython's do) — only slower; see
``ftf_kernel.pyx`` for what each loop computes and ``adloader.scheduling.loops`` for which
one runs.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-9
INF = math.inf
NAN_CAST = -(1 << 63)  # what x86 makes of a NaN cast to long long (a NaN rate: μ_k is NaN)


class _RowLists(dict):
    """λ(·; D) as a list, made on first use: a decision reads a few rows of a large table."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def __missing__(self, node: int) -> list[float]:
        row = self[node] = self.table[node].tolist()
        return row


def _best(total: list[float]) -> int:
    """The first index within 1e-9 of the most."""
    top = -INF
    for x in total:
        if x > top:
            top = x
    tol = 1e-9 * max(1.0, math.fabs(top))
    for i, x in enumerate(total):
        if x >= top - tol:
            return i
    return 0


def _largest(part: list[float], below: int) -> int:
    """The largest partial step waiting among jobs < ``below`` (the earlier among equals);
    -1 when none."""
    best = -1
    for j in range(below):
        if part[j] > 0 and (best < 0 or part[j] > part[best]):
            best = j
    return best


def _linear_at(mu, w, a: float, g: float, extra: int, d: list[int], part: list[float]) -> float:
    """Σ ρ^k·T_k of the best plan at one D on linear rows; that plan's workers into ``d``."""
    n = len(mu)
    best = -1
    total = 0.0
    left = extra
    for k in range(n):
        total += w[k] * min(mu[k], a)
        d[k] = 1
    k = 0
    while left > 0:
        step = w[k] * g if k < n else 0.0
        if step > EPS and (best < 0 or step >= part[best]):  # equal: the step first
            room = max(mu[k] - a, 0.0)
            q = room / g  # whole steps: floor(q), or E when q ≥ E (an integer: same test)
            full = extra if q >= extra else int(math.floor(q)) if q == q else NAN_CAST
            take = min(full, left)
            total += take * step
            d[k] += take
            left -= take
            p = min(room - full * g, g) if full < extra else 0.0
            part[k] = w[k] * p if (p > EPS and w[k] * p > EPS) else -1.0
            if part[k] > 0 and (best < 0 or part[k] > part[best]):
                best = k
            k += 1
        elif best >= 0:
            total += part[best]
            d[best] += 1
            left -= 1
            part[best] = -1.0
            best = _largest(part, k)
        else:
            break
    return total


def _concave_at(mu, w, rows: _RowLists, node: int, extra: int, d: list[int]) -> float:
    """Σ ρ^k·T_k of the best plan at one D on concave rows (λ(·; D) = ``rows[node]``); its
    workers into ``d``."""
    n = len(mu)
    row = rows[node]
    total = 0.0
    for k in range(n):
        total += w[k] * min(mu[k], row[1])
        d[k] = 1
    for _ in range(extra):
        best, gain = -1, EPS
        for k in range(n):
            if d[k] + 1 <= node:
                up = w[k] * (min(mu[k], row[d[k] + 1]) - min(mu[k], row[d[k]]))
                if up > gain:
                    best, gain = k, up
        if best < 0:
            break
        total += gain
        d[best] += 1
    return total


def _plan(mu: list[float], rho: float, rows: _RowLists, capacity: int, linear: bool,
          a: list[float], g: list[float], d: list[int]) -> None:
    """The priority plan of ``mu`` into ``d``."""
    n = len(mu)
    if capacity < n:
        for k in range(n):
            d[k] = 1 if k < capacity else 0
        return
    w = [0.0] * n
    part = [0.0] * n
    most = 0.0
    for k in range(n):
        w[k] = rho ** float(k)
        most += w[k] * mu[k]
    reached = most - 1e-9 * max(1.0, math.fabs(most))  # no plan beats Σ ρ^k·μ_k: stop there
    span = [-INF] * (capacity - n + 1)
    for node in range(n, capacity + 1):
        if linear:
            span[node - n] = _linear_at(mu, w, a[node], g[node], node - n, d, part)
        else:
            span[node - n] = _concave_at(mu, w, rows, node, node - n, d)
        if span[node - n] >= reached:
            break
    node = n + _best(span)
    if linear:
        _linear_at(mu, w, a[node], g[node], node - n, d, part)
    else:
        _concave_at(mu, w, rows, node, node - n, d)


def _floats(x) -> list[float]:
    return np.asarray(x, dtype=np.float64).tolist()


def plan(mu, rho: float, table, capacity: int, linear: bool, a, g) -> np.ndarray:
    """Workers for jobs given in priority order: max Σ ρ^k·T_k, one worker each (the first
    C when C < N). ``linear``: rows a + g·(d − 1) (``a``, ``g`` by D), else concave rows."""
    mu_l = _floats(mu)
    d = [0] * len(mu_l)
    _plan(mu_l, float(rho), _RowLists(np.asarray(table, dtype=np.float64)), int(capacity),
          bool(linear), _floats(a), _floats(g), d)
    return np.array(d, dtype=np.int64)


def forward(mu, remaining, table, capacity: int, order, window: float, rho: float,
            linear: bool, a, g) -> tuple[np.ndarray, np.ndarray]:
    """(completion of each job from now, the plan now) when the priority plan runs the jobs
    in ``order`` to the end, re-planned ``window`` s after each completion (0: at once)."""
    mu_l, left = _floats(mu), _floats(remaining)
    rows = _RowLists(np.asarray(table, dtype=np.float64))
    a_l, g_l = _floats(a), _floats(g)
    capacity, window, rho, linear = int(capacity), float(window), float(rho), bool(linear)
    n = len(mu_l)
    m = n
    t, until = 0.0, -INF
    first: list[int] | None = None
    ends = [INF] * n
    alive = [int(k) for k in np.asarray(order).tolist()]
    workers = [0] * n  # the plan in force; 0: done
    rate = [0.0] * n
    while m > 0:
        if t >= until - EPS:
            workers = [0] * n
            got = [0] * m
            _plan([mu_l[alive[i]] for i in range(m)], rho, rows, capacity, linear, a_l, g_l,
                  got)
            for i in range(m):
                workers[alive[i]] = got[i]
            if first is None:
                first = list(workers)
            until = INF
        row = rows[sum(workers)]
        dt = until - t
        for i in range(m):
            k = alive[i]
            rate[i] = min(mu_l[k], row[workers[k]]) if workers[k] > 0 else 0.0
            if rate[i] > 0:
                dt = min(dt, left[k] / max(rate[i], EPS))
        if not math.isfinite(dt):
            break  # nothing runs (C = 0): every end stays inf
        t += dt
        kept = 0
        for i in range(m):
            k = alive[i]
            need = left[k] / max(rate[i], EPS) if rate[i] > 0 else INF
            left[k] -= rate[i] * dt
            if need <= dt * (1 + 1e-12) + EPS:
                ends[k] = t
                workers[k] = 0
            else:
                alive[kept] = k
                kept += 1
        if kept < m:
            until = t + window if window > 0 else -INF
        m = kept
    return (np.array(ends, dtype=np.float64),
            np.array(first if first is not None else [0] * n, dtype=np.int64))


def balance_run(cap, left_in, table, capacity: int, t: float,
                until: float) -> tuple[np.ndarray, np.ndarray]:
    """Balance from ``t`` to ``until`` (inf: to the end) over jobs in their order, each at
    min(cap_i, λ(bal_i; C)) among those left (C // M each, one more for the first C mod M;
    one each to the first C when C < M): (each end, inf if not reached; samples left)."""
    cap_l, left = _floats(cap), _floats(left_in)
    capacity, t, until = int(capacity), float(t), float(until)
    n = len(cap_l)
    m = n
    ends = [INF] * n
    rate = [0.0] * n
    alive = [True] * n
    row = np.asarray(table, dtype=np.float64)[capacity].tolist() if n else []
    while m > 0 and t < until:
        if capacity >= m:
            base, more = capacity // m, capacity % m
        else:
            base, more = 0, capacity
        rank, dt, moving = 0, until - t, False
        for k in range(n):
            rate[k] = 0.0
            if alive[k]:
                dk = base + (1 if rank < more else 0)
                rank += 1
                if dk > 0:
                    rate[k] = min(cap_l[k], row[dk])
                if rate[k] > 0:
                    moving = True
                    dt = min(dt, left[k] / max(rate[k], EPS))
        if not moving:
            break
        t += dt
        for k in range(n):
            if alive[k]:
                need = left[k] / max(rate[k], EPS) if rate[k] > 0 else INF
                if need <= dt * (1 + 1e-12) + EPS:
                    ends[k] = t
                    left[k] = 0.0
                    alive[k] = False
                    m -= 1
                else:
                    left[k] -= rate[k] * dt
    return np.array(ends, dtype=np.float64), np.array(left, dtype=np.float64)
