"""Upgrades and rollbacks under running jobs, with the release before protocol versions
(release 0, ``PREVIOUS``): its library installed from the commit into a virtual environment
(no compiler: the Python loops), a job of one release training while the daemon is stopped
and started again on the other release's code, in both directions. The job re-attaches and
finishes, recorded ``finished`` by the daemon it ends under.

Skipped in a shallow clone that lacks the commit; where a virtual environment or git is not
at hand, skipped, except under CI=true, where that fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ci_rules import cannot, run
from daemon_harness import Daemon, wait_for

ROOT = Path(__file__).resolve().parents[3]
PREVIOUS = "140a4ce86e4a65b964d1c985dccb62303f6f0338"  # release 0: the last before versions


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Path:
    """The python of an environment where ``adloader`` is release 0's."""
    if shutil.which("git") is None:
        cannot("no git")
    if run(["git", "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], cwd=ROOT).returncode != 0:
        pytest.skip(f"commit {PREVIOUS[:7]} is not in this clone (a shallow clone: fetch it)")
    work = tmp_path_factory.mktemp("release0")
    tree = work / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", PREVIOUS], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env_dir = work / "venv"
    made = run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)])
    if made.returncode != 0:
        cannot(f"no venv: {made.stderr.strip()[-300:]}")
    python = env_dir / "bin" / "python"
    run([str(python), "-m", "pip", "uninstall", "-y", "-q", "setuptools"])  # as in the sdist test
    no_cc = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "PIP_NO_INPUT": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = run([str(python), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
               str(tree)], env=no_cc, cwd=work)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    where = _release(python, work)
    assert Path(where).resolve().is_relative_to(env_dir.resolve()), where  # its own copy
    return python


def _daemon(state: Path, python: Path, port: int | None = None) -> Daemon:
    """A daemon of the release ``python`` has, started outside the checkout: with the
    checkout as its working directory, ``python -m adloader`` would find this tree's
    ``adloader`` first, whichever environment it ran in."""
    wrap = ("env", "-C", str(state.parent))
    d = Daemon(state, port=port, wrap=wrap)
    d.args[len(wrap)] = str(python)  # ``python -m adloader daemon`` of that release
    return d


def _job(daemon: Daemon, python: Path) -> str:
    command = daemon.train_command(iterations=400, step_scale=1.0)
    command[0] = str(python)
    r = daemon.http.post("/v1/jobs", json={
        "name": "across", "command": command, "model": "smResnet20", "batch_size": 8,
        "iterations": 400, "cwd": str(daemon.state_dir.parent)})  # outside the checkout
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _release(python: Path, cwd: Path) -> str:
    """Where that environment's ``adloader`` comes from, seen from ``cwd``."""
    return run([str(python), "-c", "import adloader.protocol as p; print(p.__file__)"],
                cwd=cwd, check=True).stdout.strip()


def _is_this_release(daemon: Daemon) -> bool:
    """Only this release's daemon counts ignored fields (``adloader_unknown_fields``)."""
    return "adloader_unknown_fields" in daemon.http.get("/metrics").text


def _log(tmp_path: Path, job: str) -> str:
    log = tmp_path / "state" / "logs" / f"{job}.log"
    return log.read_text()[-3000:] if log.exists() else "(no log)"


@pytest.mark.parametrize("job_release,daemon_first,daemon_then", [
    ("previous", "previous", "this"),  # an upgrade under a running job of release 0
    ("this", "this", "previous"),  # a rollback under a running job of this release
], ids=["upgrade", "rollback"])
def test_a_job_keeps_training_while_the_daemon_changes_release(previous, tmp_path, job_release,
                                                               daemon_first, daemon_then):
    pythons = {"previous": previous, "this": Path(sys.executable)}
    assert "release0" in _release(previous, tmp_path)  # the jobs' and daemons' own copies
    assert "release0" not in _release(Path(sys.executable), tmp_path)
    first = _daemon(tmp_path / "state", pythons[daemon_first]).start()
    then = None
    try:
        job = _job(first, pythons[job_release])
        wait_for(lambda: (first.job(job)["iteration"] or 0) > 5 or first.state(job) != "running"
                 and first.state(job) not in ("buffered", "queued"), 120, "the job to train")
        assert first.state(job) == "running", _log(tmp_path, job)
        assert _is_this_release(first) == (daemon_first == "this")
        first.stop()
        then = _daemon(tmp_path / "state", pythons[daemon_then], port=first.port).start()
        assert _is_this_release(then) == (daemon_then == "this")
        seen = then.job(job)["iteration"] or 0
        wait_for(lambda: (then.job(job)["iteration"] or 0) > seen, 60,
                 "heartbeats from the job to reach the other release's daemon")
        wait_for(lambda: then.state(job) != "running", 180, "the job to end there")
        assert then.state(job) == "finished", _log(tmp_path, job)
        assert then.metric("adloader_dropped_frames_total") == 0
    finally:
        for d in (first, then):
            if d is not None and d.proc is not None and d.proc.poll() is None:
                d.stop()
