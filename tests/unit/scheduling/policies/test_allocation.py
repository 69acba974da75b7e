import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.errors import InputError
from adloader.scheduling.policies.allocation import (
    JobDemand,
    balance,
    inverse,
    optimal,
    oracle,
    proportion,
    requested,
    separable_max,
    total_throughput,
    waa,
)
from adloader.scheduling.policies.registry import POLICIES, get_policy


def staged_table(capacity, per_worker=100.0, knee=6, contended=40.0, saturation=None):
    """λ(d; D) = d/D · L(D) with a piecewise-linear L, as the TPM builds it."""
    saturation = max(saturation or capacity + 1, knee)
    node = np.arange(capacity + 1)
    rate = per_worker * np.minimum(node, knee) + contended * np.clip(node - knee, 0,
                                                                     saturation - knee)
    d = node[None, :]
    return np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * rate[:, None], 0.0)


jobs_strategy = st.lists(
    st.tuples(st.floats(10, 3000), st.floats(0.1, 30), st.one_of(st.none(), st.integers(1, 12))),
    min_size=1, max_size=8,
)


def demands(spec):
    return [JobDemand(f"j{i}", mu, m, r) for i, (mu, m, r) in enumerate(spec)]


@settings(max_examples=60, deadline=None)
@given(jobs_strategy, st.integers(1, 40), st.sampled_from(sorted(POLICIES)))
def test_policies_respect_capacity_and_give_everyone_a_worker(spec, capacity, name):
    jobs = demands(spec)
    table = staged_table(capacity)
    plan = get_policy(name)(jobs, capacity, table)
    assert set(plan) == {j.name for j in jobs}
    assert sum(plan.values()) <= capacity
    assert all(d >= 0 for d in plan.values())
    if capacity >= len(jobs):
        assert all(d >= 1 for d in plan.values())
    else:  # the first C jobs in queue order get one worker, the rest wait
        assert [plan[j.name] for j in jobs] == [1] * capacity + [0] * (len(jobs) - capacity)
    assert plan == get_policy(name)(jobs, capacity, table)  # deterministic


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(20, 1500), min_size=1, max_size=4), st.integers(1, 9),
       st.integers(2, 8), st.floats(0, 90))
def test_optimal_equals_oracle(mus, capacity, knee, contended):
    jobs = [JobDemand(f"j{i}", mu) for i, mu in enumerate(mus)]
    capacity = max(capacity, len(jobs))
    table = staged_table(capacity, 100.0, knee, contended)
    best = total_throughput(jobs, oracle(jobs, capacity, table), table)
    got = total_throughput(jobs, optimal(jobs, capacity, table), table)
    assert got == pytest.approx(best, rel=1e-9)


def test_optimal_equals_oracle_on_non_concave_curves():
    rng = np.random.default_rng(3)
    for _ in range(40):
        capacity = int(rng.integers(3, 8))
        table = staged_table(capacity)
        table[:, 2] *= 1.6  # a bump: the second worker helps more than the first
        jobs = [JobDemand(f"j{i}", float(rng.uniform(50, 900))) for i in range(rng.integers(1, 4))]
        best = total_throughput(jobs, oracle(jobs, capacity, table), table)
        assert total_throughput(jobs, optimal(jobs, capacity, table), table) == pytest.approx(best)


def test_optimal_beats_every_other_policy_on_its_objective():
    rng = np.random.default_rng(0)
    table = staged_table(18, 120, 11, 50)
    for _ in range(30):
        jobs = demands([(rng.uniform(50, 2500), rng.uniform(0.5, 20), 6) for _ in range(4)])
        best = total_throughput(jobs, optimal(jobs, 18, table), table)
        for name in POLICIES:
            assert total_throughput(jobs, get_policy(name)(jobs, 18, table), table) <= best + 1e-6


def test_separable_max_dp_and_greedy_agree_with_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n, cap = int(rng.integers(1, 4)), int(rng.integers(3, 8))
        cap = max(cap, n)
        concave = np.cumsum(np.sort(rng.uniform(0, 10, (n, cap)), axis=1)[:, ::-1], axis=1)
        for values in (np.hstack([np.zeros((n, 1)), concave]),
                       np.hstack([np.zeros((n, 1)), rng.uniform(0, 50, (n, cap))])):
            got = separable_max(values, cap)
            assert sum(got) <= cap and min(got) >= 1
            brute = max(
                sum(values[i, p[i]] for i in range(n))
                for p in np.ndindex(*([cap + 1] * n))
                if sum(p) <= cap and min(p) >= 1
            )
            assert sum(values[i, got[i]] for i in range(n)) == pytest.approx(brute)


def test_waa_follows_algorithm_1():
    # λ(d; 18) = 100·d for d ≤ 18 (no contention): d' = μ/100.
    table = staged_table(18, 100.0, 18, 0.0)
    jobs = [JobDemand("big", 250.0), JobDemand("a", 1200.0), JobDemand("b", 1000.0)]
    # d' = 2.5, 12, 10 -> d = 3, 12, 10 (sum 25); gaps 0.5, 0, 0 -> order big, a, b;
    # one from each job with d > 1, in that order, until Σ ≤ 18:
    # 2,11,9 (22) -> 1,10,8 (19) -> big stays at 1, a -> 9: Σ = 18, stop.
    plan = waa(jobs, 18, table)
    assert plan == {"big": 1, "a": 9, "b": 8}
    # enough room: nobody is trimmed and spare workers stay idle (no over-provisioning)
    plan = waa(jobs, 30, staged_table(30, 100.0, 30, 0.0))
    assert plan == {"big": 3, "a": 12, "b": 10}
    # C = N: one each (Algorithm 1, lines 1-2)
    assert waa(jobs, 3, staged_table(3)) == {"big": 1, "a": 1, "b": 1}


def test_baselines_follow_their_rules():
    jobs = [JobDemand("r18", 1, 11.7, 6), JobDemand("md", 1, 1.8, 6), JobDemand("sm", 1, 0.9, 6)]
    assert balance(jobs, 18) == {"r18": 6, "md": 6, "sm": 6}
    prop = proportion(jobs, 18)
    inv = inverse(jobs, 18)
    assert prop["r18"] > prop["md"] > prop["sm"] >= 1 and sum(prop.values()) == 18
    assert inv["sm"] > inv["md"] > inv["r18"] >= 1 and sum(inv.values()) == 18
    assert requested(jobs, 18) == {"r18": 6, "md": 6, "sm": 6}
    assert sum(requested([JobDemand("x", 1, 1, 30), JobDemand("y", 1, 1, 10)], 18).values()) == 18


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(InputError, match="unknown policy 'fastest'"):
        get_policy("fastest")
