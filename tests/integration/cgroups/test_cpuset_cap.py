"""A job confined to part of the node's CPUs gets at most that part of the node's workers
(issue "Install anywhere", item 2: "worker counts capped at a step's cpuset").

A Slurm step with ``task/cgroup`` runs in a cpuset of its own; a job started under
``taskset`` likewise. The daemon reads what the kernel says of the job's master as it
connects (its affinity, ``os.sched_getaffinity`` of the pid ``SO_PEERCRED`` gave) and, when
that is a strict subset of the daemon's own CPUs, plans it at most its share of the node's
workers (1 of 2 CPUs, 4 workers: 2): more would only crowd its cores. A job that may run
wherever the daemon does is not capped (a node run with more workers than cores keeps them).
Real daemon (``balance``, 4 workers), jobs started by hand: one free, alone, then one under
``taskset -c 0``, alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from daemon_harness import Daemon, attached_script, wait_for

pytestmark = pytest.mark.skipif(shutil.which("taskset") is None, reason="no taskset")
CAPACITY = 4


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state", capacity=CAPACITY, extra=("--policy", "balance")).start()
    yield d
    d.stop()


def _alone(daemon, cmd, job: str, prefix: list[str]) -> list[int]:
    """Run ``job`` alone until a plan gave it workers; the worker counts it was given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADLOADER_")}
    env.update(ADLOADER_ENDPOINT=daemon.endpoint, ADLOADER_JOB=job,
               ADLOADER_JOB_TOKEN=f"token-{job}")
    proc = subprocess.Popen([*prefix, *cmd], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (daemon.job(job) or {}).get("iteration"), 60, f"{job} to train")
        wait_for(lambda: daemon.events("resize", job) or daemon.job(job)["workers"] > 1, 30,
                 f"a plan for {job}")
        return [daemon.events("attached", job)[0]["data"]["workers"],
                *(e["data"]["workers"] for e in daemon.events("resize", job))]
    finally:
        proc.kill()
        proc.wait()
        wait_for(lambda: daemon.state(job) != "running", 30, f"{job} to end")


def test_a_job_pinned_to_half_the_cpus_gets_half_the_workers(daemon, tmp_path):
    cpus = os.sched_getaffinity(0)
    if len(cpus) != 2:
        pytest.skip("written for a 2-CPU machine: one CPU is half the node")
    cmd = attached_script(tmp_path, "job.py")
    free = _alone(daemon, cmd, "free", [])
    assert max(free) == CAPACITY, free  # alone, unconfined: every worker
    [attached] = daemon.events("attached", "free")
    assert attached["data"]["cpus"] is None and attached["data"]["max_workers"] is None
    pinned = _alone(daemon, cmd, "pinned", ["taskset", "-c", str(min(cpus))])
    [attached] = daemon.events("attached", "pinned")
    assert attached["data"]["cpus"] == 1 and attached["data"]["max_workers"] == CAPACITY // 2
    assert max(pinned) == CAPACITY // 2, pinned
