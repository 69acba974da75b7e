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
then a heuristic. The loop is compiled (``scheduling.kernels.jct_kernel``): per D a merge of the N
rows' savings, O(N·(C − N)) a D.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adloader.scheduling.kernels import loops
from adloader.scheduling.policies.fair import (
    DEFAULT_ALPHA,
    balance_plan,
    balance_rates,
    fair_targets,
)


def jct(jobs: Sequence, capacity: int, loading, alpha: float = DEFAULT_ALPHA) -> dict[str, int]:
    """argmin Σ S_i / T_i(d_i) over d_i ≥ 1, Σd ≤ C, T_i ≥ α·b_i (see the module)."""
    n = len(jobs)
    if n == 0:
        return {}
    if capacity < n:  # the queue rule every policy shares: one each for the first C
        return {j.name: int(i < capacity) for i, j in enumerate(jobs)}
    table = np.ascontiguousarray(loading, dtype=np.float64)
    mu = np.array([j.training_rate for j in jobs], dtype=np.float64)
    remaining = np.array([max(float(getattr(j, "remaining", 0.0) or 0.0), 1.0) for j in jobs])
    floor = fair_targets(balance_rates(mu, capacity, table), alpha) if alpha > 0 else \
        np.zeros(n)
    plan = loops.jct_plan(mu, remaining, np.ascontiguousarray(floor, dtype=np.float64),
                          alpha > 0, table, int(capacity))
    if plan is None:  # numerical edge: balance is always fair
        plan = balance_plan(n, capacity)
    return dict(zip((j.name for j in jobs), plan.tolist(), strict=True))
