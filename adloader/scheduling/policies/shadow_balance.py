"""``ShadowBalance``: balance's run of the same jobs, kept beside the real one.

Each job enters the shadow when it is first planned (its arrival a_i, its S_i) and runs
there at its balance rate b_i = min(B_i·μ_i, λ(bal_i; C)) among the jobs the shadow still
holds, leaving it when its samples are done — whatever the real node did meanwhile. Ĉ_i is
its completion there, projected with no further arrival (an arrival only delays balance's
jobs, so the projection errs early: strict). ``ftf`` keeps C_i ≤ a_i + (Ĉ_i − a_i)/α.

B_i·μ_i is the job's GPU share of its solo rate. Given each job's GPUs and solo rate, the
shadow shares the GPUs as balance's run would: among the jobs *the shadow* still runs, each
at balance's workers (``gpushare.gpu_ceilings``), recomputed at each of its ends. Taking the
shares from the real run instead let a partner that ``ftf`` ends later than balance slow a
job the shadow then expected slow under balance too — a deadline too late (the held-out
misses at identical placement, ``docs/benchmarks.md``). Without them, the ceiling as given.

Pure: the caller gives the time. Fluid rates between events, as the node simulator's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from adloader.scheduling.kernels import loops
from adloader.scheduling.policies.gpushare import gpu_ceilings

EPS = 1e-9
SHARED_MOST = 32  # past this many jobs in the shadow, the ceilings as given (see ``_run``)


@dataclass
class _Shadow:
    arrival: float
    left: float  # samples still to load under balance
    cap: float  # B·μ (GPU share included) as last planned
    end: float | None = None
    solo: float | None = None  # B·μ alone on its GPUs (None: share as ``cap`` gives)
    gpus: tuple[int, ...] = ()


class ShadowBalance:
    """Balance's run of the jobs planned so far (see the module)."""

    def __init__(self, capacity: int, table):
        self.capacity = int(capacity)
        self.table = np.ascontiguousarray(table, dtype=np.float64)
        self.t: float | None = None
        self.jobs: dict[str, _Shadow] = {}

    def _caps(self, names: list[str], share: bool) -> np.ndarray:
        """B·μ of each job the shadow runs: as given, or (``share``) its GPUs shared as
        balance's run shares them where its solo rate and GPUs are known."""
        cap = {k: self.jobs[k].cap for k in names}
        shared = [k for k in names if self.jobs[k].solo is not None and self.jobs[k].gpus]
        if share and shared:
            m, row = len(names), self.table[self.capacity]
            base, more = (self.capacity // m, self.capacity % m) if self.capacity >= m \
                else (0, self.capacity)
            loads = {k: float(row[base + (1 if r < more else 0)]) for r, k in enumerate(names)}
            cap.update(gpu_ceilings({k: self.jobs[k].gpus for k in shared},
                                    {k: self.jobs[k].solo for k in shared},
                                    float(row[self.capacity]), loads))
        return np.array([cap[k] for k in names], dtype=np.float64)

    def _run(self, until: float, commit: bool) -> dict[str, float]:
        """Balance from ``self.t`` to ``until`` (inf: to the end); the ends it reaches. Where
        the shadow shares GPUs itself, piece by piece: its ceilings change at each end. Each
        piece shares the GPUs anew (the planner's rule, per job: cubic in the jobs sharing
        a GPU), so past ``SHARED_MOST`` jobs the ceilings are taken as given, in one run: a
        burst of short jobs (``adloader bench soak``: hundreds at once in the shadow) made
        the daemon's control loop spend 81 % of its time here."""
        names = [k for k, s in self.jobs.items() if s.end is None]
        if not names or self.t is None:
            return {}
        t, ends = float(self.t), {}
        left = np.array([self.jobs[k].left for k in names], dtype=np.float64)
        piecewise = len(names) <= SHARED_MOST and any(
            self.jobs[k].solo is not None and self.jobs[k].gpus for k in names)
        while names and t < until:
            cap = self._caps(names, piecewise)
            end, rest = loops.balance_run(cap, left, self.table, self.capacity, t, float(until))
            done = end[np.isfinite(end)]
            if not piecewise or done.size == 0:
                ends.update({k: float(e) for k, e in zip(names, end, strict=True)
                             if np.isfinite(e)})
                left = rest
                break
            first = float(done.min())  # the first end: ceilings stand until it
            ended, left = loops.balance_run(cap, left, self.table, self.capacity, t, first)
            gone = np.isfinite(ended)
            if not gone.any():  # rounding: the first run's first ends
                gone = end <= first
            ends.update({k: first for k, g in zip(names, gone, strict=True) if g})
            names = [k for k, g in zip(names, gone, strict=True) if not g]
            left, t = left[~gone], first
        if commit:
            for k, rest in zip(names, left, strict=True):
                self.jobs[k].left = float(rest)
            for k, e in ends.items():
                self.jobs[k].left, self.jobs[k].end = 0.0, e
        return ends

    def observe(self, now: float, jobs: Iterable[tuple]) -> None:
        """Advance to ``now``; then each (name, B·μ, S_i left[, solo B·μ, GPUs]) seen: a new
        job enters with its S_i, a known one gets its current ceiling (and solo rate and
        GPUs, where given: the shadow then shares the GPUs itself). Jobs not seen and done
        are dropped."""
        if self.t is not None and now > self.t:
            self._run(now, commit=True)
        self.t = now if self.t is None else max(self.t, now)
        seen = set()
        for name, cap, remaining, *placed in jobs:
            seen.add(name)
            job = self.jobs.get(name)
            if job is None:
                job = self.jobs[name] = _Shadow(self.t, max(float(remaining), 0.0), float(cap))
            job.cap = float(cap)
            if placed:
                job.solo, job.gpus = float(placed[0]), tuple(placed[1])
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
