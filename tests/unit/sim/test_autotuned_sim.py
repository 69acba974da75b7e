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

    def fixed(d: int) -> float:
        one = trace.model_copy(update={"jobs": (trace.jobs[0].model_copy(
            update={"workers": d}),)})
        config = replace(KERNEL, policy="requested", realloc=False, correct=False, capacity=d,
                         arrival_window_s=0.0, arrival_settle_s=0.0, completion_window_s=0.0)
        job = simulate(one, paper_profile, paper_model, config).jobs[0]
        return job.end_s - job.spec.arrival_s

    best = min(fixed(d) for d in range(1, paper_profile.cores + 1))
    jct = tuned.end_s - tuned.spec.arrival_s
    assert best < jct < fixed(1)
