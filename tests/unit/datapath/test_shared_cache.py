"""Issue 14, one node cache shared by the node's jobs: the node stream, private and shared
caches on it, and MIN with a partition resized in time against exhaustive search."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.datapath.access_stream import NodeSequence, access_stream, node_sequence
from adloader.datapath.cache_policies import evaluate
from adloader.datapath.eviction import belady
from adloader.datapath.shared_cache import (
    JobAccesses,
    belady_resized,
    dataset_view,
    evaluate_partitioned,
    evaluate_private,
    evaluate_resplit,
    evaluate_shared,
    even_split,
    hits_by_job,
    merge_streams,
)
from adloader.errors import InputError


def job(name, dataset, size, seed, rate=1.0, epochs=2, batch=8, start=0.0):
    seq = node_sequence(access_stream(seed, epochs, size, batch))
    return JobAccesses(name, dataset, size, seq, rate, start)


def plain(name, dataset, size, samples, per_step=1, rate=1.0, start=0.0):
    arr = np.asarray(samples, dtype=np.int64)
    steps = np.arange(arr.size, dtype=np.int64) // per_step
    seq = NodeSequence(arr, steps, max(1, -(-arr.size // per_step)), arr.size)
    return JobAccesses(name, dataset, size, seq, rate, start)


@pytest.fixture(scope="module")
def three():
    """A, B on X (seeds 0, 1; B slower), C on Y (faster, arriving later)."""
    return [job("A", "X", 200, 0), job("B", "X", 200, 1, rate=0.7),
            job("C", "Y", 120, 2, rate=1.5, epochs=3, start=3.0)]


def test_the_node_stream_interleaves_by_time_and_shares_a_dataset_s_ids():
    a = plain("A", "X", 4, [0, 1, 2, 3], per_step=2)  # iterations at t = 0, 1
    b = plain("B", "X", 4, [3, 2], per_step=1, rate=2.0)  # t = 0, 0.5
    c = plain("C", "Y", 3, [0, 1, 2], per_step=3, start=0.5)  # t = 0.5
    m = merge_streams([a, b, c])
    assert m.datasets == ("X", "Y") and m.offsets == {"X": 0, "Y": 4} and m.distinct == 7
    # t=0: A's iteration, then B's (job order); t=0.5: B, then C; t=1: A
    assert m.sequence.samples.tolist() == [0, 1, 3, 2, 4, 5, 6, 2, 3]
    assert m.job.tolist() == [0, 0, 1, 1, 2, 2, 2, 0, 0]
    assert m.sequence.step.tolist() == [0, 0, 1, 2, 3, 3, 3, 4, 4]  # one event an iteration
    assert m.time.tolist() == [0, 0, 0, 0.5, 0.5, 0.5, 0.5, 1, 1]
    view, pos = dataset_view(m, "X", since=0.5)
    assert view.samples.tolist() == [2, 2, 3] and pos.tolist() == [3, 7, 8]
    assert view.step.tolist() == [0, 1, 1]
    y, _ = dataset_view(m, "Y")
    assert y.samples.tolist() == [0, 1, 2]


def test_what_one_job_decoded_is_a_hit_for_the_next():
    """B reads what A read half an iteration earlier: with room for one batch, B always hits."""
    a = plain("A", "X", 50, np.arange(50), per_step=5)
    b = plain("B", "X", 50, np.arange(50), per_step=5, start=0.5)
    m = merge_streams([a, b])
    for policy, room, kw in (("belady", 5, {}), ("lobster", 5, {"prefetch": 0}),
                             ("lobster", 10, {})):  # prefetching one event ahead holds two
        shared = evaluate_shared(m, room, policy, **kw)
        assert hits_by_job(m, shared) == {"A": 0, "B": 50}, (policy, kw)
    private = evaluate_private(m, {"A": 5, "B": 5}, "belady")
    assert private.hits == 0  # separate caches: each job reads each sample once


def test_private_caches_are_each_job_on_its_own(three):
    m = merge_streams(three)
    caps = even_split([j.name for j in three], 61)
    assert caps == {"A": 21, "B": 20, "C": 20}
    for policy in ("lru", "lobster", "nopfs", "belady"):
        got = evaluate_private(m, caps, policy)
        per = hits_by_job(m, got)
        for j in three:
            assert per[j.name] == evaluate(policy, j.sequence, caps[j.name]).hits, policy
        assert got.hits + got.misses == len(m.sequence)


def test_min_on_the_node_stream_bounds_every_split(three):
    m = merge_streams(three)
    for cap in (0, 30, 90, 200):
        best = evaluate_shared(m, cap, "belady").hits
        for policy in ("lru", "lobster", "nopfs"):
            assert evaluate_shared(m, cap, policy).hits <= best
            assert evaluate_private(m, even_split(["A", "B", "C"], cap), policy).hits <= best
        for x in range(0, cap + 1, max(1, cap // 5)):
            split = {"X": x, "Y": cap - x}
            part = evaluate_partitioned(m, split, "belady")
            assert part.hits <= best
            assert evaluate_partitioned(m, split, "lobster").hits <= part.hits
            assert evaluate_resplit(m, [(-math.inf, split)]).hits == part.hits


def test_a_partition_as_large_as_the_cache_is_min_on_its_dataset(three):
    m = merge_streams(three)
    view, _ = dataset_view(m, "X")
    got = evaluate_partitioned(m, {"X": 80}, "belady")
    assert got.hits == belady(view.samples, 80).hits
    assert hits_by_job(m, got)["C"] == 0


def test_a_job_that_leaves_reads_nothing_after():
    a = job("A", "X", 100, 0, rate=2.0)
    assert a.end == pytest.approx(a.sequence.step[-1] / 2 + 0.5)
    half = a.until(a.end / 2)
    assert len(half.sequence) == len(a.sequence) // 2 and half.end <= a.end / 2 + 0.5
    assert a.until(-1.0).end == a.start


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=40), st.integers(0, 6))
def test_a_fixed_room_is_min(seq, cap):
    arr = np.array(seq, dtype=np.int64)
    assert belady_resized(arr, cap).hits == belady(arr, cap).hits


def _exhaustive(seq, caps) -> int:
    """Most hits of any demand cache with room caps[t] after access t (all subsets kept)."""
    best = {frozenset(): 0}
    for x, c in zip(seq, caps, strict=True):
        nxt: dict[frozenset, int] = {}
        for cached, hits in best.items():
            h = hits + (x in cached)
            pool = sorted(cached | {x})
            for mask in range(1 << len(pool)):
                if bin(mask).count("1") <= c:
                    keep = frozenset(p for i, p in enumerate(pool) if mask >> i & 1)
                    nxt[keep] = max(nxt.get(keep, -1), h)
        best = nxt
    return max(best.values())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=11))
def test_a_resized_room_is_the_exhaustive_optimum(pairs):
    seq = [x for x, _ in pairs]
    caps = [c for _, c in pairs]
    got = belady_resized(np.array(seq, dtype=np.int64), np.array(caps, dtype=np.int64))
    assert got.hits == _exhaustive(seq, caps)


def test_bad_inputs_are_named():
    a = plain("A", "X", 4, [0, 1])
    with pytest.raises(InputError):
        merge_streams([])
    with pytest.raises(InputError):
        merge_streams([a, a])
    with pytest.raises(InputError):
        merge_streams([a, plain("B", "X", 5, [0])])  # one dataset, two sizes
    with pytest.raises(InputError):
        merge_streams([plain("B", "X", 2, [0, 3])])  # reads past its dataset
    with pytest.raises(InputError):
        merge_streams([plain("B", "X", 4, [0], rate=0.0)])
    with pytest.raises(InputError):
        dataset_view(merge_streams([a]), "Z")
    with pytest.raises(InputError):
        belady_resized(np.array([0, 0]), np.array([1, -1]))
    with pytest.raises(InputError):
        evaluate_resplit(merge_streams([a]), [(1.0, {"X": 1}), (0.0, {"X": 2})])
