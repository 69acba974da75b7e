"""Clairvoyant access streams: equal to the loader's order, and their derived quantities."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adloader.datapath.access_stream import (
    access_frequency,
    access_stream,
    next_use,
    node_frequency,
    node_sequence,
    reuse_distance,
)
from adloader.datapath.reuse import next_access, previous_access
from adloader.datapath.sample_order import rank_order
from adloader.errors import InputError

CASES = [  # size, world, global batch, drop_last, shuffle
    (100, 4, 16, False, True),  # ragged last batch
    (103, 4, 16, False, True),  # padding
    (103, 4, 16, True, True),  # padding, last partial batch dropped
    (9, 8, 8, False, True),  # more padding than samples beyond one per rank
    (50, 1, 7, True, False),
    (64, 2, 8, True, True),  # exact fit
]


def loader_batches(seed, epoch, size, world, rank, local, drop_last, shuffle):
    """What ElasticDataLoader yields: rank_order (padded), chunked, last partial dropped."""
    order = rank_order(seed, epoch, size, world, rank, shuffle, drop_last=False).tolist()
    stop = len(order) - len(order) % local if drop_last else len(order)
    return [order[i : i + local] for i in range(0, stop, local)]


@pytest.mark.parametrize("size,world,gb,drop_last,shuffle", CASES)
def test_stream_is_what_the_loader_yields(size, world, gb, drop_last, shuffle):
    s = access_stream(7, 3, size, gb, world, drop_last, shuffle)
    local = gb // world
    for e in range(3):
        for r in range(world):
            batches = loader_batches(7, e, size, world, r, local, drop_last, shuffle)
            assert len(batches) == s.steps_per_epoch
            assert [s.batch(e, r, k).tolist() for k in range(len(batches))] == batches
            assert s.samples[e, r].tolist() == [i for b in batches for i in b]


@pytest.mark.parametrize("size,world,gb,drop_last,shuffle", CASES)
def test_ranks_partition_each_epoch(size, world, gb, drop_last, shuffle):
    s = access_stream(1, 2, size, gb, world, drop_last, shuffle)
    per_rank = -(-size // world)
    for e in range(2):
        counts = np.bincount(s.samples[e].ravel(), minlength=size)
        assert counts.sum() == world * s.rank_len
        if not drop_last:  # every sample read, the padding (< world) read twice
            assert counts.min() == 1 and counts.sum() - size == per_rank * world - size
        else:
            assert counts.max() <= 1 or size < world
        for r in range(world):  # a rank never reads a sample twice in one epoch
            assert np.unique(s.samples[e, r]).size == s.rank_len


def test_epochs_differ_and_seed_matters():
    a = access_stream(0, 2, 1000, 32, 4).samples
    b = access_stream(1, 2, 1000, 32, 4).samples
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a, b)


def brute_next(seq):
    return [next((j for j in range(i + 1, len(seq)) if seq[j] == seq[i]), len(seq))
            for i in range(len(seq))]


@given(st.lists(st.integers(0, 6), max_size=40))
def test_next_and_previous_access_brute_force(seq):
    arr = np.array(seq, dtype=np.int64)
    assert next_access(arr).tolist() == brute_next(seq)
    prev = [max((j for j in range(i) if seq[j] == seq[i]), default=-1) for i in range(len(seq))]
    assert previous_access(arr).tolist() == prev


@given(st.integers(1, 5), st.integers(1, 4), st.integers(0, 2), st.integers(0, 2**31 - 1))
def test_next_access_period_shortcut(epochs, period_extra, cut, seed):
    rng = np.random.default_rng(seed)
    period = period_extra + 3
    seq = np.concatenate([rng.permutation(period + 2)[:period] for _ in range(epochs)])
    seq = seq[: seq.size - cut]  # a partial last block
    assert np.array_equal(next_access(seq, period=period), next_access(seq))


def test_next_use_and_reuse_distance_brute_force():
    s = access_stream(3, 4, 37, 12, 3)
    for r in range(3):
        seq = s.rank_sequence(r).tolist()
        nxt = brute_next(seq)
        expect = [np.inf if j == len(seq) else j for j in nxt]
        assert next_use(s, r).tolist() == expect
        assert reuse_distance(s, r).tolist() == [x - i for i, x in enumerate(expect)]
        step = [(p // s.rank_len) * s.steps_per_epoch + (p % s.rank_len) // s.local_batch
                for p in range(len(seq))]
        want = [np.inf if j == len(seq) else step[j] - step[i] for i, j in enumerate(nxt)]
        assert reuse_distance(s, r, unit="step").tolist() == want
    with pytest.raises(InputError):
        reuse_distance(s, 0, unit="furlong")


def test_access_frequency():
    s = access_stream(5, 6, 40, 8, 4)
    freq = access_frequency(s)
    assert freq.shape == (4, 40)
    for r in range(4):
        brute = np.zeros(40, dtype=int)
        for x in s.rank_sequence(r):
            brute[x] += 1
        assert np.array_equal(freq[r], brute)
    assert np.array_equal(freq.sum(axis=0), np.full(40, 6))  # once per epoch (no padding)
    assert np.array_equal(node_frequency(s, [1, 3]), freq[1] + freq[3])


@pytest.mark.parametrize("size,world,gb,drop_last,shuffle", CASES)
def test_node_sequence_interleaves_ranks_by_step(size, world, gb, drop_last, shuffle):
    s = access_stream(2, 3, size, gb, world, drop_last, shuffle)
    ranks = [0, world - 1] if world > 1 else [0]
    ns = node_sequence(s, ranks)
    samples, steps = [], []
    for e in range(3):
        for k in range(s.steps_per_epoch):
            for r in ranks:
                b = s.batch(e, r, k).tolist()
                samples += b
                steps += [e * s.steps_per_epoch + k] * len(b)
    assert ns.samples.tolist() == samples
    assert ns.step.tolist() == steps
    assert ns.accesses_per_epoch * 3 == len(ns)
    with pytest.raises(InputError):
        node_sequence(s, [world])


def test_bad_input():
    with pytest.raises(InputError, match="global batch"):
        access_stream(0, 1, 100, 10, 4)
    with pytest.raises(InputError, match="epochs"):
        access_stream(0, 0, 100, 8, 4)
    with pytest.raises(InputError, match="no local batch"):
        access_stream(0, 1, 10, 64, 2, drop_last=True)
