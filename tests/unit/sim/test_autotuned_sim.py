"""The per-job autotuner simulated (adloader/sim/autotuned.py): every job runs the tuner the
live baseline runs (adloader.scheduling.tuners.autotune), from its arrival, on the same truth."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adloader.scheduling.tuners.autotune import Autotuner
from adloader.sim.autotuned import WINDOW, AutotunedSimulator
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import load_trace

KERNEL = SimConfig(cpu_sharing="kernel")


def _alone(trace, name):
    return trace.model_copy(update={"jobs": tuple(j for j in trace.jobs if j.name == name)})


def _fixed_jct(trace, profile, model, d: int) -> float:
    """The JCT of ``trace``'s one job alone at ``d`` fixed workers, no daemon."""
    one = trace.model_copy(update={"jobs": (trace.jobs[0].model_copy(update={"workers": d}),)})
    config = replace(KERNEL, policy="requested", realloc=False, correct=False, capacity=d,
                     arrival_window_s=0.0, arrival_settle_s=0.0, completion_window_s=0.0)
    job = simulate(one, profile, model, config).jobs[0]
    return job.end_s - job.spec.arrival_s


def test_a_job_alone_climbs_one_worker_a_window_until_the_gain_flattens(paper_profile,
                                                                         paper_model):
    trace = _alone(load_trace("paper-static", paper_profile.gpus), "mdResnet12")
    sim = AutotunedSimulator(trace, paper_profile, paper_model, KERNEL)
    result = sim.run()
    counts = [t["workers"].get("mdResnet12") for t in result.timeline if t["workers"]]
    assert counts[0] == Autotuner().start
    assert counts == sorted(counts) and counts[-1] > 8  # one at a time, never back down
    tuner = sim.tuners["mdResnet12"]
    assert tuner.stopped
    # it stops where one more worker buys < 5 %: on the paper's L(D), just past the knee at
    # 11 workers (81 samples/s a worker before, 40 after)
    by_count = {d: r for d, r, _ in tuner.history}
    top = max(by_count)
    assert by_count[top] < 1.05 * by_count[top - 1]  # the worker that made it stop
    assert all(by_count[d] >= 1.05 * by_count[d - 1] for d in range(2, top))
    # each reading spans WINDOW batches: the first, at one worker, ends after WINDOW of them
    first = next(t["t_s"] for t in result.timeline[1:])
    rate_one = paper_profile.node_loading_rate(1) / trace.jobs[0].batch_size
    assert first == pytest.approx(WINDOW / rate_one, rel=1e-3)


def test_alone_it_ends_between_one_worker_and_the_best_fixed_count(paper_profile, paper_model):
    """What it costs to find the count (its ramp), bounded on both sides."""
    trace = _alone(load_trace("paper-static", paper_profile.gpus), "Resnet18")
    tuned = AutotunedSimulator(trace, paper_profile, paper_model, KERNEL).run().jobs[0]
    fixed = {d: _fixed_jct(trace, paper_profile, paper_model, d)
             for d in range(1, paper_profile.cores + 1)}
    jct = tuned.end_s - tuned.spec.arrival_s
    assert min(fixed.values()) < jct < fixed[1]


@pytest.mark.parametrize("name", ["Resnet18", "mdResnet12"])
def test_the_competent_tuner_alone_comes_within_5_percent_of_its_best_fixed_count(
        paper_profile, paper_model, name):
    """``climb`` from the node's workers ÷ the jobs (alone: all of them), within them: its
    JCT within 1/0.95 of the best fixed count's in 1..the node's workers — the live bar, on
    the simulator's truth; the weak tuner, from one worker, does not reach it."""
    trace = _alone(load_trace("paper-static", paper_profile.gpus), name)
    node = replace(KERNEL, capacity=paper_profile.cores)
    sim = AutotunedSimulator(trace, paper_profile, paper_model, node, tuner="climb")
    climbed = sim.run().jobs[0]
    assert sim.tuners[name].history[0][0] == paper_profile.cores  # its start
    weak = AutotunedSimulator(trace, paper_profile, paper_model, node).run().jobs[0]
    best = min(_fixed_jct(trace, paper_profile, paper_model, d)
               for d in range(1, paper_profile.cores + 1))
    assert climbed.end_s - climbed.spec.arrival_s <= best / 0.95
    assert weak.end_s - weak.spec.arrival_s > best / 0.95


def test_the_competent_tuner_starts_at_the_even_split_of_the_node_s_workers(paper_profile,
                                                                            paper_model):
    trace = load_trace("paper-static", paper_profile.gpus)
    node = replace(KERNEL, capacity=12)
    sim = AutotunedSimulator(trace, paper_profile, paper_model, node, tuner="climb")
    result = sim.run()
    first = next(t["workers"] for t in result.timeline if t["workers"])
    assert set(first.values()) == {12 // 3}
    assert all(max(t["workers"].values()) <= 12 for t in result.timeline if t["workers"])
    with pytest.raises(ValueError, match="no tuner 'magic'"):
        AutotunedSimulator(trace, paper_profile, paper_model, node, tuner="magic")
