"""`bench live` with the contention surface: the points it measures, and the simulated
no-daemon settings held against live under both loading truths (no process is started)."""

import dataclasses

import pytest

from adloader.bench.live import live_bench as live
from adloader.bench.live.live_report import model_rows
from adloader.device.device_profile import load_profile, save_profile
from adloader.device.loading_surface import SurfacePoint
from adloader.sim.trace import load_trace


def test_the_bench_measures_its_fixed_settings_and_a_few_splits():
    trace = load_trace("paper-static")
    cfg = live.LiveConfig(baselines=("requested", "even", "cores", "autotune"))
    grid = live.surface_grid(cfg, trace, 6)
    requested = tuple(j.workers for j in trace.jobs)
    assert grid[0] == requested and (2, 2, 2) in grid  # even and cores (2 cores) are one point
    assert len({tuple(sorted(p)) for p in grid}) == len(grid)  # each once
    assert all(2 <= len(p) <= 3 for p in grid) and len(grid) <= 8  # short: ≤ 1 min here
    assert live.surface_grid(dataclasses.replace(cfg, baselines=()), trace, 6)[0] == (1, 1)


def test_simulated_baselines_report_both_loading_truths(tmp_path):
    trace = load_trace("paper-static")
    names = [j.name for j in trace.jobs]
    paper = load_profile("paper")
    node = dataclasses.replace(paper, cores=2, loading_workers=6, gpus=trace.gpus,
                               node_loading=(0.0, 300.0, 500.0, 520.0, 530.0, 535.0, 540.0),
                               loading_surface=(SurfacePoint((2, 2, 2), (120.0, 125.0, 130.0)),))
    path = tmp_path / "live-profile.json"
    save_profile(node, path)
    runs = [{"policy": "no daemon: even", "round": 0,
             "jobs": [{"name": n, "throughput": 150.0} for n in names]}]
    sims = live.simulated_baselines(live.LiveConfig(), path, trace, 6, 2, runs)
    assert [(s["truth"], s["cpu_sharing"]) for s in sims] == [
        ("model", "kernel"), ("model", "static"), ("measured", "kernel"), ("measured", "static")]
    for s in sims:  # the live even split: 2 workers each
        if s["truth"] == "measured" and s["cpu_sharing"] == "static":
            # every loader slower than its GPU here: each job loads its measured rate while
            # all three run (the first to end: exactly), faster once one has ended
            got = [s["simulated"][n] / want for n, want in zip(names, (120.0, 125.0, 130.0),
                                                                strict=True)]
            assert min(got) == pytest.approx(1.0, rel=1e-6) and max(got) > 1.0
    columns, rows = model_rows(sims)
    assert columns[:3] == ["setting", "loading", "CPU sharing"]
    assert [r[1] for r in rows] == ["d/D·L(D)", "d/D·L(D)", "surface", "surface"]
    old = [{k: v for k, v in s.items() if k not in ("truth", "loading")} for s in sims]
    assert model_rows(old)[1][0][1] == "d/D·L(D)"  # a result from before the surface
