"""`adloader bench live`: the mix fitted onto real GPUs, and a quick run with real daemons."""

import json
import subprocess
import sys

import pytest

from adloader.bench.sim import experiments
from adloader.sim.trace import fit_to_gpus, load_trace


@pytest.mark.parametrize(("gpus", "per_gpu"), [(1, 3), (2, 3), (4, 2), (8, 1)])
def test_the_mix_is_fitted_onto_the_gpus_there_are(gpus, per_gpu):
    trace, jobs_per_gpu = fit_to_gpus(load_trace("paper-static"), gpus)
    assert trace.gpus == gpus
    assert all(job.gpus == min(2, gpus) and job.gpu_ids is None for job in trace.jobs)
    assert jobs_per_gpu == per_gpu  # every job of the mix can start at once
    assert sum(job.gpus for job in trace.jobs) <= gpus * jobs_per_gpu


def test_with_cuda_the_prior_steps_are_measured_on_the_gpu(tmp_path, monkeypatch):
    """The GPU branch of the prior, with the GPU timing replaced (no GPU here): α is fitted
    from the mix's models at half, once and twice their per-GPU batch."""
    from adloader.bench.live import live_bench as bench_live
    from adloader.device.device_profile import load_profile
    from adloader.models import features
    from adloader.scheduling.model.samples import TrainingSample

    paper = load_profile("paper")
    asked = {}

    def timed(models, batches, device, progress=None):
        asked.update(models=list(models), batches=list(batches), device=device)
        return [TrainingSample(b, 1, features(m).flops_g, features(m).params_m,
                               paper.step_time(b, features(m).flops_g, features(m).params_m, 1),
                               m) for m in models for b in batches]

    monkeypatch.setattr(bench_live, "measure_training", timed)
    monkeypatch.setattr(bench_live.torch.cuda, "get_device_name", lambda i=0: "a test GPU")
    trace, _ = fit_to_gpus(load_trace("paper-static"), 1)
    cfg = bench_live.LiveConfig(capacity=2, images=8)
    path = bench_live.measured_profile(cfg, tmp_path / "jpeg", tmp_path, trace, cuda=True,
                                       per_gpu=3)
    profile = load_profile(str(path))
    assert profile.max_jobs_per_gpu == 3  # the three jobs share the one GPU, as in the runs
    limits = bench_live.predicted_limits(cfg, path, trace, capacity=2)
    # every job of the mix is in the bound's order (with 2 a GPU, one never ran beside them)
    assert sorted(limits["bounds"]["order"]) == ["Resnet18", "mdResnet12", "smResnet20"]
    assert asked == {"models": ["Resnet18", "mdResnet12", "smResnet20"],
                     "batches": [64, 128, 256], "device": "cuda"}
    assert profile.gpus == 1 and profile.loading_workers == 2 and "a test GPU" in profile.device
    for model in asked["models"]:
        f = features(model)
        want = paper.step_time(128, f.flops_g, f.params_m, 1)
        assert profile.step_time(128, f.flops_g, f.params_m, 1) == pytest.approx(want, rel=0.05)


def test_quick_bench_live_runs_real_daemons_and_the_no_daemon_baselines(tmp_path):
    """The live bench end to end (emulated GPU steps), every row in one run: the daemon's
    policies, fixed counts, the weak tuner, and the rows a careful user compares with — a
    queue one job at a time (each with the node's workers, one after another), the competent
    tuner on our loader, our loader alone at a fixed count; and the GPU run kit's plumbing:
    the same command with ``--report DIR`` writes the self-contained report a CUDA node's run
    writes (its tables from this run, the timelines, the machine)."""
    out, kit = tmp_path / "live.json", tmp_path / "kit"
    proc = subprocess.run(
        [sys.executable, "-m", "adloader", "bench", "live", "--quick", "--workers", "2",
         "--policies", "balance,ftf",
         "--baselines", "requested,even,autotune,fifo,shortest,climb,elastic:one",
         "--json", str(out), "--report", str(kit)], capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = {r["policy"]: r for r in result["summary"]}
    assert set(rows) == {"balance", "ftf", *(f"no daemon: {b}" for b in (
        "requested", "even", "autotune", "fifo", "shortest", "climb", "elastic:one"))}
    even = rows["no daemon: even"]
    assert even["reference"] == "no daemon: even" and even["makespan_paired"] == 1.0
    assert even["worst_job"] == 1.0 and even["worst_jct_paired"] == 1.0
    assert rows["ftf"]["daemon"] and not even["daemon"] and len(rows["ftf"]["jobs"]) == 3
    assert "makespan_vs_best_fixed" in rows["ftf"] and "makespan_vs_requested" in rows["ftf"]
    assert result["capacity"] == 2
    for run in result["runs"]:
        assert len(run["jobs"]) == 3 and run["aggregate_throughput"] > 0
        assert all(0 < j["jct_s"] <= run["makespan_s"] + 1e-6 for j in run["jobs"])
        assert run["memory_mb"] > 0
        # the node's own rate: every sample over the span it trained, from its first batch
        first = min(j["start_s"] for j in run["jobs"])
        assert run["first_batch_s"] == first and 0 < first < run["makespan_s"]
        samples = sum(j["iterations"] * j["batch_size"] for j in run["jobs"])
        assert run["node_rate"] == pytest.approx(samples / (run["makespan_s"] - first), 1e-3)
        if run["policy"].startswith("no daemon"):  # no daemon, no supervisor: on torch's
            # loader nothing of ours runs; ours alone counts its own thread's CPU
            ours = any(j.get("loader") == "elastic" for j in run["jobs"])
            assert run["overhead_cpu_per_training_s"] >= 0 if ours else \
                run["overhead_cpu_per_training_s"] == 0, run["policy"]
        else:
            assert [job["state"] for job in run["jobs"]] == ["finished"] * 3
            assert run["overhead_cpu_per_training_s"] > 0 and run["cpu_s"]["daemon"] > 0
    tuned = next(r for r in result["runs"] if r["policy"] == "no daemon: autotune")
    assert all(j["workers"] and j["workers"][0] == [0, 1] for j in tuned["jobs"])
    assert all(j["workers_at"][0][1] == 1 for j in tuned["jobs"])  # when it changed, too
    _check_the_report(kit, result)
    # the measured floor is a bound: every run of the bench, whatever its setting, is above
    floor = result["floor"]
    for run in result["runs"]:
        assert run["makespan_s"] >= floor["makespan"] and run["mean_jct_s"] >= floor["mean_jct"]
    assert 0 < floor["makespan_x_best_fixed"] <= 1 and 0 < floor["makespan_x_requested"] <= 1
    assert "no schedule — any workers" in proc.stdout
    assert "## What no schedule can beat here (measured)" in (kit / "report.md").read_text()
    assert "over every schedule" in proc.stdout and "best schedule" in proc.stdout
    assert "one measure for every row" in proc.stdout
    runs = {r["policy"]: r for r in result["runs"]}
    for queue in ("no daemon: fifo", "no daemon: shortest"):
        jobs = sorted(runs[queue]["jobs"], key=lambda j: j["start_s"])
        assert all(j["workers_initial"] == 2 for j in jobs)  # the node's workers, alone
        for before, after in zip(jobs, jobs[1:], strict=False):
            assert after["start_s"] >= before["end_s"] - 1e-6  # one after another
    climb = runs["no daemon: climb"]
    assert all(j["loader"] == "elastic" and j["workers_at"] for j in climb["jobs"])
    assert all(j["loader"] == "elastic" for j in runs["no daemon: elastic:one"]["jobs"])
    assert all(j["workers_initial"] == 1 for j in runs["no daemon: elastic:one"]["jobs"])
    row = next(r for r in result["summary"] if r["policy"] == "ftf")
    assert row["best_nodaemon"]["makespan_s"].startswith("no daemon: ")


def test_the_limits_are_those_of_the_scaled_mix_on_the_profile():
    """Balance is one schedule: no bound may claim it impossible; the LP's reached Σ stays
    under its own bound; halving the iterations halves the makespan bound."""
    from adloader.bench.live.live_bench import LiveConfig, predicted_limits

    trace = load_trace("paper-static")
    full = predicted_limits(LiveConfig(iterations_scale=0.2), "paper", trace, 6)
    half = predicted_limits(LiveConfig(iterations_scale=0.1), "paper", trace, 6)
    bound = full["bounds"]
    assert 0 < bound["makespan_lb_ratio"] <= 1 + 1e-9 and bound["sum_ub_ratio"] >= 1 - 1e-9
    for lp in full["schedule_lp"]:
        assert lp["feasible"] and lp["sum_ratio"] <= lp["sum_upper_ratio"] + 1e-9
    assert half["bounds"]["makespan_lb"] == pytest.approx(bound["makespan_lb"] / 2, rel=0.02)
    # the frontier: every floor, both ways; a tighter floor never raises what can be reached
    front = full["frontier"]
    assert sorted({(o["alpha"], o["pause"]) for o in front}) == sorted(
        (a, p) for a in experiments.FRONTIER_ALPHAS for p in (False, True))
    for pause in (False, True):
        way = sorted((o for o in front if o["pause"] == pause), key=lambda o: o["alpha"])
        uppers = [o["sum_upper_ratio"] for o in way if o["feasible"]]
        assert uppers == sorted(uppers, reverse=True)
        for o in way:
            assert not o["feasible"] or (o["sum_ratio"] <= o["sum_upper_ratio"] + 1e-9
                                         and o["makespan_ratio"] >= bound["makespan_lb_ratio"]
                                         - 1e-6)
    assert next(o for o in front if o["alpha"] == 0.0 and o["pause"])["sum_ratio"] >= \
        next(o for o in front if o["alpha"] == 1.0 and o["pause"])["sum_ratio"] - 1e-9
    # fewer workers than jobs: no schedule keeps a worker for every job, said, not raised
    short = predicted_limits(LiveConfig(iterations_scale=0.03), "paper", trace, 2)
    assert not next(lp for lp in short["schedule_lp"] if not lp["pause"])["feasible"]


def test_bench_live_refuses_bad_settings():
    proc = subprocess.run([sys.executable, "-m", "adloader", "bench", "live", "--rounds",
                           "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--rounds must be >= 1" in proc.stderr and "Traceback" not in proc.stderr


def test_rounds_are_paired_with_the_even_split_of_the_same_round():
    from adloader.bench.live.live_bench import summarise_rounds

    def run(policy, rnd, jobs, makespan):
        jobs = [{"name": n, "throughput": x, "jct_s": c} for n, (x, c) in jobs.items()]
        return {"policy": policy, "round": rnd, "jobs": jobs, "makespan_s": makespan,
                "aggregate_throughput": sum(j["throughput"] for j in jobs),
                "mean_jct_s": sum(j["jct_s"] for j in jobs) / len(jobs), "worst_jct_s":
                max(j["jct_s"] for j in jobs), "memory_mb": 100.0,
                "overhead_cpu_per_training_s": 0.0}

    even, req = "no daemon: even", "no daemon: requested"
    runs = [run(even, 0, {"a": (10, 10), "b": (10, 10)}, 10),
            run(even, 1, {"a": (20, 5), "b": (20, 5)}, 5),  # a faster round: drift
            run(req, 0, {"a": (8, 12), "b": (8, 12)}, 12),
            run(req, 1, {"a": (16, 6), "b": (16, 6)}, 6),
            run("ftf", 0, {"a": (15, 6), "b": (9, 9)}, 9),
            run("ftf", 1, {"a": (30, 3), "b": (18, 4.5)}, 4.5)]
    rows = {r["policy"]: r for r in summarise_rounds(runs, ("ftf", even, req))}
    ftf = rows["ftf"]
    assert ftf["reference"] == even and ftf["daemon"] and not rows[even]["daemon"]
    assert ftf["makespan_paired"] == pytest.approx(0.9)
    assert ftf["spread"] == pytest.approx([0.9, 0.9])
    assert ftf["jobs"] == pytest.approx({"a": 1.5, "b": 0.9}) and ftf["worst_job"] == 0.9
    assert ftf["jct_paired"] == pytest.approx(0.75) and ftf["worst_jct_paired"] == 0.9
    assert ftf["makespan_vs_best_fixed"] == pytest.approx(0.9)  # even is the best fixed
    assert ftf["best_fixed"] == {"makespan_s": even, "mean_jct_s": even}  # least median
    assert ftf["makespan_vs_requested"] == pytest.approx(0.75)
    assert ftf["met"] == ["makespan_vs_best_fixed", "makespan_vs_requested",
                          "jct_vs_best_fixed", "makespan_vs_best_nodaemon",
                          "jct_vs_best_nodaemon"]
    assert rows[req]["met"] == [] and rows[req]["makespan_paired"] == pytest.approx(1.2)
    # a queue: one job at a time ends the first sooner (mean JCT) and the last later; it is
    # no fixed setting, but the best no-daemon row in hindsight for the mean JCT
    fifo = "no daemon: fifo"
    runs += [run(fifo, 0, {"a": (20, 5), "b": (20, 10)}, 10),
             run(fifo, 1, {"a": (40, 2.5), "b": (40, 5)}, 5)]
    rows = {r["policy"]: r for r in summarise_rounds(runs, ("ftf", even, req, fifo))}
    ftf = rows["ftf"]
    assert ftf["best_fixed"] == {"makespan_s": even, "mean_jct_s": even}
    assert ftf["best_nodaemon"] == {"makespan_s": even, "mean_jct_s": fifo}
    assert ftf["jct_vs_best_nodaemon"] == pytest.approx(1.0)  # 7.5 / 7.5, 3.75 / 3.75
    assert "jct_vs_best_nodaemon" in ftf["met"]


def _check_the_report(kit, result):
    from PIL import Image

    report = (kit / "report.md").read_text()
    machine = json.loads((kit / "machine.json").read_text())
    assert machine["logical_cores"] >= 1 and machine["gpus"] == [] and machine["torch"]
    assert json.loads((kit / "live.json").read_text())["summary"] == result["summary"]
    for row in result["summary"]:  # every setting's row, with its paired makespan ratio
        steady = f"{row['steady_rate']:.0f}" if row.get("steady_rate") else "—"
        assert (f"| {row['policy']} | {row['makespan_s']:.1f} | {row['first_batch_s']:.2f} | "
                f"{row['node_rate']:.0f} | {steady} | {row['makespan_paired']:.3f} |") in report
    assert "GPU steps emulated" in report and "![" in report and "timeline.png" in report
    with Image.open(kit / "timeline.png") as png:
        width, height = png.size
    assert width > 400 and height > 200 * len(result["summary"])  # a panel a setting


def test_a_no_daemon_run_gets_its_timeline_from_the_jobs_own_reports():
    """Fixed counts from each job's start to its end; a tuner's changes where it made them."""
    from adloader.bench.live.live_report import with_timeline

    run = {"policy": "no daemon: autotune", "makespan_s": 9.0, "aggregate_throughput": 1.0,
           "jobs": [{"name": "a", "start": 102.0, "start_s": 2.0, "end_s": 9.0,
                     "workers_initial": None, "workers_at": [[102.0, 1], [105.0, 2]]},
                    {"name": "b", "start": 101.5, "start_s": 1.5, "end_s": 6.0,
                     "workers_initial": 3, "workers_at": None}]}
    timeline = with_timeline(run, capacity=4)["timeline"]
    at = {e["t_s"]: e["workers"] for e in timeline}
    assert at[1.5] == {"b": 3} and at[2.0] == {"a": 1, "b": 3} and at[5.0] == {"a": 2, "b": 3}
    assert at[6.0] == {"a": 2} and at[9.0] == {}


def test_the_steady_rate_is_the_nodes_while_every_job_trains():
    """From the last job's first batch (t=2) to the first job's last (t=6): a trains
    10 batches a second there, b 5; batches of 4 samples."""
    from adloader.bench.live.nodaemon import steady_rate

    a = {"batch_size": 4, "progress": [[0.0, 1], [2.0, 21], [6.0, 61], [8.0, 81]]}
    b = {"batch_size": 4, "progress": [[2.0, 1], [4.0, 11], [7.0, 26]]}
    c = {"batch_size": 4, "progress": [[1.0, 1], [6.0, 51]]}
    assert steady_rate([a, b, c]) == pytest.approx(4 * (10 + 5 + 10))
    assert steady_rate([a, {"batch_size": 4, "progress": [[5.5, 1], [6.2, 8]]}]) is None
    assert steady_rate([a, {"batch_size": 4}]) is None  # a report without progress


def test_the_kit_plan_fits_a_lent_machine():
    """--kit: ftf against the even split, 2 rounds, 500 iterations a job, L(D) once and no
    contention surface; a flag given still applies."""
    import argparse

    from adloader.cli.bench.bench_live import _live_config, live_flags

    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    live_flags(p)
    cfg = _live_config(p.parse_args(["--kit"]))
    assert (cfg.policies, cfg.baselines, cfg.rounds) == (("ftf",), ("even",), 2)
    assert (cfg.iterations_scale, cfg.loading_rounds, cfg.surface_rounds) == (1.0, 1, 0)
    assert _live_config(p.parse_args(["--kit", "--rounds", "3"])).rounds == 3
