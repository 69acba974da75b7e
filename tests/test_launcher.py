"""The launcher: jobs share the daemon's CPU scheduling group, log to a file, stop as a group."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adloader.daemon.launcher import Launcher, autogroup_enabled, separate_cpu_group

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def launcher(tmp_path):
    launcher = Launcher(tmp_path / "logs", "ipc:///nowhere")
    yield launcher
    launcher.stop_all()


def test_a_job_is_its_own_process_group_in_the_daemons_session(launcher):
    started = launcher.start("j-1", "tok", SLEEPER, None, {}, 2, (0,))
    assert os.getpgid(started.pid) == started.pid  # cancel stops it and its workers
    # not a new session: with autogroup on, a session is one scheduling group and would get
    # a session's share of the CPU whatever its workers
    assert os.getsid(started.pid) == os.getsid(0)
    assert not separate_cpu_group(started.pid)
    assert _wait(lambda: "up" in Path(started.log_path).read_text())


def test_the_environment_carries_what_attach_reads(launcher, tmp_path):
    cmd = [sys.executable, "-c", "import os; print(os.environ['ADLOADER_JOB'], "
           "os.environ['ADLOADER_WORKERS'], os.environ['ADLOADER_GPU_IDS'], "
           "os.environ['CUDA_VISIBLE_DEVICES'], os.environ['EXTRA'])"]
    started = launcher.start("j-2", "tok", cmd, str(tmp_path), {"EXTRA": "x"}, 3, (1, 2))
    assert _wait(lambda: launcher.reap() == [("j-2", 0)])
    assert Path(started.log_path).read_text().split() == ["j-2", "3", "1,2", "1,2", "x"]


def test_stop_ends_the_whole_process_group(launcher):
    cmd = [sys.executable, "-c", "import subprocess, sys, time; "
           "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
           "print(p.pid, flush=True); time.sleep(60)"]
    started = launcher.start("j-3", "tok", cmd, None, {}, 1, (0,))
    log = Path(started.log_path)
    assert _wait(lambda: log.read_text().split()[:1] != [])
    child = int(log.read_text().split()[0])
    launcher.stop("j-3", started.pid, grace_s=5)
    assert _wait(lambda: not Launcher.alive(child))


@pytest.mark.skipif(not autogroup_enabled(), reason="kernel autogroup is off here")
def test_a_job_started_in_another_session_is_flagged():
    proc = subprocess.Popen(SLEEPER, start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        assert separate_cpu_group(proc.pid)
    finally:
        proc.kill()
        proc.wait()
