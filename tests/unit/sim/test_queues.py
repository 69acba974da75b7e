"""The queue baselines (adloader/sim/queues.py): the jobs one at a time, each alone with the
node's workers, FIFO or shortest first; the arithmetic on hand numbers, then the simulated
static mix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adloader.errors import InputError
from adloader.sim import no_daemon, queues
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import load_trace

DURATIONS = [10.0, 5.0, 2.0]
LENGTHS = [100, 50, 20]  # samples: the last job is the shortest


def test_fifo_runs_in_arrival_order_and_idles_until_the_next_arrival():
    together = queues.queue_times(DURATIONS, [0.0, 0.0, 0.0], LENGTHS, "fifo")
    assert together == [(0.0, 10.0), (10.0, 15.0), (15.0, 17.0)]  # ties: the trace's order
    apart = queues.queue_times(DURATIONS, [0.0, 3.0, 20.0], LENGTHS, "fifo")
    assert apart == [(0.0, 10.0), (10.0, 15.0), (20.0, 22.0)]  # idle from 15 to 20
    # by arrival, not by the trace's order
    late_first = queues.queue_times(DURATIONS, [4.0, 1.0, 0.0], LENGTHS, "fifo")
    assert late_first == [(7.0, 17.0), (2.0, 7.0), (0.0, 2.0)]


def test_shortest_first_takes_the_fewest_samples_among_the_arrived():
    together = queues.queue_times(DURATIONS, [0.0, 0.0, 0.0], LENGTHS, "shortest")
    assert together == [(7.0, 17.0), (2.0, 7.0), (0.0, 2.0)]
    # non-preemptive: the long job, alone at 0, runs to its end; then the shorter first
    apart = queues.queue_times(DURATIONS, [0.0, 1.0, 2.0], LENGTHS, "shortest")
    assert apart == [(0.0, 10.0), (12.0, 17.0), (10.0, 12.0)]
    # equal samples: the earlier arrival first, then the trace's order
    tied = queues.queue_times([10.0, 1.0, 1.0], [0.0, 2.0, 1.0], [100, 50, 50], "shortest")
    assert tied == [(0.0, 10.0), (11.0, 12.0), (10.0, 11.0)]
    same = queues.queue_times([3.0, 4.0], [0.0, 0.0], [50, 50], "shortest")
    assert same == [(0.0, 3.0), (3.0, 7.0)]
    # nobody waiting when the node frees: idle until the next arrival
    gap = queues.queue_times([1.0, 1.0], [0.0, 5.0], [10, 1], "shortest")
    assert gap == [(0.0, 1.0), (5.0, 6.0)]
    with pytest.raises(InputError, match="queue order"):
        queues.queue_times([1.0], [0.0], [1], "lifo")


def test_each_job_runs_alone_for_its_solo_time_one_after_another(paper_profile, paper_model):
    trace = load_trace("paper-static", paper_profile.gpus)
    base = SimConfig(cpu_sharing="kernel")
    cores = paper_profile.cores
    solo_config = replace(base, policy="requested", realloc=False, correct=False,
                          capacity=cores, arrival_window_s=0.0, arrival_settle_s=0.0,
                          completion_window_s=0.0)
    solo = {}
    for job in trace.jobs:
        one = trace.model_copy(update={"jobs": (job.model_copy(update={"workers": cores}),)})
        [ran] = simulate(one, paper_profile, paper_model, solo_config).to_json()["jobs"]
        solo[job.name] = ran["end_s"]
    fifo = queues.simulate_queue(trace, paper_profile, paper_model, base, "fifo")
    assert fifo["policy"] == "fifo queue"
    jobs = fifo["jobs"]
    assert [j["name"] for j in jobs] == [j.name for j in trace.jobs]
    for j in jobs:
        assert j["end_s"] - j["start_s"] == pytest.approx(solo[j["name"]], abs=2e-3)
        assert j["workers_initial"] == cores
        assert j["jct_s"] == pytest.approx(j["end_s"] - j["arrival_s"], abs=1e-3)
    ordered = sorted(jobs, key=lambda j: j["start_s"])
    assert [j["name"] for j in ordered] == [j.name for j in trace.jobs]  # all at 0: trace order
    assert ordered[0]["start_s"] == 0.0
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert after["start_s"] == pytest.approx(before["end_s"], abs=1e-3)
    assert fifo["makespan_s"] == pytest.approx(sum(solo.values()), abs=5e-3)
    assert fifo["mean_jct_s"] == pytest.approx(
        sum(j["jct_s"] for j in jobs) / len(jobs), abs=1e-3)
    # Σ of each job's samples/s over its own run, as SimResult.to_json sums it
    assert fifo["aggregate_throughput"] == pytest.approx(sum(
        j.batch_size * j.iterations / solo[j.name] for j in trace.jobs), rel=1e-4)
    assert [t["workers"] for t in fifo["timeline"]] == [
        {j.name: cores} for j in trace.jobs] + [{}]
    shortest = queues.simulate_queue(trace, paper_profile, paper_model, base, "shortest")
    assert shortest["policy"] == "shortest-first queue"
    assert shortest["mean_jct_s"] <= fifo["mean_jct_s"] + 1e-9
    assert shortest["makespan_s"] == pytest.approx(fifo["makespan_s"], abs=5e-3)


def test_compare_carries_the_queues_and_each_jobs_best_count_in_hindsight(paper_profile,
                                                                        paper_model):
    trace = load_trace("paper-static", paper_profile.gpus)
    rows = no_daemon.compare(trace, paper_profile, paper_model, SimConfig())
    names = [r["setting"] for r in rows]
    assert names[:len(no_daemon.SETTINGS)] == [f"no daemon: {s}" for s in no_daemon.SETTINGS]
    assert names[-3:] == ["no daemon: best per-job counts (hindsight)",
                          "no daemon: fifo queue", "no daemon: shortest-first queue"]
    by = dict(zip(names, rows, strict=True))
    queued = queues.simulate_queue(trace, paper_profile, paper_model,
                                   SimConfig(cpu_sharing="kernel"), "fifo")
    assert by["no daemon: fifo queue"]["mean_jct_s"] == queued["mean_jct_s"]
    # the descent starts at the best uniform setting and keeps only what lowers the mean JCT
    searched = by["no daemon: best per-job counts (hindsight)"]
    best = no_daemon.best_fixed(rows)["mean_jct_s"]
    assert searched["mean_jct_s"] <= best["mean_jct_s"] + 1e-9
    assert all(1 <= j["workers_initial"] <= paper_profile.cores for j in searched["jobs"])
    assert "mean_jct_x_best_fixed" in searched and "mean_jct_x_even" in by["no daemon: fifo queue"]
