"""A job confined to fewer CPUs than the node's is never given more workers than it has CPUs
(issue "Install anywhere", item 2: "worker counts capped at a step's cpuset").

A Slurm step with ``task/cgroup`` runs in a cpuset of its own; a job started under
``taskset`` likewise. The daemon reads what the kernel says of the job's master as it
connects (its affinity, ``os.sched_getaffinity`` of the pid ``SO_PEERCRED`` gave) and plans
at most that many workers for it: more would only share its cores and cost memory. Real
daemon (``balance``: two jobs on 4 workers would get 2 each), two jobs started by hand, one
under ``taskset -c 0``.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from daemon_harness import Daemon, attached_script, wait_for

pytestmark = pytest.mark.skipif(shutil.which("taskset") is None, reason="no taskset")


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state", capacity=4, extra=("--policy", "balance")).start()
    yield d
    d.stop()


def test_a_job_pinned_to_one_cpu_gets_one_worker_where_its_peer_gets_more(daemon, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: nothing to confine a job to")
    cmd = attached_script(tmp_path, "job.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADLOADER_")}
    env["ADLOADER_ENDPOINT"] = daemon.endpoint
    procs = {}
    try:
        for job, prefix in (("pinned", ["taskset", "-c", "0"]), ("free", [])):
            procs[job] = subprocess.Popen(
                [*prefix, *cmd], env={**env, "ADLOADER_JOB": job,
                                      "ADLOADER_JOB_TOKEN": f"token-{job}"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: all((daemon.job(j) or {}).get("iteration") for j in procs), 60,
                 "both jobs to train")
        wait_for(lambda: any(e["data"]["workers"] > 1 for e in daemon.events("resize", "free")),
                 30, "a plan that gives the free job more than one worker")
        attached = {e["job"]: e["data"] for e in daemon.events("attached")}
        assert attached["pinned"]["cpus"] == 1
        assert attached["free"]["cpus"] == len(os.sched_getaffinity(0))
        pinned = [e["data"]["workers"] for e in daemon.events("resize", "pinned")]
        assert attached["pinned"]["workers"] <= 1 and all(w <= 1 for w in pinned), pinned
        assert daemon.job("pinned")["workers"] == 1
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
