"""``fair``: max Σ T_i with every T_i ≥ α·b_i, against the exhaustive oracle and ``optimal``."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adloader.errors import InputError
from adloader.scheduling.bounds.fair_frontier import all_plans, oracle_fair, pareto_frontier
from adloader.scheduling.policies.allocation import JobDemand, balance, optimal, total_throughput
from adloader.scheduling.policies.fair import (
    FairAllocator,
    _masked_dp,
    _prepare,
    _threshold_plan,
    balance_plan,
    balance_rates,
    fair,
    fair_targets,
)
from adloader.scheduling.policies.registry import get_policy


def staged_table(capacity, per_worker=100.0, knee=6, contended=40.0):
    node = np.arange(capacity + 1)
    rate = per_worker * np.minimum(node, knee) + contended * np.clip(node - knee, 0, None)
    d = node[None, :]
    return np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * rate[:, None], 0.0)


def random_table(rng, capacity, kind):
    """λ(d; D), non-increasing in D: concave rows g(d)·h(D), or any rows made monotone in D
    by a running minimum down each column (as ``ThroughputModel.loading_table`` does)."""
    size = capacity + 1
    d = np.arange(size)
    if kind == "concave":
        steps = np.sort(rng.uniform(0, 120, capacity))[::-1]
        if rng.random() < 0.3:  # concave but falling at the end
            steps -= rng.uniform(0, 60)
        g = np.concatenate([[0.0], np.cumsum(steps)])
        h = np.minimum.accumulate(rng.uniform(0.4, 1.0, size))
        table = np.maximum(h[:, None] * g[None, :], 0.0)
    else:
        steps = rng.uniform(0, 120, (size, capacity))
        if kind == "bumpy":  # not monotone in d either
            steps -= rng.uniform(0, 50, (size, capacity))
        table = np.maximum(np.hstack([np.zeros((size, 1)), np.cumsum(steps, axis=1)]), 0.0)
        for col in range(1, size):
            table[col:, col] = np.minimum.accumulate(table[col:, col])
    return np.where(d[None, :] <= d[:, None], table, 0.0)


def mix(rng, n):
    return [JobDemand(f"j{i}", float(rng.uniform(10, 900))) for i in range(n)]


def fair_enough(jobs, plan, capacity, table, alpha):
    """Every job reaches α of its balance rate (within 1e-9), in capacity, ≥ 1 worker each."""
    mu = np.array([j.training_rate for j in jobs])
    d = np.array([plan[j.name] for j in jobs])
    rates = np.minimum(mu, table[d.sum(), d])
    base = balance_rates(mu, capacity, table)
    return d.sum() <= capacity and d.min() >= 1 and np.all(rates >= alpha * base - 1e-9)


@pytest.mark.parametrize("kind", ["concave", "monotone", "bumpy", "staged"])
def test_fair_equals_the_oracle(kind):
    rng = np.random.default_rng(["concave", "monotone", "bumpy", "staged"].index(kind))
    for _ in range(60):
        n = int(rng.integers(1, 5))
        capacity = int(rng.integers(n, 10))
        table = (staged_table(capacity, 100.0, int(rng.integers(1, 8)), rng.uniform(0, 90))
                 if kind == "staged" else random_table(rng, capacity, kind))
        jobs = mix(rng, n)
        alpha = float(rng.choice([0.0, 0.5, 0.8, 0.95, 1.0, rng.uniform()]))
        got = fair(jobs, capacity, table, alpha)
        best = oracle_fair(jobs, capacity, table, alpha)
        assert fair_enough(jobs, got, capacity, table, alpha)
        assert fair_enough(jobs, best, capacity, table, alpha)
        assert total_throughput(jobs, got, table) == pytest.approx(
            total_throughput(jobs, best, table), rel=1e-9)
        assert sum(got.values()) == sum(best.values())  # ties go to fewer workers


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(20, 1500), min_size=1, max_size=4), st.integers(1, 9),
       st.integers(1, 8), st.floats(0, 90), st.floats(0, 1))
def test_fair_equals_the_oracle_on_staged_tables(mus, capacity, knee, contended, alpha):
    jobs = [JobDemand(f"j{i}", mu) for i, mu in enumerate(mus)]
    capacity = max(capacity, len(jobs))
    table = staged_table(capacity, 100.0, knee, contended)
    got = get_policy(f"fair:{alpha!r}")(jobs, capacity, table)
    assert fair_enough(jobs, got, capacity, table, alpha)
    best = oracle_fair(jobs, capacity, table, alpha)
    # gains are quantised to 1e-9 of the node's rate (ties go to fewer workers): a worker
    # whose gain is within one quantum may be left out
    quantum = 1e-9 * float(table.max())
    assert total_throughput(jobs, got, table) == pytest.approx(
        total_throughput(jobs, best, table), rel=1e-9, abs=capacity * quantum)


def test_alpha_zero_is_optimal_and_one_keeps_balance_rates():
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(1, 30))
        capacity = int(rng.integers(n, 4 * n + 8))
        kind = rng.choice(["concave", "monotone"]) if capacity < 40 else "concave"
        table = staged_table(capacity, 100.0, int(rng.integers(1, capacity + 1)),
                             rng.uniform(0, 90)) if rng.random() < 0.5 else \
            random_table(rng, capacity, kind)
        jobs = mix(rng, n)
        best = total_throughput(jobs, optimal(jobs, capacity, table), table)
        assert total_throughput(jobs, fair(jobs, capacity, table, 0.0), table) == \
            pytest.approx(best, rel=1e-9)
        strict = fair(jobs, capacity, table, 1.0)
        assert fair_enough(jobs, strict, capacity, table, 1.0)
        assert total_throughput(jobs, strict, table) >= \
            total_throughput(jobs, balance(jobs, capacity), table) * (1 - 1e-12)


def test_threshold_method_equals_dp_with_lower_bounds():
    """The vectorised marginal gains (ties, partial gains, lower bounds) against exact DP."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        node = int(rng.integers(n, 40))
        steps = np.round(np.sort(rng.uniform(0, 5, node)), 0)[::-1] * 20  # many equal gains
        values = np.concatenate([[0.0], np.cumsum(steps)])
        row = _prepare(values)
        assert row.fast
        mu = np.round(rng.uniform(0, values.max() * 0.6, n), int(rng.integers(-1, 2)))
        t = fair_targets(rng.uniform(0, 1, n) * np.minimum(mu, values[node // n]),
                         float(rng.uniform()))
        got, want = _threshold_plan(mu, t, row, node), _masked_dp(mu, t, values, node)
        assert (got is None) == (want is None)
        if got is not None:
            assert got.sum() <= node and np.all(values[got] >= t)
            assert np.minimum(mu, values[got]).sum() == pytest.approx(
                np.minimum(mu, values[want]).sum(), rel=1e-12, abs=1e-9)


def test_the_solver_re_solves_exactly_after_changes():
    rng = np.random.default_rng(5)
    capacity = 60
    table = staged_table(capacity, 100.0, 18, 40.0)
    solver = FairAllocator(table)
    jobs, plan = mix(rng, 12), None
    for step in range(40):
        if step % 3 == 0 and len(jobs) < 40:
            jobs.append(JobDemand(f"a{step}", float(rng.uniform(10, 900))))  # an arrival
        elif step % 3 == 1 and len(jobs) > 1:
            jobs.pop(int(rng.integers(len(jobs))))  # a departure
        else:
            i = int(rng.integers(len(jobs)))
            jobs[i] = JobDemand(jobs[i].name, float(rng.uniform(10, 900)))  # a new rate
        plan = solver.allocate(jobs, capacity, previous=plan)
        fresh = fair(jobs, capacity, table)
        assert fair_enough(jobs, plan, capacity, table, 0.95)
        assert total_throughput(jobs, plan, table) == pytest.approx(
            total_throughput(jobs, fresh, table), rel=1e-12)


def test_queue_and_empty_cases_follow_the_other_policies():
    table = staged_table(3)
    jobs = [JobDemand(f"j{i}", 100.0) for i in range(5)]
    assert fair(jobs, 3, table) == {"j0": 1, "j1": 1, "j2": 1, "j3": 0, "j4": 0}
    assert fair([], 3, table) == {}


def test_balance_plan_is_balance():
    for n in range(1, 40):
        for capacity in range(n, 3 * n + 50, 7):
            jobs = [JobDemand(f"j{i}", 1.0) for i in range(n)]
            assert balance_plan(n, capacity).tolist() == list(balance(jobs, capacity).values())


@pytest.mark.parametrize("name", ["fair:1.5", "fair:-0.1", "fair:nan", "fair:x", "fair:"])
def test_alpha_is_validated(name):
    with pytest.raises(InputError, match="α must be"):
        get_policy(name)


def test_fair_policy_names():
    table = staged_table(8)
    jobs = [JobDemand("a", 150.0), JobDemand("b", 400.0)]
    assert get_policy("fair")(jobs, 8, table) == fair(jobs, 8, table, 0.95)
    assert get_policy("fair:0.5")(jobs, 8, table) == fair(jobs, 8, table, 0.5)


def test_pareto_frontier_of_a_tiny_mix():
    # no contention: λ(d; D) = 100·d. Balance gives (2, 2): rates 200 and 150, Σ 350.
    table = staged_table(4, 100.0, 4, 0.0)
    jobs = [JobDemand("hungry", 1000.0), JobDemand("small", 150.0)]
    points = pareto_frontier(jobs, 4, table)
    assert [(p["allocation"], p["throughput"]) for p in points] == [
        ({"hungry": 3, "small": 1}, 400.0), ({"hungry": 2, "small": 2}, 350.0)]
    assert points[0]["throughput_ratio"] == pytest.approx(400 / 350)
    assert points[0]["worst_ratio"] == pytest.approx(100 / 150)
    assert points[1]["throughput_ratio"] == points[1]["worst_ratio"] == 1.0
    assert fair(jobs, 4, table, 0.95) == {"hungry": 2, "small": 2}
    assert fair(jobs, 4, table, 0.6) == {"hungry": 3, "small": 1}
    assert all_plans(2, 4).tolist() == [[1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [3, 1]]


def test_each_frontier_point_is_what_fair_gets_at_its_alpha():
    rng = np.random.default_rng(9)
    for _ in range(25):
        n = int(rng.integers(2, 4))
        capacity = int(rng.integers(n, 9))
        table = random_table(rng, capacity, str(rng.choice(["concave", "monotone"])))
        jobs = mix(rng, n)
        points = pareto_frontier(jobs, capacity, table)
        throughputs = [p["throughput"] for p in points]
        worst = [p["worst_ratio"] for p in points]
        assert throughputs == sorted(throughputs, reverse=True)
        assert worst == sorted(worst) and len(set(worst)) == len(worst)
        for p in points:
            if p["worst_ratio"] <= 1.0:
                got = fair(jobs, capacity, table, p["worst_ratio"])
                assert total_throughput(jobs, got, table) == pytest.approx(p["throughput"])


def test_schedule_bounds_hold_for_every_two_phase_schedule():
    """Two jobs sharing a node of rate 10 (each alone at most 8): no schedule beats the bounds,
    and one schedule reaches the makespan bound."""
    from adloader.scheduling.bounds.fair_frontier import schedule_bounds

    samples, own = [40.0, 20.0], [8.0, 8.0]
    rate = {frozenset([0]): 8.0, frozenset([1]): 8.0, frozenset([0, 1]): 10.0}
    out = schedule_bounds(samples, rate.__getitem__, own)
    assert out["makespan_lb"] == pytest.approx(6.0) and out["node_rate_max"] == 10.0
    best_makespan, best_sum = math.inf, 0.0
    for share in np.linspace(0.0, 1.0, 101):  # job 0 gets share × 10 (≤ 8) until one ends
        r0, r1 = min(share * 10, 8.0), min((1 - share) * 10, 8.0)
        if r0 == 0 or r1 == 0:
            continue
        t = min(samples[0] / r0, samples[1] / r1)
        left = [samples[0] - r0 * t, samples[1] - r1 * t]
        ends = [t + left[0] / 8.0, t] if left[0] > 1e-9 else [t, t + left[1] / 8.0]
        best_makespan = min(best_makespan, max(ends))
        best_sum = max(best_sum, samples[0] / ends[0] + samples[1] / ends[1])
    assert best_makespan >= out["makespan_lb"] - 1e-9
    assert best_makespan == pytest.approx(out["makespan_lb"], rel=0.02)  # 6 s is reachable
    assert best_sum <= out["sum_ub"] + 1e-9
    tight = schedule_bounds(samples, rate.__getitem__, own, floor_jct=[5.0, 5.0])
    assert not tight["feasible"]  # 60 samples at ≤ 10/s cannot both end by 5 s


def test_the_arrival_bound_by_hand_and_against_every_simulated_policy():
    from adloader.scheduling.bounds.fair_frontier import arrival_bound

    # two jobs at 0 (100 samples each), one at 10 (50): the node reads ≤ 10/s, each job ≤ 8/s
    b = arrival_bound([0, 0, 10], [100, 100, 50], [8, 8, 8], 10)
    assert b["makespan_lb"] == pytest.approx(25.0) and b["binding"] == ("arrival", 0)
    b = arrival_bound([0, 90], [100, 40], [8, 2], 10)  # the late, slow one binds: 90 + 20
    assert b["makespan_lb"] == pytest.approx(110.0) and b["binding"] == ("job", 1)
    with pytest.raises(InputError):
        arrival_bound([0], [1, 2], [1], 1)

    from adloader.bench.sim import experiments
    from adloader.device import synth
    from adloader.device.device_profile import load_profile
    from adloader.sim.trace import load_trace

    profile = load_profile("paper")
    model = synth.fitted_model(profile, 0)
    trace = load_trace("paper-dynamic", profile.gpus)
    lb = experiments.dynamic_bound(trace, profile, model)
    for run in experiments.dynamic(trace, profile, model):
        assert max(j["end_s"] for j in run["jobs"]) >= lb["makespan_lb"] - 1e-6, run["policy"]
