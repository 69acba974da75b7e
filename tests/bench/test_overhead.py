"""adloader's own CPU cost, gated (issue 23, item 3: "No overhead").

A real daemon runs the paper's static mix as real jobs (GPU steps emulated, real JPEG
loading), replayed through REST as ``adloader bench live`` does it, and the CPU-seconds of
adloader's own processes are read as the bench reads them (``bench.nodaemon.RunWatch``, the
daemon's start-up left out): the daemon with its refit worker, one supervisor a job, and each
job's application master (its channel thread, libzmq's threads, the batch hook).

A run this short cannot meet the full-length budget (≤ 0.01 CPU-second per training-second):
each supervisor is a Python interpreter's start (~0.09 CPU-s here), a fresh daemon's first
refit imports scikit-learn (~2.3 CPU-s), and the jobs train ~45 s in all. So the gate is on
absolute figures that noise moves little, each with its own budget: per job-run (supervisor,
master) and per second the daemon runs (all of it; and the REST serving of its main thread,
where the replay's polls land). Each budget sits between what this machine measures now and
what the waste that was cut cost (``docs/benchmarks.md``, "Overhead, where it goes", has both,
and the full-length bench that must meet 0.01). The refits are gated apart
(``tests/integration/daemon/test_refit_worker.py``): this run's few samples make every fit trivial.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from adloader import env as names
from adloader.bench.live import nodaemon
from adloader.remote.process import DaemonProcess
from adloader.sim.trace import load_trace
from adloader.workloads import replay as replay_mod
from adloader.workloads.dataset import ensure_images

ITERATIONS_SCALE = 0.06  # 30 iterations a job: ~15 s of training each
CAPACITY = 3  # a worker a job to start with: all three jobs start together
# CPU-seconds, each between what this 2-core machine measures now and the waste that was cut
BUDGET = {
    "supervisor_per_job": 0.20,  # now ~0.09: a Python interpreter's start and a wait
    "master_per_job": 0.05,  # now ~0.01; the process's full collections apart (FullCollections)
    "daemon_per_s": 0.04,  # now ~0.02: control loop, heartbeats, REST (refits apart)
    # set at 0.0065 when it measured 0.0039-0.0045; 2026-11-26 the code before that day's
    # changes measured 0.0059-0.0060 and after them 0.0063-0.0069 (paired runs); polled
    # every 0.5 s as before the cut, 0.008
    "rest_per_s": 0.0075,
}


def _main_thread_cpu_s(pid: int) -> float:
    """CPU seconds of a process's main thread (the daemon's: uvicorn's event loop)."""
    with open(f"/proc/{pid}/task/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("overhead")
    data = root / "jpeg"
    ensure_images(data, 64)
    trace = load_trace("paper-static")
    mp = pytest.MonkeyPatch()
    mp.setenv(names.STEP_PROFILE, "paper")  # what the jobs emulate
    mp.setenv(names.GPU_LOCK_DIR, str(root))
    reports = root / "reports"
    reports.mkdir()
    args = ["--policy", "ftf", "--capacity", str(CAPACITY), "--gpus", str(trace.gpus),
            "--jobs-per-gpu", "2", "--arrival-window", "2", "--completion-window", "2",
            "--heartbeat", "0.5", "--profile", "paper"]
    try:
        with nodaemon.RunWatch(str(root)) as watch, \
                DaemonProcess(root / "state", args) as daemon:
            watch.mark()  # the daemon is up: its start-up is not the run's overhead
            rest_0, t0 = _main_thread_cpu_s(daemon.proc.pid), time.time()
            result = replay_mod.replay(
                trace, daemon.call, iterations_scale=ITERATIONS_SCALE, step_scale=1.2,
                crop=64, data=str(data), images=64, timeout_s=300, report_dir=str(reports),
                poll_s=replay_mod.POLL_S)
            watch.sample()
            # the daemon predicts from the child's fitted arrays (scheduling.model.compiled): it
            # never loads scikit-learn, whichever regressor won
            maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
            model = daemon.call("GET", "/v1/model").json()
            wall_s = time.time() - t0
            rest_s = _main_thread_cpu_s(daemon.proc.pid) - rest_0
            during = watch.cpu_by_role()
    finally:
        mp.undo()
    jobs = [dict(name=j.name, **json.loads((reports / f"{j.name}.json").read_text()))
            for j in trace.jobs]
    measured = nodaemon.summarise(jobs, t0, watch)
    return {"replay": result, "measured": measured, "during": during, "wall_s": wall_s,
            "rest_s": rest_s, "jobs": len(jobs), "sklearn_in_daemon": "/sklearn/" in maps,
            "model": model}


def test_every_job_ran_under_the_daemon(run):
    assert [j["state"] for j in run["replay"]["jobs"]] == ["finished"] * run["jobs"]
    assert run["during"].get("job", 0) > 0  # the jobs were seen: the watch works
    assert run["during"].get("daemon", 0) > 0 and run["during"].get("supervisor", 0) > 0


def test_adloader_own_processes_stay_within_their_cpu_budget(run):
    """Each figure against its own budget, so a failure names the part that grew."""
    cpu, jobs, wall = run["during"], run["jobs"], run["wall_s"]
    master = run["measured"]["cpu_s"]["master"]
    figures = {"supervisor_per_job": cpu.get("supervisor", 0.0) / jobs,
               "master_per_job": master / jobs,
               "daemon_per_s": cpu.get("daemon", 0.0) / wall,
               "rest_per_s": run["rest_s"] / wall}
    shown = {k: round(v, 4) for k, v in figures.items()}
    print(f"overhead figures {shown}, CPU-s {cpu}, {wall:.1f} s")  # shown with -s
    over = {k: v for k, v in shown.items() if v > BUDGET[k]}
    assert not over, (f"over budget: {over} (budget {BUDGET}); all: {shown}; CPU-s during "
                      f"the run {cpu}, masters {master:.3f}, {wall:.1f} s; per training-s "
                      f"{run['measured']['overhead_cpu_per_training_s']}")


def test_the_daemon_never_loads_scikit_learn_and_its_fitting_worker_accounts_for_itself(run):
    assert not run["sklearn_in_daemon"]
    fitter = run["model"]["fitter"]
    if fitter["starts"]:  # a fit was made: the worker's start is what the watch saw, mostly
        assert 0 < fitter["startup_cpu_s"] <= run["during"].get("refit", 0.0) + 0.05, fitter


def test_the_watch_counts_a_daemon_child_that_does_not_name_the_run(tmp_path):
    """A one-shot child of the daemon (a fit, a FLOPs count) has no run folder in its command
    line; it is the daemon's cost all the same, counted by the role its command says."""
    import subprocess
    import sys

    marker = str(tmp_path / "run-marker")
    # the child: 0.6 CPU-seconds, then 0.6 s idle (pacing: a one-shot child's life)
    parent = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
              "'import time; t = time.process_time(); exec(\"while time.process_time() - t "
              "< 0.6: pass\"); time.sleep(0.6)', 'adloader.daemon.model.' + 'refit'])")
    proc = subprocess.Popen([sys.executable, "-c", parent, marker])
    with nodaemon.RunWatch(marker, every_s=0.1) as watch:
        proc.wait(30)
    roles = watch.cpu_by_role()
    assert roles.get("refit", 0.0) >= 0.4, roles  # the child, by its command
    assert "daemon" in roles  # the parent: it names the run


def test_the_pools_the_resizes_started_are_counted_in_the_masters_overhead(run):
    """Shown apart (``master_resize``), never taken out of ``master``."""
    cpu = run["measured"]["cpu_s"]
    assert 0.0 <= cpu["master_resize"] <= cpu["master"], cpu
    if run["replay"].get("resized_jobs"):  # a resize reached a running job: it started a pool
        assert cpu["master_resize"] > 0, (cpu, run["replay"]["resized_jobs"])
