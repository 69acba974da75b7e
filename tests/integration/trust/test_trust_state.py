"""Job state tells the truth: finished (exit 0), failed (exit code or signal, last lines
kept), cancelled, and lost only when nothing is known — for jobs the daemon launched, jobs
started with ``adloader run`` and jobs that attach by hand; across daemon restarts too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from daemon_harness import Daemon, attached_script, script, wait_for


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state", extra=("--cancel-grace", "1")).start()
    yield d
    d.stop()


def _ended(daemon, job, timeout=60):
    wait_for(lambda: daemon.state(job) in ("finished", "failed", "cancelled", "lost"), timeout,
             f"{job} to end")
    return daemon.job(job)


# -- jobs the daemon launched ---------------------------------------------------------
def test_a_launched_job_that_raises_is_failed_with_its_last_lines(daemon, tmp_path):
    cmd = attached_script(tmp_path, "raises.py", "if i == 5: raise ValueError('boom at 5')")
    job = _ended(daemon, daemon.submit("raises", command=cmd))
    assert (job["state"], job["exit_code"], job["reason"]) == ("failed", 1, "exit code 1")
    tail = daemon.events("failed", job["id"])[0]["data"]["tail"]
    assert "ValueError: boom at 5" in tail


def test_a_launched_job_interrupted_is_failed_by_its_signal(daemon, tmp_path):
    cmd = attached_script(tmp_path, "sigint.py",
                          "if i == 5: os.kill(os.getpid(), 2)")  # Ctrl-C
    job = _ended(daemon, daemon.submit("sigint", command=cmd))
    assert job["state"] == "failed" and job["reason"] == "killed by SIGINT"
    assert job["exit_code"] == -signal.SIGINT


def test_a_plain_exit_code_is_kept(daemon):
    job = _ended(daemon, daemon.submit("three", command=[sys.executable, "-c",
                                                         "import sys; sys.exit(3)"]))
    assert (job["state"], job["exit_code"], job["reason"]) == ("failed", 3, "exit code 3")


def test_cancel_stops_a_launched_job_at_a_batch_boundary(daemon, tmp_path):
    cmd = attached_script(tmp_path, "loop.py")
    job = daemon.submit("loop", command=cmd)
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > 3, 60, "it to iterate")
    pid = daemon.job(job)["pid"]
    assert daemon.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    view = _ended(daemon, job, 30)
    assert view["state"] == "cancelled"
    assert daemon.events("cancel", job) and not psutil.pid_exists(pid)
    log = daemon.http.get(f"/v1/jobs/{job}/log").text
    assert "Traceback" not in log  # it stopped cleanly (JobCancelled is a SystemExit)


def test_cancel_ends_a_launched_job_that_never_reaches_a_boundary(daemon, tmp_path):
    cmd = attached_script(tmp_path, "stuck.py", "time.sleep(3600)")  # stuck in its first step
    stuck = daemon.submit("stuck", command=cmd)
    plain = daemon.submit("plain", command=[sys.executable, "-c", "import time; "
                                            "time.sleep(3600)"])  # never attaches
    wait_for(lambda: daemon.events("registered", stuck), 60, "the stuck one to attach")
    wait_for(lambda: daemon.events("launched", plain), 60, "the plain one to start")
    pids = wait_for(lambda: all(daemon.job(j)["pid"] for j in (stuck, plain)) and [
        daemon.job(j)["pid"] for j in (stuck, plain)], 10, "their pids")
    for job in (stuck, plain):
        assert daemon.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    for job in (stuck, plain):
        assert _ended(daemon, job, 30)["state"] == "cancelled"
    wait_for(lambda: not any(psutil.pid_exists(p) for p in pids), 10, "their processes to end")


def test_a_job_that_ends_while_the_daemon_is_down_is_reconciled(daemon):
    job = daemon.submit("short", iterations=15)
    wait_for(lambda: daemon.events("launched", job), 60, "the launch")
    daemon.kill()
    status = daemon.state_dir / "jobs" / f"{job}.exit"
    wait_for(status.exists, 120, "the job's supervisor to record its exit")
    again = Daemon(daemon.state_dir, port=daemon.port).start()
    try:
        view = again.job(job)
        assert (view["state"], view["exit_code"]) == ("finished", 0)
        assert again.events("recovered", job)
    finally:
        again.stop()


def test_kill_9_of_the_daemon_around_decisions_loses_no_finished_job(tmp_path):
    """The daemon SIGKILLed eight times while jobs arrive, run and end: every job that ran
    to the end is finished, none is lost or launched twice."""
    d = Daemon(tmp_path / "state", window=0.2).start()
    jobs = []
    try:
        for round_ in range(8):
            jobs.append(d.submit(f"r{round_}", iterations=10 + 5 * (round_ % 3)))
            time.sleep(0.15 * (round_ % 4))  # pacing: the kill lands before, in, after the window
            d.kill()
            d = Daemon(d.state_dir, port=d.port, window=0.2).start()
        for job in jobs:
            wait_for(lambda j=job: d.state(j) in ("finished", "failed", "lost", "cancelled"),
                     180, f"{job} to end")
        states = {job: d.job(job)["state"] for job in jobs}
        assert set(states.values()) == {"finished"}, states
        for job in jobs:
            assert len(d.events("launched", job)) == 1, job
    finally:
        d.stop()


# -- jobs started by hand: `adloader run`, and attach alone -----------------------------
def _run(daemon, cmd, **kw):
    env = dict(os.environ, ADLOADER_STATE_DIR=str(daemon.state_dir))
    return subprocess.Popen([sys.executable, "-m", "adloader", "run", "--", *cmd],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def _hand_job(daemon):
    found = wait_for(lambda: [j for j in daemon.http.get("/v1/jobs").json()
                              if j["spec"]["command"] == ["(started by hand)"]], 60,
                     "the job to register itself")
    return found[0]["id"]


def test_run_reports_the_exit_code_and_exits_with_it(daemon, tmp_path):
    cmd = attached_script(tmp_path, "exit3.py", "if i == 5: sys.exit(3)")
    proc = _run(daemon, cmd)
    assert proc.wait(60) == 3
    job = _ended(daemon, _hand_job(daemon))
    assert (job["state"], job["exit_code"]) == ("failed", 3)
    cmd = attached_script(tmp_path, "ok.py", "if i == 5: break")
    assert _run(daemon, cmd).wait(60) == 0


def test_cancel_reaches_a_run_job_and_run_exits_with_its_status(daemon, tmp_path):
    proc = _run(daemon, attached_script(tmp_path, "loop.py"))
    job = _hand_job(daemon)
    wait_for(lambda: (daemon.job(job)["iteration"] or 0) > 3, 30, "it to iterate")
    assert daemon.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    assert proc.wait(30) == 128 + signal.SIGTERM
    assert _ended(daemon, job, 30)["state"] == "cancelled"


def _no_hang(output: str, what: str) -> None:
    """A job that hung after its Ctrl-C or error was ended by its exit watchdog
    (client/master/exit_watchdog.py): the status is still right, so only warn, with the stacks.
    (It hung twice in the full CI order at stop 16 and never alone; this is how to see
    where, should it come back.)"""
    from adloader.client.master.exit_watchdog import MARK

    if MARK in output:
        import warnings

        warnings.warn(f"{what}: the exit watchdog ended it:\n"
                      f"{output[output.index(MARK):][:6000]}", stacklevel=2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_run_reaches_the_job_and_nothing_is_orphaned(daemon, tmp_path, sig):
    proc = _run(daemon, attached_script(tmp_path, "loop.py", "print(os.getpid(), flush=True)"
                                        " if i == 1 else None"))
    job = _hand_job(daemon)
    child = int(wait_for(lambda: [w for w in proc.stdout.readline().split() if w.isdigit()],
                         30, "the job's pid")[0])
    proc.send_signal(sig)
    assert proc.wait(30) == -sig  # run dies of what its job died of
    _no_hang(proc.stdout.read().decode(errors="replace"), f"a run job sent {sig!r}")
    wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() ==
             psutil.STATUS_ZOMBIE, 10, "the job's process to end")
    view = _ended(daemon, job, 30)
    assert view["state"] == "failed" and view["exit_code"] == -sig


@pytest.mark.parametrize(("body", "code", "reason"), [
    ("if i == 5: raise ValueError('by hand')", 1, "exit code 1"),
    ("if i == 5: os.kill(os.getpid(), 2)", -signal.SIGINT, "killed by SIGINT"),
    ("if i == 5: break", 0, "exit code 0"),
])
def test_a_job_attached_by_hand_reports_how_it_ended(daemon, tmp_path, body, code, reason):
    env = dict(os.environ, ADLOADER_ENDPOINT=daemon.endpoint)
    env.pop("ADLOADER_SUPERVISOR", None)
    err = tmp_path / "hand.err"
    with err.open("w") as sink:
        proc = subprocess.Popen(attached_script(tmp_path, "hand.py", body), env=env,
                                stdout=subprocess.DEVNULL, stderr=sink)
    proc.wait(60)
    _no_hang(err.read_text(), f"a job attached by hand ({body})")
    job = _ended(daemon, _hand_job(daemon))
    assert (job["exit_code"], job["reason"]) == (code, reason)
    assert job["state"] == ("finished" if code == 0 else "failed")


def test_a_run_job_gone_silent_after_cancel_is_cancelled_not_lost(daemon, tmp_path):
    """A hand-started job that is cancelled and never answers (its process frozen) is
    cancelled once it is no longer heard: the daemon asked it to stop."""
    cmd = script(tmp_path, "frozen.py", "import os, signal, time\n"
                 "from adloader.client import attach\n"
                 "job = attach(model='smResnet20', batch_size=4, iterations=10)\n"
                 "print(os.getpid(), flush=True)\n"
                 "time.sleep(3600)\n")
    proc = _run(daemon, cmd)
    job = _hand_job(daemon)
    child = int(wait_for(lambda: [w for w in proc.stdout.readline().split() if w.isdigit()],
                         30, "the job's pid")[0])
    os.kill(child, signal.SIGSTOP)
    try:
        assert daemon.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
        assert _ended(daemon, job, 30)["state"] == "cancelled"
    finally:
        os.kill(child, signal.SIGKILL)
        proc.wait(30)
