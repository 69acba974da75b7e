# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The loop of ``jct``: argmin Σ S_i / T_i(d_i; D) over d_i ≥ 1 (or each job's floor),
Σd = D, every D = N..C, the best D winning (ties to fewer workers).

Per D: each job's fewest workers meeting its floor (a binary search on a row that never
falls, else a scan), then the D − Σ floor largest savings t_i(d) − t_i(d + 1), taken as a
merge of the N rows — exact where T is concave in d, so that t_i = S_i/T_i is convex and each
row's savings fall. Then Σ t_i of that plan at its own total.

One source, run two ways, as ``ftf_kernel`` is (see there): compiled by Cython where the
install has a C compiler, else as plain Python on lists, the same plans bit for bit.
"""

from __future__ import annotations

import numpy as np

try:
    import cython
except ModuleNotFoundError:  # no Cython installed: plain Python, its few names stood in
    from adloader.scheduling.kernels import plain as cython

from adloader.scheduling.kernels.plain import RowLists, floats

COMPILED = cython.compiled
EPS = cython.declare(cython.double, 1e-12)
INF = cython.declare(cython.double, float("inf"))


@cython.cfunc
def _zeros(n: cython.Py_ssize_t) -> object:
    """``n`` zeros for the loop to write: a numpy array where compiled, else a list."""
    if cython.compiled:
        return np.zeros(n, dtype=np.int64)
    else:
        return [0] * n


@cython.cfunc
def _time(s: cython.double, mu: cython.double, rate: cython.double) -> cython.double:
    """t = S / min(μ, λ)."""
    return s / max(min(mu, rate), EPS)


@cython.cfunc
def _lowest(mu: cython.double[::1], n: cython.Py_ssize_t, floor: cython.double[::1],
            use_floor: cython.bint, row: cython.double[::1], node: cython.Py_ssize_t,
            lo: cython.longlong[::1]) -> cython.bint:
    """Each job's fewest workers meeting its floor on λ(·; D) = ``row`` into ``lo`` (1
    without a floor); False when one cannot."""
    i: cython.Py_ssize_t
    k: cython.Py_ssize_t
    low: cython.Py_ssize_t
    high: cython.Py_ssize_t
    mid: cython.Py_ssize_t
    rising: cython.bint = True
    if not use_floor:
        for i in range(n):
            lo[i] = 1
        return True
    for k in range(1, node):
        if row[k + 1] < row[k]:
            rising = False
            break
    for i in range(n):
        if rising:
            if min(mu[i], row[node]) < floor[i]:
                return False
            low, high = 1, node  # the first d in 1..D with λ(d; D) ≥ floor
            while low < high:
                mid = (low + high) // 2
                if row[mid] >= floor[i]:
                    high = mid
                else:
                    low = mid + 1
            lo[i] = low
        else:
            lo[i] = 0
            for k in range(1, node + 1):
                if min(mu[i], row[k]) >= floor[i]:
                    lo[i] = k
                    break
            if lo[i] == 0:
                return False
    return True


def jct_plan(mu: cython.double[::1], remaining: cython.double[::1], floor: cython.double[::1],
             use_floor: cython.bint, table: cython.double[:, ::1],
             capacity: cython.longlong) -> np.ndarray | None:
    """Workers minimising Σ S_i / T_i (see the module); None when no D meets every floor."""
    n: cython.Py_ssize_t = len(mu)
    i: cython.Py_ssize_t
    node: cython.Py_ssize_t
    best_i: cython.Py_ssize_t
    total: cython.Py_ssize_t
    extra: cython.longlong
    _e: cython.longlong
    best_value: cython.double = INF
    value: cython.double
    gain: cython.double
    up: cython.double
    found: cython.bint = False
    if not cython.compiled:  # plain Python: the loop reads lists
        mu, remaining, floor = floats(mu), floats(remaining), floats(floor)
        table = RowLists(np.asarray(table, dtype=np.float64))
        use_floor, capacity = bool(use_floor), int(capacity)
    best_a = _zeros(n)
    lo: cython.longlong[::1] = _zeros(n)
    plan: cython.longlong[::1] = _zeros(n)
    best: cython.longlong[::1] = best_a
    row: cython.double[::1]
    at: cython.double[::1]
    for node in range(n, capacity + 1):
        row = table[node]
        if not _lowest(mu, n, floor, use_floor, row, node, lo):
            continue  # some job cannot get its floor at this total
        extra = node
        for i in range(n):
            extra -= lo[i]
            plan[i] = lo[i]
        if extra < 0:
            continue
        for _e in range(extra):  # the largest saving left; rows' savings fall
            best_i, gain = -1, EPS
            for i in range(n):
                if plan[i] + 1 <= node:
                    up = (_time(remaining[i], mu[i], row[plan[i]])
                          - _time(remaining[i], mu[i], row[plan[i] + 1]))
                    if up > gain:
                        best_i, gain = i, up
            if best_i < 0:
                break
            plan[best_i] += 1
        total = 0
        for i in range(n):
            total += plan[i]
        at = table[total]
        value = 0.0
        for i in range(n):
            value += _time(remaining[i], mu[i], at[plan[i]])
        if not found or value < best_value - 1e-12 * max(1.0, abs(best_value)):
            best_value, found = value, True
            best[:] = plan
    return np.asarray(best_a, dtype=np.int64) if found else None
