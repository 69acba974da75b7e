"""``schedule_lp.best_schedule``: the best time-varying schedule by linear programs, checked
by hand on one server, and on the static mix against a real policy's run."""

from __future__ import annotations

import numpy as np
import pytest

from adloader.bench.sim.experiments import static
from adloader.errors import InputError
from adloader.scheduling.bounds.schedule_lp import best_schedule, pareto_rows
from adloader.sim.schedule_oracle import static_schedule_oracle
from adloader.sim.trace import load_trace


def one_server(present):
    """One server of rate 1: serve either job alone (time-sharing mixes them)."""
    rows = []
    for i in present:
        row = np.zeros(2)
        row[i] = 1.0
        rows.append(row)
    return np.array(rows)


def test_shortest_first_is_found_and_proved_best():
    out = best_schedule([1.0, 2.0], one_server)
    assert out["order"] == [0, 1] and out["ends"] == pytest.approx([1.0, 3.0])
    assert out["sum"] == pytest.approx(1 + 2 / 3) and out["sum_upper"] == pytest.approx(1 + 2 / 3)


def test_a_floor_forces_the_other_order():
    out = best_schedule([1.0, 2.0], one_server, deadlines=[np.inf, 2.5])
    assert out["order"] == [1, 0] and out["ends"] == pytest.approx([3.0, 2.0])
    assert out["sum"] == pytest.approx(1 / 3 + 1)
    assert not best_schedule([1.0, 2.0], one_server, deadlines=[0.5, 2.5])["feasible"]


def test_dominated_allocations_are_dropped():
    rows = pareto_rows([[1, 0], [0.5, 0], [0, 1], [0.5, 0.5], [0.4, 0.5]])
    assert sorted(map(tuple, rows.tolist())) == [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)]


def test_bad_input_is_named():
    with pytest.raises(InputError, match="samples > 0"):
        best_schedule([1.0, 0.0], one_server)
    with pytest.raises(InputError, match="1 to 6 jobs"):
        best_schedule([1.0] * 7, one_server)


def test_static_mix_oracle_bounds_every_policy(paper_profile, paper_model):
    trace = load_trace("paper-static")
    runs = static(trace, paper_profile, paper_model)
    ref = next(r for r in runs if r["policy"] == "balance" and not r["realloc"])
    lp = static_schedule_oracle(trace, paper_profile, paper_model, ref, pause=False)
    assert lp["feasible"] and lp["sum"] <= lp["sum_upper"] * (1 + 1e-9)
    for r in runs:  # no policy keeping the floor beats the best schedule's bound
        if r["realloc"] and r["worst_job_ratio"] >= 0.95:
            assert r["aggregate_throughput"] <= lp["sum_upper"] * (1 + 1e-6)
    ftf = next(r for r in runs if r["policy"] == "ftf" and r["realloc"])
    assert ftf["aggregate_throughput"] >= 0.95 * lp["sum"]  # within 5 % of the best found


# -- least_mean_jct: the floor under every schedule's mean completion time ---------------
def test_the_jct_floor_runs_jobs_one_after_another_when_only_the_cpu_binds():
    from adloader.scheduling.bounds.schedule_lp import least_mean_jct

    # 4 jobs of 1 sample, the node loads 2 samples/s, GPUs never bind: shortest first, one at
    # a time, ends at 0.5, 1, 1.5, 2 (mean 1.25); sharing the CPU evenly would end all at 2
    free = least_mean_jct([1, 1, 1, 1], 2.0, [0.0] * 4, [[0], [1], [2], [3]])
    assert free["mean_jct"] == pytest.approx(1.25)
    assert free["makespan"] == pytest.approx(2.0)
    # each job's GPU takes 1 s a sample: two at a time at most, ends 1, 1, 2, 2
    capped = least_mean_jct([1, 1, 1, 1], 2.0, [1.0] * 4, [[0], [1], [2], [3]])
    assert capped["mean_jct"] == pytest.approx(1.5)
    # two jobs on one GPU: it binds (2 s of GPU work), the CPU does not
    shared = least_mean_jct([1, 1], 100.0, [1.0, 1.0], [[0], [0]])
    assert shared["mean_jct"] == pytest.approx(1.5) and shared["makespan"] == pytest.approx(2)


def test_the_jct_floor_holds_each_job_to_its_intake_and_its_deadline():
    from adloader.scheduling.bounds.schedule_lp import least_mean_jct

    # 2 jobs of 1 sample, the node loads 2 samples/s; each takes in at most 1 sample/s: the
    # CPU cannot run one after the other faster, both end at 1 s
    capped = least_mean_jct([1, 1], 2.0, [0.0, 0.0], [[0], [1]], intake=[1.0, 1.0])
    assert capped["mean_jct"] == pytest.approx(1.0) and capped["makespan"] == pytest.approx(1)
    # without the ceiling: one after the other, 0.5 and 1
    free = least_mean_jct([1, 1], 2.0, [0.0, 0.0], [[0], [1]])
    assert free["mean_jct"] == pytest.approx(0.75)
    # 3 jobs of 1 sample, 1 sample/s: shortest first ends 1, 2, 3; a deadline of 1.5 for
    # each of the first two forces them to share: 2, 2, 3 at best... within 1.5 no order can
    # end two of them, so none is counted
    none = least_mean_jct([1, 1, 1], 1.0, [0.0] * 3, [[0], [1], [2]], deadline=[1.5, 1.5, 9])
    assert none["mean_jct"] == np.inf and none["order"] is None
    late = least_mean_jct([1, 1, 1], 1.0, [0.0] * 3, [[0], [1], [2]], deadline=[9, 9, 1.0])
    assert late["ends"][2] == pytest.approx(1.0) and late["mean_jct"] == pytest.approx(2.0)


def _gpu_node_static(profile, model):
    """The static mix on the ``gpu-node`` truth: (the even split's run, the floor of every
    schedule that ends each job by ``due`` s — each job held to its intake ceiling, the node
    to L(capacity))."""
    from adloader.scheduling.bounds.schedule_lp import least_mean_jct
    from adloader.sim.simulator import SimConfig, Simulator
    from adloader.sim.trace import load_trace

    trace = load_trace("paper-static")
    even = Simulator(trace, profile, model,
                     SimConfig(policy="balance", truth="gpu-node")).run().to_json()
    sim = Simulator(trace, profile, model, SimConfig(truth="gpu-node"))
    jobs = sim.jobs

    def floor(due: float) -> dict:
        return least_mean_jct([j.spec.iterations * j.spec.batch_size for j in jobs],
                              profile.node_loading_rate(sim.capacity),
                              [j.step_s / j.spec.batch_size for j in jobs],
                              gpus=[j.spec.gpus for j in jobs], node_gpus=sim.gpus,
                              intake=[sim.intake[j.name] for j in jobs],
                              deadline=[due] * len(jobs))

    return even, floor


def test_on_the_gpu_node_truth_no_schedule_within_the_nodes_workers_ends_the_static_mix_by_a_tenth_sooner(  # noqa: E501
        paper_profile, paper_model):
    """The floor behind the simulated target's verdict: each job held to its intake ceiling,
    the node to L(capacity), no job later than 1/0.95 of its even-split JCT: no schedule's
    mean JCT is 0.9x the even split's."""
    even, floor = _gpu_node_static(paper_profile, paper_model)
    out = floor(even["mean_jct_s"] / 0.95)
    assert 0.9 < out["mean_jct"] / even["mean_jct_s"] < 0.95


def test_on_the_gpu_node_truth_the_even_split_ends_the_static_mix_soonest_and_sooner_jobs_cost_makespan(  # noqa: E501
        paper_profile, paper_model):
    """Why ``ftf`` plans the even split there: no schedule ends the static mix sooner than
    the even split does, and none that ends it within 1 % of that has a mean JCT under 0.92x
    the even split's (each job held to its intake ceiling): priority that costs no makespan
    buys almost nothing; 0.9x costs about 5 % of the makespan."""
    even, floor = _gpu_node_static(paper_profile, paper_model)
    fair = even["mean_jct_s"] / 0.95
    near = floor(min(fair, 1.01 * even["makespan_s"]))
    assert near["makespan"] >= 0.999 * even["makespan_s"]  # the even split's is the least
    assert 0.92 < near["mean_jct"] / even["mean_jct_s"] < 0.95
    assert floor(min(fair, 1.05 * even["makespan_s"]))["mean_jct"] / even["mean_jct_s"] < 0.91


def test_the_jct_floor_is_under_every_simulated_run_on_either_truth(paper_profile, paper_model):
    """A bound that could fail: every fixed setting, the autotuner and every policy under
    the daemon end the static mix no sooner on average than the floor says."""
    from adloader.sim import no_daemon
    from adloader.sim.schedule_oracle import jct_floor
    from adloader.sim.simulator import SimConfig
    from adloader.sim.trace import load_trace

    trace = load_trace("paper-static", paper_profile.gpus)
    for truth in ("model", "published"):
        config = SimConfig(truth=truth, capacity=paper_profile.cores)
        floor = jct_floor(trace, paper_profile, paper_model, config)
        rows = no_daemon.compare(trace, paper_profile, paper_model, config,
                                 policies=("balance", "ftf", "jct"))
        # the two tuners, 3 policies, each job's best count in hindsight, 2 queues
        assert len(rows) == len(no_daemon.SETTINGS) + 2 + 3 + 1 + len(no_daemon.QUEUES)
        for r in rows:
            # JCTs count from the arrival: the daemon's settle only adds
            assert r["mean_jct_s"] >= floor["mean_jct"] - 1e-6, (truth, r["setting"])
            assert r["makespan_s"] >= floor["makespan"] - 1e-6, (truth, r["setting"])
