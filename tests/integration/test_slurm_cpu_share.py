"""Each Slurm step's CPU share under a daemon with ``--cpu-shares``, on a real Slurm
(``TaskPlugin=task/cgroup`` with ``ConstrainCores=yes``, ``ProctrackType=proctrack/cgroup``)
and this machine's real cgroups (v1 here).

Slurm puts each step in a cpuset of its own; two steps that share cores (a partition with
``OverSubscribe``, or steps given every core) then share them as the kernel shares any
processes — by process count. The daemon moves each job it adopts into a CPU-controller
group of its own, weighted by its workers; on cgroup v1 that hierarchy is not one Slurm uses
(cpuset, freezer), so the step stays Slurm's: tracked, signalled and cancelled as before. A
tenant step that starts 6 busy processes then takes no more of the shared core than a step
with 1, at equal workers; and ``scancel`` still ends both steps and every process they
started (Slurm's tracking is intact), the well-behaved one at a batch boundary, recorded as a
cancel. (A job resized by the daemon as the SIGTERM came trained on until Slurm's SIGKILL
before the launcher's stop was numbered after the daemon's commands:
``tests/unit/test_launcher_stop.py``.)
Root and the packages are needed; under CI=true a missing one fails."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from daemon_harness import Daemon, script, wait_for
from slurm_cluster import SlurmCluster
from test_cpu_share import BUSY, HAND_STARTED, _share_of, cpu_shares_here

from adloader import env as names


@pytest.fixture
def shared_node(tmp_path, monkeypatch):
    """(the cluster, whose partition lets 2 jobs share a core; a daemon with
    ``--cpu-shares``; a view of its groups)."""
    monkeypatch.setenv(names.setting("lost_after_s"), "60")  # a starved master is not lost
    parent = f"adloader-slurm-{uuid.uuid4().hex[:8]}"
    probe = cpu_shares_here(parent)
    cluster = SlurmCluster(tmp_path / "slurm", kill_wait_s=5, oversubscribe=2).start()
    daemon = Daemon(tmp_path / "state", capacity=4,
                    extra=("--policy", "requested", "--cpu-shares", parent)).start()
    try:
        yield cluster, daemon, probe
    finally:
        cluster.stop()
        daemon.stop()
        probe.close()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _slurm_cgroup(pid: int) -> str:
    """The step's cpuset path Slurm gave ``pid`` (cgroup v1), or "" when none."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuset" in controllers.split(","):
            return path if "slurm" in path else ""
    return ""


def test_two_steps_sharing_a_core_take_their_shares_and_stay_slurm_s(shared_node, tmp_path):
    cluster, daemon, probe = shared_node
    steps: dict[str, subprocess.Popen] = {}
    try:
        for job, n in (("tenant", 6), ("modest", 1)):
            cmd = script(tmp_path, f"{job}.py", HAND_STARTED.format(busy=BUSY, n=n))
            env = {**cluster.env, "ADLOADER_ENDPOINT": daemon.endpoint, "ADLOADER_JOB": job,
                   "ADLOADER_JOB_TOKEN": f"{job}-token"}
            # every core of the node to each step: the two share them (OverSubscribe)
            steps[job] = subprocess.Popen(
                ["srun", "-N1", "-n1", f"-c{os.cpu_count()}", f"--job-name={job}", *cmd],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                cwd=tmp_path)
        busy = {job: set(p.stdout.readline().split()) for job, p in steps.items()}
        assert [len(b) for b in busy.values()] == [6, 1], (busy, cluster.logs())
        for job in steps:
            pid = wait_for(lambda job=job: daemon.job(job).get("pid"), 30, f"{job} registered")
            assert _slurm_cgroup(pid), f"{job}: not in a Slurm step's cpuset"

            def members(job=job):
                return set((probe.base / job / "cgroup.procs").read_text().split()) \
                    if (probe.base / job).is_dir() else set()
            wait_for(lambda job=job, pid=pid: {str(pid), *busy[job]} <= members(job), 30,
                  f"{job}'s process and the ones it started in its CPU group")
            assert all(_slurm_cgroup(int(p)) for p in busy[job])  # and still Slurm's step
        wait_for(lambda: probe.weight("tenant") == probe.weight("modest") == probe.default, 30,
              "equal weights written")
        got = _share_of({"tenant": [], "modest": []}, probe, 4.0)
        assert got["modest"] == pytest.approx(0.5, rel=0.10), got
        # Slurm still tracks the steps: scancel ends them and every process they started
        jobs = subprocess.run(["squeue", "-h", "-o", "%i %j"], env=cluster.env, text=True,
                              capture_output=True, timeout=60).stdout.split("\n")
        ids = [line.split()[0] for line in jobs if line.strip()]
        assert len(ids) == 2, jobs
        subprocess.run(["scancel", *ids], env=cluster.env, check=True, timeout=60)
        for job, p in steps.items():
            p.wait(60)
            wait_for(lambda job=job: not any(_alive(int(pid)) for pid in busy[job]), 30,
                     f"{job}'s processes ended by Slurm")
        # the modest job stops at a batch boundary (exit 143), recorded as a cancel; the
        # tenant, starved by its own spinning processes (Slurm's SIGTERM reaches the task,
        # not them), is SIGKILLed after KillWait like any job that does not stop in time
        wait_for(lambda: daemon.state("modest") != "running", 30, "modest to end")
        view = daemon.job("modest")
        assert view["state"] == "cancelled" and view["exit_code"] == 143, view
    finally:
        for p in steps.values():
            if p.poll() is None:
                p.kill()
                p.wait()

