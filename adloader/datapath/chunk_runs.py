"""Aggregated chunk loading: a mini-batch's indices as a few contiguous reads (SOLAR §4.4).

SOLAR sorts the indices a mini-batch loads, merges neighbours close enough that one read of
the rows from the first to the last (the unused rows between included) is cheaper than
separate reads, and loads each such run in one call; reordering inside the mini-batch leaves
the batch itself unchanged (§4.4, "Implementation Details"). ``plan_reads`` makes that plan
and says where each of the sampler's indices lands in what was read, so the batch keeps the
sampler's order (duplicates included). ``threshold_from_timings`` picks the plan's gap from a
micro-benchmark's timings, as the paper picks its |chunk| (footnote 4: |chunk| = 15 means
reading samples i … i+14 in one call is faster than reading them separately).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adloader.errors import InputError


@dataclass(frozen=True)
class ChunkThreshold:
    """When two wanted rows share one read.

    ``max_gap``: unused rows one read may pass over between two wanted rows (0: only
    neighbours merge); ``max_run``: rows one read may span, first to last (SOLAR's |chunk|).
    """

    max_gap: int
    max_run: int

    def __post_init__(self) -> None:
        for name, low in (("max_gap", 0), ("max_run", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) \
                    or value < low:
                raise InputError(f"chunk threshold: {name} must be an integer >= {low}, "
                                 f"got {value!r}")
            object.__setattr__(self, name, int(value))


@dataclass(frozen=True)
class ReadPlan:
    """Reads ``runs`` (``[start, stop)`` row ranges, ascending and disjoint), one call each.

    With the runs' rows laid end to end (``rows_read`` of them), the sampler's k-th index is
    row ``take[k]``: ``np.concatenate(reads)[take]`` is the batch in the sampler's order.
    """

    runs: tuple[tuple[int, int], ...]
    take: np.ndarray

    @property
    def rows_read(self) -> int:
        return sum(stop - start for start, stop in self.runs)

    @property
    def offsets(self) -> list[int]:
        """Where each run's rows start among the rows read."""
        out, at = [], 0
        for start, stop in self.runs:
            out.append(at)
            at += stop - start
        return out


def _as_indices(indices: Sequence[int]) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise InputError(f"chunk runs: indices must be a flat sequence of integers, "
                         f"got {idx.dtype} of shape {idx.shape}")
    idx = idx.astype(np.int64, copy=False)
    if idx.min() < 0:
        raise InputError(f"chunk runs: indices must be >= 0, got {int(idx.min())}")
    return idx


def plan_reads(indices: Sequence[int], threshold: ChunkThreshold) -> ReadPlan:
    """The fewest reads covering ``indices`` within ``threshold`` (any order, repeats allowed).

    Greedy over the sorted unique indices: a run takes the next index while the unused rows
    before it are at most ``max_gap`` and the run's span stays within ``max_run`` — which
    gives the minimum number of runs (a run that ends earlier never lets a later one reach
    further).
    """
    idx = _as_indices(indices)
    if idx.size == 0:
        return ReadPlan((), np.zeros(0, dtype=np.int64))
    wanted = np.unique(idx)
    # a gap too wide to read through starts a run wherever max_run allows it
    breaks = np.flatnonzero(np.diff(wanted) - 1 > threshold.max_gap) + 1
    segments = np.split(wanted, breaks)
    starts: list[int] = []
    stops: list[int] = []
    for seg in segments:
        i = 0
        while i < len(seg):
            start = int(seg[i])
            j = int(np.searchsorted(seg, start + threshold.max_run, side="left"))
            starts.append(start)
            stops.append(int(seg[j - 1]) + 1)
            i = j
    start_arr = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(stops, dtype=np.int64) - start_arr
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    run = np.searchsorted(start_arr, idx, side="right") - 1
    take = offsets[run] + idx - start_arr[run]
    return ReadPlan(tuple(zip(starts, stops, strict=True)), take)


def threshold_from_timings(sizes: Sequence[int], seconds: Sequence[float],
                           max_run: int) -> ChunkThreshold:
    """The largest gap worth reading through, from timed reads of k contiguous rows.

    ``seconds[i]``: one call reading ``sizes[i]`` contiguous rows (``sizes`` must hold 1).
    Two wanted rows g apart share a read when reading g + 2 rows at once costs less than two
    one-row reads: t(g + 2) < 2·t(1). A read never gets cheaper with more rows, so the
    timings are first made non-decreasing in k (pool adjacent violators: one noisy size does
    not end the search), then t is interpolated linearly between the measured sizes and the
    first size where the rule fails bounds the gap; it never fails within what was measured
    → the largest measured size (capped by ``max_run``).
    """
    if len(sizes) != len(seconds) or not sizes:
        raise InputError("chunk threshold: need one timing per size")
    order = np.argsort(np.asarray(sizes))
    k = np.asarray(sizes, dtype=np.float64)[order]
    t = np.asarray(seconds, dtype=np.float64)[order]
    if k[0] != 1 or np.any(np.diff(k) <= 0) or np.any(~np.isfinite(t)) or np.any(t <= 0):
        raise InputError("chunk threshold: sizes must be distinct, start at 1, with "
                         "positive finite timings")
    t = _non_decreasing(t)
    budget = 2.0 * t[0]
    span = k[-1]  # nothing measured costs more than two single reads
    over = np.flatnonzero(t >= budget)
    if over.size:
        j = int(over[0])  # > 0 as t(1) < 2·t(1): the line from point j-1 to j crosses there
        frac = (budget - t[j - 1]) / (t[j] - t[j - 1])
        span = k[j - 1] + frac * (k[j] - k[j - 1])
    gap = max(0, int(np.floor(span)) - 2)
    return ChunkThreshold(max_gap=min(gap, max(0, max_run - 2)), max_run=max_run)


def _non_decreasing(t: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit of ``t`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for value in t:
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, count = blocks.pop()
            prev = blocks[-1]
            prev[0] = (prev[0] * prev[1] + mean * count) / (prev[1] + count)
            prev[1] += count
    return np.concatenate([np.full(int(count), mean) for mean, count in blocks])
