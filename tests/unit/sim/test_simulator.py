import pytest

from adloader.errors import InputError
from adloader.sim.simulator import SimConfig, SimJob, gpu_rates, simulate
from adloader.sim.trace import Trace, TraceJob, load_trace


def _job(name, gpus, step, batch=64):
    spec = TraceJob(name=name, model="smResnet20", batch_size=batch, gpus=len(gpus),
                    iterations=10, arrival_s=0)
    return SimJob(spec, 0.3, 0.9, step, gpu_ids=tuple(gpus))


def test_gpu_rates_water_filling():
    a, b = _job("a", [0], 0.1), _job("b", [0], 0.1)
    rates = gpu_rates([a, b], lambda j: 1e9)  # both GPU-bound: half the GPU each
    assert rates == {"a": pytest.approx(5.0), "b": pytest.approx(5.0)}
    rates = gpu_rates([a, b], lambda j: 64.0 if j.name == "a" else 1e9)  # a loads 1 it/s
    assert rates["a"] == pytest.approx(1.0) and rates["b"] == pytest.approx(9.0)
    c = _job("c", [0, 1], 0.1)  # spans two GPUs; d alone on GPU 1
    d = _job("d", [1], 0.1)
    rates = gpu_rates([a, c, d], lambda j: 1e9)
    assert rates["c"] == pytest.approx(5.0) and rates["a"] == pytest.approx(5.0)


@pytest.mark.parametrize("policy", ["balance", "waa", "optimal"])
def test_static_mix_runs_to_completion(paper_profile, paper_model, policy):
    trace = load_trace("paper-static")
    result = simulate(trace, paper_profile, paper_model, SimConfig(policy=policy)).to_json()
    assert {j["name"] for j in result["jobs"]} == {j.name for j in trace.jobs}
    for j in result["jobs"]:
        assert j["start_s"] == pytest.approx(0.05)  # the settle: every job could start
        assert j["end_s"] > j["start_s"]
        assert j["throughput"] == pytest.approx(128 * 500 / (j["end_s"] - j["start_s"]), rel=1e-3)
    for entry in result["timeline"]:
        assert sum(entry["workers"].values()) <= 18
    assert 0 <= result["gpu_idle_fraction"] < 1
    assert result["aggregate_throughput"] == pytest.approx(
        sum(j["throughput"] for j in result["jobs"]), rel=1e-6)
    for key in ("policy", "cores", "makespan_s", "mean_jct_s", "reallocations"):
        assert key in result


def test_no_realloc_keeps_running_jobs_workers(paper_profile, paper_model):
    trace = load_trace("paper-dynamic")
    result = simulate(trace, paper_profile, paper_model,
                      SimConfig(policy="requested", realloc=False)).to_json()
    assert result["reallocations"] == 0
    seen = {}
    for entry in result["timeline"]:
        for name, workers in entry["workers"].items():
            assert seen.setdefault(name, workers) == workers
    assert {j["name"]: j["workers_initial"] for j in result["jobs"]} == {
        j.name: j.workers for j in trace.jobs}


def test_reallocation_moves_workers_when_jobs_finish(paper_profile, paper_model):
    trace = load_trace("paper-static")
    result = simulate(trace, paper_profile, paper_model, SimConfig(policy="optimal")).to_json()
    assert result["reallocations"] >= 1
    last = next(j for j in sorted(result["jobs"], key=lambda j: -j["end_s"]))
    peak = max(e["workers"].get(last["name"], 0) for e in result["timeline"])
    assert peak > last["workers_initial"]


def test_jobs_beyond_capacity_wait_in_the_queue(paper_profile, paper_model):
    jobs = [TraceJob(name=f"j{i}", model="smResnet20", batch_size=64, gpus=1, iterations=50,
                     arrival_s=0) for i in range(4)]
    result = simulate(Trace(jobs=jobs), paper_profile, paper_model,
                      SimConfig(policy="optimal", capacity=2, arrival_window_s=0,
                                completion_window_s=0)).to_json()
    starts = sorted(j["start_s"] for j in result["jobs"])
    assert starts[:2] == [0.0, 0.0] and starts[2] > 0
    assert all(sum(e["workers"].values()) <= 2 for e in result["timeline"])


def test_trace_needing_more_gpus_than_the_profile(paper_profile, paper_model):
    job = TraceJob(name="big", model="Resnet18", batch_size=64, gpus=8, iterations=5, arrival_s=0)
    with pytest.raises(InputError, match="job 'big'"):
        simulate(Trace(jobs=[job]), paper_profile, paper_model)


def test_prediction_error_is_bounded_fixed_per_job_and_leaves_the_truth():
    from adloader.sim.noisy_model import NoisyModel

    class Flat:
        def training_throughput(self, b, g, f, p):
            return 100.0

        kind = "flat"

    noisy = NoisyModel(Flat(), 0.2, seed=3)
    rates = {noisy.training_throughput(32, 1, f, 1.0) for f in (1.0, 2.0, 3.0, 4.0, 5.0)}
    assert all(80.0 <= r <= 120.0 for r in rates) and len(rates) == 5
    assert noisy.training_throughput(32, 1, 2.0, 1.0) == noisy.training_throughput(32, 1, 2.0, 1.0)
    assert noisy.kind == "flat"  # everything else is the model's own
