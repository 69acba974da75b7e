"""The contention surface (adloader/device/loading_surface.py) and the `measured` truth: it
round-trips through the profile JSON, reproduces every measured point (alone, in the simulator
under both CPU-sharing truths, in the TPM's samples), interpolates between them by its stated
rule, and a profile without one loads and behaves as before."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console

from adloader.bench.sim import report
from adloader.cli import main
from adloader.device import synth
from adloader.device.device_profile import load_profile, save_profile
from adloader.device.loading_surface import LoadingSurface, SurfacePoint
from adloader.errors import InputError
from adloader.scheduling.policies.gpushare import iteration_rates
from adloader.sim.cpu_sharing import kernel_rates
from adloader.sim.simulator import SimConfig, Simulator
from adloader.sim.trace import load_trace
from adloader.sim.truth import load_truth
from adloader.workloads.contention import check_grid, default_grid, parse_grid

POINTS = (
    SurfacePoint((2, 2, 2), (180.0, 200.0, 190.0)),
    SurfacePoint((4, 1, 1), (330.0, 70.0, 75.0)),
    SurfacePoint((6, 6, 6), (150.0, 160.0, 155.0)),
    SurfacePoint((1, 1), (140.0, 150.0)),
    SurfacePoint((3, 3), (260.0, 250.0)),
    SurfacePoint((3,), (300.0,)),
)


def _profile(paper_profile, points=POINTS):
    return dataclasses.replace(paper_profile, name="box", loading_surface=points)


def _alone(profile, d, node):
    return profile.loading_rate(d, node)


def test_the_surface_round_trips_through_the_profile_json(paper_profile, tmp_path):
    profile = _profile(paper_profile)
    save_profile(profile, tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["loading_surface"][1] == {"workers": [4, 1, 1], "rates": [330.0, 70.0, 75.0]}
    back = load_profile(str(tmp_path / "p.json"))
    assert back.loading_surface == POINTS and back.to_json() == profile.to_json()


def test_a_profile_without_a_surface_loads_and_behaves_as_before(paper_profile, paper_model,
                                                                 tmp_path):
    assert paper_profile.loading_surface == ()
    assert "loading_surface" not in paper_profile.to_json()  # the file it always wrote
    save_profile(paper_profile, tmp_path / "old.json")
    assert load_profile(str(tmp_path / "old.json")).to_json() == paper_profile.to_json()
    assert load_truth("model", paper_profile).surface is None
    # the TPM's samples and the simulator's rates are the d/D·L(D) ones
    with_truth = synth.loading_samples(paper_profile, 0, truth=load_truth("model", paper_profile))
    assert with_truth == synth.loading_samples(paper_profile, 0)
    sim = Simulator(load_trace("paper-static"), paper_profile, paper_model,
                    SimConfig(cpu_sharing="static"))
    for j in sim.jobs:
        j.state, j.workers = "running", 6
    rates = sim._rates()
    for j in sim.jobs:
        want = min(_alone(paper_profile, 6, 18) / j.spec.batch_size, 1 / j.step_s)
        assert rates[j.name] == pytest.approx(want)
    with pytest.raises(InputError, match="no loading surface"):
        load_truth("measured", paper_profile)


@pytest.mark.parametrize("bad", [
    {"workers": [2, 0], "rates": [1.0, 1.0]},
    {"workers": [2, 2], "rates": [1.0]},
    {"workers": [2], "rates": [-1.0]},
    {"workers": [], "rates": []},
    {"rates": [1.0]},
])
def test_a_malformed_surface_is_refused_naming_the_point(paper_profile, tmp_path, bad):
    data = paper_profile.to_json() | {"loading_surface": [bad]}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"loading_surface\[0\]"):
        load_profile(str(tmp_path / "bad.json"))


def test_each_measured_point_is_reproduced_exactly(paper_profile):
    surface = LoadingSurface(POINTS, paper_profile.node_loading_rate)
    for p in POINTS:
        names = [f"j{i}" for i in range(len(p.workers))]
        assert surface.rates(dict(zip(names, p.workers, strict=True))) == dict(
            zip(names, p.rates, strict=True))
    # in any order: jobs meet pipelines by workers, most first, ties in the order given
    assert surface.rates({"a": 1, "b": 4, "c": 1, "idle": 0}) == {
        "a": 70.0, "b": 330.0, "c": 75.0, "idle": 0.0}


def test_between_points_the_factor_is_interpolated_by_the_stated_rule(paper_profile):
    surface = LoadingSurface(POINTS, paper_profile.node_loading_rate)
    p = paper_profile
    # one job alone: at its point, measured; elsewhere the factor of the k = 1 points (flat
    # past them); with no point of one pipeline, L(D) itself (c = 1)
    assert surface.rates({"a": 3}) == {"a": 300.0}
    k1 = 300 / p.node_loading_rate(3)
    assert surface.rates({"a": 5})["a"] == pytest.approx(p.node_loading_rate(5) * k1)
    no_k1 = LoadingSurface(POINTS[:-1], p.node_loading_rate)
    assert no_k1.rates({"a": 5}) == {"a": pytest.approx(p.node_loading_rate(5))}
    # k = 2, D = 4 between the totals 2 and 6: c linear in D, at equal shares
    c2 = (140 + 150) / 2 / _alone(p, 1, 2)
    c6 = (260 + 250) / 2 / _alone(p, 3, 6)
    assert surface.rates({"a": 2, "b": 2})["a"] == pytest.approx(
        _alone(p, 2, 4) * (c2 + c6) / 2)
    # k = 3 at D = 6, share 3/6 between the shares 1/3 and 4/6
    c_third = (180 + 200 + 190) / 3 / _alone(p, 2, 6)
    c_bulk = 330 / _alone(p, 4, 6)
    got = surface.rates({"a": 3, "b": 2, "c": 1})["a"]
    w = (3 / 6 - 1 / 3) / (4 / 6 - 1 / 3)
    assert got == pytest.approx(_alone(p, 3, 6) * ((1 - w) * c_third + w * c_bulk))
    # more jobs than measured: the largest k; past the largest total: flat in D
    c_18 = 155.0 / _alone(p, 6, 18)
    assert surface.rates({n: 6 for n in "abcd"})["a"] == pytest.approx(_alone(p, 6, 24) * c_18)
    assert surface.factors({"a": 1, "b": 1})["a"] == pytest.approx(140 / _alone(p, 1, 2))


def _busy(sim, workers):
    for j in sim.jobs:
        j.state, j.workers = "running", workers[j.name]
        j.step_s = 1e-6  # the GPU never binds: each job loads what its loader gives
    rates = sim._rates()
    return {j.name: rates[j.name] * j.spec.batch_size for j in sim.jobs}


@pytest.mark.parametrize("sharing", ["static", "kernel"])
def test_the_simulator_runs_on_the_measured_points(paper_profile, paper_model, sharing):
    profile = _profile(paper_profile)
    trace = load_trace("paper-static")
    sim = Simulator(trace, profile, paper_model, SimConfig(truth="measured",
                                                           cpu_sharing=sharing))
    names = [j.name for j in sim.jobs]
    for p in (POINTS[0], POINTS[1], POINTS[2]):
        got = _busy(sim, dict(zip(names, p.workers, strict=True)))
        assert list(got.values()) == pytest.approx(list(p.rates), rel=1e-6)
    model = Simulator(trace, profile, paper_model, SimConfig(cpu_sharing=sharing))
    alone = _busy(model, dict.fromkeys(names, 2))  # the `model` truth ignores the surface
    assert list(alone.values()) == pytest.approx([_alone(profile, 2, 6)] * 3, rel=1e-6)


def test_the_kernel_shares_the_cpu_a_gpu_bound_job_leaves_on_top_of_the_factors():
    def node_loading(d):
        return 100.0 * min(d, 2.0)
    batch = {"gpu_bound": 10, "hungry": 10}

    def rates(loading):
        return iteration_rates({"gpu_bound": (0,), "hungry": (1,)},
                               {"gpu_bound": 10 / 40.0, "hungry": 1e-6}, batch,
                               {n: loading(n) for n in batch})
    plain = kernel_rates({"gpu_bound": 3, "hungry": 3}, node_loading, rates, batch)
    slowed = kernel_rates({"gpu_bound": 3, "hungry": 3}, node_loading, rates, batch,
                          {"gpu_bound": 0.8, "hungry": 0.8})
    assert plain["gpu_bound"] == pytest.approx(slowed["gpu_bound"]) == pytest.approx(4.0)
    assert slowed["hungry"] * 10 < plain["hungry"] * 10 == pytest.approx(160.0)


def test_the_tpm_is_fitted_from_the_surface_and_the_intro_names_it(paper_profile, tmp_path):
    profile = _profile(paper_profile)
    truth = load_truth("measured", profile)
    got = {(s.job_workers, s.node_workers): s for s in synth.loading_samples(
        dataclasses.replace(profile, loading_noise=0.0), 0, truth=truth)}
    assert got[(3, 3)].loading_rate == pytest.approx(300.0)  # alone: its point
    assert got[(1, 2)].loading_rate == pytest.approx(140.0)  # beside one other 1: its point
    beside = truth.surface.rates({"job": 3, "other0": 2, "other1": 1})["job"]
    assert got[(3, 6)].loading_rate == pytest.approx(beside)  # the rest over K − 1 = 2 jobs
    save_profile(profile, tmp_path / "box.json")
    node, model, config = report.setup(str(tmp_path / "box.json"), truth="measured")
    buffer = io.StringIO()
    facts = report.intro(Console(file=buffer, width=400), node, config, model,
                         [("Resnet18", 128, 2)])
    assert facts["truth"] == "measured" and "loading surface" in facts["source"]
    assert facts["truth_sha256"] == facts["profile_sha256"] != ""


def test_the_grid_is_coarse_and_checked():
    assert default_grid(6, 3) == [(1,), (3,), (6,), (1, 1), (3, 3), (5, 1), (1, 1, 1),
                                  (2, 2, 2), (4, 1, 1)]
    assert default_grid(6, 3, min_jobs=2)[0] == (1, 1)
    assert parse_grid("2,2; 4,1,1") == [(2, 2), (4, 1, 1)]
    for bad, why in (("2,x", "not comma-separated"), ("2,2;;1", "empty point"),
                     ("2,0", "at least 1 worker"), ("2,2;2,2", "appears twice"),
                     (",".join(["1"] * 17), "at most 16"), ("300", "at most 256")):
        with pytest.raises(InputError, match=why):
            parse_grid(bad)
    with pytest.raises(InputError, match="no point"):
        check_grid([])


@pytest.mark.parametrize(("args", "why"), [
    (["--contention", "--grid", "2,x"], "--grid: '2,x' is not comma-separated"),
    (["--contention", "--grid", "1,1;1,1"], "appears twice"),
    (["--grid", "1,1"], "give --contention too"),
    (["--contention", "--max-jobs", "0"], "--max-jobs must be at least 1"),
    (["--contention", "--window", "0"], "--window must be above 0"),
])
def test_the_profile_cli_refuses_a_bad_grid_before_measuring(tmp_path, capsys, args, why):
    out = tmp_path / "o"
    assert main(["profile", "--quick", "-o", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("adloader: error:") and why in err and err.count("\n") == 1
    assert not out.exists()  # nothing measured, nothing written


def test_the_profile_cli_grid_defaults_to_k_up_to_max_jobs(tmp_path):
    from adloader.cli import build_parser
    from adloader.cli.profile import _settings

    def grid(*flags):
        args = build_parser("profile").parse_args(["profile", "--quick", "-o", str(tmp_path),
                                                   *flags])
        return _settings(args, "cpu")["grid"]
    assert grid() == []  # no --contention: no surface
    assert grid("--contention") == default_grid(3, 3)  # --quick: 3 workers in all
    assert grid("--contention", "--max-jobs", "2") == default_grid(3, 2)
    assert grid("--contention", "--grid", "2,1;1") == [(2, 1), (1,)]
