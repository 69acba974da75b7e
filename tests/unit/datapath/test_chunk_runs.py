"""SOLAR's aggregated chunk loading plan (``adloader.datapath.chunk_runs``) against a brute
force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.datapath.chunk_runs import (
    ChunkThreshold,
    _non_decreasing,
    plan_reads,
    threshold_from_timings,
)
from adloader.errors import InputError


def _valid(group: tuple[int, ...], th: ChunkThreshold) -> bool:
    gaps_ok = all(b - a - 1 <= th.max_gap for a, b in itertools.pairwise(group))
    return gaps_ok and group[-1] - group[0] + 1 <= th.max_run


def _fewest_runs(wanted: list[int], th: ChunkThreshold) -> int:
    """Every split of the sorted unique indices into consecutive groups; the fewest valid."""
    best = len(wanted)
    for cuts in itertools.product((False, True), repeat=len(wanted) - 1):
        groups, current = [], [wanted[0]]
        for value, cut in zip(wanted[1:], cuts, strict=True):
            if cut:
                groups.append(tuple(current))
                current = []
            current.append(value)
        groups.append(tuple(current))
        if all(_valid(g, th) for g in groups):
            best = min(best, len(groups))
    return best


indices_st = st.lists(st.integers(0, 60), min_size=0, max_size=11)
threshold_st = st.builds(ChunkThreshold, st.integers(0, 8), st.integers(1, 20))


@settings(max_examples=300, deadline=None)
@given(indices_st, threshold_st)
def test_plan_covers_the_batch_in_the_samplers_order_with_the_fewest_reads(indices, th):
    plan = plan_reads(indices, th)
    rows = np.concatenate([np.arange(a, b) for a, b in plan.runs]) if plan.runs else \
        np.zeros(0, dtype=np.int64)
    assert len(rows) == plan.rows_read
    assert rows[plan.take].tolist() == list(indices)  # same set, same order, repeats kept
    wanted = sorted(set(indices))
    covered = [i for a, b in plan.runs for i in range(a, b) if i in set(indices)]
    assert covered == wanted  # each wanted row read once: runs disjoint and ascending
    for a, b in plan.runs:
        assert a in set(indices) and b - 1 in set(indices)  # no run reads past its ends
        inside = [i for i in wanted if a <= i < b]
        assert _valid(tuple(inside), th)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(plan.runs))
    if wanted:
        assert len(plan.runs) == _fewest_runs(wanted, th)
    assert plan.offsets == list(np.cumsum([0] + [b - a for a, b in plan.runs])[:-1])


def test_plan_examples():
    plan = plan_reads([9, 3, 4, 4, 20, 5, 100], ChunkThreshold(max_gap=2, max_run=10))
    assert plan.runs == ((3, 6), (9, 10), (20, 21), (100, 101))
    assert plan.take.tolist() == [3, 0, 1, 1, 4, 2, 5]
    # max_run splits a dense stretch; max_gap 0 merges only neighbours
    assert plan_reads(range(10), ChunkThreshold(0, 4)).runs == ((0, 4), (4, 8), (8, 10))
    assert plan_reads([0, 2, 3], ChunkThreshold(0, 100)).runs == ((0, 1), (2, 4))
    assert plan_reads(np.array([7, 7]), ChunkThreshold(0, 1)).runs == ((7, 8),)
    empty = plan_reads([], ChunkThreshold(3, 3))
    assert empty.runs == () and empty.rows_read == 0 and len(empty.take) == 0


@pytest.mark.parametrize("bad", [[-1, 2], [[1, 2]], [1.5]])
def test_plan_refuses_what_is_not_an_index(bad):
    with pytest.raises(InputError):
        plan_reads(bad, ChunkThreshold(1, 2))


@pytest.mark.parametrize("gap,run", [(-1, 2), (0, 0), (1.5, 3), (True, 2)])
def test_threshold_refuses_bad_values(gap, run):
    with pytest.raises(InputError):
        ChunkThreshold(gap, run)


def test_threshold_from_timings_reads_through_while_one_read_beats_two():
    sizes = [1, 2, 4, 8, 16, 32]
    # t(k) = 10 + k: t(k) < 2·t(1) = 22 while k < 12, so rows i and i + 11 share a read
    th = threshold_from_timings(sizes, [10 + k for k in sizes], max_run=64)
    assert th == ChunkThreshold(max_gap=10, max_run=64)
    assert threshold_from_timings(sizes, [10 + k for k in sizes], max_run=8).max_gap == 6
    # never dearer within what was measured: the largest measured span
    assert threshold_from_timings([1, 4], [1.0, 1.5], max_run=99).max_gap == 2
    # two rows at once already cost two reads: only neighbours merge
    assert threshold_from_timings([1, 2], [1.0, 3.0], max_run=9).max_gap == 0
    # one noisy size (3 rows dearer than 5) does not end the search: timings made monotone
    noisy = threshold_from_timings([1, 2, 3, 5, 9, 17], [810, 814, 1601, 997, 2039, 2639], 99)
    assert noisy.max_gap == 4
    with pytest.raises(InputError):
        threshold_from_timings([2, 4], [1.0, 2.0], max_run=9)
    with pytest.raises(InputError):
        threshold_from_timings([1, 4], [1.0], max_run=9)


@given(st.lists(st.floats(0.1, 100.0), min_size=1, max_size=12))
def test_monotone_fit_is_the_closest_non_decreasing_one(values):
    fit = _non_decreasing(np.asarray(values))
    assert np.all(np.diff(fit) >= -1e-9) and len(fit) == len(values)
    assert abs(fit.sum() - sum(values)) < 1e-6 * max(1.0, sum(values))  # pooling keeps means
    if all(b >= a for a, b in itertools.pairwise(values)):
        assert np.allclose(fit, values)
