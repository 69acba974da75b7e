"""What a node offers a cluster scheduler: spare loading capacity and the
predicted gain of one more worker, from the same TPM and allocation the daemon plans with.

For the jobs i on the node with workers d_i (D = Σ d_i of the node's C) and ceilings
c_i·B_i·F_μ,i (their GPU shares included: ``planner.demands``), the predicted rate is
T_i = min(c_i·B_i·F_μ,i, λ(d_i; D)) and the node's Σ T. Reported:

- ``free_workers``: C − D, workers nobody holds;
- ``idle_workers``: Σ (d_i − the fewest workers giving job i the same T_i within ``tol``):
  workers held but predicted to buy nothing (a GPU-bound job's surplus);
- ``marginal_gain``: max_i Σ T with one more worker to job i (D + 1) − Σ T, samples/s: what
  the node's next worker is worth (0 when D = C);
- ``spare_rate``: what a new job could load at once with the free and idle workers,
  λ(free + idle; C) — the number a loading-aware placement compares across nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def _total(ceilings: Sequence[float], workers: Sequence[int], table: np.ndarray) -> float:
    cap = table.shape[0] - 1
    node = min(int(sum(workers)), cap)
    return float(sum(min(c, table[node, min(d, cap)]) for c, d in zip(ceilings, workers,
                                                                        strict=True)))


def summary(ceilings: Mapping[str, float], workers: Mapping[str, int], capacity: int,
            table: np.ndarray, tol: float = 0.01) -> dict:
    """The node's offer (see the module doc); ``table`` is λ(d; D) for d, D ≤ C."""
    names = sorted(ceilings)
    c = [float(ceilings[n]) for n in names]
    d = [int(workers.get(n, 0)) for n in names]
    node = sum(d)
    total = _total(c, d, table)
    idle = 0
    for i in range(len(names)):
        rate = min(c[i], table[min(node, capacity), min(d[i], capacity)])
        fewest = d[i]
        while fewest > 1 and min(c[i], table[min(node, capacity), fewest - 1]) >= \
                rate * (1 - tol):
            fewest -= 1
        idle += d[i] - fewest
    gain = 0.0
    if node < capacity:
        for i in range(len(names)):
            more = list(d)
            more[i] += 1
            gain = max(gain, _total(c, more, table) - total)
    free = max(0, capacity - node)
    spare = free + idle
    return {"capacity": int(capacity), "node_workers": int(node), "free_workers": int(free),
            "idle_workers": int(idle), "predicted_rate": round(total, 3),
            "marginal_gain": round(gain, 3),
            "spare_rate": round(float(table[capacity, min(spare, capacity)]), 3),
            "jobs": len(names)}
