"""The priority plan: the way for linear rows against the one for concave rows and against
exhaustive search; the concave one on rows that are not linear; which rows, kept a table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adloader.bench.sim.experiments import _loading_table
from adloader.device import synth
from adloader.device.device_profile import load_profile
from adloader.scheduling.kernels import loops  # compiled where built, else as plain Python
from adloader.scheduling.policies.priority_plan import Rows, linear_rows, priority_plan


def staged(capacity: int, per_worker: float, knee: int, slope: float) -> np.ndarray:
    """λ(d; D) = d/D·L(D), L rising per_worker a worker up to the knee, slope after."""
    node = np.arange(capacity + 1, dtype=float)
    total = per_worker * np.minimum(node, knee) + slope * np.maximum(node - knee, 0)
    d = node[None, :]
    return np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * total[:, None], 0.0)


def rooted(capacity: int, per_worker: float, contention: float) -> np.ndarray:
    """λ(d; D) = per_worker·√d/(1 + c·D): concave in d, not linear."""
    d = np.arange(capacity + 1, dtype=float)[None, :]
    node = np.arange(capacity + 1, dtype=float)[:, None]
    return per_worker * np.sqrt(d) / (1.0 + contention * node)


def value(plan, mu, table, rho):
    d = np.asarray(plan)
    return float(((rho ** np.arange(len(mu))) * np.minimum(mu, table[d.sum(), d])).sum())


def brute(mu, table, capacity, rho):
    return max(value(p, mu, table, rho)
               for p in itertools.product(range(1, capacity + 1), repeat=len(mu))
               if sum(p) <= capacity)


def test_the_tpms_tables_are_linear_in_d():
    assert linear_rows(_loading_table(64)) is not None
    assert linear_rows(staged(20, 100.0, 6, 30.0)) is not None
    model = synth.fitted_model(load_profile("paper"), 0)  # the staged TPM, as fitted
    assert model.loading.regressor == "staged"
    assert linear_rows(model.loading_table(18)) is not None
    assert linear_rows(rooted(12, 100.0, 0.05)) is None  # concave, not linear: the general way


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("rho", [0.99, 0.5, 0.05])
def test_the_fast_way_agrees_with_the_general_one(seed, rho):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(4, 70))
    n = int(rng.integers(1, min(capacity, 20) + 1))
    table = staged(capacity, float(rng.uniform(20, 150)), int(rng.integers(1, capacity + 1)),
                   float(rng.uniform(0, 40)))
    a, g = linear_rows(table)
    mu = rng.uniform(5, 900, n)
    mu[rng.random(n) < 0.2] = float(table[capacity, 1]) * int(rng.integers(1, 4))  # exact steps
    fast = loops.plan(mu, rho, table, capacity, True, a, g)
    slow = loops.plan(mu, rho, table, capacity, False, a, g)  # read as concave rows
    assert fast.min() >= 1 and fast.sum() <= capacity
    assert value(fast, mu, table, rho) == pytest.approx(value(slow, mu, table, rho), rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("rho", [0.99, 0.5])
def test_each_way_is_the_weighted_optimum(seed, rho):
    rng = np.random.default_rng(100 + seed)
    n, capacity = int(rng.integers(2, 4)), int(rng.integers(4, 10))
    mu = rng.uniform(60, 500, n)
    linear = staged(capacity, float(rng.uniform(50, 150)), int(rng.integers(1, capacity)),
                    float(rng.uniform(0, 30)))
    concave = rooted(capacity, float(rng.uniform(80, 200)), float(rng.uniform(0, 0.1)))
    for table in (linear, concave):
        got = priority_plan(mu, table, capacity, rho)
        assert value(got, mu, table, rho) == pytest.approx(brute(mu, table, capacity, rho),
                                                           rel=1e-6)


def test_fewer_workers_than_jobs_go_to_the_first():
    table = _loading_table(8)
    assert priority_plan(np.full(10, 100.0), table, 8).tolist() == [1] * 8 + [0, 0]


def test_the_rows_follow_their_table():
    table = _loading_table(16)
    rows = Rows.of(table, 16)
    assert rows.linear
    assert Rows.of(table, 16) is rows and Rows.of(table, 15) is not rows
    table[:] = rooted(16, 100.0, 0.05)  # changed in place: read anew, now concave
    again = Rows.of(table, 16)
    assert again is not rows and not again.linear


@pytest.mark.parametrize("mu", [[1e300, 5.0, 0.0], [np.inf, 10.0, 1e-300], [np.nan, 10.0, 20.0]])
def test_absurd_rates_still_get_a_plan(mu):
    """A rate no job has (a lying or broken prediction) gives a plan within the node, at
    once: the compiled loops neither overflow a step count nor spin."""
    from adloader.scheduling.policies.ftf import forward

    table = _loading_table(16)
    plan = priority_plan(np.array(mu), table, 16)
    assert plan.min() >= 1 and plan.sum() <= 16
    ends, now = forward(np.array(mu), np.array([1e6, 1e3, 10.0]), table, 16, [0, 1, 2])
    assert now.sum() <= 16 and len(ends) == 3


def test_only_the_last_tables_are_kept():
    """Each kept ``Rows`` holds its table: a process making table after table (a daemon
    refitting its model, a benchmark) keeps only the last few alive."""
    import gc
    import weakref

    first = _loading_table(8)
    gone = weakref.ref(first)
    Rows.of(first, 8)
    del first
    for _ in range(Rows.KEEP):
        Rows.of(_loading_table(8), 8)
    gc.collect()
    assert gone() is None and len(Rows._by_table) <= Rows.KEEP
