"""The contention surface: what each of k loading pipelines loads when they run side by side
(measured by ``adloader profile --contention``), replayed as a simulated node's loading truth.

A point is the workers of k pipelines run at once, [d_1..d_k], and the samples/s each loaded,
[r_1..r_k]. Asked for the jobs running now (their workers d_i, D = Σ d_i, k jobs with d_i > 0),
the surface answers each job's loading rate λ_i by this rule:

1. **A measured point** (the same workers, in any order) gets its measured rates: jobs and
   pipelines are paired in order of workers, ties in the order given. The truth reproduces every
   point exactly.
2. **Otherwise** λ_i = d_i/D · L(D) · c, the old rule (L(D) of one pipeline alone, Fig. 5) times
   the **contention factor** c = r/(d/D · L(D)) the measured points show, interpolated:
   - among the points of k pipelines — k larger than any measured: the largest; k = 1 with no
     point of one pipeline: c = 1 (L(D) is that measurement); a k between measured ones: the
     nearest measured k ≥ 2, the larger on a tie;
   - linear in D between the two nearest measured totals of that k (flat outside them);
   - at each of those totals, linear in the job's share d_i/D between the nearest measured
     shares (flat outside; the pipelines of one share averaged).

Rates of a job with no workers are 0. Plain functions on plain data: the profile holds the points.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from adloader.errors import InputError

MAX_PIPELINES = 16  # pipelines in one point
MAX_TOTAL_WORKERS = 256  # workers of one point in all


class SurfacePoint(NamedTuple):
    """k pipelines' workers [d_1..d_k] run side by side and the samples/s each loaded."""

    workers: tuple[int, ...]
    rates: tuple[float, ...]

    def to_json(self) -> dict:
        return {"workers": list(self.workers), "rates": [round(r, 4) for r in self.rates]}


def check_workers(workers: Sequence[int], where: str = "point") -> tuple[int, ...]:
    """One point's workers, checked: 1..MAX_PIPELINES pipelines of at least one worker each,
    at most MAX_TOTAL_WORKERS in all."""
    out = tuple(int(d) for d in workers)
    if not out:
        raise InputError(f"{where}: a point needs at least one pipeline")
    if len(out) > MAX_PIPELINES:
        raise InputError(f"{where}: {len(out)} pipelines, at most {MAX_PIPELINES} side by side")
    if min(out) < 1:
        raise InputError(f"{where}: each pipeline needs at least 1 worker, got {list(out)}")
    if sum(out) > MAX_TOTAL_WORKERS:
        raise InputError(f"{where}: {sum(out)} workers in all, at most {MAX_TOTAL_WORKERS}")
    return out


def points_from_json(data, origin: str) -> tuple[SurfacePoint, ...]:
    """The ``loading_surface`` field of a profile: a list of {"workers": [...], "rates": [...]}."""
    if not isinstance(data, list):
        raise InputError(f"{origin}: profile field 'loading_surface' is a list of points")
    out, seen = [], set()
    for i, item in enumerate(data):
        where = f"{origin}: loading_surface[{i}]"
        if not isinstance(item, dict) or "workers" not in item or "rates" not in item:
            raise InputError(f"{where}: a point is {{\"workers\": [...], \"rates\": [...]}}")
        try:
            workers = check_workers(item["workers"], where)
            rates = tuple(float(r) for r in item["rates"])
        except (TypeError, ValueError):
            raise InputError(f"{where}: workers are integers, rates numbers") from None
        if len(rates) != len(workers):
            raise InputError(f"{where}: {len(workers)} pipelines but {len(rates)} rates")
        if any(not math.isfinite(r) or r < 0 for r in rates):
            raise InputError(f"{where}: rates must be finite and non-negative")
        key = tuple(sorted(workers))
        if key in seen:
            raise InputError(f"{where}: workers {list(workers)} measured twice")
        seen.add(key)
        out.append(SurfacePoint(workers, rates))
    return tuple(out)


def _order(workers: Sequence[float]) -> list[int]:
    """Indices by workers, most first, ties in the order given."""
    return sorted(range(len(workers)), key=lambda i: -workers[i])


class LoadingSurface:
    """Each job's loading rate from the measured points and the node's L(D) (see the module)."""

    def __init__(self, points: Sequence[SurfacePoint], node_loading: Callable[[float], float]):
        if not points:
            raise InputError("a loading surface needs at least one measured point")
        self.points = tuple(points)
        self.node_loading = node_loading
        self.exact = {tuple(sorted(p.workers)): p for p in self.points}
        # k -> total D -> [(share, factor)] of each measured pipeline
        self.factors_by_k: dict[int, dict[int, list[tuple[float, float]]]] = {}
        for p in self.points:
            total = sum(p.workers)
            base = self.node_loading(total) / total
            for d, r in zip(p.workers, p.rates, strict=True):
                factor = r / (d * base) if base > 0 else 1.0
                self.factors_by_k.setdefault(len(p.workers), {}).setdefault(total, []).append(
                    (d / total, factor))

    @property
    def max_pipelines(self) -> int:
        return max(len(p.workers) for p in self.points)

    def rates(self, workers: Mapping[str, float]) -> dict[str, float]:
        """λ_i samples/s of each job with ``workers[i]`` workers, all running at once."""
        active = {n: w for n, w in workers.items() if w > 0}
        out = {n: 0.0 for n in workers}
        if not active:
            return out
        point = self._measured(active)
        if point is not None:
            return out | point
        total = sum(active.values())
        base = self.node_loading(total) / total
        return out | {n: w * base * self._factor(len(active), total, w / total)
                      for n, w in active.items()}

    def factors(self, workers: Mapping[str, float]) -> dict[str, float]:
        """c_i = λ_i / (d_i/D · L(D)) of each job (1 for a job with no workers)."""
        active = {n: w for n, w in workers.items() if w > 0}
        total = sum(active.values())
        base = self.node_loading(total) / total if total > 0 else 0.0
        rates = self.rates(workers)
        return {n: rates[n] / (active[n] * base) if n in active and base > 0 else 1.0
                for n in workers}

    def _measured(self, active: Mapping[str, float]) -> dict[str, float] | None:
        values = list(active.values())
        if any(float(w) != int(w) for w in values):
            return None
        point = self.exact.get(tuple(sorted(int(w) for w in values)))
        if point is None:
            return None
        names = list(active)
        jobs, pipes = _order(values), _order(point.workers)
        return {names[j]: point.rates[p] for j, p in zip(jobs, pipes, strict=True)}

    def _factor(self, k: int, total: float, share: float) -> float:
        known = sorted(self.factors_by_k)
        if k not in self.factors_by_k:
            if k == 1:
                return 1.0
            many = [m for m in known if m >= 2]
            if not many:
                return 1.0
            k = min(many, key=lambda m: (abs(m - k), -m))
        by_total = self.factors_by_k[k]
        totals = sorted(by_total)
        if total <= totals[0]:
            return self._at(by_total[totals[0]], share)
        if total >= totals[-1]:
            return self._at(by_total[totals[-1]], share)
        hi = next(i for i, t in enumerate(totals) if t >= total)
        t0, t1 = totals[hi - 1], totals[hi]
        w = (total - t0) / (t1 - t0)
        return (1 - w) * self._at(by_total[t0], share) + w * self._at(by_total[t1], share)

    @staticmethod
    def _at(samples: list[tuple[float, float]], share: float) -> float:
        by_share: dict[float, list[float]] = {}
        for s, c in samples:
            by_share.setdefault(round(s, 9), []).append(c)
        xs = sorted(by_share)
        return float(np.interp(share, xs, [float(np.mean(by_share[x])) for x in xs]))
