"""``jct``: the allocation that minimises predicted completion times, not the sum of rates.

The paper maximises Σ T_i (eq. 1), which starves a job whose workers buy the node little —
it finishes last. Each job's remaining samples S_i are known (its spec and heartbeats), so
its predicted time to finish at d workers is t_i(d) = S_i / T_i(d; D), T_i = min(B_i·μ_i,
λ(d; D)). ``jct`` minimises Σ t_i (the mean JCT of the jobs present, were the plan to stay),
re-solved at every arrival and completion; with ``alpha`` it keeps the sharing incentive
T_i ≥ α·b_i (``fair``'s floor). A job with no S_i known counts as one sample.

Exact for the plan it solves: T concave increasing in d makes t_i = S_i/T_i convex
decreasing, so per node total D the C−N largest marginal savings t_i(k) − t_i(k+1) (a prefix
of each row) are optimal; a plan for D stays as good at its own total Σd ≤ D (λ never grows
with D), so the best D wins. Rows that are not concave fall back to the same greedy, which is
then a heuristic. Each job can take at most C − N workers beyond its floor, so only those
columns are read: O((C − N)·N·(C − N)) numpy work (1,000 jobs × 1,024 workers: ~1 ms).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adloader.fair_allocation import DEFAULT_ALPHA, balance_rates, fair_targets

EPS = 1e-12


def predicted_times(remaining: np.ndarray, mu: np.ndarray, row: np.ndarray,
                    plan: np.ndarray) -> np.ndarray:
    """t_i = S_i / min(μ_i, λ(d_i; D)) for one row λ(·; D)."""
    rate = np.minimum(mu, row[plan])
    return remaining / np.maximum(rate, EPS)


def _lowest(mu: np.ndarray, row: np.ndarray, floor: np.ndarray | None,
            n: int) -> np.ndarray | None:
    """Each job's fewest workers meeting its floor on the row λ(·; D) (1 without a floor);
    None when one cannot. A search on a row that never falls, else a scan of the row."""
    if floor is None:
        return np.ones(n, dtype=np.int64)
    if (np.diff(row[1:]) >= 0).all():
        reach = np.minimum(mu, row[-1]) >= floor
        lo = np.searchsorted(row[1:], floor, side="left") + 1
        return lo.astype(np.int64) if reach.all() else None
    ok = np.minimum(mu[:, None], row[None, 1:]) >= floor[:, None]
    return (ok.argmax(axis=1) + 1).astype(np.int64) if ok.any(axis=1).all() else None


def jct(jobs: Sequence, capacity: int, loading, alpha: float = DEFAULT_ALPHA) -> dict[str, int]:
    """argmin Σ S_i / T_i(d_i) over d_i ≥ 1, Σd ≤ C, T_i ≥ α·b_i (see the module)."""
    n = len(jobs)
    if n == 0:
        return {}
    if capacity < n:  # the queue rule every policy shares: one each for the first C
        return {j.name: int(i < capacity) for i, j in enumerate(jobs)}
    mu = np.array([j.training_rate for j in jobs], float)
    remaining = np.array([max(float(getattr(j, "remaining", 0.0) or 0.0), 1.0) for j in jobs])
    floor = fair_targets(balance_rates(mu, capacity, loading), alpha) if alpha > 0 else None
    best_value, best_plan = np.inf, None
    for node in range(n, capacity + 1):
        row = np.asarray(loading[node, : node + 1], float)
        lo = _lowest(mu, row, floor, n)
        if lo is None:
            continue  # some job cannot get its floor at this total
        extra = node - int(lo.sum())
        if extra < 0:
            continue
        # each job can take at most ``extra`` more: only d = lo..lo + extra matter
        d = lo[:, None] + np.arange(extra + 1)[None, :]
        rate = np.minimum(mu[:, None], row[np.minimum(d, node)])
        times = remaining[:, None] / np.maximum(rate, EPS)
        saving = np.where(d[:, 1:] <= node, times[:, :-1] - times[:, 1:], -np.inf)
        flat = saving.ravel()
        take = min(extra, int(np.sum(flat > EPS)))
        plan = lo.copy()
        if take > 0:
            chosen = np.argpartition(-flat, take - 1)[:take]
            plan += np.bincount(chosen // saving.shape[1], minlength=n)
        total = int(plan.sum())
        value = float(predicted_times(remaining, mu, loading[total, : total + 1], plan).sum())
        if best_plan is None or value < best_value - 1e-12 * max(1.0, abs(best_value)):
            best_value, best_plan = value, plan
    if best_plan is None:  # numerical edge: balance is always fair
        from adloader.fair_allocation import balance_plan

        best_plan = balance_plan(n, capacity)
    return {j.name: int(best_plan[i]) for i, j in enumerate(jobs)}
