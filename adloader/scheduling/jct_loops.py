"""The loop of ``jct`` in plain Python: ``jct_kernel`` (Cython) statement for statement, used
where that module was not built (an install without a C compiler). Same arguments, same
plans bit for bit, only slower; see ``jct_kernel.pyx`` for what it computes and
``adloader.scheduling.loops`` for which one runs.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-12


def _time(s: float, mu: float, rate: float) -> float:
    """t = S / min(μ, λ)."""
    return s / max(min(mu, rate), EPS)


def _lowest(mu: list[float], floor: list[float], use_floor: bool, row: list[float], node: int,
            lo: list[int]) -> bool:
    """Each job's fewest workers meeting its floor on λ(·; D) = ``row`` into ``lo`` (1 without
    a floor); False when one cannot."""
    n = len(mu)
    if not use_floor:
        for i in range(n):
            lo[i] = 1
        return True
    rising = not any(row[k + 1] < row[k] for k in range(1, node))
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


def jct_plan(mu, remaining, floor, use_floor: bool, table, capacity: int) -> np.ndarray | None:
    """Workers minimising Σ S_i / T_i (see ``jct_kernel``); None when no D meets every floor."""
    mu_l = np.asarray(mu, dtype=np.float64).tolist()
    rem = np.asarray(remaining, dtype=np.float64).tolist()
    floor_l = np.asarray(floor, dtype=np.float64).tolist()
    table = np.asarray(table, dtype=np.float64)
    use_floor, capacity = bool(use_floor), int(capacity)
    n = len(mu_l)
    lo, best = [0] * n, [0] * n
    best_value, found = math.inf, False
    for node in range(n, capacity + 1):
        row = table[node].tolist()
        if not _lowest(mu_l, floor_l, use_floor, row, node, lo):
            continue  # some job cannot get its floor at this total
        extra = node - sum(lo)
        plan = list(lo)
        if extra < 0:
            continue
        for _ in range(extra):  # the largest saving left; rows' savings fall
            best_i, gain = -1, EPS
            for i in range(n):
                if plan[i] + 1 <= node:
                    up = (_time(rem[i], mu_l[i], row[plan[i]])
                          - _time(rem[i], mu_l[i], row[plan[i] + 1]))
                    if up > gain:
                        best_i, gain = i, up
            if best_i < 0:
                break
            plan[best_i] += 1
        at = table[sum(plan)].tolist() if sum(plan) != node else row
        value = 0.0
        for i in range(n):
            value += _time(rem[i], mu_l[i], at[plan[i]])
        if not found or value < best_value - 1e-12 * max(1.0, math.fabs(best_value)):
            best_value, found = value, True
            best = plan
    return np.array(best, dtype=np.int64) if found else None
