"""The best time-varying schedule, as linear programs: how far any policy could go.

Fix the order π in which jobs complete. Between the (k−1)-th and k-th completion the jobs
J_k = {π(k), …, π(N)} are present; what a schedule does there is, for each allocation p
the node may run, the time x_{k,p} ≥ 0 it spends in it (the phase's average rates are a
convex combination of the allocations' rate vectors R_p). Then, all linear in x,

    job i is done by its phase:  Σ_{k ≤ pos(i)} Σ_p x_{k,p}·R_{p,i} ≥ S_i
    its completion:              C_i = Σ_{k ≤ pos(i)} Σ_p x_{k,p} ≤ D_i   (D_i: its floor)

Every schedule with that order — allocations changing at any instant — is a point of this
polytope, and every point is a schedule (switching costs aside). Σ_i S_i/C_i is convex in
C, so its maximum over the polytope is hard in general; two numbers per order bound it:

- ``sum_upper``: Σ_i S_i / min C_i, each C_i minimised alone — no schedule does better;
- ``sum``: successive linearisation (each step maximises the tangent, which lies below a
  convex function: each step's schedule is real and no worse than the last), started from
  every single-job optimum — a schedule that reaches it exists.

When they meet, that is the optimum. For a handful of jobs (N! orders). Pure: scipy's HiGHS
is imported inside.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from adloader.errors import InputError
from adloader.scheduling.policies.phase_program import Groups, completion_orders, phase_program

Options = Callable[[tuple[int, ...]], np.ndarray]  # present jobs -> (P, N) rates, samples/s
# (jobs placed -> their GPUs, jobs waiting in arrival order) -> the GPUs of those placed now
Admit = Callable[[dict[int, tuple[int, ...]], list[int]], dict[int, tuple[int, ...]]]


def pareto_rows(rates: np.ndarray) -> np.ndarray:
    """The rows no other row dominates (≥ everywhere, > somewhere): the rest are never
    needed by a schedule that may time-share."""
    rates = np.unique(np.asarray(rates, dtype=float), axis=0)
    keep = np.ones(len(rates), dtype=bool)
    for i in range(len(rates)):
        if keep[i]:
            dominated = np.all(rates <= rates[i], axis=1) & np.any(rates < rates[i], axis=1)
            keep &= ~dominated
    return rates[keep]


def _order_lp(samples: np.ndarray, order: Sequence[int], options: Options,
              deadlines: np.ndarray):
    """(A_ub, b_ub, T) for one completion order; T maps x to completion times C."""
    n = len(samples)
    blocks = [pareto_rows(options(tuple(sorted(order[k:])))) for k in range(n)]
    sizes = [len(b) for b in blocks]
    start = np.concatenate([[0], np.cumsum(sizes)])
    pos = {job: k for k, job in enumerate(order)}
    done = np.zeros((n, start[-1]))
    ends = np.zeros((n, start[-1]))
    for i in range(n):
        for k in range(pos[i] + 1):
            done[i, start[k]:start[k + 1]] = blocks[k][:, i]
            ends[i, start[k]:start[k + 1]] = 1.0
    a_ub = np.vstack([-done, ends[np.isfinite(deadlines)]])
    b_ub = np.concatenate([-samples, deadlines[np.isfinite(deadlines)]])
    return a_ub, b_ub, ends, blocks


def best_schedule(samples: Sequence[float], options: Options,
                  deadlines: Sequence[float] | None = None, steps: int = 40) -> dict:
    """Bounds on max Σ S_i/C_i over every schedule (see the module), each C_i ≤ D_i."""
    from scipy.optimize import linprog

    s = np.asarray(samples, dtype=float)
    n = len(s)
    if n == 0 or n > 6:
        raise InputError(f"best_schedule: 1 to 6 jobs (it tries every order), got {n}")
    if np.any(s <= 0):
        raise InputError("best_schedule: every job needs samples > 0")
    dl = np.full(n, np.inf) if deadlines is None else np.asarray(deadlines, dtype=float)
    best = {"sum": 0.0, "sum_upper": 0.0, "order": None, "ends": None, "feasible": False}
    for order in itertools.permutations(range(n)):
        a_ub, b_ub, ends, _ = _order_lp(s, order, options, dl)

        def solve(weights, a_ub=a_ub, b_ub=b_ub, ends=ends):
            res = linprog(weights @ ends, A_ub=a_ub, b_ub=b_ub, bounds=(0, None),
                          method="highs")
            return ends @ res.x if res.status == 0 else None

        singles = [solve(np.eye(n)[i]) for i in range(n)]
        if any(c is None for c in singles):
            continue  # this order cannot meet the floors
        upper = float(sum(s[i] / max(singles[i][i], 1e-12) for i in range(n)))
        best["sum_upper"] = max(best["sum_upper"], upper)
        best["feasible"] = True
        for c in singles + [solve(s / np.maximum(np.array(singles).min(axis=0), 1e-12))]:
            if c is None:
                continue
            value = float((s / np.maximum(c, 1e-12)).sum())
            for _ in range(steps):  # maximise the tangent of Σ S/C at c: min Σ S_i/c_i²·C_i
                nxt = solve(s / np.maximum(c, 1e-12) ** 2)
                if nxt is None:
                    break
                v = float((s / np.maximum(nxt, 1e-12)).sum())
                if v <= value * (1 + 1e-9):
                    break
                c, value = nxt, v
            if value > best["sum"]:
                best.update(sum=value, order=list(order), ends=[float(x) for x in c])
    return best


def least_mean_jct(samples: Sequence[float], loading: float, gpu_s: Sequence[float],
                   gpu_ids: Sequence[Sequence[int]] | None = None,
                   gpus: Sequence[int] | None = None, node_gpus: int = 0,
                   intake: Sequence[float] | None = None,
                   deadline: Sequence[float] | None = None) -> dict:
    """A floor under every schedule's mean completion time, jobs all present at t = 0.

    The rates any schedule can run lie in R = {r ≥ 0 : Σ_i r_i ≤ L, and on every GPU g
    Σ_{i on g} τ_i·r_i ≤ 1}: the node loads at most ``loading`` = L samples/s whatever its
    workers (the peak of L(D)), and a GPU is busy at most all the time (τ_i = ``gpu_s``, GPU
    seconds a sample of job i; co-location that slows jobs only shrinks R). For a completion
    order π, phase k lasts t_k and job i loads y_{k,i} samples in it with y_k ∈ t_k·R, so
    min Σ C_i is a linear program; the least over every order bounds every schedule — any
    allocation, changing at any instant, oversubscribed or not. Also the least makespan.

    Without ``gpu_ids`` (any placement): each job's own GPUs are busy at most all the time,
    τ_i·r_i ≤ 1, and the node's ``node_gpus`` GPUs at most all of theirs, Σ_i g_i·τ_i·r_i ≤
    G (g_i = ``gpus``, the job's GPU count) — looser, and true of every placement.

    ``intake`` (samples/s, one a job; 0 or inf: none): each job's training loop takes in at
    most C_i whatever its workers (its intake ceiling), r_i ≤ C_i — R shrinks again.
    ``deadline`` (seconds, one a job; inf: none): the schedules that complete each job by
    its deadline (no order that cannot is counted).
    """
    s = np.asarray(samples, dtype=float)
    n = len(s)
    if n == 0 or n > 7:
        raise InputError(f"least_mean_jct: 1 to 7 jobs (it tries every order), got {n}")
    if gpu_ids is None:  # any placement: a GPU of its own per job, the node's in all
        if gpus is None or len(gpus) != n or node_gpus < 1:
            raise InputError("least_mean_jct: without gpu_ids, every job's GPU count and the "
                             "node's GPUs")
        members = [[i] for i in range(n)] + [list(range(n))]
        weight = [[gpu_s[i]] for i in range(n)] + [[gpus[i] * gpu_s[i] for i in range(n)]]
        limit = [1.0] * n + [float(node_gpus)]
    else:
        if len(gpu_ids) != n:
            raise InputError("least_mean_jct: gpu_ids for every job")
        on = sorted({g for ids in gpu_ids for g in ids})
        members = [[i for i in range(n) if g in gpu_ids[i]] for g in on]
        weight = [[gpu_s[i] for i in m] for m in members]
        limit = [1.0] * len(on)
    if loading <= 0 or np.any(s <= 0) or len(gpu_s) != n:
        raise InputError("least_mean_jct: loading > 0, and samples and gpu_s for every job")
    groups = list(zip(members, weight, limit, strict=True))
    best: dict = {"mean_jct": np.inf, "order": None, "ends": None}
    for order, (ends, _) in completion_orders(s, loading, intake, deadline, groups):
        if ends.sum() / n < best["mean_jct"] - 1e-12:
            best.update(mean_jct=float(ends.sum()) / n, order=list(order),
                        ends=[float(c) for c in ends])
    busy = [sum(tau * s[i] for i, tau in zip(m, w, strict=True)) / cap
            for m, w, cap in zip(members, weight, limit, strict=True)]
    alone = [s[i] / intake[i] for i in range(n)
             if intake is not None and 0 < intake[i] < np.inf]
    best["makespan"] = float(max([s.sum() / loading, *busy, *alone]))
    return best


def least_mean_jct_arriving(samples: Sequence[float], arrival: Sequence[float],
                            loading: float, gpu_s: Sequence[float], admit: Admit,
                            intake: Sequence[float] | None = None,
                            jct_limit: Sequence[float] | None = None) -> dict:
    """``least_mean_jct`` for jobs that arrive apart, on GPUs as ``admit`` places them.

    Every event — an arrival (``arrival``, seconds) or a completion — starts a phase; for a
    completion order and the place of each arrival among the completions, the phases and who
    runs in each are fixed, and so is the placement: at each event ``admit`` places waiting
    jobs on the GPUs of those present (the planner's rule, which no policy changes; a job
    waits until it fits). The program is ``least_mean_jct``'s, each arrival's phases pinned
    to its time; the least over every order and interleaving bounds every schedule of
    ``loading`` samples/s with that placement. ``jct_limit`` (seconds from each job's
    arrival; inf: none): the schedules that end each job within it. A JCT counts from the
    job's arrival; ``ends`` are times from the first."""
    s, a = np.asarray(samples, dtype=float), np.asarray(arrival, dtype=float)
    n = len(s)
    if n == 0 or n > 7 or len(a) != n or len(gpu_s) != n:
        raise InputError(f"least_mean_jct_arriving: 1 to 7 jobs (it tries every order), each "
                         f"with samples, arrival and gpu_s; got {n}")
    if loading <= 0 or np.any(s <= 0):
        raise InputError("least_mean_jct_arriving: loading > 0 and samples > 0")
    times = sorted(set(a.tolist()))
    batch = [[i for i in range(n) if a[i] == t] for t in times]
    limit = None if jct_limit is None else [a[i] - times[0] + jct_limit[i] for i in range(n)]
    best: dict = {"mean_jct": np.inf, "order": None, "ends": None, "jct": None}
    for order in itertools.permutations(range(n)):
        pos = {job: k for k, job in enumerate(order)}
        # the completions before each later arrival: non-decreasing, none of its own jobs
        for before in itertools.product(range(n + 1), repeat=len(times) - 1):
            if any(x > y for x, y in zip(before, before[1:], strict=False)) or any(
                    pos[i] < before[b - 1] for b in range(1, len(times)) for i in batch[b]):
                continue
            events = _events(order, before)
            phases = _placed_phases(events, batch, gpu_s, admit)
            if phases is None:
                continue
            done_at = {e[1]: k for k, e in enumerate(events) if e[0] == "done"}
            fixed = [(k, times[e[1]] - times[0]) for k, e in enumerate(events)
                     if e[0] == "arrive" and e[1] > 0]
            found = phase_program(s, loading, intake, limit, phases, done_at, fixed)
            if found is None:
                continue
            ends = found[0]
            jct = ends + times[0] - a
            if jct.mean() < best["mean_jct"] - 1e-12:
                best.update(mean_jct=float(jct.mean()), order=list(order),
                            ends=[float(c) for c in ends], jct=[float(c) for c in jct])
    return best


def _events(order: Sequence[int], before: Sequence[int]) -> list[tuple[str, int]]:
    """("arrive", batch) and ("done", job) in time order: batch b after ``before[b-1]``
    completions."""
    events, nxt = [("arrive", 0)], 1
    for k, job in enumerate(order):
        while nxt <= len(before) and before[nxt - 1] == k:
            events.append(("arrive", nxt))
            nxt += 1
        events.append(("done", job))
    return events


def _placed_phases(events: list[tuple[str, int]], batch: list[list[int]],
                   gpu_s: Sequence[float], admit: Admit) -> list[tuple[set[int], Groups]] | None:
    """The phase after each event but the last: the jobs placed and each GPU's group; None
    where a job would complete before it is placed."""
    placed: dict[int, tuple[int, ...]] = {}
    waiting: list[int] = []
    phases: list[tuple[set[int], Groups]] = []
    for kind, what in events[:-1]:
        if kind == "arrive":
            waiting += batch[what]
        elif what not in placed:
            return None
        else:
            del placed[what]
        placed.update(admit(dict(placed), list(waiting)))
        waiting = [i for i in waiting if i not in placed]
        on = sorted({g for ids in placed.values() for g in ids})
        members = [[i for i in placed if g in placed[i]] for g in on]
        phases.append((set(placed), [(m, [gpu_s[i] for i in m], 1.0) for m in members]))
    last = events[-1]
    return phases if last[1] in placed else None
