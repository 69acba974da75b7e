"""A job whose interpreter cannot finish after Ctrl-C or an error still ends, with the
right status, and its stderr says where it was stuck (client/master/exit_watchdog.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

STUCK = """
import os, sys, threading, time
from adloader.client import attach
from adloader.client.master import exit_watchdog
from adloader.client.loader.loader import ElasticDataLoader

exit_watchdog.GRACE_S = 1.0
def stuck_forever():
    threading.Event().wait()
if sys.argv[2] == "stuck":  # a non-daemon thread that never ends: the interpreter waits
    threading.Thread(target=stuck_forever, name="stuck").start()
loader = ElasticDataLoader(list(range(10)), batch_size=2)
job = attach(loader, model="smResnet20", endpoint="")  # no daemon: the hook is there anyway
if sys.argv[1] == "ctrl-c":
    os.kill(os.getpid(), 2)
    time.sleep(5)  # where the Ctrl-C lands (at once)
raise ValueError("boom")
"""


@pytest.mark.parametrize(("how", "code"), [("ctrl-c", -signal.SIGINT), ("error", 1)])
def test_a_job_stuck_at_its_end_ends_with_its_status_and_says_where(tmp_path, how, code):
    path = tmp_path / "stuck.py"
    path.write_text(STUCK)
    proc = subprocess.run([sys.executable, str(path), how, "stuck"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "adloader: the job did not end 1 s after its" in proc.stderr
    assert "stuck_forever" in proc.stderr  # the stack of the thread that held it


def test_a_job_that_ends_normally_is_not_touched(tmp_path):
    path = tmp_path / "fine.py"
    path.write_text(STUCK)
    proc = subprocess.run([sys.executable, str(path), "ctrl-c", "fine"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == -signal.SIGINT
    assert "did not end" not in proc.stderr
