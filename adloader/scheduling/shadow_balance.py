"""``ShadowBalance``: balance's run of the same jobs, kept beside the real one.

Each job enters the shadow when it is first planned (its arrival a_i, its S_i) and runs
there at its balance rate b_i = min(B_i·μ_i, λ(bal_i; C)) among the jobs the shadow still
holds, leaving it when its samples are done — whatever the real node did meanwhile. Ĉ_i is
its completion there, projected with no further arrival (an arrival only delays balance's
jobs, so the projection errs early: strict). ``ftf`` keeps C_i ≤ a_i + (Ĉ_i − a_i)/α.

Pure: the caller gives the time. Fluid rates between events, as the node simulator's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from adloader.scheduling import loops

EPS = 1e-9


@dataclass
class _Shadow:
    arrival: float
    left: float  # samples still to load under balance
    cap: float  # B·μ (GPU share included) as last planned
    end: float | None = None


class ShadowBalance:
    """Balance's run of the jobs planned so far (see the module)."""

    def __init__(self, capacity: int, table):
        self.capacity = int(capacity)
        self.table = np.ascontiguousarray(table, dtype=np.float64)
        self.t: float | None = None
        self.jobs: dict[str, _Shadow] = {}

    def _run(self, until: float, commit: bool) -> dict[str, float]:
        """Balance from ``self.t`` to ``until`` (inf: to the end); the ends it reaches."""
        names = [k for k, s in self.jobs.items() if s.end is None]
        if not names or self.t is None:
            return {}
        cap = np.array([self.jobs[k].cap for k in names], dtype=np.float64)
        left = np.array([self.jobs[k].left for k in names], dtype=np.float64)
        end, left = loops.balance_run(cap, left, self.table, self.capacity, float(self.t),
                                      float(until))
        ends = {k: float(e) for k, e in zip(names, end, strict=True) if np.isfinite(e)}
        if commit:
            for k, rest, e in zip(names, left, end, strict=True):
                s = self.jobs[k]
                s.left, s.end = (0.0, float(e)) if np.isfinite(e) else (float(rest), None)
        return ends

    def observe(self, now: float, jobs: Iterable[tuple[str, float, float]]) -> None:
        """Advance to ``now``; then each (name, B·μ, S_i left) seen: a new job enters with
        its S_i, a known one gets its current ceiling. Jobs not seen and done are dropped."""
        if self.t is not None and now > self.t:
            self._run(now, commit=True)
        self.t = now if self.t is None else max(self.t, now)
        seen = set()
        for name, cap, remaining in jobs:
            seen.add(name)
            job = self.jobs.get(name)
            if job is None:
                self.jobs[name] = _Shadow(self.t, max(float(remaining), 0.0), float(cap))
            else:
                job.cap = float(cap)
        self.jobs = {k: s for k, s in self.jobs.items() if k in seen or s.end is None}

    def forget(self, name: str) -> None:
        """A job that left for good before its end (cancelled, failed): balance has not it."""
        self.jobs.pop(name, None)

    def ends(self) -> dict[str, float]:
        """Ĉ_i of every job held: done ones as they ended, the rest projected."""
        out = {k: s.end for k, s in self.jobs.items() if s.end is not None}
        out.update(self._run(np.inf, commit=False))
        return out

    def deadlines(self, now: float, alpha: float) -> dict[str, float]:
        """D_i = (Ĉ_i − a_i)/α − (now − a_i): seconds from ``now`` left to job i."""
        a = max(float(alpha), EPS)
        return {k: (c - self.jobs[k].arrival) / a - (now - self.jobs[k].arrival)
                for k, c in self.ends().items()}
