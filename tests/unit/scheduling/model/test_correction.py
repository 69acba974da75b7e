"""The online correction c_i of a job's predicted B·F_μ, alone and in the simulator."""

import math

import pytest

from adloader.bench.sim.experiments import correction_runs
from adloader.errors import InputError
from adloader.scheduling.model import correction
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import load_trace


def test_update_moves_toward_the_observed_ratio_in_log_space():
    c = 1.0
    history = []
    for _ in range(4):
        c = correction.update(c, observed=50.0, predicted=100.0 * c)  # truly 0.5
        history.append(c)
    assert history[0] == pytest.approx(0.5 ** correction.WEIGHT)
    assert all(b < a for a, b in zip(history, history[1:], strict=False))
    assert history[-1] == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_broken_measurement_changes_nothing(bad):
    assert correction.update(0.8, bad, 100.0) == 0.8
    assert correction.update(0.8, 100.0, bad) == 0.8


def test_the_correction_is_bounded_and_moved_is_symmetric():
    assert correction.update(1.0, 1e12, 1.0, weight=1.0) == correction.LIMITS[1]
    assert correction.update(1.0, 1e-12, 1.0, weight=1.0) == correction.LIMITS[0]
    assert correction.moved(1.2, 1.0) and correction.moved(1.0, 1.2)
    assert not correction.moved(1.1, 1.0) and not correction.moved(1.0, 1.1)


def test_a_job_twice_as_slow_as_predicted_is_scheduled_as_if_the_truth_were_known(
        paper_profile, paper_model):
    trace = load_trace("paper-dynamic", paper_profile.gpus)
    rows = {r["case"]: r for r in correction_runs(trace, paper_profile, paper_model, "app4",
                                                  2.0, "fair")}
    online, known, blind = (rows["online correction"], rows["truth known (bound)"],
                            rows["no correction"])
    assert online["corrected_after_s"] == pytest.approx(10.0)  # the first sample after warm-up
    for key in ("makespan_s", "mean_jct_s", "job_jct_s"):
        assert online[key] == pytest.approx(known[key], rel=0.001)
        assert blind[key] >= known[key] - 1e-6
    # with app4 started after the settle, not a 30 s window, the job that ends last is one
    # the correction does not move: the makespan is the same in all three, the JCTs are not
    for key in ("mean_jct_s", "job_jct_s"):
        assert abs(blind[key] - known[key]) > 5 * abs(online[key] - known[key])


def test_the_slow_setting_names_a_job_of_the_trace(paper_profile, paper_model):
    trace = load_trace("paper-static", paper_profile.gpus)
    with pytest.raises(InputError, match="no job named nope"):
        simulate(trace, paper_profile, paper_model, SimConfig(slow=(("nope", 2.0),)))
