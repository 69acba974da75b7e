"""The no-daemon settings simulated beside the policies (adloader/sim/no_daemon.py): no
buffers and no capacity cap for the baselines, makespan from the first arrival, ratios
against the even split of the same call."""

from __future__ import annotations

import pytest

from adloader.sim import no_daemon
from adloader.sim.simulator import SimConfig
from adloader.sim.trace import load_trace


@pytest.mark.parametrize("hold, wait", [(False, 0.25), (True, 30.0)])
def test_the_baselines_run_uncapped_and_the_daemon_pays_its_window(paper_profile, paper_model,
                                                                   hold, wait):
    trace = load_trace("paper-static", paper_profile.gpus)
    rows = {r["setting"]: r for r in no_daemon.compare(
        trace, paper_profile, paper_model, SimConfig(arrival_window_s=30.0,
                                                     completion_window_s=30.0,
                                                     hold_arrivals=hold))}
    assert set(rows) == {"no daemon: requested", "no daemon: even", "no daemon: cores",
                         "daemon: balance", "daemon: ftf"}
    cores = paper_profile.cores
    assert [j["workers_initial"] for j in rows["no daemon: cores"]["jobs"]] == [cores] * 3
    assert rows["no daemon: even"]["makespan_x_even"] == 1.0
    # the same 6,6,6 split: the daemon's only difference is its arrival buffer — the settle
    # (the jobs could start at once), or the whole 30 s window when arrivals are held
    even, bal = rows["no daemon: even"], rows["daemon: balance"]
    assert [j["workers_initial"] for j in bal["jobs"]] == [6, 6, 6]
    assert bal["makespan_s"] == pytest.approx(even["makespan_s"] + wait, abs=0.05)
    assert min(j["start_s"] for j in even["jobs"]) == 0.0
