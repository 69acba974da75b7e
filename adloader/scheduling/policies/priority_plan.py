"""The priority plan behind ``ftf``: max Σ ρ^k·T_k(d_k; Σd) over the jobs in priority order.

T_k(d; D) = min(B_k·μ_k, λ(d; D)), k the job's rank, one worker each at least. Near 1, ρ
keeps the node's total nearly the most it can be and, among such plans, gives the earlier
job more. Exact both ways the compiled loops take (``scheduling.kernels.ftf_kernel``), chosen per
table: rows linear in d (the staged TPM's proportional share λ(d; D) = d/D·L(D) is:
λ(d; D) = a(D) + g(D)·(d − 1), each job's gains ⌊(μ_k − a)/g⌋ equal steps and a partial
one) and any concave rows (each job's gains fall along its row).

``Rows`` keeps which rows a table has (and its largest λ) for the last few tables.
"""

from __future__ import annotations

import weakref

import numpy as np

from adloader.scheduling.kernels import loops

LINEAR_TOL = 1e-9  # relative: a row is linear when every step equals its first within this


def linear_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, g) with λ(d; D) = a[D] + g[D]·(d − 1) for 1 ≤ d ≤ D and g ≥ 0, or None when any
    row D ≥ 2 is not so."""
    size = table.shape[0]
    if size < 3 or table.shape[1] < size:
        return None
    a = table[:, 1].astype(float).copy()
    g = np.zeros(size)
    g[2:] = table[2:, 2] - table[2:, 1]
    d = np.arange(size)[None, :]
    node = np.arange(size)[:, None]
    inside = (d >= 1) & (d <= node)
    expect = a[:, None] + g[:, None] * (d - 1)
    scale = LINEAR_TOL * (1.0 + np.abs(table).max())
    if (g < -scale).any() or (np.abs(np.where(inside, table - expect, 0.0)) > scale).any():
        return None
    return a, np.maximum(g, 0.0)


def priority_plan(mu: np.ndarray, table: np.ndarray, capacity: int,
                  rho: float = 0.99) -> np.ndarray:
    """Workers for jobs given in priority order: max Σ ρ^k·T_k, one worker each (the first
    C when C < N). Exact on concave rows; linear ones take the fast way."""
    return Rows.of(np.asarray(table, dtype=float), capacity).plan(mu, rho)


class Rows:
    """One table and capacity as the kernels read them: rows linear in d (``a``, ``g`` by
    D) or concave. ``of`` keeps the last ``KEEP`` tables' (finding which rows a table has
    reads all of it)."""

    KEEP = 8  # tables remembered (a daemon uses one or two; benches make many)
    _by_table: dict[int, tuple[weakref.ref, tuple, Rows]] = {}

    def __init__(self, table: np.ndarray, capacity: int):
        self.capacity = int(capacity)
        self.table = np.ascontiguousarray(table, dtype=np.float64)
        size = min(self.table.shape[0], self.capacity + 1)
        rows = linear_rows(self.table[:size, :size]) if size == self.capacity + 1 else None
        self.linear = rows is not None
        self.a, self.g = rows if rows is not None else (np.zeros(1), np.zeros(1))
        self.top = float(self.table.max())  # the most any job can load: L*

    @classmethod
    def of(cls, table: np.ndarray, capacity: int) -> Rows:
        """The rows of this very array (same object, shape, capacity and sum), read anew
        when the array was freed or changed."""
        stamp = (table.shape, int(capacity), float(table.sum()))
        held = cls._by_table.get(id(table))
        if held is not None and held[0]() is table and held[1] == stamp:
            return held[2]
        rows = cls(table, capacity)
        kept = [(k, v) for k, v in cls._by_table.items() if v[0]() is not None]
        cls._by_table = dict(kept[-(cls.KEEP - 1):])  # its rows hold the table: few kept
        cls._by_table[id(table)] = (weakref.ref(table), stamp, rows)
        return rows

    def plan(self, mu: np.ndarray, rho: float = 0.99) -> np.ndarray:
        """The priority plan of jobs ``mu`` (B·μ, in priority order)."""
        return loops.plan(np.ascontiguousarray(mu, dtype=np.float64), float(rho),
                          self.table, self.capacity, self.linear, self.a, self.g)

    def forward(self, mu: np.ndarray, remaining: np.ndarray, order, window: float = 0.0,
                rho: float = 0.99) -> tuple[np.ndarray, np.ndarray]:
        """``forward`` of the loops (``adloader.scheduling.kernels.loops``) on these rows."""
        return loops.forward(np.ascontiguousarray(mu, dtype=np.float64),
                             np.ascontiguousarray(remaining, dtype=np.float64),
                             self.table, self.capacity,
                             np.ascontiguousarray(order, dtype=np.int64), float(window),
                             float(rho), self.linear, self.a, self.g)
