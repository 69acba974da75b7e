"""The per-job autotuner baseline (adloader/scheduling/tuners/autotune.py): alone on a node it
reaches ≥ 0.95× the rate of the job's best fixed ``num_workers``; it adds workers one at a
time and takes back at most the last one."""

from __future__ import annotations

import pytest

from adloader.scheduling.tuners.autotune import Autotuner


def _run(tuner: Autotuner, rate_of, batch: int = 32, batches: int = 400) -> list[int]:
    """Feed the tuner a job whose loader delivers ``rate_of(workers)`` samples/s and whose
    GPU takes ``batch / step_rate`` s a batch; returns the workers used batch by batch."""
    used = []
    step_rate = 400.0
    for _ in range(batches):
        d = tuner.workers
        used.append(d)
        load_s = batch / max(rate_of(d), 1e-9)
        step_s = batch / step_rate
        wait_s = max(load_s - step_s, 0.0)  # the loader prefetches while the GPU steps
        tuner.observe(batch, wait_s, step_s)
    return used


def _job_rate(d: int, rate_of) -> float:
    return min(400.0, rate_of(d))


@pytest.mark.parametrize("rate_of", [
    lambda d: 90.0 * d,  # linear until the GPU binds at 400/s: knee at 5 workers
    lambda d: 150.0 * min(d, 2) + 20.0 * max(d - 2, 0),  # contention after 2 workers
    lambda d: 500.0 * min(d, 1),  # one worker already feeds the GPU
    lambda d: 120.0 * min(d, 3) - 30.0 * max(d - 3, 0),  # oversubscribed past 3: slower
])
def test_alone_it_reaches_095_of_the_best_fixed_setting(rate_of):
    tuner = Autotuner(most=16)
    used = _run(tuner, rate_of)
    best = max(_job_rate(d, rate_of) for d in range(1, 17))
    settled = _job_rate(used[-1], rate_of)
    assert settled >= 0.95 * best, (used[-1], settled, best)
    peak = max(used)
    assert used[:used.index(peak) + 1] == sorted(used[:used.index(peak) + 1])
    assert set(used[used.index(peak):]) <= {peak, peak - 1}  # at most the last one back
    assert used[-1] <= 16


def test_a_job_that_never_waits_keeps_one_worker():
    tuner = Autotuner()
    assert set(_run(tuner, lambda d: 10_000.0 * d)) == {1}


def test_it_stops_at_the_cores_it_sees():
    tuner = Autotuner(most=3)
    assert max(_run(tuner, lambda d: 10.0 * d)) == 3
