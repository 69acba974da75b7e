# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled loop of ``jct`` (Cython, built on install): argmin Σ S_i / T_i(d_i; D) over
d_i ≥ 1 (or each job's floor), Σd = D, every D = N..C, the best D winning (ties to fewer
workers).

Per D: each job's fewest workers meeting its floor (a binary search on a row that never
falls, else a scan), then the D − Σ floor largest savings t_i(d) − t_i(d + 1), taken as a
merge of the N rows — exact where T is concave in d, so that t_i = S_i/T_i is convex and each
row's savings fall. Then Σ t_i of that plan at its own total.
"""

import numpy as np

from libc.math cimport INFINITY, fabs

cdef double EPS = 1e-12


cdef inline double _time(double s, double mu, double rate):
    """t = S / min(μ, λ)."""
    return s / max(min(mu, rate), EPS)


cdef bint _lowest(double[::1] mu, double[::1] floor, bint use_floor, double[:, ::1] table,
                  Py_ssize_t node, long long[::1] lo):
    """Each job's fewest workers meeting its floor on λ(·; D) into ``lo`` (1 without a
    floor); False when one cannot."""
    cdef Py_ssize_t n = mu.shape[0], i, k, low, high, mid
    cdef bint rising = True
    if not use_floor:
        for i in range(n):
            lo[i] = 1
        return True
    for k in range(1, node):
        if table[node, k + 1] < table[node, k]:
            rising = False
            break
    for i in range(n):
        if rising:
            if min(mu[i], table[node, node]) < floor[i]:
                return False
            low, high = 1, node  # the first d in 1..D with λ(d; D) ≥ floor
            while low < high:
                mid = (low + high) // 2
                if table[node, mid] >= floor[i]:
                    high = mid
                else:
                    low = mid + 1
            lo[i] = low
        else:
            lo[i] = 0
            for k in range(1, node + 1):
                if min(mu[i], table[node, k]) >= floor[i]:
                    lo[i] = k
                    break
            if lo[i] == 0:
                return False
    return True


def jct_plan(double[::1] mu, double[::1] remaining, double[::1] floor, bint use_floor,
             double[:, ::1] table, long long capacity):
    """Workers minimising Σ S_i / T_i (see the module); None when no D meets every floor."""
    cdef Py_ssize_t n = mu.shape[0], i, node, best_i, total
    cdef long long extra, e
    cdef double best_value = INFINITY, value, gain, up
    cdef bint found = False
    lo_a, plan_a, best_a = (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                            np.zeros(n, dtype=np.int64))
    cdef long long[::1] lo = lo_a, plan = plan_a, best = best_a
    for node in range(n, capacity + 1):
        if not _lowest(mu, floor, use_floor, table, node, lo):
            continue  # some job cannot get its floor at this total
        extra = node
        for i in range(n):
            extra -= lo[i]
            plan[i] = lo[i]
        if extra < 0:
            continue
        for e in range(extra):  # the largest saving left; rows' savings fall
            best_i, gain = -1, EPS
            for i in range(n):
                if plan[i] + 1 <= node:
                    up = (_time(remaining[i], mu[i], table[node, plan[i]])
                          - _time(remaining[i], mu[i], table[node, plan[i] + 1]))
                    if up > gain:
                        best_i, gain = i, up
            if best_i < 0:
                break
            plan[best_i] += 1
        total = 0
        for i in range(n):
            total += plan[i]
        value = 0.0
        for i in range(n):
            value += _time(remaining[i], mu[i], table[total, plan[i]])
        if not found or value < best_value - 1e-12 * max(1.0, fabs(best_value)):
            best_value, found = value, True
            best[:] = plan
    return best_a if found else None
