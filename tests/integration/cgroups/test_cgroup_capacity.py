"""A real daemon on automatic capacity follows its cgroup live: an in-place resize of the
pod (``cpu.max`` rewritten) changes the workers it hands out, without a restart."""

import os

import pytest

from tests.daemon_harness import Daemon, wait_for

CORES = len(os.sched_getaffinity(0))


@pytest.mark.skipif(CORES < 2, reason="needs 2 cores to grow past one worker")
def test_an_in_place_resize_changes_the_workers_handed_out(tmp_path, monkeypatch):
    root = tmp_path / "cgroup"
    leaf = root / "kubepods" / "pod1"
    leaf.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu cpuset\n")
    (root / "proc-self-cgroup").write_text("0::/kubepods/pod1\n")
    (leaf / "cpu.max").write_text("100000 100000\n")  # one CPU
    monkeypatch.setenv("ADLOADER_CGROUP_ROOT", str(root))
    daemon = Daemon(tmp_path / "state", extra=("--capacity", "0")).start()
    try:
        assert daemon.http.get("/v1/allocations").json()["capacity"] == 1
        job = daemon.submit("long", iterations=100_000, step_scale=0.2)
        wait_for(lambda: daemon.job(job)["workers"] == 1, 60, "the job to run on 1 worker")

        (leaf / "cpu.max").write_text("max 100000\n")  # the pod is resized: no limit now
        wait_for(lambda: daemon.http.get("/v1/allocations").json()["capacity"] == CORES, 30,
                 "the daemon to follow the cgroup")
        wait_for(lambda: daemon.job(job)["workers"] > 1, 30, "the job to get more workers")
        change = daemon.events("capacity")[-1]["data"]
        assert change == {"workers": CORES, "was": 1}

        (leaf / "cpu.max").write_text("100000 100000\n")  # and back down
        wait_for(lambda: daemon.job(job)["workers"] == 1, 30, "the job to shrink to 1")
        assert daemon.state(job) == "running"  # resized live, never restarted
        daemon.http.post(f"/v1/jobs/{job}/cancel")
    finally:
        daemon.stop()
