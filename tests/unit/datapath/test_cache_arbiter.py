"""Issue 14, the cache arbiter: the split of the node cache among datasets against brute force,
greedy exact on concave curves only, and the split re-solved when jobs come and go."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.datapath.access_stream import access_stream, node_sequence
from adloader.datapath.cache_arbiter import (
    CacheArbiter,
    HitCurve,
    allocate_dp,
    allocate_greedy,
    hit_curve,
    is_concave,
    live_splits,
    split_cache,
)
from adloader.datapath.cache_policies import evaluate
from adloader.datapath.eviction import belady
from adloader.datapath.shared_cache import (
    JobAccesses,
    evaluate_partitioned,
    evaluate_resplit,
    merge_streams,
)
from adloader.errors import InputError


def brute(curves, budget) -> float:
    names = list(curves)
    best = 0.0
    for ks in itertools.product(*(range(len(curves[n])) for n in names)):
        if sum(ks) <= budget:
            best = max(best, sum(curves[n][k] for n, k in zip(names, ks, strict=True)))
    return best


def value(curves, units) -> float:
    return sum(curves[n][min(k, len(curves[n]) - 1)] for n, k in units.items())


def rising(draw_gains):
    return [0.0, *itertools.accumulate(draw_gains)]


curve = st.lists(st.integers(0, 9), min_size=0, max_size=5).map(rising)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"), curve, min_size=1, max_size=4),
       st.integers(0, 12))
def test_dp_is_the_brute_force_optimum(curves, budget):
    units = allocate_dp(curves, budget)
    assert set(units) == set(curves) and sum(units.values()) <= budget
    assert all(0 <= units[n] < len(curves[n]) for n in curves)
    assert value(curves, units) == brute(curves, budget)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"),
                       st.lists(st.integers(0, 9), max_size=5), min_size=1, max_size=4),
       st.integers(0, 12))
def test_greedy_is_exact_on_concave_curves(gains, budget):
    curves = {n: rising(sorted(g, reverse=True)) for n, g in gains.items()}  # concave
    assert all(is_concave(c) for c in curves.values())
    units = allocate_greedy(curves, budget)
    assert sum(units.values()) <= budget
    assert value(curves, units) == brute(curves, budget)


def test_greedy_is_not_exact_when_a_curve_is_not_concave():
    curves = {"a": [0, 1, 2], "b": [0, 0, 5]}  # b gains only after two units
    assert not is_concave(curves["b"])
    assert value(curves, allocate_greedy(curves, 2)) == 2
    assert allocate_dp(curves, 2) == {"a": 0, "b": 2} and brute(curves, 2) == 5


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=40))
def test_min_hits_over_a_run_are_concave_in_the_room(seq):
    arr = np.array(seq, dtype=np.int64)
    c = hit_curve(arr, 8, 1)
    assert c.hits == tuple(float(belady(arr, k).hits) for k in range(9))
    assert is_concave(c.hits)


def test_a_hit_curve_counts_its_window_and_stops_at_the_dataset():
    seq = node_sequence(access_stream(0, 3, 100, 10))
    c = hit_curve(seq, 100, 30, policy="lobster", since=100)
    assert len(c.hits) == 5  # 0, 30, 60, 90, 100 samples
    assert c.hits[-1] == evaluate("lobster", seq, 100).window(100).hits == 200
    assert c.at(99) == c.hits[-1]
    assert len(hit_curve(seq, 100, 30, max_units=2).hits) == 3


def test_split_cache_hands_out_the_rest_by_marginal_gain():
    curves = {"X": HitCurve(10, (0, 50, 90, 120)), "Y": HitCurve(10, (0, 40, 45))}
    assert split_cache(curves, 25) == {"X": 20, "Y": 5}  # grid: X 2 units; 5 left → Y's 40
    assert split_cache(curves, 25, method="greedy") == {"X": 20, "Y": 5}
    assert split_cache(curves, 100) == {"X": 30, "Y": 20}  # both full: the rest stays free
    assert split_cache({}, 10) == {}
    assert split_cache({"X": HitCurve(10, (0, 5, 9, 10), size=25)}, 100) == {"X": 25}
    with pytest.raises(InputError):
        split_cache({"X": HitCurve(10, (0, 1)), "Y": HitCurve(5, (0, 1))}, 10)
    with pytest.raises(InputError):
        split_cache(curves, 10, method="fair")
    with pytest.raises(InputError):
        allocate_dp({"X": [0, 1]}, -1)


def job(name, dataset, size, seed, rate=1.0, epochs=3, start=0.0):
    seq = node_sequence(access_stream(seed, epochs, size, 10))
    return JobAccesses(name, dataset, size, seq, rate, start)


@pytest.fixture(scope="module")
def node():
    """A, B share X; C reads Y, more epochs, and finishes first."""
    return [job("A", "X", 200, 0), job("B", "X", 200, 1), job("C", "Y", 80, 2, 2.0, 6)]


def test_the_split_is_the_best_static_split_on_the_grid(node):
    m = merge_streams(node)
    arbiter = CacheArbiter(120, unit=20)
    split = arbiter.split(node)
    assert sum(split.values()) <= 120
    got = evaluate_partitioned(m, split, "belady").hits
    for x in range(0, 121, 20):
        other = {"X": x, "Y": min(120 - x, 80)}
        assert got >= evaluate_partitioned(m, other, "belady").hits
    assert arbiter.curves(node)["X"] is arbiter.curves(node)["X"]  # reused, not recomputed


def test_a_dataset_nobody_reads_again_gets_no_room(node):
    a, b, c = node
    arbiter = CacheArbiter(100, unit=10)
    after = arbiter.split(node, now=c.end)  # C is done: its past only
    assert after == {"X": 100, "Y": 0}
    assert arbiter.split([a, b]) == {"X": 100}


def test_the_plan_re_splits_at_departures_and_never_loses_to_one_split(node):
    m = merge_streams(node)
    arbiter = CacheArbiter(120, unit=20)
    plan = arbiter.plan(node, now=0.0)
    assert [t for t, _ in plan] == [0.0, node[2].end]  # C leaves first, A and B together
    assert plan[1][1] == {"X": 120, "Y": 0}
    static = evaluate_resplit(m, [(0.0, arbiter.split(node, now=0.0))]).hits
    assert evaluate_resplit(m, plan).hits >= static
    assert all(sum(s.values()) <= 120 for _, s in plan)


def test_an_unannounced_departure_is_re_planned(node):
    a, b, c = node
    gone = c.until(c.end / 3)
    arbiter = CacheArbiter(120, unit=20)
    told = live_splits(arbiter, [a, b, c])
    assert [t for t, _ in told] == [0.0, c.end]  # departures as predicted: one plan
    got = live_splits(arbiter, [a, b, gone], predicted={"C": c})
    times = [t for t, _ in got]
    assert times[0] == 0.0 and gone.end in times and c.end not in times
    assert dict(got)[gone.end] == {"X": 120, "Y": 0}
    m = merge_streams([a, b, gone])
    kept = [(t, s) for t, s in arbiter.plan([a, b, c], now=0.0) if t < gone.end]
    assert evaluate_resplit(m, got).hits >= evaluate_resplit(m, kept).hits


def test_a_late_arrival_is_planned_when_it_comes(node):
    a, b, c = node
    late = JobAccesses("C", "Y", 80, c.sequence, c.rate, start=5.0)
    got = live_splits(CacheArbiter(120, unit=20), [a, b, late])
    assert got[0] == (0.0, {"X": 120})  # before C arrives the daemon knows only X
    at = dict(got)
    assert at[5.0]["Y"] > 0 and at[late.end] == {"X": 120, "Y": 0}  # C's room, then back


def test_a_job_that_outruns_its_prediction_is_re_planned_when_it_should_have_left(node):
    a, b, c = node
    short = c.until(c.end / 3)  # the daemon expects C to leave at a third
    got = dict(live_splits(CacheArbiter(120, unit=20), [a, b, c], predicted={"C": short}))
    assert short.end in got and got[short.end]["Y"] > 0  # still reading Y: room again
    assert got[c.end] == {"X": 120, "Y": 0}
