"""The cluster simulator (adloader/sim/cluster.py) on the node's policy code."""

from __future__ import annotations

import pytest

from adloader.device import synth
from adloader.device.device_profile import load_profile
from adloader.errors import InputError
from adloader.sim.cluster import PLACEMENTS, CJob, Cluster, cluster_trace, compare
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import Trace, TraceJob


@pytest.fixture(scope="module")
def setup():
    profile = load_profile("paper")
    return profile, synth.fitted_model(profile, 0)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_every_job_is_placed_runs_and_ends_and_every_gpu_comes_back(setup, placement):
    profile, model = setup
    trace = cluster_trace(6, profile.gpus, 6, seed=3, rate_per_node_s=1 / 60)
    assert any(j.nodes == 2 for j in trace)
    cluster = Cluster(6, profile, model, placement)
    out = cluster.run(trace)
    assert out["jobs"] == len(trace)
    for j in trace:
        assert j.end is not None and j.start >= j.arrival and j.end > j.start
        assert j.done == pytest.approx(j.iterations, rel=1e-5)
        assert len(j.parts) == j.nodes
        assert all(len(ids) == j.gpus_per_node for ids in j.parts.values())
    assert cluster.free == [list(range(profile.gpus))] * 6  # all given back, none twice
    assert 0 <= out["gpu_idle_held"] <= 1 and 0 <= out["gpu_idle"] <= 1


def test_no_gpu_is_ever_given_twice(setup):
    profile, model = setup
    cluster = Cluster(3, profile, model, "binpack")
    seen = []
    place = cluster._place

    def checked(job):
        ok = place(job)
        held = [g for k in range(3) for j in cluster.on[k].values() for g in
                [(k, x) for x in j.parts[k]]]
        assert len(held) == len(set(held)), "a GPU given to two jobs"
        seen.append(ok)
        return ok

    cluster._place = checked
    cluster.run(cluster_trace(3, profile.gpus, 10, seed=1, rate_per_node_s=1 / 20))
    assert False in seen  # the cluster was full at times: jobs waited


def test_one_job_alone_runs_as_the_node_simulator_says(setup):
    profile, model = setup
    job = CJob("a", "Resnet18", 128, 1, 1, 800, 0.0)
    out = Cluster(1, profile, model).run([job])
    sim = simulate(Trace(jobs=(TraceJob(name="a", model="Resnet18", batch_size=128, gpus=1,
                                        iterations=800, arrival_s=0.0),)),
                   profile, model, SimConfig(arrival_window_s=0.0, completion_window_s=0.0,
                                             correct=False))
    assert out["makespan_s"] == pytest.approx(sim.makespan_s, rel=1e-3)


def test_placements_compare_against_spread_and_bad_names_are_refused(setup):
    profile, model = setup
    rows = compare(4, profile, model, jobs_per_node=4, rate_per_node_s=1 / 100)
    assert [r["placement"] for r in rows] == list(PLACEMENTS)
    assert rows[0]["makespan_x_spread"] == 1.0 and rows[0]["node_hours_per_s"] > 0
    with pytest.raises(InputError, match="placement"):
        Cluster(2, profile, model, "random")


def test_the_bench_prints_and_saves_its_table(tmp_path, capsys):
    import json

    from adloader import cli

    assert cli.main(["bench", "cluster", "--quick", "--json", str(tmp_path / "c.json")]) == 0
    rows = json.loads((tmp_path / "c.json").read_text())
    assert {(r["nodes"], r["placement"]) for r in rows} == {(n, p) for n in (4, 16)
                                                            for p in PLACEMENTS}
    assert "loading" in capsys.readouterr().out
