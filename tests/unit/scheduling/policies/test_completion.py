"""``jct``: minimum predicted Σ completion time, checked against exhaustive search."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adloader.scheduling.policies.allocation import JobDemand, balance
from adloader.scheduling.policies.jct import jct
from adloader.scheduling.policies.registry import get_policy


def table(capacity: int, per_worker: float = 100.0, contention: float = 0.03) -> np.ndarray:
    """λ(d; D): linear in d, shrinking with the node total D (concave rows)."""
    d = np.arange(capacity + 1)[None, :]
    node = np.arange(capacity + 1)[:, None]
    return per_worker * d / (1.0 + contention * np.maximum(node - 4, 0))


def brute(jobs, capacity, loading, alpha):
    mu = np.array([j.training_rate for j in jobs])
    s = np.array([j.remaining for j in jobs])
    bal = balance(jobs, capacity)
    base = np.minimum(mu, [loading[capacity, bal[j.name]] for j in jobs])
    best, plan_best = np.inf, None
    for plan in itertools.product(range(1, capacity - len(jobs) + 2), repeat=len(jobs)):
        total = sum(plan)
        if total > capacity:
            continue
        rate = np.minimum(mu, loading[total, list(plan)])
        if np.any(rate < alpha * base - 1e-9):
            continue
        value = float((s / rate).sum())
        if value < best - 1e-9:
            best, plan_best = value, plan
    return best, plan_best


def value(jobs, alloc, loading):
    total = sum(alloc.values())
    return sum(j.remaining / min(j.training_rate, loading[total, alloc[j.name]]) for j in jobs)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("alpha", [0.0, 0.95])
def test_jct_equals_exhaustive_search(seed, alpha):
    rng = np.random.default_rng(seed)
    n, capacity = int(rng.integers(2, 4)), int(rng.integers(4, 9))
    loading = table(capacity, per_worker=float(rng.uniform(50, 150)))
    jobs = [JobDemand(f"j{i}", float(rng.uniform(80, 600)), remaining=float(rng.uniform(1e3, 1e5)))
            for i in range(n)]
    got = jct(jobs, capacity, loading, alpha=alpha)
    best, _ = brute(jobs, capacity, loading, alpha)
    assert value(jobs, got, loading) == pytest.approx(best, rel=1e-9)
    assert sum(got.values()) <= capacity


def test_a_long_job_is_not_starved():
    loading = table(18)
    jobs = [JobDemand("short", 900.0, remaining=2e4), JobDemand("long", 300.0, remaining=4e5)]
    got = jct(jobs, 18, loading)
    assert got["long"] >= balance(jobs, 18)["long"] * 0.5
    assert get_policy("jct")(jobs, 18, loading) == got


def test_jct_alpha_names_and_the_floor():
    loading = table(12)
    jobs = [JobDemand("a", 900.0, remaining=1e3), JobDemand("b", 900.0, remaining=1e6)]
    free = get_policy("jct:0")(jobs, 12, loading)
    floored = get_policy("jct:0.95")(jobs, 12, loading)
    assert free["b"] > free["a"]  # the long job gets more when nothing holds the short one up
    bal = balance(jobs, 12)
    total = sum(floored.values())
    for j in jobs:  # with the floor, neither falls below 0.95 of its balance rate
        assert min(j.training_rate, loading[total, floored[j.name]]) >= \
            0.95 * min(j.training_rate, loading[12, bal[j.name]]) - 1e-9
