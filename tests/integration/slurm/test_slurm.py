"""adloader on a Slurm node, for real: munge, slurmctld and slurmd started here (Debian's
slurm-wlm; ``ProctrackType=proctrack/cgroup``, ``TaskPlugin=task/cgroup``), a real daemon, and
jobs submitted through ``srun`` and ``sbatch`` as docs/slurm.md shows. What the daemon saw is
checked: the job named by its Slurm ids, its ending, and ``scancel`` recorded as a cancel that
came at a batch boundary. Root and the packages are needed; under CI=true a missing one fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import Daemon, wait_for
from slurm_cluster import SlurmCluster

LOOP = """
import os, sys, time
from adloader import ElasticDataLoader, attach
iterations = int(sys.argv[1])
print("SLURM", os.environ["SLURM_JOB_ID"], os.environ["SLURM_STEP_ID"], os.getpid(), flush=True)
loader = ElasticDataLoader(list(range(100000)), batch_size=4, num_workers=0)
attach(loader, model="smResnet20", batch_size=4, iterations=iterations)
for i, batch in enumerate(loader):
    time.sleep(0.02)  # pacing: a training step
    if i + 1 == iterations:
        break
print("done", flush=True)
"""


@pytest.fixture
def node(tmp_path):
    """(the cluster, a daemon, the environment srun and sbatch run with)."""
    cluster = SlurmCluster(tmp_path / "slurm").start()
    daemon = Daemon(tmp_path / "state").start()
    env = {**cluster.env, "ADLOADER_STATE_DIR": str(daemon.state_dir),
           "ADLOADER_ENDPOINT": daemon.endpoint}
    try:
        yield cluster, daemon, env
    finally:
        cluster.stop()
        daemon.stop()


def _named(daemon, name: str) -> list[dict]:
    return daemon.http.get("/v1/jobs", params={"name": name}).json()


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "loop.py"
    path.write_text(LOOP)
    return path


def _sbatch_training(cluster, env, tmp_path: Path) -> str:
    """An sbatch job whose one srun step trains (nearly) forever under ``adloader run``; its
    Slurm job id."""
    batch = tmp_path / "train.sbatch"
    batch.write_text("#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --output=" + str(tmp_path)
                     + "/slurm-%j.out\n"
                     f"srun {sys.executable} -m adloader run -- {sys.executable} "
                     f"{_script(tmp_path)} 1000000\n")
    submitted = subprocess.run(["sbatch", "--parsable", str(batch)], env=env, text=True,
                               capture_output=True, timeout=60, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr + cluster.logs()
    job = submitted.stdout.strip().split(";")[0]
    return job


@pytest.mark.parametrize("tasks", [1, 2])
def test_srun_runs_a_job_the_daemon_knows_by_its_slurm_ids(node, tmp_path, tasks):
    cluster, daemon, env = node
    done = subprocess.run(["srun", "-N1", f"-n{tasks}", sys.executable, "-m", "adloader",
                           "run", "--", sys.executable, str(_script(tmp_path)), "30"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
    assert done.stdout.count("done") == tasks
    job, step = re.search(r"SLURM (\d+) (\d+)", done.stdout).groups()
    name = f"slurm-{job}.{step}"
    [view] = wait_for(lambda: [v for v in _named(daemon, name) if v["state"] == "finished"],
                      30, f"{name} to be finished in the daemon")
    assert view["exit_code"] == 0 and view["iteration"] == 30
    # the step's tasks on this node are one job (SLURM_LOCALID 0 registered it), not one each
    assert len(_named(daemon, name)) == 1 and len(daemon.http.get("/v1/jobs").json()) == 1


def test_scancel_of_an_sbatch_job_ends_it_at_a_batch_boundary_recorded_cancelled(node,
                                                                                 tmp_path):
    cluster, daemon, env = node
    job = _sbatch_training(cluster, env, tmp_path)
    name = f"slurm-{job}.0"  # the batch script's first srun: step 0
    [running] = wait_for(lambda: [v for v in _named(daemon, name)
                                  if (v["iteration"] or 0) > 10], 120,
                         f"{name} to train under the daemon")
    assert running["state"] == "running"
    cancelled = subprocess.run(["scancel", job], env=env, capture_output=True, text=True,
                               timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr
    [view] = wait_for(lambda: [v for v in _named(daemon, name)
                               if v["state"] not in ("running", "queued", "paused")], 60,
                      f"{name} to end in the daemon")
    events = daemon.events(job=view["id"])
    assert view["state"] == "cancelled", (view, events, cluster.logs())
    finishing = [e for e in events if e["kind"] == "finishing"]
    assert finishing and finishing[0]["data"]["stopped_by"] == "slurm"
    # it stopped at a batch boundary, by itself: its master's last count is the job's, and
    # it did not wait for Slurm's SIGKILL (KillWait, 30 s)
    assert finishing[0]["data"]["iterations"] == view["iteration"] > 10
    assert "SIGKILL" not in str(view.get("reason"))


SQUATTER = """
import time
from adloader import ElasticDataLoader, attach
loader = ElasticDataLoader(list(range(400)), batch_size=4, num_workers=0)
attach(loader, model="smResnet20", batch_size=4, iterations=100)
for batch in loader:
    time.sleep(0.01)  # pacing: a training step
print("squatter done", flush=True)
"""


def test_a_slurm_name_taken_outside_that_slurm_job_is_refused(node, tmp_path):
    """Issue "Install anywhere", item 3: a tenant who registers another's launcher-derived
    name. The real step's master is in its job's cgroup (``job_J``) and is verified; a process
    outside Slurm claiming ``slurm-J.0`` (``ADLOADER_NAME``, as anyone can set) is refused,
    the reason naming where it is, and trains on without the daemon; the real job alone
    carries the name."""
    cluster, daemon, env = node
    job = _sbatch_training(cluster, env, tmp_path)
    name = f"slurm-{job}.0"
    try:
        [real] = wait_for(lambda: [v for v in _named(daemon, name)
                                   if (v["iteration"] or 0) > 5], 120,
                          f"{name} to train under the daemon")
        [attached] = [e for e in daemon.events(job=real["id"]) if e["kind"] == "attached"]
        assert attached["data"]["name_verified"] is True, attached
        squat = tmp_path / "squat.py"
        squat.write_text(SQUATTER)
        outside = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
        done = subprocess.run([sys.executable, str(squat)],
                              env={**outside, "ADLOADER_NAME": name, "ADLOADER_JOB": "squat-1",
                                   "ADLOADER_JOB_TOKEN": "squat-token"},
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0 and "squatter done" in done.stdout, done.stderr
        assert "refused" in done.stderr and f"Slurm job {job}" in done.stderr, done.stderr
        refused = [e for e in daemon.events("refused") if e["data"]["job"] == "squat-1"]
        assert refused and "not in that job" in refused[0]["data"]["reason"], refused
        assert [v["id"] for v in _named(daemon, name)] == [real["id"]]
        assert daemon.http.get("/v1/jobs/squat-1").status_code == 404
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)


NODE_ENV = """#!/bin/sh
# one srun task: the daemon of the Slurm node it landed on (several slurmd on this host)
case "$SLURMD_NODENAME" in
{cases}
esac
exec {python} -m adloader run -- {python} {script} 30
"""


def test_a_step_over_two_slurm_nodes_is_one_name_with_a_part_under_each_node_s_daemon(
        tmp_path):
    """Two slurmd on this host (nodes n1 and n2, as Slurm runs several on one host), a daemon
    for each, and ``srun -N2 -n2 adloader run -- python train.py``: each node's task
    registers with its own node's daemon, both parts carry the step's name
    ``slurm-J.S``, verified against Slurm's cgroups, and both end finished."""
    cluster = SlurmCluster(tmp_path / "slurm", nodes=2).start()
    daemons = {n: Daemon(tmp_path / f"state-{n}").start() for n in cluster.nodes}
    try:
        cases = "\n".join(f'{n}) export ADLOADER_STATE_DIR="{d.state_dir}" '
                          f'ADLOADER_ENDPOINT="{d.endpoint}" ;;' for n, d in daemons.items())
        task = tmp_path / "task.sh"
        task.write_text(NODE_ENV.format(cases=cases, python=sys.executable,
                                        script=_script(tmp_path)))
        task.chmod(0o755)
        done = subprocess.run(["srun", "-N2", "-n2", str(task)], env=cluster.env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr + cluster.logs()
        assert done.stdout.count("done") == 2
        job, step = re.search(r"SLURM (\d+) (\d+)", done.stdout).groups()
        name = f"slurm-{job}.{step}"
        for node, daemon in daemons.items():
            [view] = wait_for(lambda d=daemon: [v for v in _named(d, name)
                                                if v["state"] == "finished"],
                              30, f"{name} finished in {node}'s daemon")
            assert view["exit_code"] == 0 and view["iteration"] == 30
            assert len(daemon.http.get("/v1/jobs").json()) == 1  # its node's part alone
            [attached] = [e for e in daemon.events(job=view["id"]) if e["kind"] == "attached"]
            assert attached["data"]["name_verified"] is True, attached
    finally:
        cluster.stop()
        for d in daemons.values():
            d.stop()
