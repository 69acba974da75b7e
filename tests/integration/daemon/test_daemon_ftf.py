"""A real daemon under ``--policy ftf`` with real training jobs over ZeroMQ."""

import time

from daemon_harness import Daemon, wait_for


def test_ftf_serves_the_short_job_first_and_moves_its_workers_at_once(tmp_path):
    # a long completion window: ftf must not wait for it when a job finishes; the plan as
    # ftf makes it, applied at once (--open-loop: the closed loop would measure each move,
    # and a job this short ends before a trial could pay back)
    d = Daemon(tmp_path / "state", capacity=4, gpus=2,
               extra=("--policy", "ftf", "--completion-window", "60", "--open-loop")).start()
    try:
        long_job = d.submit("long", iterations=100000, step_scale=2.0)
        short_job = d.submit("short", iterations=60)
        wait_for(lambda: d.job(short_job)["state"] == "running"
                 and d.job(long_job)["state"] == "running", 90, "both jobs to run")
        wait_for(lambda: d.job(short_job)["workers"] > d.job(long_job)["workers"], 30,
                 "the short job to lead")
        assert d.job(long_job)["workers"] >= 1  # never starved to nothing
        wait_for(lambda: d.job(short_job)["state"] == "finished", 120, "the short job to end")
        ended = time.monotonic()
        wait_for(lambda: d.job(long_job)["workers"] == 4, 20, "the long job to get the node")
        assert time.monotonic() - ended < 20  # well inside the 60 s completion window
        before = d.job(long_job)["iteration"]
        wait_for(lambda: d.job(long_job)["iteration"] > before + 5, 30, "training to go on")
    finally:
        d.stop()
