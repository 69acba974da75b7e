"""Cache arbiter: the node's cache memory C divided among datasets by predicted marginal hits.

As ``scheduling.policies.allocation`` divides workers by predicted marginal throughput, the arbiter
divides the shared node cache (``adloader.datapath.shared_cache``) among the datasets its jobs read:
maximise Σ_d h_d(c_d) subject to Σ_d c_d ≤ C, h_d(c) the hits of dataset d's part of the node
stream in a partition of c samples. The jobs' streams are known from their seeds, so h_d is
predicted by running a clairvoyant policy on that part (``hit_curve``) on the grid c = k·u,
k = 0..G (flat past N_d: room beyond the dataset buys nothing).

- ``allocate_dp``: exact on the grid for any curves — a DP over (dataset, units), O(D·B·G).
- ``allocate_greedy``: one unit at a time to the largest marginal gain h_d(k+1) − h_d(k);
  exact when every h_d is concave (``is_concave``), not otherwise (a curve that gains only
  after two units is never started). MIN's hits over a whole run are concave in c (the most
  reuse intervals with ≤ c overlapping is a min-cost-flow value in c); counted over a window
  (the future from now, warmed by the past) or phase by phase they need not be: the DP.
- ``split_cache``: units → samples, the < u samples left over to the best next marginal gain.
- ``CacheArbiter``: ``split`` re-solves for the jobs present, from ``now`` on; ``plan`` also
  re-splits at their predicted departures (a dataset whose jobs are gone needs no room, and
  MIN hands a departing dataset's slots on before it ends); ``live_splits`` re-plans at
  every arrival and unpredicted departure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from adloader.datapath.cache_policies import evaluate
from adloader.datapath.shared_cache import JobAccesses, belady_resized, dataset_view, merge_streams
from adloader.errors import InputError


@dataclass(frozen=True)
class HitCurve:
    """Predicted hits h(k·u) of a partition of k units of u = ``unit`` samples, k = 0..G.

    ``size``: the most room worth having (N_d; the last point may be less than G·u).
    """

    unit: int
    hits: tuple[float, ...]
    size: int | None = None

    def at(self, units: int) -> float:
        return self.hits[min(units, len(self.hits) - 1)]


def hit_curve(sequence, size: int, unit: int, max_units: int | None = None,
              policy: str = "belady", since: int = 0, stop: int | None = None,
              **kw) -> HitCurve:
    """h(k·u) of ``policy`` on a dataset's part of the node stream, k up to ⌈N_d / u⌉.

    Only the hits of accesses at positions [``since``, ``stop``) count: the past runs too, so
    the samples a partition of that size would already hold are hits of the future.
    """
    if unit < 1:
        raise InputError(f"cache arbiter: the unit must be at least 1 sample, got {unit}")
    top = -(-int(size) // unit)
    top = top if max_units is None else min(top, int(max_units))
    return HitCurve(unit, tuple(
        float(evaluate(policy, sequence, min(k * unit, size), **kw).window(since, stop).hits)
        for k in range(top + 1)), int(size))


def is_concave(hits: Sequence[float], tol: float = 1e-9) -> bool:
    """Marginal gains h(k+1) − h(k) never rise."""
    gains = np.diff(np.asarray(hits, dtype=np.float64))
    return bool(np.all(np.diff(gains) <= tol))


def _check(curves: Mapping[str, Sequence[float]], budget: int) -> None:
    if int(budget) != budget or budget < 0:
        raise InputError(f"cache arbiter: the budget must be a whole number >= 0, got {budget}")
    for name, h in curves.items():
        if len(h) < 1:
            raise InputError(f"cache arbiter: the hit curve of {name!r} is empty")


def allocate_dp(curves: Mapping[str, Sequence[float]], budget: int) -> dict[str, int]:
    """Units k_d maximising Σ h_d(k_d) with Σ k_d ≤ B, exactly (h_d flat past its grid)."""
    _check(curves, budget)
    budget = int(budget)
    names = list(curves)
    best = np.zeros(budget + 1)  # best[b]: the datasets so far with at most b units
    choice = []
    for name in names:
        h = np.asarray(curves[name], dtype=np.float64)[: budget + 1]
        new = np.full(budget + 1, -np.inf)
        pick = np.zeros(budget + 1, dtype=np.int64)
        for k, value in enumerate(h):  # first k wins ties: fewer units to earlier datasets
            cand = best[: budget + 1 - k] + value
            better = cand > new[k:]
            new[k:][better] = cand[better]
            pick[k:][better] = k
        best = new
        choice.append(pick)
    out, b = {}, int(budget)
    for name, pick in zip(reversed(names), reversed(choice), strict=True):
        out[name] = int(pick[b])
        b -= out[name]
    return {name: out[name] for name in names}


def allocate_greedy(curves: Mapping[str, Sequence[float]], budget: int) -> dict[str, int]:
    """One unit at a time to the largest marginal gain (ties: earlier name); stops at 0 gain."""
    _check(curves, budget)
    units = dict.fromkeys(curves, 0)
    for _ in range(int(budget)):
        gain, name = max(((curves[n][units[n] + 1] - curves[n][units[n]], n)
                          for n in curves if units[n] + 1 < len(curves[n])),
                         key=lambda g: g[0], default=(0.0, None))
        if name is None or gain <= 0:
            break
        units[name] += 1
    return units


def split_cache(curves: Mapping[str, HitCurve], capacity: int,
                method: str = "dp") -> dict[str, int]:
    """Samples per dataset, Σ ≤ C: the grid optimum, then the rest by next marginal gain."""
    if not curves:
        return {}
    units = {c.unit for c in curves.values()}
    if len(units) != 1:
        raise InputError("cache arbiter: the hit curves must share one unit")
    unit = units.pop()
    solve = {"dp": allocate_dp, "greedy": allocate_greedy}.get(method)
    if solve is None:
        raise InputError(f"cache arbiter: method must be 'dp' or 'greedy', got {method!r}")
    k = solve({n: c.hits for n, c in curves.items()}, int(capacity) // unit)
    top = {n: min((len(c.hits) - 1) * unit, c.size if c.size is not None else math.inf)
           for n, c in curves.items()}  # the most room each can use
    split = {n: min(k[n] * unit, top[n]) for n in curves}
    rest = int(capacity) - sum(split.values())
    gains = {n: c.at(k[n] + 1) - c.at(k[n]) for n, c in curves.items()}
    for n in sorted(curves, key=lambda n: -gains[n]):  # leftovers: the best next unit first
        extra = min(rest, top[n] - split[n]) if gains[n] > 0 else 0
        split[n] += extra
        rest -= extra
    return split


@dataclass
class CacheArbiter:
    """The node's cache split, re-solved when jobs arrive or leave.

    ``split(jobs, now)``: one split {dataset: c_d} from each dataset's hit curve — the hits of
    its jobs' accesses from ``now`` on, the cache warmed by their past. ``plan(jobs, now)``:
    a split for each phase between the jobs' predicted departures (a dataset whose jobs are
    gone needs no room), each partition running MIN inside (``belady_resized``). ``unit``:
    the grid step in samples (default ⌈C / ``points``⌉).
    """

    capacity: int
    points: int = 50
    policy: str = "belady"
    unit: int | None = None
    sweeps: int = 3  # rounds of the phase-by-phase ascent in ``plan``
    _curves: dict = field(default_factory=dict, repr=False)

    def grid_unit(self) -> int:
        return self.unit or max(1, math.ceil(self.capacity / self.points))

    def curves(self, jobs: Sequence[JobAccesses], now: float = -math.inf) -> dict[str, HitCurve]:
        """h_d on the grid; reused while dataset d's jobs (and ``now``) stay the same."""
        merged = merge_streams(jobs)
        unit = self.grid_unit()
        out = {}
        for d in merged.datasets:
            key = (d, _identity(j for j in jobs if j.dataset == d), now, unit)
            if key not in self._curves:
                seq, pos = dataset_view(merged, d)
                since = int(np.searchsorted(merged.time[pos], now))
                self._curves[key] = hit_curve(seq, merged.size_of(d), unit,
                                              -(-self.capacity // unit), self.policy, since)
            out[d] = self._curves[key]
        return out

    def split(self, jobs: Sequence[JobAccesses], now: float = -math.inf) -> dict[str, int]:
        return split_cache(self.curves(jobs, now), self.capacity)

    def _phase_curve(self, hits, d, room, k, size) -> HitCurve:
        """Dataset d's hits as a function of its room in phase k, the other phases fixed."""
        unit = self.grid_unit()
        pts = []
        for u in range(min(-(-size // unit), self.capacity // unit) + 1):
            room[k] = min(u * unit, size)
            pts.append(hits(d, room))
        return HitCurve(unit, tuple(pts), size)

    def plan(self, jobs: Sequence[JobAccesses],
             now: float = -math.inf) -> list[tuple[float, dict[str, int]]]:
        """[(from time, split), …]: phases cut at the jobs' predicted departures after ``now``.

        Starts from ``split`` in every phase, then re-solves one phase at a time with the
        others fixed (DP over each dataset's hits as a function of its room in that phase),
        keeping a change unless the total drops: a local optimum of the phased split.
        """
        merged = merge_streams(jobs)
        ends = sorted({j.end for j in jobs if j.end > now})
        if not ends:
            return [(now, dict.fromkeys(merged.datasets, 0))]
        bounds = [now, *ends[:-1]]
        first = self.split(jobs, now)
        plan = [dict(first) for _ in bounds]
        views = {}
        for d in merged.datasets:
            seq, pos = dataset_view(merged, d)
            t = merged.time[pos]
            phase = np.clip(np.searchsorted(bounds, t, side="right") - 1, 0, None)
            views[d] = (seq, phase, int(np.searchsorted(t, now)), t[-1] if t.size else now)

        memo: dict[tuple, float] = {}

        def hits(d, room) -> float:
            key = (d, *room)
            if key not in memo:
                seq, phase, since, _ = views[d]
                memo[key] = float(belady_resized(seq, np.asarray(room)[phase]).window(since).hits)
            return memo[key]

        def total(p) -> float:
            return sum(hits(d, [s[d] for s in p]) for d in merged.datasets)

        best = total(plan)
        for _ in range(self.sweeps if len(bounds) > 1 else 0):
            grew = False
            for k, start in enumerate(bounds):
                live = [d for d in merged.datasets if views[d][3] >= start]  # read from k on
                trial = [dict(s) for s in plan]
                trial[k] = dict.fromkeys(merged.datasets, 0)
                if len(live) == 1:  # one dataset left: all the room (MIN gains with room)
                    trial[k][live[0]] = min(self.capacity, merged.size_of(live[0]))
                elif live:
                    trial[k].update(split_cache({d: self._phase_curve(
                        hits, d, [s[d] for s in plan], k, merged.size_of(d)) for d in live},
                        self.capacity))
                if (value := total(trial)) >= best:  # equal: the tidier split (no dead room)
                    plan, best, grew = trial, value, grew or value > best
            if not grew:
                break
        return list(zip(bounds, plan, strict=True))


def _identity(jobs) -> tuple:
    """What a hit curve depends on: each job's name, accesses, start and rate."""
    return tuple(sorted((j.name, len(j.sequence), j.start, j.rate) for j in jobs))


def live_splits(arbiter: CacheArbiter, jobs: Sequence[JobAccesses],
                predicted: Mapping[str, JobAccesses] | None = None,
                ) -> list[tuple[float, dict[str, int]]]:
    """The splits in force as jobs come and go: [(from time, split), …].

    The daemon plans (``CacheArbiter.plan``) at every arrival and at every departure it did
    not predict — early, or late (then at the predicted end, when the job is still there) —
    knowing the jobs that have arrived: those that left or outran their prediction by their
    actual accesses, the others by ``predicted[name]`` (what it expects them to read;
    default: what they do read). Jobs yet to arrive are not known.
    """
    predicted = predicted or {}
    guess = {j.name: predicted.get(j.name, j) for j in jobs}
    plans = []
    events = {j.start for j in jobs} | {j.end for j in jobs} | {g.end for g in guess.values()}
    for t in sorted(events):
        came = any(j.start == t for j in jobs)
        early = any(j.end == t < guess[j.name].end for j in jobs)
        late = any(guess[j.name].end == t < j.end for j in jobs)
        if any(j.start <= t < j.end for j in jobs) and (came or early or late):
            known = [j if min(j.end, guess[j.name].end) <= t else guess[j.name]
                     for j in jobs if j.start <= t]
            plans.append((t, arbiter.plan(known, now=t)))
    out = []
    for i, (t, plan) in enumerate(plans):  # each plan holds until the next one is made
        stop = plans[i + 1][0] if i + 1 < len(plans) else math.inf
        out += [(s, split) for s, split in plan if t <= s < stop]
    return out
