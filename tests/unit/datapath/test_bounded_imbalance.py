"""Locality with bounded imbalance (adloader.datapath.bounded_imbalance): the ``bounded`` mode
against
brute force over every split of small global batches, the capped water fill, the two ends."""

from __future__ import annotations

import heapq
import math
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.datapath.bounded_imbalance import batch_bound, bounded_assign, capped_fill
from adloader.datapath.locality_batch import plan_step, uneven_assign
from adloader.datapath.locality_modes import get_mode
from adloader.errors import InputError

ALPHAS = [1.0, 1.1, 1.34, 1.5, 2.0, math.inf]


def _holds(holder, r, sample) -> bool:
    return holder[sample] == r if holder.ndim == 1 else bool(holder[r, sample])


@st.composite
def small(draw):
    p = draw(st.integers(1, 4))
    size = draw(st.integers(1, 9))
    n = draw(st.integers(1, 7 if p <= 3 else 5))
    batch = np.array(draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n)))
    if draw(st.booleans()):
        holder = np.array(draw(st.lists(st.integers(-1, p - 1), min_size=size, max_size=size)))
    else:
        holder = np.array(draw(st.lists(st.lists(st.booleans(), min_size=size, max_size=size),
                                        min_size=p, max_size=p)))
    return batch, holder, p, draw(st.sampled_from(ALPHAS))


def _brute_force(batch, holder, p, cap):
    """Over every split with n_r ≤ cap: the least fetched, then the least largest batch."""
    local = [[_holds(holder, r, s) for r in range(p)] for s in batch.tolist()]
    best = None
    for split in product(range(p), repeat=batch.size):
        sizes = np.bincount(split, minlength=p)
        if sizes.max() > cap:
            continue
        fetched = sum(not local[j][r] for j, r in enumerate(split))
        key = (fetched, int(sizes.max()))
        best = key if best is None or key < best else best
    return best


@settings(max_examples=250, deadline=None)
@given(small(), st.sampled_from([(2.0, 0.0), (0.5, 0.0), (1.5, 8.0)]),
       st.sampled_from([0.0, 1.0]))
def test_bounded_against_brute_force(instance, costs, compute_cost):
    batch, holder, p, alpha = instance
    read_cost, message_cost = costs
    plan = bounded_assign(batch, holder, p, max_imbalance=alpha, read_cost=read_cost,
                          message_cost=message_cost, compute_cost=compute_cost)
    np.testing.assert_array_equal(np.sort(np.concatenate(plan.positions)),
                                  np.arange(batch.size))  # every position exactly once
    b = -(-batch.size // p)
    cap = batch_bound(b, alpha, batch.size)
    assert plan.local_sizes.max() <= cap
    fetched = sum(not _holds(holder, r, s) for r, ids in enumerate(plan.local_samples)
                  for s in ids.tolist())
    assert plan.transferred + plan.read == fetched  # what is not fetched is a cache hit
    assert (fetched, int(plan.local_sizes.max())) == _brute_force(batch, holder, p, cap)
    assert len(plan.transfers) <= max(p - 1, 0)
    for src, dst, ids in plan.transfers:
        assert src != dst and all(_holds(holder, src, i) for i in ids)
    if read_cost < 1 and message_cost == 0:
        assert not plan.transfers  # storage is the cheaper way to move a sample


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20), st.integers(0, 6)), min_size=1, max_size=8),
       st.data())
def test_capped_fill_is_the_greedy_fill(ranks, data):
    levels = np.array([lv for lv, _ in ranks])
    room = np.array([c for _, c in ranks])
    units = data.draw(st.integers(0, int(room.sum())))
    got = capped_fill(levels, room, units)
    assert got.sum() == units and np.all((got >= 0) & (got <= room))
    heap = [(lv, r) for r, lv in enumerate(levels) if room[r] > 0]
    heapq.heapify(heap)
    greedy = np.zeros(len(ranks), dtype=np.int64)
    for _ in range(units):  # one unit at a time to the lowest rank with room left
        lv, r = heapq.heappop(heap)
        greedy[r] += 1
        if greedy[r] < room[r]:
            heapq.heappush(heap, (lv + 1, r))
    top = max(((levels + got)[got > 0]).tolist(), default=0.0)
    assert top == pytest.approx(max(((levels + greedy)[greedy > 0]).tolist(), default=0.0))
    for r in np.flatnonzero(got > 0):  # no unit moves to a lower rank with room
        for s in np.flatnonzero(got < room):
            assert levels[s] + got[s] + 1 >= levels[r] + got[r] - 1e-9
    with pytest.raises(InputError, match="exceed the room"):
        capped_fill(levels, room, int(room.sum()) + 1)


def _disjoint(seed, p, b, size=4096):
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, p, size)
    return rng.permutation(size)[: p * b], owner


@pytest.mark.parametrize("seed", range(5))
def test_the_two_ends(seed):
    batch, owner = _disjoint(seed, 8, 32)
    loc, solar = plan_step(batch, owner, 8, 32), uneven_assign(batch, owner, 8, 32)
    even = bounded_assign(batch, owner, 8, 32, max_imbalance=1.0)
    assert even.transferred + even.read == loc.transferred + loc.read
    assert even.local_sizes.max() == 32
    free = bounded_assign(batch, owner, 8, 32, max_imbalance=math.inf)
    assert free.transferred + free.read == 0  # every sample cached somewhere: SOLAR's zero
    assert free.local_sizes.max() == solar.local_sizes.max()
    mid = bounded_assign(batch, owner, 8, 32, max_imbalance=1.1)
    h = np.bincount(owner[batch], minlength=8)
    assert mid.transferred + mid.read == np.maximum(h - 35, 0).sum()  # c = ⌊1.1 · 32⌋ = 35
    assert mid.local_sizes.max() == np.clip(h.max(), 32, 35)


def test_a_cold_epoch_reads_like_the_regular_loader():
    batch = np.arange(22) * 3
    plan = get_mode("bounded")(batch, np.full(66, -1), 4)
    for r in range(4):
        np.testing.assert_array_equal(plan.positions[r], np.arange(22)[r::4])
        np.testing.assert_array_equal(plan.storage_reads[r], batch[r::4])


def test_replicas_are_kept_by_a_max_flow():
    # samples 0, 1 cached on both ranks, 2, 3 only on rank 0: rank 1 keeps 0 and 1
    holder = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=bool)
    plan = bounded_assign(np.arange(4), holder, 2, max_imbalance=1.0)
    assert plan.transferred + plan.read == 0
    assert sorted(plan.local_samples[1].tolist()) == [0, 1]


def test_batch_bound():
    assert batch_bound(10, 1.1) == 11 and batch_bound(128, 1.1) == 140
    assert batch_bound(4, 1.1) == 4 and batch_bound(3, 1.5) == 4
    assert batch_bound(128, 1.0) == 128 and batch_bound(4, math.inf, 16) == 16
    assert batch_bound(4, 9.0, 16) == 16
    for bad in (0.9, float("nan")):
        with pytest.raises(InputError, match="max_imbalance must be at least 1"):
            batch_bound(8, bad)
