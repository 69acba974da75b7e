"""Each Slurm step's CPU share under a daemon with ``--cpu-shares``, on a real Slurm
(``TaskPlugin=task/cgroup`` with ``ConstrainCores=yes``, ``ProctrackType=proctrack/cgroup``)
and real cgroups: v1 here, v2 in a kernel of its own
(``tests/integration/cgroups/test_cgroup_v2.py`` runs this file there).

Slurm puts each step in a cpuset of its own; two steps that share cores (a partition with
``OverSubscribe``, or steps given every core) then share them as the kernel shares any
processes — by process count on v1, by Slurm's default weights on v2 — whatever their
workers. On cgroup v1 the daemon moves each job it adopts into a CPU-controller group of its
own, weighted by its workers: that hierarchy is not one Slurm uses (cpuset, freezer). On v2
there is one hierarchy, and the step's cgroup is Slurm's: the daemon weights the job where it
is — the step's folder, and its Slurm job's folder by the sum of its steps — never moving a
process. Either way the step stays Slurm's (tracked, signalled and cancelled as before): a
tenant step with 1 worker that starts 6 busy processes takes a third of the shared core
beside a step with 2 workers and 1 busy process (a half, or 6/7, without the daemon); and
``scancel`` ends both steps and every process they started, the well-behaved one at a batch
boundary, recorded as a cancel. (A job resized by the daemon as the SIGTERM came trained on
until Slurm's SIGKILL before the launcher's stop was numbered after the daemon's commands:
``tests/unit/client/test_launcher_stop.py``.)
Root and the packages are needed; under CI=true a missing one fails."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from daemon_harness import Daemon, script, wait_for
from slurm_cluster import SlurmCluster
from test_cpu_share import BUSY, HAND_STARTED, _share_of, cpu_shares_here, placed

from adloader import env as names


@pytest.fixture
def shared_node(tmp_path, monkeypatch):
    """(the cluster, whose partition lets 2 jobs share a core; a daemon with
    ``--cpu-shares``; a view of its groups)."""
    monkeypatch.setenv(names.setting("lost_after_s"), "60")  # a starved master is not lost
    parent = f"adloader-slurm-{uuid.uuid4().hex[:8]}"
    probe = cpu_shares_here(parent)
    # KillWait: time for the modest step to stop at a batch boundary (in the guest of
    # test_cgroup_v2.py, Python runs many times slower: 5 s was not enough there)
    cluster = SlurmCluster(tmp_path / "slurm", kill_wait_s=20, oversubscribe=2).start()
    daemon = Daemon(tmp_path / "state", capacity=4,
                    extra=("--policy", "requested", "--cpu-shares", parent,
                           "--open-loop")).start()  # weights follow the plan's own counts
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
    """The Slurm step's cgroup ``pid`` is in — the cpuset path on v1, the unified path on v2
    (``0::``) — or "" when none."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuset" in controllers.split(",") or line.startswith("0::") and "job_" in path:
            return path if "slurm" in path else ""
    return ""


# (busy processes started, workers asked — pinned to one of this machine's 2 CPUs, a job gets
# at most 2 of the daemon's 4): weights 1 : 2, so the share of the core both spin on is
# 1/3 : 2/3 — by process count it would be 6 : 1, by Slurm's v2 defaults 1 : 1
STEPS = {"tenant": (6, 1), "modest": (1, 2)}


def test_two_steps_sharing_a_core_take_their_shares_and_stay_slurm_s(shared_node, tmp_path):
    cluster, daemon, probe = shared_node
    steps: dict[str, subprocess.Popen] = {}
    try:
        for job, (n, workers) in STEPS.items():
            body = HAND_STARTED.format(busy=BUSY, n=n, go=str(tmp_path / f"{job}.go")).replace(
                "num_workers=0", f"num_workers={workers}")
            cmd = script(tmp_path, f"{job}.py", body)
            env = {**cluster.env, "ADLOADER_ENDPOINT": daemon.endpoint, "ADLOADER_JOB": job,
                   "ADLOADER_JOB_TOKEN": f"{job}-token"}
            # every core of the node to each step: the two share them (OverSubscribe)
            steps[job] = subprocess.Popen(
                ["srun", "-N1", "-n1", f"-c{os.cpu_count()}", f"--job-name={job}", *cmd],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                cwd=tmp_path)
        for job in steps:
            placed(daemon, job, tmp_path / f"{job}.go")
        busy = {job: set(p.stdout.readline().split()) for job, p in steps.items()}
        assert [len(b) for b in busy.values()] == [6, 1], (busy, cluster.logs())
        for job in steps:
            pid = wait_for(lambda job=job: daemon.job(job).get("pid"), 30, f"{job} registered")
            step = _slurm_cgroup(pid)
            assert step, f"{job}: not in a Slurm step's cgroup"
            if probe.version == 1:  # moved into a group of its own in the cpu hierarchy
                def members(job=job):
                    return set((probe.base / job / "cgroup.procs").read_text().split()) \
                        if (probe.base / job).is_dir() else set()
                wait_for(lambda job=job, pid=pid: {str(pid), *busy[job]} <= members(job),
                         30, f"{job}'s process and the ones it started in its CPU group")
            else:  # weighted in Slurm's step, where every process it started still is
                kept = wait_for(lambda job=job: daemon.events("cpu_group_kept", job), 30,
                                f"{job} weighted in its Slurm step")[0]["data"]["cgroup"]
                assert step.startswith(kept + "/") and "/job_" in kept, (step, kept)
                assert not daemon.events("cpu_group_joined", job)
                assert not (probe.base / job).exists()
                probe.keep(job, kept)  # the probe reads the same folders
            assert all(_slurm_cgroup(int(p)) for p in busy[job])  # and still Slurm's step
        want = (683, 1365) if probe.version == 1 else (67, 133)  # the default × d / mean(d)
        wait_for(lambda: (probe.weight("tenant"), probe.weight("modest")) == want, 30,
                 f"weights {want}, by the workers")
        if probe.version == 2:  # the two Slurm jobs, siblings, weighted by their steps
            assert [int((probe.group(j).parent / "cpu.weight").read_text())
                    for j in STEPS] == list(want)
        got = _share_of({"tenant": [], "modest": []}, probe, 4.0)
        assert got["modest"] == pytest.approx(2 / 3, rel=0.10), got
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
        try:
            wait_for(lambda: daemon.state("modest") != "running", 30, "modest to end")
        except AssertionError as exc:  # what the daemon and srun saw of it
            seen = [(e["kind"], e["data"]) for e in daemon.events(job="modest")][-4:]
            raise AssertionError(f"{exc}: {seen}; srun: "
                                 f"{steps['modest'].stderr.read()[-1500:]}") from None
        view = daemon.job("modest")
        assert view["state"] == "cancelled" and view["exit_code"] == 143, view
    finally:
        for p in steps.values():
            if p.poll() is None:
                p.kill()
                p.wait()

