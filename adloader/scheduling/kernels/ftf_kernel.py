# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The loops of ``ftf``: the priority plan max Σ ρ^k·T_k(d_k; D), the forward run that
re-plans it at every completion, and balance's fluid run. A node's tens of jobs make these
loops, not array sizes, the cost: compiled, one plan at 17 jobs × 64 workers takes
microseconds, a whole forward run tens.

One source, run two ways (``scheduling.kernels.loops`` says which): compiled by Cython where
the install has a C compiler (its pure-Python mode: C types in annotations and ``cython.*``),
else as plain Python, the same results bit for bit — the same IEEE operations in the same
order (Python's float is C's double; ``min``/``max`` keep the first of equals both ways) —
only slower. Compiled, the loops read numpy arrays through typed memoryviews; in plain Python
they read lists (``adloader.scheduling.kernels.plain``), which the public functions make: nothing
else differs. Integers stay inside C's range but for a NaN rate (a broken prediction): its
step count is the least ``long long`` both ways (what x86 makes of a NaN cast), and the
totals it reaches are NaN both ways, so the plan is the same
(``tests/unit/scheduling/policies/test_loops_fallback.py``).

The plan, per node total D = N..C (E = D − N workers beyond one each), then the best D
(the first within 1e-9 of the most: ties to fewer workers); the scan stops at the first D
that reaches Σ ρ^k·μ_k, which no plan beats:

- **rows linear in d**, λ(d; D) = a(D) + g(D)·(d − 1): job k's gains are ⌊(μ_k − a)/g⌋
  equal steps ρ^k·g and one partial step. Steps come in rank order (ρ^k falls) and only a
  partial step of an earlier job can come before job k's, so the E largest gains are a
  merge that reads each job when it reaches it (ties: the step first, then the earlier
  job). Exact.
- **concave rows**: each job's gains ρ^k·ΔT_k(d; D) fall along its row, so the E largest
  are a merge of N falling sequences. Exact on concave rows.
"""

from __future__ import annotations

import numpy as np

try:
    import cython
except ModuleNotFoundError:  # no Cython installed: plain Python, its few names stood in
    from adloader.scheduling.kernels import plain as cython

from adloader.scheduling.kernels.plain import RowLists, floats

COMPILED = cython.compiled
EPS = cython.declare(cython.double, 1e-9)
INF = cython.declare(cython.double, float("inf"))
NAN_CAST = cython.declare(cython.longlong, np.iinfo(np.int64).min)  # a NaN as x86 casts it


@cython.cfunc
def _filled(n: cython.Py_ssize_t, value, dtype) -> object:
    """``n`` times ``value`` for the loops to write: a numpy array where compiled, else a
    list."""
    if cython.compiled:
        return np.zeros(n, dtype=dtype) if value == 0 else np.full(n, value, dtype=dtype)
    else:
        return [value] * n


@cython.cfunc
def _copy(values, dtype) -> object:
    """A copy of ``values`` for the loops: a numpy array where compiled, else a list."""
    if cython.compiled:
        return np.array(values, dtype=dtype)
    else:
        return np.asarray(values, dtype=dtype).tolist()


@cython.cfunc
def _best(total: cython.double[::1], count: cython.Py_ssize_t) -> cython.Py_ssize_t:
    """The first index (of ``count``) within 1e-9 of the most."""
    i: cython.Py_ssize_t
    top: cython.double = -INF
    tol: cython.double
    for i in range(count):
        if total[i] > top:
            top = total[i]
    tol = 1e-9 * max(1.0, abs(top))
    for i in range(count):
        if total[i] >= top - tol:
            return i
    return 0


@cython.cfunc
def _largest(part: cython.double[::1], below: cython.Py_ssize_t) -> cython.Py_ssize_t:
    """The largest partial step waiting among jobs < ``below`` (the earlier among equals);
    -1 when none."""
    j: cython.Py_ssize_t
    best: cython.Py_ssize_t = -1
    for j in range(below):
        if part[j] > 0 and (best < 0 or part[j] > part[best]):
            best = j
    return best


@cython.cfunc
def _linear_at(mu: cython.double[::1], n: cython.Py_ssize_t, w: cython.double[::1],
               a: cython.double, g: cython.double, extra: cython.longlong,
               d: cython.longlong[::1], part: cython.double[::1]) -> cython.double:
    """Σ ρ^k·T_k of the best plan at one D on linear rows (the first ``n`` jobs); that
    plan's workers into ``d``."""
    k: cython.Py_ssize_t
    best: cython.Py_ssize_t = -1
    total: cython.double = 0.0
    step: cython.double
    room: cython.double
    q: cython.double
    p: cython.double
    left: cython.longlong = extra
    full: cython.longlong
    take: cython.longlong
    for k in range(n):
        total += w[k] * min(mu[k], a)
        d[k] = 1
    k = 0
    while left > 0:
        step = w[k] * g if k < n else 0.0
        if step > EPS and (best < 0 or step >= part[best]):  # equal: the step first
            room = max(mu[k] - a, 0.0)
            q = room / g  # whole steps ⌊q⌋; past E only E count (no cast overflow)
            if q >= extra:
                full = extra
            elif q == q:
                full = int(q)  # toward zero (compiled: a C cast)
                if full > q:
                    full -= 1  # ⌊q⌋ below zero
            else:
                full = NAN_CAST  # a NaN μ or row
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


@cython.cfunc
def _concave_at(mu: cython.double[::1], n: cython.Py_ssize_t, w: cython.double[::1],
                row: cython.double[::1], node: cython.Py_ssize_t, extra: cython.longlong,
                d: cython.longlong[::1]) -> cython.double:
    """Σ ρ^k·T_k of the best plan at one D on concave rows (λ(·; D) = ``row``, the first
    ``n`` jobs); its workers into ``d``."""
    k: cython.Py_ssize_t
    best: cython.Py_ssize_t
    total: cython.double = 0.0
    gain: cython.double
    up: cython.double
    _e: cython.longlong
    for k in range(n):
        total += w[k] * min(mu[k], row[1])
        d[k] = 1
    for _e in range(extra):
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


@cython.cfunc
def _plan(mu: cython.double[::1], n: cython.Py_ssize_t, rho: cython.double,
          table: cython.double[:, ::1], capacity: cython.longlong, linear: cython.bint,
          a: cython.double[::1], g: cython.double[::1], d: cython.longlong[::1],
          w: cython.double[::1], part: cython.double[::1],
          total: cython.double[::1]) -> cython.void:
    """The priority plan of the first ``n`` jobs of ``mu`` into ``d`` (scratch: ``w``,
    ``part``, ``total``)."""
    k: cython.Py_ssize_t
    node: cython.Py_ssize_t
    count: cython.Py_ssize_t
    most: cython.double = 0.0
    reached: cython.double
    if capacity < n:
        for k in range(n):
            d[k] = 1 if k < capacity else 0
        return
    for k in range(n):
        w[k] = rho ** k
        most += w[k] * mu[k]
    reached = most - 1e-9 * max(1.0, abs(most))  # no plan beats Σ ρ^k·μ_k: stop there
    count = capacity - n + 1
    for k in range(count):
        total[k] = -INF
    for node in range(n, capacity + 1):
        if linear:
            total[node - n] = _linear_at(mu, n, w, a[node], g[node], node - n, d, part)
        else:
            total[node - n] = _concave_at(mu, n, w, table[node], node, node - n, d)
        if total[node - n] >= reached:
            break
    node = n + _best(total, count)
    if linear:
        _linear_at(mu, n, w, a[node], g[node], node - n, d, part)
    else:
        _concave_at(mu, n, w, table[node], node, node - n, d)


def plan(mu: cython.double[::1], rho: cython.double, table: cython.double[:, ::1],
         capacity: cython.longlong, linear: cython.bint, a: cython.double[::1],
         g: cython.double[::1]) -> np.ndarray:
    """Workers for jobs given in priority order: max Σ ρ^k·T_k, one worker each (the first
    C when C < N). ``linear``: rows a + g·(d − 1) (``a``, ``g`` by D), else concave rows."""
    n: cython.Py_ssize_t = len(mu)
    if not cython.compiled:  # plain Python: the loops read lists
        mu, a, g = floats(mu), floats(a), floats(g)
        table = RowLists(np.asarray(table, dtype=np.float64))
        rho, capacity, linear = float(rho), int(capacity), bool(linear)
    d = _filled(n, 0, np.int64)
    _plan(mu, n, rho, table, capacity, linear, a, g, d, _filled(n, 0.0, np.float64),
          _filled(n, 0.0, np.float64), _filled(max(capacity + 1, 1), 0.0, np.float64))
    return np.asarray(d, dtype=np.int64)


def forward(mu: cython.double[::1], remaining, table: cython.double[:, ::1],
            capacity: cython.longlong, order, window: cython.double, rho: cython.double,
            linear: cython.bint, a: cython.double[::1],
            g: cython.double[::1]) -> tuple[np.ndarray, np.ndarray]:
    """(completion of each job from now, the plan now) when the priority plan runs the jobs
    in ``order`` to the end, re-planned ``window`` s after each completion (0: at once)."""
    n: cython.Py_ssize_t = len(mu)
    m: cython.Py_ssize_t = n
    i: cython.Py_ssize_t
    k: cython.Py_ssize_t
    kept: cython.Py_ssize_t
    node: cython.longlong
    t: cython.double = 0.0
    until: cython.double = -INF
    dt: cython.double
    need: cython.double
    have_first: cython.bint = False
    if not cython.compiled:  # plain Python: the loops read lists
        mu, a, g = floats(mu), floats(a), floats(g)
        table = RowLists(np.asarray(table, dtype=np.float64))
        capacity, window, rho, linear = int(capacity), float(window), float(rho), bool(linear)
    ends_a, first_a = _filled(n, INF, np.float64), _filled(n, 0, np.int64)
    ends: cython.double[::1] = ends_a
    first: cython.longlong[::1] = first_a
    left: cython.double[::1] = _copy(remaining, np.float64)
    alive: cython.longlong[::1] = _copy(order, np.int64)
    workers: cython.longlong[::1] = _filled(n, 0, np.int64)  # the plan in force; 0: done
    got: cython.longlong[::1] = _filled(n, 0, np.int64)
    sub: cython.double[::1] = _filled(n, 0.0, np.float64)
    rate: cython.double[::1] = _filled(n, 0.0, np.float64)
    w: cython.double[::1] = _filled(n, 0.0, np.float64)
    part: cython.double[::1] = _filled(n, 0.0, np.float64)
    total: cython.double[::1] = _filled(max(capacity + 1, 1), 0.0, np.float64)
    row: cython.double[::1]
    while m > 0:
        if t >= until - EPS:
            for k in range(n):
                workers[k] = 0
            for i in range(m):
                sub[i] = mu[alive[i]]
            _plan(sub, m, rho, table, capacity, linear, a, g, got, w, part, total)
            for i in range(m):
                workers[alive[i]] = got[i]
            if not have_first:
                first[:] = workers
                have_first = True
            until = INF
        node = 0
        for k in range(n):
            node += workers[k]
        row = table[node]
        dt = until - t
        for i in range(m):
            k = alive[i]
            rate[i] = min(mu[k], row[workers[k]]) if workers[k] > 0 else 0.0
            if rate[i] > 0:
                dt = min(dt, left[k] / max(rate[i], EPS))
        if not -INF < dt < INF:
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
    return np.asarray(ends_a, dtype=np.float64), np.asarray(first_a, dtype=np.int64)


def balance_run(cap: cython.double[::1], left_in, table: cython.double[:, ::1],
                capacity: cython.longlong, t: cython.double,
                until: cython.double) -> tuple[np.ndarray, np.ndarray]:
    """Balance from ``t`` to ``until`` (inf: to the end) over jobs in their order, each at
    min(cap_i, λ(bal_i; C)) among those left (C // M each, one more for the first C mod M;
    one each to the first C when C < M): (each end, inf if not reached; samples left)."""
    n: cython.Py_ssize_t = len(cap)
    m: cython.Py_ssize_t = n
    k: cython.Py_ssize_t
    base: cython.longlong
    more: cython.longlong
    rank: cython.longlong
    dk: cython.longlong
    dt: cython.double
    need: cython.double
    moving: cython.bint
    if not cython.compiled:  # plain Python: the loops read lists
        cap, table = floats(cap), RowLists(np.asarray(table, dtype=np.float64))
        capacity, t, until = int(capacity), float(t), float(until)
    ends_a, left_a = _filled(n, INF, np.float64), _copy(left_in, np.float64)
    ends: cython.double[::1] = ends_a
    left: cython.double[::1] = left_a
    rate: cython.double[::1] = _filled(n, 0.0, np.float64)
    alive: cython.longlong[::1] = _filled(n, 1, np.int64)
    row: cython.double[::1]
    while m > 0 and t < until:
        row = table[capacity]
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
                    rate[k] = min(cap[k], row[dk])
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
                    alive[k] = 0
                    m -= 1
                else:
                    left[k] -= rate[k] * dt
    return np.asarray(ends_a, dtype=np.float64), np.asarray(left_a, dtype=np.float64)
