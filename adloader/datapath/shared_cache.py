"""One node cache shared by the node's jobs, keyed by dataset identity.

Jobs that read the same dataset (hyper-parameter runs of one model, different seeds) share the
cache: a sample is the pair (dataset, index), so what one job decoded is a hit for the next.
The node's clairvoyant input is the streams of all its jobs together (NoPFS §3.1, per job):

- ``JobAccesses``: one job's node sequence (``adloader.datapath.access_stream.node_sequence``) on
dataset d of
  N_d samples, advancing at ``rate`` iterations per unit time from ``start``: its iteration s
  happens at t = start + s / rate.
- ``merge_streams``: all jobs' accesses in time order (ties: job order, then position), each
  keyed by a global id offset_d + index — the node stream. Its *events* are the jobs'
  iterations in that order; ``step`` is the event index, so ``adloader.datapath.eviction`` runs on
  it as
  on one job's ``NodeSequence`` (Lobster's keys are then next uses in events).
- ``evaluate_private``: per job a private cache of c_j samples, its own policy, its own stream.
- ``evaluate_shared``: one cache of C samples on the node stream (``belady``: the multi-job
  MIN, the reference no policy beats).
- ``evaluate_partitioned``: one partition of c_d samples per dataset (Σ c_d ≤ C, split by
  ``adloader.datapath.cache_arbiter``), each running a policy on its dataset's part of the stream;
  ``evaluate_resplit`` the same with a split that changes when jobs come and go, each
  partition running MIN with a capacity that changes in time (``belady_resized``).

Every result is a ``CacheStats`` over the node stream's accesses; ``hits_by_job`` splits it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adloader.datapath.access_stream import NodeSequence
from adloader.datapath.cache_policies import evaluate
from adloader.datapath.eviction import CacheStats
from adloader.datapath.reuse import next_access
from adloader.errors import InputError


@dataclass(frozen=True)
class JobAccesses:
    """A job on the node: its ``sequence`` on ``dataset`` (N_d = ``size`` samples)."""

    name: str
    dataset: str
    size: int
    sequence: NodeSequence
    rate: float = 1.0  # iterations per unit time
    start: float = 0.0  # arrival time

    def time_of(self, steps) -> np.ndarray:
        """When iteration s runs: start + s / rate."""
        return self.start + np.asarray(steps, dtype=np.float64) / self.rate

    @property
    def end(self) -> float:
        """When the job finishes: after its last iteration."""
        s = self.sequence.step
        return self.start + (int(s[-1]) + 1) / self.rate if s.size else self.start

    def until(self, time: float) -> JobAccesses:
        """The job leaving at ``time``: only the iterations that start before it."""
        keep = self.time_of(self.sequence.step) < time
        seq = self.sequence
        part = NodeSequence(seq.samples[keep], seq.step[keep], seq.steps_per_epoch,
                            seq.accesses_per_epoch)
        return JobAccesses(self.name, self.dataset, self.size, part, self.rate, self.start)


@dataclass(frozen=True)
class MergedStream:
    """The node stream: global sample ids in time order with each access's job and time."""

    sequence: NodeSequence  # samples: offset_d + index; step: event (a job's iteration) index
    job: np.ndarray  # index into ``jobs`` of each access
    time: np.ndarray  # time of each access (its iteration's)
    jobs: tuple[JobAccesses, ...]
    offsets: Mapping[str, int]  # dataset → first global id, in order of first appearance

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(self.offsets)

    @property
    def distinct(self) -> int:
        """Σ N_d over the node's datasets: the cache fractions of the bench are of this."""
        return sum(self.size_of(d) for d in self.offsets)

    def size_of(self, dataset: str) -> int:
        return next(j.size for j in self.jobs if j.dataset == dataset)

    def dataset_of_access(self) -> np.ndarray:
        """Index of each access's dataset in ``datasets``."""
        index = {d: i for i, d in enumerate(self.offsets)}
        return np.array([index[j.dataset] for j in self.jobs], dtype=np.int64)[self.job]


def merge_streams(jobs: Sequence[JobAccesses]) -> MergedStream:
    """Interleave the jobs' node sequences by time; jobs on one dataset share its ids."""
    if not jobs:
        raise InputError("shared cache: no jobs on the node")
    if len({j.name for j in jobs}) != len(jobs):
        raise InputError("shared cache: two jobs share a name")
    offsets: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for j in jobs:
        if not j.rate > 0 or not math.isfinite(j.rate):
            raise InputError(f"shared cache: job {j.name} needs a rate > 0, got {j.rate}")
        if j.dataset in sizes and sizes[j.dataset] != j.size:
            raise InputError(f"shared cache: dataset {j.dataset!r} has {sizes[j.dataset]} "
                             f"samples for one job and {j.size} for {j.name}")
        if j.sequence.samples.size and int(j.sequence.samples.max()) >= j.size:
            raise InputError(f"shared cache: job {j.name} reads past its {j.size} samples")
        if j.dataset not in sizes:
            offsets[j.dataset] = sum(sizes.values())
            sizes[j.dataset] = j.size
    keys = np.concatenate([j.sequence.samples.astype(np.int64) + offsets[j.dataset]
                           for j in jobs])
    step = np.concatenate([j.sequence.step for j in jobs])
    time = np.concatenate([j.time_of(j.sequence.step) for j in jobs])
    job = np.concatenate([np.full(len(j.sequence), i, np.int64) for i, j in enumerate(jobs)])
    order = np.lexsort((np.arange(keys.size), job, time))  # time, then job, then position
    keys, step, time, job = keys[order], step[order], time[order], job[order]
    events = _events(job, step)
    seq = NodeSequence(keys, events, sum(j.sequence.steps_per_epoch for j in jobs),
                       sum(j.sequence.accesses_per_epoch for j in jobs))
    return MergedStream(seq, job, time, tuple(jobs), offsets)


def _events(job: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Event index of each access: a new event wherever the (job, iteration) changes."""
    if not job.size:
        return np.zeros(0, dtype=np.int64)
    new = np.concatenate([[False], (job[1:] != job[:-1]) | (step[1:] != step[:-1])])
    return np.cumsum(new, dtype=np.int64)


def dataset_view(merged: MergedStream, dataset: str,
                 since: float = -math.inf) -> tuple[NodeSequence, np.ndarray]:
    """Dataset d's part of the node stream from ``since`` on, with local ids (0..N_d − 1).

    Returns the sequence (events renumbered 0, 1, …) and its positions in the node stream.
    """
    if dataset not in merged.offsets:
        raise InputError(f"shared cache: no job on the node reads {dataset!r}")
    d = merged.datasets.index(dataset)
    pos = np.flatnonzero((merged.dataset_of_access() == d) & (merged.time >= since))
    ev = merged.sequence.step[pos]
    steps = _events(np.zeros_like(ev), ev)
    mine = [j.sequence for j in merged.jobs if j.dataset == dataset]
    seq = NodeSequence(merged.sequence.samples[pos] - merged.offsets[dataset], steps,
                       max(1, sum(s.steps_per_epoch for s in mine)),
                       sum(s.accesses_per_epoch for s in mine))
    return seq, pos


def _combine(n: int, parts) -> CacheStats:
    """One node-stream ``CacheStats`` from (positions, stats) of disjoint parts."""
    hit = np.zeros(n, dtype=bool)
    evictions = 0
    for pos, stats in parts:
        hit[pos] = stats.hit
        evictions += stats.evictions
    hits = int(hit.sum())
    return CacheStats(hits, n - hits, hits / n if n else 0.0, evictions, None, hit)


def even_split(names: Sequence[str], capacity: int) -> dict[str, int]:
    """C // n samples each, the remainder to the first ones."""
    q, r = divmod(int(capacity), len(names))
    return {name: q + (i < r) for i, name in enumerate(names)}


def evaluate_private(merged: MergedStream, capacities: Mapping[str, int], policy: str,
                     **kw) -> CacheStats:
    """Per job a private cache of c_j samples (``capacities[job]``) on its own stream."""
    parts = []
    for i, j in enumerate(merged.jobs):
        pos = np.flatnonzero(merged.job == i)  # the job's accesses, in its own order
        parts.append((pos, evaluate(policy, j.sequence, capacities.get(j.name, 0), **kw)))
    return _combine(len(merged.sequence), parts)


def evaluate_shared(merged: MergedStream, capacity: int, policy: str = "belady",
                    **kw) -> CacheStats:
    """One cache of C samples on the node stream (``belady``: the multi-job MIN)."""
    return evaluate(policy, merged.sequence, capacity, **kw)


def evaluate_partitioned(merged: MergedStream, split: Mapping[str, int],
                         policy: str = "lobster", **kw) -> CacheStats:
    """A partition of c_d = ``split[d]`` samples per dataset, each running ``policy``."""
    parts = []
    for d in merged.datasets:
        seq, pos = dataset_view(merged, d)
        parts.append((pos, evaluate(policy, seq, split.get(d, 0), **kw)))
    return _combine(len(merged.sequence), parts)


def belady_resized(sequence, capacity) -> CacheStats:
    """MIN with a capacity c(t) given per access (a partition the arbiter resizes).

    As ``cache.belady``: keys are next uses, the farthest leaves first; when c(t) shrinks the
    farthest keys leave until the cache fits. Farthest-first stays optimal under any c(t)
    (the exchange argument of MIN does not use a fixed size).
    """
    seq = sequence.samples if isinstance(sequence, NodeSequence) else np.asarray(sequence)
    n = seq.size
    cap = np.broadcast_to(np.asarray(capacity, dtype=np.int64), (n,)).tolist()
    if n and min(cap) < 0:
        raise InputError("shared cache: a partition's capacity must be >= 0")
    nxt = next_access(seq).tolist()
    alive = bytearray(n + 1)
    heap: list[int] = []
    size = evictions = 0
    hit = np.zeros(n, dtype=bool)
    for t, k in enumerate(nxt):
        if alive[t]:
            hit[t] = True
            size -= 1
        c = cap[t]
        while size > c:  # shrink: drop the farthest keys (dead entries are all in the past)
            m = -heapq.heappop(heap)
            if alive[m] and m > t:
                alive[m] = 0
                size -= 1
                evictions += 1
        if k == n:
            continue
        if size < c:
            heapq.heappush(heap, -k)
            alive[k] = 1
            size += 1
        elif c:
            m = -heap[0]  # the largest key: alive, as every dead key is ≤ t
            if k < m:
                heapq.heapreplace(heap, -k)
                alive[m] = 0
                alive[k] = 1
                evictions += 1
    hits = int(hit.sum())
    return CacheStats(hits, n - hits, hits / n if n else 0.0, evictions, None, hit)


def evaluate_resplit(merged: MergedStream,
                     splits: Sequence[tuple[float, Mapping[str, int]]]) -> CacheStats:
    """Partitions resized live: ``splits`` = [(from time, {dataset: c_d}), …], times rising.

    Each dataset's partition runs ``belady_resized`` with c_d of the split in force at each
    access's time (0 before the first): the best any policy can do inside the splits.
    """
    times = [t for t, _ in splits]
    if not splits or times != sorted(times):
        raise InputError("shared cache: splits must be given in time order")
    parts = []
    for d in merged.datasets:
        seq, pos = dataset_view(merged, d)
        which = np.searchsorted(times, merged.time[pos], side="right") - 1
        caps = np.array([0] + [s.get(d, 0) for _, s in splits], dtype=np.int64)[which + 1]
        parts.append((pos, belady_resized(seq, caps)))
    return _combine(len(merged.sequence), parts)


def hits_by_job(merged: MergedStream, stats: CacheStats) -> dict[str, int]:
    """Hits of each job's accesses in a node-stream result."""
    if stats.hit is None:
        raise InputError("shared cache: these stats carry no per-access hits")
    per = np.bincount(merged.job, weights=stats.hit, minlength=len(merged.jobs))
    return {j.name: int(per[i]) for i, j in enumerate(merged.jobs)}
