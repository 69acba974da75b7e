"""Cache policies against brute-force references, and their order on shuffled streams."""

from collections import Counter, OrderedDict
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.datapath.access_stream import access_stream, node_sequence
from adloader.datapath.cache_policies import POLICIES, evaluate
from adloader.datapath.eviction import lru_expected
from adloader.datapath.reuse import lru_stack_distance
from adloader.errors import InputError

seqs = st.lists(st.integers(0, 7), max_size=40)
caps = st.integers(0, 6)


def lru_reference(seq, capacity):
    cache, hit = OrderedDict(), []
    for x in seq:
        hit.append(x in cache)
        if x in cache:
            cache.move_to_end(x)
        elif capacity:
            cache[x] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hit


def optimal_hits(seq, capacity):
    """Exhaustive: after each access keep any subset of cache ∪ {x} of at most C samples."""
    states = {frozenset(): 0}
    for x in seq:
        new: dict = {}
        for cache, hits in states.items():
            h = hits + (x in cache)
            pool = cache | {x}
            for r in range(min(capacity, len(pool)) + 1):
                for keep in combinations(pool, r):
                    key = frozenset(keep)
                    new[key] = max(new.get(key, -1), h)
        states = new
    return max(states.values())


def nopfs_reference(seq, capacity):
    freq, first = Counter(seq), {}
    for i, x in enumerate(seq):
        first.setdefault(x, i)
    placed = set(sorted(freq, key=lambda x: (-freq[x], first[x]))[:capacity])
    seen, hit = set(), []
    for x in seq:
        hit.append(x in seen and x in placed)
        seen.add(x)
    return hit


def lobster_reference(seq, capacity, steps, period, prefetch, eager, bypass=True):
    """The interpretation in ``cache.lobster``, written the slow obvious way."""
    n = len(seq)
    nxt = [next((j for j in range(i + 1, n) if seq[j] == seq[i]), None) for i in range(n)]

    def dropped(i):  # evicted after use: not read again, or (eager) not in the next epoch
        return nxt[i] is None or eager and steps[nxt[i]] >= (steps[i] // period + 2) * period

    cache, hit, looked = {}, [False] * n, 0
    for h in range(max(steps) + 1 if n else 0):
        while looked < n and steps[looked] <= h + prefetch:
            x, g = seq[looked], steps[looked]
            if bypass:  # a miss competes with its next use; one never needed is not kept
                g = None if dropped(looked) else steps[nxt[looked]]
            if x in cache:
                hit[looked] = True
            elif g is None:
                pass
            elif len(cache) < capacity:
                cache[x] = g
            elif capacity:
                y = max(cache, key=lambda s: (cache[s], s))
                if cache[y] > g:
                    del cache[y]
                    cache[x] = g
            looked += 1
        for i in (i for i in range(n) if steps[i] == h and seq[i] in cache):
            if dropped(i):
                del cache[seq[i]]
            else:
                cache[seq[i]] = steps[nxt[i]]
    return hit


@settings(max_examples=150, deadline=None)
@given(seqs, caps)
def test_lru_matches_ordered_dict(seq, capacity):
    stats = evaluate("lru", np.array(seq, dtype=np.int64), capacity)
    assert stats.hit.tolist() == lru_reference(seq, capacity)
    assert stats.hits + stats.misses == len(seq)


@given(seqs)
def test_lru_stack_distance_brute_force(seq):
    dist = lru_stack_distance(np.array(seq, dtype=np.int64))
    for i, x in enumerate(seq):
        prev = max((j for j in range(i) if seq[j] == x), default=None)
        want = len(set(seq[prev + 1 : i])) if prev is not None else np.iinfo(np.int64).max
        assert dist[i] == want


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=11), st.integers(0, 3))
def test_belady_is_optimal(seq, capacity):
    assert evaluate("belady", np.array(seq, dtype=np.int64), capacity).hits == optimal_hits(
        seq, capacity)


@settings(max_examples=100, deadline=None)
@given(seqs, caps)
def test_no_policy_beats_belady(seq, capacity):
    arr = np.array(seq, dtype=np.int64)
    best = evaluate("belady", arr, capacity).hits
    for name in POLICIES:
        assert evaluate(name, arr, capacity).hits <= best, name


@settings(max_examples=100, deadline=None)
@given(seqs, caps)
def test_nopfs_matches_reference(seq, capacity):
    assert evaluate("nopfs", np.array(seq, dtype=np.int64), capacity).hit.tolist() == \
        nopfs_reference(seq, capacity)


@settings(max_examples=100, deadline=None)
@given(seqs, caps, st.integers(1, 4), st.integers(1, 4), st.integers(0, 2), st.booleans(),
       st.booleans())
def test_lobster_matches_reference(seq, capacity, per_step, period, prefetch, eager, bypass):
    steps = [i // per_step for i in range(len(seq))]
    got = evaluate("lobster", np.array(seq, dtype=np.int64), capacity, steps=steps,
                   steps_per_epoch=period, prefetch=prefetch, eager=eager, bypass=bypass)
    assert got.hit.tolist() == lobster_reference(seq, capacity, steps, period, prefetch, eager,
                                                 bypass)
    lazy = evaluate("lobster-lazy", np.array(seq, dtype=np.int64), capacity, steps=steps,
                    steps_per_epoch=period, prefetch=prefetch, eager=eager)
    assert lazy.hit.tolist() == lobster_reference(seq, capacity, steps, period, prefetch, eager,
                                                  bypass=False)


def test_belady_on_shuffled_epochs_hits_capacity_per_epoch():
    """Every cached sample is read again before anything read this epoch: C hits an epoch."""
    rng = np.random.default_rng(0)
    seq = np.concatenate([rng.permutation(500) for _ in range(4)])
    for capacity in (0, 1, 50, 250, 500):
        per_epoch = evaluate("belady", seq, capacity).hit.reshape(4, -1).sum(axis=1)
        assert per_epoch.tolist() == [0] + [capacity] * 3


@pytest.fixture(scope="module")
def shuffled():
    stream = access_stream(0, 3, 8000, 64, 8)
    return node_sequence(stream), node_sequence(stream, [0, 1])


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5])
def test_order_on_shuffled_streams_one_node(shuffled, fraction):
    capacity = int(fraction * 8000)
    r = {name: evaluate(name, shuffled[0], capacity).hits for name in POLICIES}
    assert r["lru"] < r["lobster"] <= r["belady"]
    assert r["lru"] < r["nopfs"] <= r["belady"]
    assert r["lobster"] >= 0.97 * r["belady"]
    # every sample once an epoch: the first epoch is cold, then C hits an epoch
    assert r["belady"] == r["nopfs"] == 2 * capacity


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5])
def test_order_on_shuffled_streams_part_of_the_ranks(shuffled, fraction):
    """A node with 2 of 8 ranks reads a quarter of each epoch: frequencies differ (NoPFS §3.1)."""
    capacity = int(fraction * 8000)
    r = {name: evaluate(name, shuffled[1], capacity).hits for name in POLICIES}
    assert r["lru"] < r["lobster-lazy"] <= r["lobster"] <= r["belady"]
    assert r["lru"] < r["nopfs"] <= r["belady"]
    assert r["lobster"] >= 0.99 * r["belady"]
    assert r["lobster-lazy"] >= 0.97 * r["belady"]
    # the paper's eager reuse-distance rule drops what the next epoch does not read
    assert evaluate("lobster", shuffled[1], capacity, eager=True).hits < r["lobster-lazy"]


def test_lru_on_shuffled_epochs_matches_expectation(shuffled):
    seq = shuffled[0]
    warm = seq.accesses_per_epoch
    dist = lru_stack_distance(seq.samples)[warm:]
    for c in (0.1, 0.3, 0.5):
        got = float(np.mean(dist < c * 8000))
        assert got == pytest.approx(lru_expected(c), abs=0.01)
    assert lru_expected(0.1) == pytest.approx(0.1**2 / 2, rel=0.05)


def test_nopfs_tiers_take_the_most_frequent_first():
    seq = np.array([5, 1, 5, 2, 5, 1, 3, 1, 5, 2, 4], dtype=np.int64)  # r: 5:4, 1:3, 2:2
    stats = evaluate("nopfs", seq, 3, tiers=(1, 2))
    assert stats.tier_hits == (3, 3)  # RAM: sample 5; SSD: samples 1 and 2
    assert stats.hits == 6 == evaluate("nopfs", seq, 3).hits
    with pytest.raises(InputError):
        evaluate("nopfs", seq, 3, tiers=(1, -2))


def test_window_counts_a_part():
    stats = evaluate("lru", np.array([1, 1, 2, 1, 2], dtype=np.int64), 2)
    assert stats.window(2).hits == 2 and stats.window(2).misses == 1
    assert stats.window(0, 2).hit_ratio == 0.5


def test_bad_input():
    seq = np.array([1, 2, 1], dtype=np.int64)
    with pytest.raises(InputError, match="unknown cache policy 'fifo'"):
        evaluate("fifo", seq, 2)
    with pytest.raises(InputError, match="capacity"):
        evaluate("lru", seq, -1)
    with pytest.raises(InputError, match="sample ids"):
        evaluate("lru", np.array([1.5, 2.0]), 1)
    with pytest.raises(InputError, match="non-decreasing"):
        evaluate("lobster", seq, 1, steps=[1, 0, 2])
