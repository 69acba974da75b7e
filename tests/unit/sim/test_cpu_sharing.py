"""The kernel's CPU sharing in the simulated truth (adloader/sim/cpu_sharing.py): a job whose
GPU binds leaves the CPU its sleeping workers would hold to the others."""

from __future__ import annotations

import numpy as np
import pytest

from adloader.scheduling.policies.gpushare import iteration_rates
from adloader.sim.cpu_sharing import kernel_rates

BATCH = {"gpu_bound": 10, "hungry": 10}
STEP = {"gpu_bound": 10 / 40.0, "hungry": 1e-6}  # 40 samples/s at most; the other: no limit
WORKERS = {"gpu_bound": 3, "hungry": 3}


def node_loading(d: float) -> float:
    """Two cores: 100 samples/s a worker up to 2 runnable, then flat at 200."""
    return float(np.interp(d, [0, 2, 100], [0, 200, 200]))


def rates_for(loading) -> dict[str, float]:
    return iteration_rates({"gpu_bound": (0,), "hungry": (1,)}, STEP, BATCH,
                           {n: loading(n) for n in BATCH})


def samples(rates) -> dict[str, float]:
    return {n: r * BATCH[n] for n, r in rates.items()}


def test_sleeping_workers_give_their_cpu_to_the_others():
    got = samples(kernel_rates(WORKERS, node_loading, rates_for, BATCH))
    assert got["gpu_bound"] == pytest.approx(40.0, rel=1e-6)
    # s·(3 + 40/s) = 200 per the fixed point: the hungry job's 3 workers load 160
    assert got["hungry"] == pytest.approx(160.0, rel=1e-6)
    static = samples(rates_for(lambda n: WORKERS[n] / 6 * node_loading(6)))
    assert static["hungry"] == pytest.approx(100.0)  # the model's own truth wastes 60


def test_when_every_worker_is_busy_both_truths_agree():
    step = {"gpu_bound": 1e-6, "hungry": 1e-6}
    def rates(loading):
        return iteration_rates({"gpu_bound": (0,), "hungry": (1,)}, step, BATCH,
                               {n: loading(n) for n in BATCH})
    kernel = samples(kernel_rates({"gpu_bound": 1, "hungry": 3}, node_loading, rates, BATCH))
    assert kernel == pytest.approx({"gpu_bound": 50.0, "hungry": 150.0}, rel=1e-6)
