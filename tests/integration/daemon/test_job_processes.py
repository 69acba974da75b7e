"""A launched job's processes as an operator sees them, with real processes under a real
daemon: the job's own pid beside its supervisor's, a signal to either noticed and recorded,
and ``adloader cancel --signal``."""

from __future__ import annotations

import os
import signal
import sys

import psutil
import pytest
from daemon_harness import Daemon, RawMaster, wait_for

from adloader.daemon.jobs.launcher import group_alive

# a job with a child of its own in its process group (as a loader's workers are)
WITH_CHILD = [sys.executable, "-c", "import subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
              "print('child started', flush=True)\ntime.sleep(300)\n"]
ENDED = ("finished", "failed", "cancelled", "lost")


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "state").start()
    yield d
    d.stop()


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie no one has reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def pids(daemon: Daemon, job: str) -> tuple[int, int]:
    """(the job's pid, its supervisor's), once the supervisor has recorded both."""
    view = wait_for(lambda: (v := daemon.job(job))["pid"] and v["supervisor_pid"] and v, 30,
                    "the job's pid and its supervisor's")
    return view["pid"], view["supervisor_pid"]


def ended(daemon: Daemon, job: str, timeout: float = 20) -> dict:
    return wait_for(lambda: (v := daemon.job(job))["state"] in ENDED and v, timeout,
                    f"{job} to end")


def test_the_job_pid_is_the_training_process_and_the_supervisor_leads_its_group(
        daemon, run, monkeypatch):
    job = daemon.submit("sleeper", command=WITH_CHILD)
    pid, supervisor = pids(daemon, job)
    assert pid != supervisor
    proc = psutil.Process(pid)
    assert proc.ppid() == supervisor and os.getpgid(pid) == supervisor == os.getpgid(supervisor)
    assert "subprocess.Popen" in " ".join(proc.cmdline())  # the command itself
    started = daemon.events("started", job)
    assert started and started[0]["data"] == {"pid": pid, "supervisor_pid": supervisor}
    assert daemon.events("launched", job)[0]["data"]["supervisor_pid"] == supervisor
    listed = {j["id"]: j for j in daemon.http.get("/v1/jobs").json()}[job]
    assert (listed["pid"], listed["supervisor_pid"]) == (pid, supervisor)
    monkeypatch.setenv("ADLOADER_URL", daemon.url)
    monkeypatch.setenv("ADLOADER_TOKEN", daemon.token)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = run("jobs")
    assert code == 0 and "supervisor" in out
    row = next(line for line in out.splitlines() if job in line)
    assert str(pid) in row and str(supervisor) in row


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_jobs_pid_is_recorded_as_its_ending(daemon, sig):
    job = daemon.submit("victim", command=WITH_CHILD)
    pid, supervisor = pids(daemon, job)
    os.kill(pid, sig)
    view = ended(daemon, job)
    name = signal.Signals(sig).name
    assert (view["state"], view["exit_code"], view["reason"]) == (
        "failed", -sig, f"killed by {name}")
    [event] = daemon.events("failed", job)
    assert event["data"]["exit"] == f"killed by {name}" and event["data"]["exit_code"] == -sig
    wait_for(lambda: gone(supervisor), 10, "its supervisor to exit after recording it")


def test_killing_the_supervisor_ends_the_job_and_its_group_and_records_it(daemon):
    job = daemon.submit("orphan", command=WITH_CHILD)
    wait_for(lambda: "child started" in daemon.http.get(f"/v1/jobs/{job}/log").text, 30,
             "the job's child to start")
    pid, supervisor = pids(daemon, job)
    os.kill(supervisor, signal.SIGKILL)  # the supervisor alone, as `kill -9 <old pid>` did
    view = ended(daemon, job)
    assert (view["state"], view["exit_code"], view["reason"]) == (
        "failed", -signal.SIGKILL, "killed by SIGKILL")
    note = daemon.events("failed", job)[0]["data"]["note"]
    assert f"its supervisor (pid {supervisor}) was killed by SIGKILL" in note
    wait_for(lambda: gone(pid), 10, "the job's process to end")
    wait_for(lambda: not group_alive(supervisor), 10, "the job's whole group to end")


def test_a_supervisor_killed_while_the_daemon_is_down_takes_its_job_along(daemon):
    job = daemon.submit("alone", command=WITH_CHILD)
    wait_for(lambda: "child started" in daemon.http.get(f"/v1/jobs/{job}/log").text, 30,
             "the job's child to start")
    pid, supervisor = pids(daemon, job)
    daemon.kill()
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: gone(pid), 10, "the job to get its parent-death signal")
    assert group_alive(supervisor)  # its child lives on, until a daemon sees to it
    again = Daemon(daemon.state_dir, port=daemon.port).start()
    try:
        view = ended(again, job)
        assert view["state"] == "lost"  # nothing recorded its exit status: said so
        assert "ended without recording" in again.events("lost", job)[0]["data"]["note"]
        wait_for(lambda: not group_alive(supervisor), 10, "the rest of its group to end")
    finally:
        again.stop()


@pytest.mark.parametrize("sig", ["kill", "usr1"])
def test_cancel_with_a_signal_sends_it_now(daemon, run, monkeypatch, sig):
    monkeypatch.setenv("ADLOADER_URL", daemon.url)
    monkeypatch.setenv("ADLOADER_TOKEN", daemon.token)
    job = daemon.submit("hung", command=[sys.executable, "-c", "import signal, time\n"
                                         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                         "time.sleep(300)\n"])
    pid, _ = pids(daemon, job)
    code, _, err = run("cancel", job, "--signal", "STOP")
    assert code == 2 and "SIGSTOP does not end a process" in err
    code, _, err = run("cancel", job, "--signal", "NOPE")
    assert code == 2 and "not a signal" in err
    code, out, _ = run("cancel", job, "--signal", sig)
    assert code == 0 and f"cancelled {job}" in out
    view = ended(daemon, job)
    number = signal.Signals[f"SIG{sig.upper()}"]
    assert (view["state"], view["exit_code"], view["reason"]) == (
        "cancelled", -number, f"killed by {number.name}")
    assert daemon.events("cancel", job)[0]["data"]["signal"] == number.name
    assert "note" not in daemon.events("cancelled", job)[0]["data"]  # nothing to explain
    wait_for(lambda: gone(pid), 10, "the job's process to end")


def test_the_daemon_signals_only_processes_it_started(daemon):
    with RawMaster(daemon.endpoint) as m:
        m.register("by-hand", "tok")
        wait_for(lambda: daemon.events("attached"), 10, "the job to attach")
        r = daemon.http.post("/v1/jobs/by-hand/cancel", params={"signal": "KILL"})
        assert r.status_code == 409 and "not started by the daemon" in r.text  # its state
        assert daemon.state("by-hand") == "running"
