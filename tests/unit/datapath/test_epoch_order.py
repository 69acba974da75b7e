"""SOLAR's epoch order: the reuse matrix, the path search against brute force and its bound,
and the guarantee that a reordered run still reads each epoch as a permutation."""

import itertools
from collections import OrderedDict

import numpy as np
import pytest

from adloader.datapath.access_stream import access_stream
from adloader.datapath.epoch_order import (
    EpochOrder,
    assignment_bound,
    check_order,
    exhaustive_order,
    path_reuse,
    plan_epoch_order,
    reuse_matrix,
    solar_order,
    source_epoch,
)
from adloader.datapath.eviction import lru
from adloader.datapath.sample_order import epoch_permutation, rank_order
from adloader.errors import InputError


def perms_of(seed, epochs, size):
    return np.stack([epoch_permutation(seed, e, size) for e in range(epochs)])


def slow_reuse(perms, c, model):
    """W[u, v] by the definitions, one sample at a time (an OrderedDict LRU for "lru")."""
    e, n = perms.shape
    w = np.zeros((e, e), dtype=np.int64)
    for u, v in itertools.permutations(range(e), 2):
        if model == "solar":
            w[u, v] = len(set(perms[u][n - min(c, n) :].tolist()) & set(perms[v][:c].tolist()))
            continue
        buffer = OrderedDict()
        for k, x in enumerate(np.concatenate([perms[u], perms[v]]).tolist()):
            if x in buffer:
                w[u, v] += k >= n
                buffer.move_to_end(x)
            elif c:
                buffer[x] = True
                if len(buffer) > c:
                    buffer.popitem(last=False)
    return w


def random_w(rng, e, high=100):
    w = rng.integers(0, high, (e, e))
    np.fill_diagonal(w, 0)
    return w


def brute_assignment(w):
    """The best successor assignment with a dummy node, over all (E+1)! permutations."""
    e = w.shape[0]
    m = np.zeros((e + 1, e + 1), dtype=np.int64)
    m[:e, :e] = w
    best = None
    for p in itertools.permutations(range(e + 1)):
        if any(p[i] == i for i in range(e + 1)):
            continue
        value = sum(m[i, p[i]] for i in range(e + 1))
        best = value if best is None else max(best, value)
    return best


# ---------------------------------------------------------------- reuse matrix


@pytest.mark.parametrize("model", ["solar", "lru"])
@pytest.mark.parametrize("size,epochs,capacity", [(40, 5, 10), (37, 4, 0), (25, 6, 25),
                                                   (30, 3, 99), (64, 7, 17), (1, 3, 1)])
def test_reuse_matrix_matches_the_definition(model, size, epochs, capacity):
    perms = perms_of(3, epochs, size)
    assert np.array_equal(reuse_matrix(perms, capacity, model), slow_reuse(perms, capacity, model))


def test_reuse_matrix_takes_any_distinct_ids():
    rng = np.random.default_rng(0)
    perms = np.stack([rng.choice(500, 60, replace=False) for _ in range(5)])  # not 0..N−1
    for model in ("solar", "lru"):
        assert np.array_equal(reuse_matrix(perms, 20, model), slow_reuse(perms, 20, model))


def test_lru_reuse_sums_to_the_runs_lru_hits_and_eq1_bounds_it():
    # every epoch reads every sample: an LRU buffer's hits in v depend on (u, v) alone
    perms = perms_of(5, 5, 300)
    order = [3, 0, 4, 1, 2]
    for c in (0, 10, 60, 150, 300):
        solar, lru_w = reuse_matrix(perms, c, "solar"), reuse_matrix(perms, c, "lru")
        assert np.all(lru_w <= solar)
        assert path_reuse(lru_w, order) == lru(perms[order].ravel(), c).hits


def test_reuse_matrix_refuses_bad_input():
    with pytest.raises(InputError, match="twice"):
        reuse_matrix(np.array([[0, 1, 1], [2, 1, 0]]), 2)
    with pytest.raises(InputError):
        reuse_matrix(np.arange(5), 2)
    with pytest.raises(InputError):
        reuse_matrix(perms_of(0, 3, 10), -1)
    with pytest.raises(InputError):
        reuse_matrix(perms_of(0, 3, 10), 3, model="fifo")


# ---------------------------------------------------------------- search and bound


@pytest.mark.parametrize("epochs", [2, 3, 4, 5, 6])
def test_heuristic_finds_the_optimum_on_small_cases(epochs):
    rng = np.random.default_rng(epochs)
    for trial in range(40):
        w = random_w(rng, epochs)
        best = exhaustive_order(w)
        found = solar_order(w, seed=trial, exact_upto=0)
        assert found.reuse == best.reuse == path_reuse(w, best.order)
        assert path_reuse(w, found.order) == found.reuse
        assert sorted(found.order) == list(range(epochs))


@pytest.mark.parametrize("epochs", [7, 8, 9])
def test_heuristic_is_within_its_bound_on_larger_cases(epochs):
    rng = np.random.default_rng(100 + epochs)
    for trial in range(5):
        w = random_w(rng, epochs, high=1000)
        best = exhaustive_order(w).reuse
        found = solar_order(w, seed=trial, exact_upto=0)
        assert found.reuse <= best <= found.bound
        assert found.reuse >= 0.97 * best  # in practice equal; never far


def test_the_bound_is_the_assignment_relaxation_and_bounds_every_path():
    rng = np.random.default_rng(7)
    for e in (1, 2, 3, 4, 5):
        for _ in range(10):
            w = random_w(rng, e)
            bound = assignment_bound(w)
            assert bound == (brute_assignment(w) if e > 1 else 0)
            assert bound >= exhaustive_order(w).reuse
            if e > 1:  # tighter than Σ best outgoing edge − the least of them
                best_out = np.where(np.eye(e, dtype=bool), -1, w).max(axis=1)
                assert bound <= best_out.sum() - best_out.min()


def test_results_carry_a_consistent_gap():
    rng = np.random.default_rng(11)
    w = random_w(rng, 14, high=1000)
    r = solar_order(w, seed=0)
    assert isinstance(r, EpochOrder) and sorted(r.order) == list(range(14))
    assert r.sequential == path_reuse(w, range(14)) <= r.reuse <= r.bound
    assert r.gap == pytest.approx((r.bound - r.reuse) / r.bound) and 0 <= r.gap < 0.05
    assert r.exact == (r.reuse == r.bound)
    exact = exhaustive_order(w[:6, :6])
    assert exact.exact and exact.gap == 0
    with pytest.raises(InputError):
        exhaustive_order(random_w(rng, 10))
    with pytest.raises(InputError):
        solar_order(np.zeros((3, 4)))


def test_seed_reproducibility():
    w = random_w(np.random.default_rng(3), 16, high=500)
    assert solar_order(w, seed=5) == solar_order(w, seed=5)
    a, b = plan_epoch_order(9, 12, 2000, 300), plan_epoch_order(9, 12, 2000, 300)
    assert a == b and sorted(a.order) == list(range(12))
    for seed in (0, 1, 2):  # other kicks, still an order at least as good as the greedy start
        r = solar_order(w, seed=seed)
        assert sorted(r.order) == list(range(16)) and r.reuse >= r.sequential


def test_plans_beat_the_sequential_order_on_random_shuffles():
    for method in ("solar", "exhaustive"):
        for model in ("solar", "lru"):
            p = plan_epoch_order(1, 7, 3000, 600, method=method, model=model)
            s = plan_epoch_order(1, 7, 3000, 600, method="sequential", model=model)
            assert s.order == tuple(range(7)) and s.reuse == p.sequential
            assert p.reuse >= s.reuse and p.reuse <= p.bound
    with pytest.raises(InputError):
        plan_epoch_order(1, 3, 100, 10, method="pso")


# ---------------------------------------------------------------- the guarantee


def test_orders_are_checked():
    assert check_order([2, 0, 1]) == (2, 0, 1)
    for bad in ([0, 0, 1], [1, 2, 3], [-1, 0]):
        with pytest.raises(InputError):
            check_order(bad)
    assert [source_epoch((2, 0, 1), e) for e in range(5)] == [2, 0, 1, 3, 4]
    assert source_epoch(None, 7) == 7


@pytest.mark.parametrize("size,world,gb", [(500, 1, 50), (503, 4, 16), (96, 3, 12)])
def test_every_epoch_of_a_solar_stream_is_a_permutation_of_the_dataset(size, world, gb):
    seq = access_stream(4, 6, size, gb, world)
    sol = access_stream(4, 6, size, gb, world, epoch_order="solar", capacity=size // 3)
    order = sol.epoch_order
    assert sorted(order) == list(range(6)) and seq.epoch_order is None
    for e in range(6):
        reads = sol.samples[e].ravel()
        assert np.array_equal(np.unique(reads), np.arange(size))  # every sample, padding aside
        assert reads.size == seq.samples[e].size
        # epoch e reads planned epoch order[e]: the same lists, only reordered
        assert np.array_equal(sol.samples[e], seq.samples[order[e]])
        for r in range(world):
            assert np.array_equal(sol.samples[e, r],
                                  rank_order(4, order[e], size, world, r)[: sol.rank_len])
    assert plan_epoch_order(4, 6, size, size // 3).order == order


def test_access_stream_takes_an_explicit_order_and_refuses_bad_options():
    s = access_stream(0, 4, 100, 10, epoch_order=[3, 2, 1, 0])
    base = access_stream(0, 4, 100, 10)
    assert s.epoch_order == (3, 2, 1, 0)
    assert np.array_equal(s.samples, base.samples[::-1])
    longer = access_stream(0, 5, 100, 10, epoch_order=(1, 0))  # epochs past it: their own
    assert np.array_equal(longer.samples[2:], access_stream(0, 5, 100, 10).samples[2:])
    assert np.array_equal(access_stream(0, 4, 100, 10, epoch_order=None).samples, base.samples)
    with pytest.raises(InputError, match="capacity"):
        access_stream(0, 4, 100, 10, epoch_order="solar")
    with pytest.raises(InputError):
        access_stream(0, 4, 100, 10, epoch_order="random")
    with pytest.raises(InputError):
        access_stream(0, 4, 100, 10, epoch_order=[0, 0, 1, 2])


def test_the_loader_reads_the_planned_order():
    torch = pytest.importorskip("torch")
    from adloader.client.loader.loader import ElasticDataLoader

    data = torch.arange(90)
    plan = plan_epoch_order(3, 4, 90, 30)
    stream = access_stream(3, 4, 90, 10, epoch_order=plan.order)
    loader = ElasticDataLoader(data, batch_size=10, shuffle=True, seed=3,
                               epoch_order=plan.order)
    for e in range(4):
        got = torch.cat(list(loader)).tolist()
        assert sorted(got) == list(range(90))
        assert got == stream.samples[e, 0].tolist()
    assert loader.epoch == 4
    plain = ElasticDataLoader(data, batch_size=10, shuffle=True, seed=3)
    assert torch.cat(list(plain)).tolist() == rank_order(3, 0, 90).tolist()
    with pytest.raises(InputError, match="seed"):
        ElasticDataLoader(data, batch_size=10, shuffle=True, epoch_order=plan.order)
    with pytest.raises(InputError):
        ElasticDataLoader(data, batch_size=10, seed=1, epoch_order=[0, 2])
