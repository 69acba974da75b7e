"""A floor under every schedule's mean JCT when jobs arrive at different times: one
time-indexed mixed-integer program over the whole trace.

``schedule_lp.least_mean_jct`` is exact for jobs present together; jobs arriving apart it
can only bound group by group, each group alone (dropping what the groups take from one
another, a floor far under what any schedule reaches). Here the whole trace is one program,
in slots of
``slot_s`` seconds. Rates lie in the same set R as there: the node loads at most L samples/s
(the peak of L(D)), each job at most r_i = min(L, 1/τ_i, G/(g_i·τ_i)), and the node's GPUs are
busy at most all the time, Σ_i g_i·τ_i·r_i ≤ G (τ_i: GPU seconds a sample; any placement).
Variables, per job i and slot t: x (samples loaded in t, none before the job's arrival),
y (loaded by the end of t), z (binary: done by the end of t, never undone), v (what it loads
in the slot it ends in). For a job that ends in slot t*, C_i ≥ t*·Δ + v/r_i: every slot before
t* passes whole, and the last samples take at least v/r_i. Every schedule — any allocation,
changing at any instant, with or without a daemon — is a point of this program with Σ of these
terms ≤ its Σ C_i, so the program's optimum (its dual bound, when HiGHS stops early) is a
floor. A job not done by ``horizon_s`` counts ``horizon_s`` (still a floor, for any horizon).

The LP per group stays the exact one for jobs arriving together; this one is looser inside a
slot (rates averaged over a slot) and tighter across groups. Minutes on 8 jobs over 1,000 s
at 2 s slots; pure: scipy's HiGHS is imported inside.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adloader.errors import InputError


def least_total_completion(samples: Sequence[float], arrivals: Sequence[float],
                           loading: float, gpu_s: Sequence[float], gpus: Sequence[int],
                           node_gpus: int, slot_s: float = 2.0,
                           horizon_s: float | None = None,
                           time_limit_s: float = 600.0,
                           deadlines: Sequence[float] | None = None,
                           intake: Sequence[float] | None = None) -> dict:
    """The floor (see the module): ``mean_jct`` (what no schedule goes under: the program's
    dual bound), ``solved_mean_jct`` (its best point: equal when ``optimal``), per job the
    slot it ends in at that point (``ends``, seconds), ``slot_s``, ``horizon_s``.

    ``deadlines`` (seconds from the trace's start, ``inf`` for none): the floor of the
    schedules that end every job by its deadline — a job done by D_i is done by the end of
    the first slot that ends at or after D_i, so z is 1 from that slot on (looser by at most
    a slot: still a floor). ``feasible`` is False, and ``mean_jct`` infinite, where no point
    of the program meets them: then no schedule does. ``intake`` (samples/s, 0 for none):
    each job's intake ceiling, the most its training loop takes in whatever it is given."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    s = np.asarray(samples, dtype=float)
    a = np.asarray(arrivals, dtype=float)
    tau = np.asarray(gpu_s, dtype=float)
    g = np.asarray(gpus, dtype=float)
    n = len(s)
    if n == 0 or not (len(a) == len(tau) == len(g) == n):
        raise InputError("least_total_completion: samples, arrivals, gpu_s and gpus for "
                         "every job, at least one")
    if loading <= 0 or node_gpus < 1 or slot_s <= 0 or np.any(s <= 0) or np.any(tau <= 0) \
            or np.any(g < 1) or np.any(a < 0):
        raise InputError("least_total_completion: loading, GPUs, slot, samples and GPU time "
                         "a sample > 0, arrivals ≥ 0")
    rate = np.minimum.reduce([np.full(n, float(loading)), 1.0 / tau, node_gpus / (g * tau)])
    if intake is not None:
        ceiling = np.asarray(intake, dtype=float)
        if len(ceiling) != n or np.any(ceiling < 0):
            raise InputError("least_total_completion: an intake ceiling ≥ 0 for every job")
        rate = np.where(ceiling > 0, np.minimum(rate, ceiling), rate)
    if horizon_s is None:  # room for every job after the last arrival, one after another
        horizon_s = float(a.max() + (s / rate).sum())
    dt = float(slot_s)
    T = max(int(np.ceil(horizon_s / dt)), 1)
    m = n * T
    X, Y, Z, V = 0, m, 2 * m, 3 * m  # variable blocks, each indexed i·T + t

    def at(block: int, i: int, t: int) -> int:
        return block + i * T + t

    due = np.full(n, np.inf) if deadlines is None else np.asarray(deadlines, dtype=float)
    if len(due) != n or np.any(due <= a):
        raise InputError("least_total_completion: a deadline for every job, after its arrival")
    cost = np.zeros(4 * m)
    lower, upper = np.zeros(4 * m), np.zeros(4 * m)
    integral = np.zeros(4 * m)
    starts = np.arange(T) * dt
    for i in range(n):
        share = np.clip((starts + dt - a[i]) / dt, 0.0, 1.0)  # of each slot after arrival
        upper[X + i * T:X + (i + 1) * T] = share * dt * rate[i]
        upper[Y + i * T:Y + (i + 1) * T] = np.inf
        done = (starts + dt) >= a[i] + s[i] / rate[i] - 1e-9  # it can be done by then
        upper[Z + i * T:Z + (i + 1) * T] = done.astype(float)
        if np.isfinite(due[i]) and (last := int(np.ceil(due[i] / dt - 1e-9)) - 1) < T:
            lower[Z + i * T + last:Z + (i + 1) * T] = 1.0  # done by the slot D_i ends in
        integral[Z + i * T:Z + (i + 1) * T] = 1
        upper[V + i * T:V + (i + 1) * T] = np.inf
        cost[Z + i * T:Z + (i + 1) * T] = -dt  # Σ_t (1 − z_t)·Δ, its constant apart
        cost[V + i * T:V + (i + 1) * T] = 1.0 / rate[i]
    rows, cols, vals, lo, hi = [], [], [], [], []
    k = 0

    def row(entries, low, high) -> None:
        nonlocal k
        for c, v in entries:
            rows.append(k)
            cols.append(c)
            vals.append(v)
        lo.append(low)
        hi.append(high)
        k += 1

    for t in range(T):  # the node's loading, and its GPUs busy at most all the time
        row([(at(X, i, t), 1.0) for i in range(n)], -np.inf, loading * dt)
        row([(at(X, i, t), g[i] * tau[i]) for i in range(n)], -np.inf, node_gpus * dt)
    for i in range(n):
        cap = dt * rate[i]
        for t in range(T):
            before = [(at(Y, i, t - 1), -1.0)] if t else []
            row([(at(Y, i, t), 1.0), (at(X, i, t), -1.0), *before], 0.0, 0.0)  # y = Σ x
            row([(at(Y, i, t), 1.0), (at(Z, i, t), -s[i])], 0.0, np.inf)  # done: y ≥ S
            if t:
                row([(at(Z, i, t - 1), 1.0), (at(Z, i, t), -1.0)], -np.inf, 0.0)
            # v ≥ x − cap·(1 − (z_t − z_{t−1})): what it loads in the slot it ends in
            prev = [(at(Z, i, t - 1), cap)] if t else []
            row([(at(V, i, t), 1.0), (at(X, i, t), -1.0), (at(Z, i, t), -cap), *prev],
                -cap, np.inf)
    unmet = {"mean_jct": np.inf, "solved_mean_jct": np.inf, "optimal": True, "feasible": False,
             "ends": None, "slot_s": dt, "horizon_s": float(T * dt)}
    if np.any(lower > upper):  # a job cannot load its samples by its deadline's slot
        return {**unmet, "message": "a deadline before the job could end alone"}
    matrix = coo_matrix((vals, (rows, cols)), shape=(k, 4 * m)).tocsr()
    res = milp(cost, constraints=LinearConstraint(matrix, lo, hi), integrality=integral,
               bounds=Bounds(lower, upper),
               options={"time_limit": float(time_limit_s), "mip_rel_gap": 1e-6})
    if res.x is None:
        if res.status == 2:  # infeasible: no schedule meets the deadlines
            return {**unmet, "message": str(res.message)}
        raise InputError(f"least_total_completion: HiGHS found no point ({res.message})")
    constant = n * T * dt
    bound = getattr(res, "mip_dual_bound", None)
    dual = float(res.fun if bound is None or not np.isfinite(bound) else bound)
    z = res.x[Z:Z + m].reshape(n, T)
    ends = [float((T - z[i].sum() + 1) * dt) for i in range(n)]
    return {"mean_jct": (constant + dual - a.sum()) / n,
            "solved_mean_jct": (constant + float(res.fun) - a.sum()) / n,
            "optimal": res.status == 0, "feasible": True, "ends": ends, "slot_s": dt,
            "horizon_s": float(T * dt), "message": str(res.message)}
