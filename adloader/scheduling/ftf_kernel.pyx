# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled loops of ``ftf`` (Cython, built on install): the priority plan
max Σ ρ^k·T_k(d_k; D), the forward run that re-plans it at every completion, and balance's
fluid run. A node's tens of jobs make these loops, not array sizes, the cost: compiled, one
plan at 17 jobs × 64 workers takes microseconds, a whole forward run tens.

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

import numpy as np

from libc.math cimport INFINITY, fabs, floor, isfinite

cdef double EPS = 1e-9


cdef Py_ssize_t _best(double[::1] total):
    """The first index within 1e-9 of the most."""
    cdef Py_ssize_t i
    cdef double top = -INFINITY
    for i in range(total.shape[0]):
        if total[i] > top:
            top = total[i]
    cdef double tol = 1e-9 * max(1.0, fabs(top))
    for i in range(total.shape[0]):
        if total[i] >= top - tol:
            return i
    return 0


cdef Py_ssize_t _largest(double[::1] part, Py_ssize_t below):
    """The largest partial step waiting among jobs < ``below`` (the earlier among equals);
    -1 when none."""
    cdef Py_ssize_t j, best = -1
    for j in range(below):
        if part[j] > 0 and (best < 0 or part[j] > part[best]):
            best = j
    return best


cdef double _linear_at(double[::1] mu, double[::1] w, double a, double g, long long extra,
                       long long[::1] d, double[::1] part):
    """Σ ρ^k·T_k of the best plan at one D on linear rows; that plan's workers into ``d``."""
    cdef Py_ssize_t n = mu.shape[0], k, best = -1
    cdef double total = 0.0, step, room, p
    cdef long long left = extra, full, take
    for k in range(n):
        total += w[k] * min(mu[k], a)
        d[k] = 1
    k = 0
    while left > 0:
        step = w[k] * g if k < n else 0.0
        if step > EPS and (best < 0 or step >= part[best]):  # equal: the step first
            room = max(mu[k] - a, 0.0)
            p = floor(room / g)  # whole steps; past E only E count (and no cast overflow)
            full = extra if p >= extra else <long long>p
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


cdef double _concave_at(double[::1] mu, double[::1] w, double[:, ::1] table, Py_ssize_t node,
                        long long extra, long long[::1] d):
    """Σ ρ^k·T_k of the best plan at one D on concave rows (λ(·; D) = ``table[node]``); its
    workers into ``d``."""
    cdef Py_ssize_t n = mu.shape[0], k, best
    cdef double total = 0.0, gain, up
    cdef long long e
    for k in range(n):
        total += w[k] * min(mu[k], table[node, 1])
        d[k] = 1
    for e in range(extra):
        best, gain = -1, EPS
        for k in range(n):
            if d[k] + 1 <= node:
                up = w[k] * (min(mu[k], table[node, d[k] + 1]) - min(mu[k], table[node, d[k]]))
                if up > gain:
                    best, gain = k, up
        if best < 0:
            break
        total += gain
        d[best] += 1
    return total


cdef void _plan(double[::1] mu, double rho, double[:, ::1] table, long long capacity,
                bint linear, double[::1] a, double[::1] g, long long[::1] d,
                double[::1] w, double[::1] part, double[::1] total):
    """The priority plan of ``mu`` into ``d`` (scratch: ``w``, ``part``, ``total``)."""
    cdef Py_ssize_t n = mu.shape[0], k, node
    cdef double most = 0.0, reached
    if capacity < n:
        for k in range(n):
            d[k] = 1 if k < capacity else 0
        return
    for k in range(n):
        w[k] = rho ** k
        most += w[k] * mu[k]
    reached = most - 1e-9 * max(1.0, fabs(most))  # no plan beats Σ ρ^k·μ_k: stop there
    cdef double[::1] span = total[: capacity - n + 1]
    span[:] = -INFINITY
    for node in range(n, capacity + 1):
        if linear:
            span[node - n] = _linear_at(mu, w, a[node], g[node], node - n, d, part)
        else:
            span[node - n] = _concave_at(mu, w, table, node, node - n, d)
        if span[node - n] >= reached:
            break
    node = n + _best(span)
    if linear:
        _linear_at(mu, w, a[node], g[node], node - n, d, part)
    else:
        _concave_at(mu, w, table, node, node - n, d)


def plan(double[::1] mu, double rho, double[:, ::1] table, long long capacity, bint linear,
         double[::1] a, double[::1] g):
    """Workers for jobs given in priority order: max Σ ρ^k·T_k, one worker each (the first
    C when C < N). ``linear``: rows a + g·(d − 1) (``a``, ``g`` by D), else concave rows."""
    n = mu.shape[0]
    d = np.zeros(n, dtype=np.int64)
    _plan(mu, rho, table, capacity, linear, a, g, d, np.empty(n), np.empty(n),
          np.empty(max(capacity + 1, 1)))
    return d


def forward(double[::1] mu, double[::1] remaining, double[:, ::1] table, long long capacity,
            long long[::1] order, double window, double rho, bint linear, double[::1] a,
            double[::1] g):
    """(completion of each job from now, the plan now) when the priority plan runs the jobs
    in ``order`` to the end, re-planned ``window`` s after each completion (0: at once)."""
    cdef Py_ssize_t n = mu.shape[0], m = n, i, k, kept
    cdef long long node
    cdef double t = 0.0, until = -INFINITY, dt, need
    cdef bint have_first = False
    ends_a, first_a = np.full(n, np.inf), np.zeros(n, dtype=np.int64)
    cdef double[::1] ends = ends_a
    cdef long long[::1] first = first_a
    cdef double[::1] left = np.array(remaining, dtype=np.float64)
    cdef long long[::1] alive = np.array(order, dtype=np.int64)
    cdef long long[::1] workers = np.zeros(n, dtype=np.int64)  # the plan in force; 0: done
    cdef long long[::1] got = np.zeros(n, dtype=np.int64)
    cdef double[::1] sub = np.empty(n), rate = np.empty(n), w = np.empty(n), part = np.empty(n)
    cdef double[::1] total = np.empty(max(capacity + 1, 1))
    while m > 0:
        if t >= until - EPS:
            workers[:] = 0
            for i in range(m):
                sub[i] = mu[alive[i]]
            _plan(sub[:m], rho, table, capacity, linear, a, g, got[:m], w, part, total)
            for i in range(m):
                workers[alive[i]] = got[i]
            if not have_first:
                first[:] = workers
                have_first = True
            until = INFINITY
        node = 0
        for k in range(n):
            node += workers[k]
        dt = until - t
        for i in range(m):
            k = alive[i]
            rate[i] = min(mu[k], table[node, workers[k]]) if workers[k] > 0 else 0.0
            if rate[i] > 0:
                dt = min(dt, left[k] / max(rate[i], EPS))
        if not isfinite(dt):
            break  # nothing runs (C = 0): every end stays inf
        t += dt
        kept = 0
        for i in range(m):
            k = alive[i]
            need = left[k] / max(rate[i], EPS) if rate[i] > 0 else INFINITY
            left[k] -= rate[i] * dt
            if need <= dt * (1 + 1e-12) + EPS:
                ends[k] = t
                workers[k] = 0
            else:
                alive[kept] = k
                kept += 1
        if kept < m:
            until = t + window if window > 0 else -INFINITY
        m = kept
    return ends_a, first_a


def balance_run(double[::1] cap, double[::1] left_in, double[:, ::1] table,
                long long capacity, double t, double until):
    """Balance from ``t`` to ``until`` (inf: to the end) over jobs in their order, each at
    min(cap_i, λ(bal_i; C)) among those left (C // M each, one more for the first C mod M;
    one each to the first C when C < M): (each end, inf if not reached; samples left)."""
    cdef Py_ssize_t n = cap.shape[0], m = n, k
    cdef long long base, more, rank, dk
    cdef double dt, need
    cdef bint moving
    ends_a, left_a = np.full(n, np.inf), np.array(left_in, dtype=np.float64)
    cdef double[::1] ends = ends_a, left = left_a
    cdef double[::1] rate = np.zeros(n)
    cdef unsigned char[::1] alive = np.ones(n, dtype=np.uint8)
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
                    rate[k] = min(cap[k], table[capacity, dk])
                if rate[k] > 0:
                    moving = True
                    dt = min(dt, left[k] / max(rate[k], EPS))
        if not moving:
            break
        t += dt
        for k in range(n):
            if alive[k]:
                need = left[k] / max(rate[k], EPS) if rate[k] > 0 else INFINITY
                if need <= dt * (1 + 1e-12) + EPS:
                    ends[k] = t
                    left[k] = 0.0
                    alive[k] = 0
                    m -= 1
                else:
                    left[k] -= rate[k] * dt
    return ends_a, left_a
