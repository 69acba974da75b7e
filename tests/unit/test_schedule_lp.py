"""``schedule_lp.best_schedule``: the best time-varying schedule by linear programs, checked
by hand on one server, and on the static mix against a real policy's run."""

from __future__ import annotations

import numpy as np
import pytest

from adloader.errors import InputError
from adloader.scheduling.schedule_lp import best_schedule, pareto_rows
from adloader.sim.experiments import static
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
