"""Locality-aware assignment (adloader.datapath.locality_batch): Algorithm 1 against brute force,
plan
properties (hypothesis), SOLAR weights, Lobster's worker split, and the simulated bench."""

from __future__ import annotations

import heapq
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.access_stream import access_stream
from adloader.datapath.locality_batch import (
    even_targets,
    global_batches,
    plan_step,
    regular_assign,
    split_workers,
    transfer_schedule,
    uneven_assign,
    water_fill,
)
from adloader.datapath.locality_modes import MODES, get_mode
from adloader.errors import InputError


# ---- Algorithm 1 ---------------------------------------------------------------------------
def _reference_balance(counts, target):
    """Algorithm 1 line by line with plain lists (find-max: largest imbalance, lowest ID)."""
    surplus = {r: c - t for r, (c, t) in enumerate(zip(counts, target, strict=True)) if c > t}
    deficit = {r: t - c for r, (c, t) in enumerate(zip(counts, target, strict=True)) if c < t}
    schedule = []
    while surplus:
        hs = max(surplus, key=lambda r: (surplus[r], -r))
        hd = max(deficit, key=lambda r: (deficit[r], -r))
        m = min(surplus[hs], deficit[hd])
        schedule.append((hs, hd, m))
        for heap, r in ((surplus, hs), (deficit, hd)):
            heap[r] -= m
            if heap[r] == 0:
                del heap[r]
    return schedule


def _min_transfers(diff) -> int:
    """Brute force: k non-zero imbalances need k − (most zero-sum groups they split into)."""
    vals = [int(d) for d in diff if d]
    k = len(vals)
    best = {0: 0}
    for mask in range(1, 1 << k):
        if sum(vals[i] for i in range(k) if mask >> i & 1):
            continue
        sub, top = mask, 0
        while sub:  # split off one zero-sum nonempty group
            rest = mask ^ sub
            if rest in best:
                top = max(top, best[rest] + 1)
            sub = (sub - 1) & mask
        best[mask] = top
    return k - best[(1 << k) - 1]


def _counts_and_target(draw_counts, p):
    counts = np.array(draw_counts, dtype=np.int64)
    total = int(counts.sum())
    return counts, even_targets(total, p)


def test_the_papers_example():
    # Red 2, Green 6, Blue 4 of a global batch of 12: Red loads 2 from Green (Fig. 5)
    assert transfer_schedule([2, 6, 4], 4) == [(1, 0, 2)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=7))
def test_balance_against_brute_force(draw):
    p = len(draw)
    counts, target = _counts_and_target(draw, p)
    schedule = transfer_schedule(counts, target)
    assert schedule == _reference_balance(counts.tolist(), target.tolist())
    after = counts.copy()
    for src, dst, n in schedule:
        assert n > 0 and counts[src] > target[src] and counts[dst] < target[dst]
        after[src] -= n
        after[dst] += n
    np.testing.assert_array_equal(after, target)
    diff = counts - target
    k = int(np.count_nonzero(diff))
    optimum = _min_transfers(diff)
    assert optimum <= len(schedule) <= max(k - 1, 0) <= p - 1
    assert len(schedule) <= 2 * optimum  # Theorem 2: a 2-approximation


def test_balance_needs_equal_sums():
    with pytest.raises(InputError, match="counts sum to 5"):
        transfer_schedule([5, 0], [2, 2])


# ---- plans -----------------------------------------------------------------------------------
@st.composite
def instances(draw):
    p = draw(st.integers(1, 6))
    size = draw(st.integers(1, 40))
    batch = np.array(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=3 * p + 9)))
    if draw(st.booleans()):
        holder = np.array(draw(st.lists(st.integers(-1, p - 1), min_size=size, max_size=size)))
    else:
        holder = np.array(draw(st.lists(st.lists(st.booleans(), min_size=size, max_size=size),
                                        min_size=p, max_size=p)))
    costs = {"read_cost": draw(st.sampled_from([0.5, 2.0, 100.0])),
             "message_cost": draw(st.sampled_from([0.0, 3.0]))}
    return batch, holder, p, costs


def _holds(holder, r, sample) -> bool:
    return holder[sample] == r if holder.ndim == 1 else bool(holder[r, sample])


@settings(max_examples=150, deadline=None)
@given(instances(), st.data())
def test_every_plan_assigns_each_position_once(instance, data):
    batch, holder, p, costs = instance
    for name in MODES:
        plan = get_mode(name)(batch, holder, p, local_batch=-(-batch.size // p), **costs)
        every = np.sort(np.concatenate(plan.positions))
        np.testing.assert_array_equal(every, np.arange(batch.size))  # once each
        assert plan.local_sizes.sum() == batch.size
        got_from = {r: [] for r in range(p)}
        for src, dst, ids in plan.transfers:
            assert src != dst and all(_holds(holder, src, i) for i in ids)
            got_from[dst].extend(ids.tolist())
        for r in range(p):  # local batch = own cache hits + received + storage reads
            local = plan.local_samples[r].tolist()
            for i in got_from[r] + plan.storage_reads[r].tolist():
                local.remove(i)
            assert all(_holds(holder, r, i) for i in local)
        values = np.asarray(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=batch.size,
                                               max_size=batch.size)))
        weighted = sum(w * values[pos].mean() for w, pos in
                       zip(plan.loss_weights, plan.positions, strict=True) if pos.size)
        assert weighted == pytest.approx(values.mean(), rel=1e-9, abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(instances())
def test_mode_specifics(instance):
    batch, holder, p, costs = instance
    loc = plan_step(batch, holder, p, **costs)
    np.testing.assert_array_equal(loc.local_sizes, even_targets(batch.size, p))
    assert len(loc.transfers) <= p - 1
    if costs["read_cost"] < 1 and costs["message_cost"] == 0:
        assert not loc.transfers  # storage is the cheaper way to move a sample
    solar = uneven_assign(batch, holder, p)
    assert not solar.transfers
    reads = np.array([r.size for r in solar.storage_reads])
    assert reads.max() - reads.min() <= 1  # uncached samples spread evenly (SOLAR §4.3)
    for r, ids in enumerate(solar.local_samples):
        kept = [i for i in ids.tolist() if i not in solar.storage_reads[r].tolist()]
        assert all(_holds(holder, r, i) for i in kept)
    reg = regular_assign(batch, holder, p)
    for r in range(p):
        np.testing.assert_array_equal(reg.positions[r], np.arange(batch.size)[r::p])
    # a regular rank reads exactly what it does not hold; locality never needs more
    assert loc.transferred + loc.read <= reg.read


def test_a_cold_epoch_reads_like_the_regular_loader():
    batch = np.arange(20) * 3
    nobody = np.full(60, -1)
    for name in ("locality", "solar"):
        plan = get_mode(name)(batch, nobody, 4)
        for r in range(4):
            np.testing.assert_array_equal(plan.positions[r], np.arange(20)[r::4])
            np.testing.assert_array_equal(plan.storage_reads[r], batch[r::4])


def test_full_caches_need_no_storage():
    rng = np.random.default_rng(3)
    owner = rng.integers(0, 8, 1000)
    batch = rng.permutation(1000)[:256]
    plan = plan_step(batch, owner, 8, 32)
    assert plan.read == 0 and plan.transferred == np.maximum(
        32 - np.bincount(owner[batch], minlength=8), 0).sum()
    solar = uneven_assign(batch, owner, 8)
    assert solar.read == 0
    np.testing.assert_array_equal(solar.local_sizes, np.bincount(owner[batch], minlength=8))


def test_plan_errors_are_one_line():
    with pytest.raises(InputError, match="exceeds 2 ranks × local batch 3"):
        plan_step(np.arange(8), np.zeros(8, int), 2, local_batch=3)
    with pytest.raises(InputError, match="must have 3 rows"):
        plan_step(np.arange(4), np.zeros((2, 8), bool), 3)
    with pytest.raises(InputError, match="outside the directory"):
        plan_step(np.arange(9), np.zeros(8, int), 2)
    with pytest.raises(InputError, match="mode 'nearest' is unknown"):
        get_mode("nearest")


# ---- the global batch is what the ElasticDataLoader yields ------------------------------------
@pytest.mark.parametrize("size,world,local,drop_last", [(50, 4, 3, False), (50, 4, 3, True),
                                                         (64, 2, 8, False), (7, 3, 2, False)])
def test_global_batches_are_the_loaders_batches(size, world, local, drop_last):
    stream = access_stream(5, 2, size, local * world, world, drop_last=drop_last)
    for epoch in range(2):
        batches = global_batches(5, epoch, size, world, local, drop_last=drop_last)
        for rank in range(world):
            loader = ElasticDataLoader(list(range(size)), batch_size=local, shuffle=True, seed=5,
                                       rank=rank, world_size=world, drop_last=drop_last)
            plan = loader.plan(epoch)
            assert len(plan) == len(batches)
            for step, b in enumerate(batches):
                assert b[rank::world].tolist() == plan[step]
                assert b[rank::world].tolist() == stream.batch(epoch, rank, step).tolist()


# ---- helpers -----------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 20), min_size=1, max_size=8), st.integers(0, 60))
def test_water_fill_is_the_greedy_fill(levels, units):
    heap = [(lv, r) for r, lv in enumerate(levels)]
    heapq.heapify(heap)
    greedy = np.zeros(len(levels), dtype=np.int64)
    for _ in range(units):
        lv, r = heapq.heappop(heap)
        greedy[r] += 1
        heapq.heappush(heap, (lv + 1, r))
    got = water_fill(levels, units)
    assert got.sum() == units and got.min() >= 0
    final = np.asarray(levels) + got
    assert final.max() == pytest.approx((np.asarray(levels) + greedy).max())


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 64), st.lists(st.floats(0, 100), min_size=1, max_size=9))
def test_split_workers(total, loads):
    out = split_workers(total, loads)
    p = len(loads)
    assert out.sum() == total and out.min() >= 0
    if total >= p:
        assert out.min() >= 1
    load = np.asarray(loads)
    floor = 1 if total >= p else 0
    weights = load if load.sum() > 0 else np.ones(p)
    quota = (total - floor * p) * weights / weights.sum()
    assert np.all(np.abs(out - floor - quota) < 1 + 1e-9)  # largest remainder: within one
    for a, b in combinations(range(p), 2):  # more predicted misses, never fewer workers
        if load[a] > load[b]:
            assert out[a] >= out[b]


def test_split_workers_examples_and_errors():
    assert split_workers(10, [1, 2, 3, 0]).tolist() == [2, 3, 4, 1]
    assert split_workers(8, [0, 0, 0, 0]).tolist() == [2, 2, 2, 2]
    assert split_workers(2, [1, 5, 3]).tolist() == [0, 1, 1]
    with pytest.raises(InputError):
        split_workers(4, [1, -1])


# ---- the simulated bench -------------------------------------------------------------------------
