"""The phase program: the least Σ_i C_i of one sequence of phases, as a linear program.

Between consecutive events (completions, arrivals) a phase runs a fixed set of jobs; how
long it lasts and how many samples each job loads in it are the variables, bounded by the
node's loading L, each job's intake and each GPU's time (``schedule_lp``, the bounds that
use it over every completion order). ``least_sum_now`` is the policy's use: the jobs present,
every completion order, each job by its deadline; ``ftf-phased`` runs its best schedule's
first phase where no priority order is on time. Pure: scipy's HiGHS is imported inside.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

Groups = list[tuple[list[int], list[float], float]]  # (jobs on a GPU, τ of each, its limit)


def phase_program(s: np.ndarray, loading: float, intake: Sequence[float] | None,
                  deadline: Sequence[float] | None,
                  phases: list[tuple[set[int], Groups]], done_at: dict[int, int],
                  fixed: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray] | None:
    """The least Σ_i C_i of one sequence of phases, or None where none is feasible: phase p
    lasts t_p, runs the jobs of its set, each GPU group busy at most its limit, the node
    loading at most L; job i is done by the end of phase ``done_at[i]`` − 1, its C_i (from
    the first phase's start) ≤ ``deadline[i]``; ``fixed``: (k, τ), the first k phases last τ
    in all (an arrival's time). (C_i for every job, each job's rate in the first phase)."""
    from scipy.optimize import linprog

    n, count = len(s), len(phases)
    width = count + count * n  # t_p, then y_{p,i}: the samples job i loads in phase p

    def y(p: int, i: int) -> int:
        return count + p * n + i

    bounds = [(0, None)] * count + [(0, None) if i in phases[p][0] else (0, 0)
                                    for p in range(count) for i in range(n)]
    rows, rhs = [], []

    def add(entries: dict[int, float], bound: float) -> None:
        row = np.zeros(width)
        for col, v in entries.items():
            row[col] += v
        rows.append(row)
        rhs.append(bound)

    for p, (present, groups) in enumerate(phases):
        add({**{y(p, i): 1.0 for i in range(n)}, p: -loading}, 0.0)  # Σ_i y ≤ L·t_p
        for i in present:  # its intake: y_{p,i} ≤ C_i·t_p
            if intake is not None and 0 < intake[i] < np.inf:
                add({y(p, i): 1.0, p: -float(intake[i])}, 0.0)
        for m, w, cap in groups:  # GPU time: Σ_{i on g} τ_i·y_{p,i} ≤ cap·t_p
            add({**{y(p, i): tau for i, tau in zip(m, w, strict=True)}, p: -cap}, 0.0)
    cost = np.zeros(width)
    for i in range(n):
        k = done_at[i]
        cost[:k] += 1.0  # Σ_i C_i = Σ_i Σ_{p < done_at[i]} t_p
        add({y(p, i): -1.0 for p in range(k)}, -float(s[i]))  # done: Σ_p y_{p,i} ≥ S_i
        if deadline is not None and deadline[i] < np.inf:
            add(dict.fromkeys(range(k), 1.0), float(deadline[i]))
    a_eq = np.zeros((len(fixed), width))
    for r, (k, _) in enumerate(fixed):
        a_eq[r, :k] = 1.0
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs),
                  A_eq=a_eq if fixed else None, b_eq=[t for _, t in fixed] if fixed else None,
                  bounds=bounds, method="highs")
    if res.status != 0:
        return None
    t = res.x[:count]
    first = res.x[count:count + n] / t[0] if t[0] > 0 else np.zeros(n)
    return np.array([t[:done_at[i]].sum() for i in range(n)]), first


def completion_orders(samples: np.ndarray, loading: float, intake: Sequence[float] | None,
                      deadline: Sequence[float] | None, groups: Groups
                      ) -> Iterator[tuple[tuple[int, ...], tuple[np.ndarray, np.ndarray]]]:
    """(order, (C_i, first-phase rates)) for each completion order of the jobs present whose
    phase program is feasible: the jobs leave one by one in that order, every GPU group the
    same throughout. N! programs: for a handful of jobs."""
    n = len(samples)
    for order in itertools.permutations(range(n)):
        found = phase_program(samples, loading, intake, deadline,
                              [(set(order[k:]), groups) for k in range(n)],
                              {job: k + 1 for k, job in enumerate(order)}, [])
        if found is not None:
            yield order, found


def least_sum_now(samples: np.ndarray, loading: float, intake: np.ndarray,
                  deadline: np.ndarray) -> np.ndarray | None:
    """Each job's rate (samples/s) in the first phase of the least-Σ C_i schedule of the jobs
    present, over every completion order: the node loading at most ``loading``, each job at
    most its ``intake``, each done by its ``deadline`` (s from now; inf: none). None where no
    order meets them."""
    best: tuple[float, np.ndarray] | None = None
    for _, (ends, first) in completion_orders(samples, loading, intake, deadline, []):
        if best is None or ends.sum() < best[0] - 1e-9:
            best = (float(ends.sum()), first)
    return None if best is None else best[1]
