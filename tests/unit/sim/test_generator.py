"""Workload generator: determinism, Poisson arrivals, mixes, errors, and every trace validates."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adloader.bench.sim.held_out_mixes import MIX_SEED
from adloader.errors import InputError
from adloader.models import PAPER_MODELS
from adloader.sim.generator import PAPER_MIX, generate
from adloader.sim.trace import load_trace, parse_trace, save_trace


def test_deterministic_for_a_seed():
    assert generate(25, seed=7) == generate(25, seed=7)
    assert generate(25, seed=7) != generate(25, seed=8)
    assert generate(25, 7, mix="Resnet18:2,smResnet20:1") == generate(
        25, 7, mix="Resnet18:2,smResnet20:1"
    )


def test_poisson_arrivals():
    rate = 1 / 60
    trace = generate(3000, seed=3, arrival_rate_per_s=rate)
    arrivals = np.array([j.arrival_s for j in trace.jobs])
    assert arrivals[0] == 0.0 and np.all(np.diff(arrivals) >= 0)
    gaps = np.diff(arrivals)
    # mean 1/r (standard error 60/sqrt(2999) ~ 1.1 s); exponential: coefficient of variation 1
    assert abs(gaps.mean() - 60) < 4
    assert 0.9 < gaps.std() / gaps.mean() < 1.1
    # memoryless: about e^-1 of the gaps exceed the mean
    assert abs(np.mean(gaps > 60) - np.exp(-1)) < 0.04
    fast = generate(3000, seed=3, arrival_rate_per_s=2.0)
    assert abs(np.diff([j.arrival_s for j in fast.jobs]).mean() - 0.5) < 0.05


def test_job_fields_in_range():
    trace = generate(400, seed=1, node_gpus=4, iterations=(500, 1500))
    assert trace.gpus == 4 and len({j.name for j in trace.jobs}) == 400
    assert {j.gpus for j in trace.jobs} == {1, 2}
    assert {j.workers for j in trace.jobs} == {2, 4, 6}
    assert {j.iterations for j in trace.jobs} == set(range(500, 1501, 100))
    assert all(j.gpu_ids is None for j in trace.jobs)


def test_gpus_capped_and_iteration_range():
    trace = generate(100, seed=2, node_gpus=1, iterations=(550, 649))
    assert {j.gpus for j in trace.jobs} == {1}
    assert {j.iterations for j in trace.jobs} == {600}


def test_named_mixes():
    paper = generate(500, seed=4, mix="paper")
    assert {j.model for j in paper.jobs} == set(PAPER_MIX)
    for job in paper.jobs:
        assert job.batch_size == (64 if "VGG" in job.model else 128)
    small = generate(300, seed=4, mix="small")
    assert all(j.model.startswith(("sm", "md")) for j in small.jobs)
    assert {j.model for j in small.jobs} <= set(PAPER_MODELS)
    large = generate(300, seed=4, mix="large")
    assert not any(j.model.startswith(("sm", "md")) for j in large.jobs)
    assert any("VGG" in j.model for j in large.jobs)
    assert any("Resnet" in j.model for j in large.jobs)


def test_custom_mix_weights():
    trace = generate(2000, seed=5, mix="Resnet18:3, smResnet20:1")
    models = [j.model for j in trace.jobs]
    assert set(models) == {"Resnet18", "smResnet20"}
    assert abs(models.count("Resnet18") / len(models) - 0.75) < 0.04
    single = generate(5, seed=5, mix="VGG13")
    assert {j.model for j in single.jobs} == {"VGG13"} and single.jobs[0].batch_size == 64


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"jobs": 0}, "jobs must be at least 1"),
        ({"mix": "medium"}, "not a named mix"),
        ({"mix": "Resnet18:1,Resnet7:1"}, "Resnet7"),
        ({"mix": "Resnet18:0"}, "must be positive"),
        ({"mix": "Resnet18:-2"}, "must be positive"),
        ({"mix": "Resnet18:nan"}, "must be positive"),
        ({"mix": "Resnet18:x"}, "not a number"),
        ({"mix": "Resnet18:1,,"}, "empty entry"),
        ({"mix": ""}, "mix must be one of"),
        ({"arrival_rate_per_s": 0.0}, "arrival rate"),
        ({"node_gpus": 0}, "node gpus"),
        ({"seed": -1}, "seed"),
        ({"iterations": (510, 590)}, "no multiple of 100"),
    ],
)
def test_bad_arguments(kwargs, words):
    args = {"jobs": 3, "seed": 0} | kwargs
    with pytest.raises(InputError, match=words) as info:
        generate(**args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--jobs", "0"], "jobs must be at least 1"),
        (["--mix", "tiny"], "not a named mix"),
        (["--mix", "Resnet18:2,Resnet7:1"], "Resnet7"),
        (["--mix", "Resnet18:0"], "must be positive"),
        (["--rate", "-1"], "arrival rate"),
        (["--gpus", "0"], "node gpus"),
    ],
)
def test_cli_generate_errors_are_one_line(flags, words, run, tmp_path):
    out_path = tmp_path / "t.json"
    code, _, err = run("workload", "generate", "--seed", "1", *flags, "-o", str(out_path))
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("adloader: error: ")
    assert words in err
    assert not out_path.exists()


def test_cli_generate_writes_a_valid_trace(run, tmp_path):
    path = tmp_path / "gen.json"
    code, out, err = run(
        "workload", "generate", "--jobs", "6", "--seed", "9", "--mix", "small", "-o", str(path)
    )
    assert code == 0 and err == ""
    assert load_trace(path) == generate(6, 9, mix="small")
    assert "app6" in out and str(path) in out.replace("\n", "")
    code, out, _ = run("workload", "check", str(path), "--gpus", "4")
    assert code == 0 and "ok: 6 jobs" in out


def test_cli_generate_to_stdout_and_flags_read_no_environment(run, monkeypatch):
    monkeypatch.setenv("ADLOADER_MIX", "large")  # not a variable of ours: ignored
    monkeypatch.setenv("ADLOADER_SEED", "11")
    code, out, _ = run("workload", "generate", "--jobs", "4", "--rate", "0.5", "--gpus", "2",
                       "--seed", "11")
    assert code == 0
    assert parse_trace(json.loads(out)) == generate(4, 11, "paper", 0.5, 2)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=st.integers(1, 25),
    seed=st.integers(0, MIX_SEED - 1),  # the held-out seeds are never a test's
    mix=st.sampled_from(["paper", "small", "large", "Resnet34:1,smVGG16:2.5,mdVGG11:0.1"]),
    rate=st.floats(1e-4, 10.0),
    node_gpus=st.integers(1, 8),
    low=st.integers(1, 2000),
    span=st.integers(100, 2000),
)
def test_any_generated_trace_validates(jobs, seed, mix, rate, node_gpus, low, span):
    trace = generate(jobs, seed, mix, rate, node_gpus, iterations=(low, low + span))
    assert len(trace.jobs) == jobs
    again = parse_trace(json.loads(json.dumps(trace.to_json())), node_gpus=node_gpus)
    assert again == trace
    assert all(j.gpus <= node_gpus and j.batch_size % j.gpus == 0 for j in trace.jobs)
    assert all(low <= j.iterations <= low + span and j.iterations % 100 == 0 for j in trace.jobs)


def test_save_generated(tmp_path):
    trace = generate(10, seed=0)
    save_trace(trace, tmp_path / "g.json")
    assert load_trace(tmp_path / "g.json", node_gpus=4) == trace
