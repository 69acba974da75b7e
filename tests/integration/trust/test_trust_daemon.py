"""The daemon itself: one daemon a state dir, a graceful stop, clear errors for a damaged
store, a store deleted under it, and at-most-once launch when the state dir is full
(real daemons, real jobs; a tmpfs in a mount namespace of its own where one can be made)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest
from daemon_harness import Daemon, free_port, wait_for


def _daemon_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adloader", "daemon", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_a_second_daemon_on_the_same_state_dir_changes_nothing(tmp_path):
    first = Daemon(tmp_path / "state").start()
    try:
        sock = first.state_dir / "control.sock"
        inode = os.stat(sock).st_ino
        job = first.submit("kept", iterations=100000, step_scale=2.0)
        for port in (free_port(), first.port):
            done = _daemon_cli("--state-dir", str(first.state_dir), "--port", str(port))
            assert done.returncode != 0
            line = done.stderr.strip()
            assert "Traceback" not in line and len(line.splitlines()) == 1
            assert f"pid {first.proc.pid}" in line and f":{first.port}" in line
            assert os.stat(sock).st_ino == inode  # the first's socket is untouched
        other = tmp_path / "other"
        done = _daemon_cli("--state-dir", str(other), "--port", str(first.port))
        assert done.returncode != 0 and "in use" in done.stderr
        assert os.stat(sock).st_ino == inode
        wait_for(lambda: (first.job(job)["iteration"] or 0) > 3, 90, "the first to serve")
        assert first.http.get("/healthz").status_code == 200
    finally:
        first.stop()


def test_the_daemon_never_loads_torch_or_scikit_learn(tmp_path):
    """The daemon's memory is its own: features come from a table (or a child process), the
    TPM is fitted in a child process, a linear F_μ and a staged F_λ are read back as numbers."""
    import psutil

    d = Daemon(tmp_path / "state").start()
    try:
        job = d.submit("one", iterations=10)
        wait_for(lambda: d.state(job) == "finished", 90, "a job to run")
        loaded = {m.path for m in psutil.Process(d.proc.pid).memory_maps()}
        for package in ("torch", "sklearn", "scipy", "matplotlib"):
            assert not [p for p in loaded if f"/{package}/" in p], package
    finally:
        d.stop()


def test_sigterm_is_a_graceful_stop_and_jobs_reattach(tmp_path):
    d = Daemon(tmp_path / "state").start()
    job = d.submit("survivor", iterations=100000, step_scale=2.0)
    wait_for(lambda: (d.job(job)["iteration"] or 0) > 3, 90, "the job to train")
    pid = d.job(job)["pid"]
    assert d.stop() == 0
    assert "stopped; running jobs keep training" in d.log
    assert not (d.state_dir / "control.sock").exists()
    assert not (d.state_dir / "adloader.db-wal").exists()  # flushed into the file
    os.kill(pid, 0)  # the job's supervisor (and the job) still run
    again = Daemon(d.state_dir, port=d.port).start()
    try:
        seen = again.job(job)["iteration"] or 0
        wait_for(lambda: (again.job(job)["iteration"] or 0) > seen, 30, "it to re-attach")
        assert again.job(job)["state"] == "running"
    finally:
        again.http.post(f"/v1/jobs/{job}/cancel")
        wait_for(lambda: again.job(job)["state"] == "cancelled", 60, "the cancel")
        again.stop()


@pytest.mark.parametrize("damage", ["header", "middle", "truncated"])
def test_a_damaged_store_is_one_clear_line_that_says_what_to_do(tmp_path, damage):
    d = Daemon(tmp_path / "state").start()
    for i in range(60):
        d.http.post("/v1/jobs", json={"name": f"j{i}", "command": ["true"] * 50,
                                      "model": "smResnet20", "batch_size": 8,
                                      "iterations": 10})
    d.kill()
    db = d.state_dir / "adloader.db"
    for suffix in ("-wal", "-shm"):  # what a crash left: fold it in first, as a restart would
        if (d.state_dir / f"adloader.db{suffix}").exists():
            import sqlite3

            sqlite3.connect(db).execute("PRAGMA wal_checkpoint(TRUNCATE)")
            break
    data = bytearray(db.read_bytes())
    assert len(data) > 8 * 4096
    if damage == "header":
        data[:100] = b"\x00" * 100
    elif damage == "middle":
        page = len(data) // 2 // 4096 * 4096
        data[page:page + 4096] = b"\xa5" * 4096
    else:
        data = data[: len(data) // 3]
    db.write_bytes(bytes(data))
    done = _daemon_cli("--state-dir", str(d.state_dir), "--port", str(free_port()))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1, line
    assert str(db) in line and "move it aside" in line


def test_a_store_deleted_under_the_daemon_is_noticed_and_written_back(tmp_path):
    d = Daemon(tmp_path / "state").start()
    try:
        jobs = [d.submit(f"j{i}", iterations=10) for i in range(4)]
        for job in jobs:
            wait_for(lambda j=job: d.state(j) == "finished", 120, f"{job} to finish")
        for name in ("adloader.db", "adloader.db-wal", "adloader.db-shm"):
            (d.state_dir / name).unlink(missing_ok=True)
        # the file comes back a moment before the note that says so (another thread): both
        wait_for(lambda: "deleted" in (d.http.get("/healthz").json()["store"] or ""), 10,
                 "the store's deletion said")
        assert (d.state_dir / "adloader.db").exists()
        assert "was deleted while the daemon ran" in d.log
    finally:
        d.stop()
    again = Daemon(d.state_dir, port=d.port).start()
    try:
        listed = {j["id"]: j["state"] for j in again.http.get("/v1/jobs").json()}
        assert listed == dict.fromkeys(jobs, "finished")
        assert again.events("store_restored")
    finally:
        again.stop()


def test_a_store_deleted_just_before_a_graceful_stop_is_written_back_first(tmp_path):
    """Deleted, a job submitted, the daemon stopped at once (before its 2 s check): the stop
    checks the store's identity first and writes it back, so the restart has every job."""
    d = Daemon(tmp_path / "state").start()
    try:
        jobs = [d.submit(f"j{i}", command=[sys.executable, "-c", "pass"]) for i in range(3)]
        for name in ("adloader.db", "adloader.db-wal", "adloader.db-shm"):
            (d.state_dir / name).unlink(missing_ok=True)
        jobs.append(d.submit("after", command=[sys.executable, "-c", "pass"]))
    finally:
        d.stop()
    again = Daemon(d.state_dir, port=d.port).start()
    try:
        listed = {j["id"] for j in again.http.get("/v1/jobs").json()}
        assert listed == set(jobs)
    finally:
        again.stop()


def test_a_store_lost_while_no_daemon_ran_is_said_at_the_next_start(tmp_path):
    """The database deleted between two daemons (or its daemon killed before it could write
    it back): the next start checks the store's identity first, finds its id file without
    its database, starts afresh and says so (log, /healthz, an event) — and a plain restart,
    or a database swapped for another, is told apart."""
    d = Daemon(tmp_path / "state").start()
    try:
        d.submit("before", command=[sys.executable, "-c", "pass"])
    finally:
        d.stop()
    again = Daemon(d.state_dir, port=d.port).start()  # a plain restart: nothing to say
    try:
        assert again.http.get("/healthz").json().get("store") is None
        assert not again.events("store_lost")
    finally:
        again.stop()
    other = tmp_path / "other"
    Daemon(other).start().stop()  # another node's store, made apart
    for name in ("adloader.db", "adloader.db-wal", "adloader.db-shm"):
        (d.state_dir / name).unlink(missing_ok=True)
    lost = Daemon(d.state_dir, port=d.port).start()
    try:
        note = lost.http.get("/healthz").json()["store"]
        assert "gone when the daemon started" in note and "jobs of the old one" in note
        assert lost.events("store_lost") and note in lost.log
        assert lost.http.get("/v1/jobs").json() == []
    finally:
        lost.stop()
    (d.state_dir / "adloader.db").unlink()
    (d.state_dir / "adloader.db").write_bytes((other / "adloader.db").read_bytes())
    swapped = Daemon(d.state_dir, port=d.port).start()
    try:
        assert "another state database" in swapped.http.get("/healthz").json()["store"]
    finally:
        swapped.stop()


def _can_mount_tmpfs(tmp_path) -> bool:
    target = tmp_path / "probe"
    target.mkdir()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"mount -t tmpfs -o size=1m tmpfs {target}"], capture_output=True)
    return done.returncode == 0


@pytest.mark.root  # a tmpfs mounted in a mount namespace of its own
def test_a_full_state_dir_never_launches_a_job_twice(tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a tmpfs in a mount namespace here (needs CAP_SYS_ADMIN)")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    wrap = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            f"mount -t tmpfs -o size=3m,mode=0700 tmpfs {state} && exec \"$@\"", "sh")
    # every arrival held for the window: the state dir fills before any launch is planned
    d = Daemon(state, window=1.5, wrap=wrap, extra=("--hold-arrivals",)).start()
    try:
        filler = d.path("filler")
        jobs = [d.submit(f"j{i}", iterations=10) for i in range(2)]
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the state dir to the last byte
        for size in (65536, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
        os.close(fd)
        wait_for(lambda: d.metric("adloader_storage_errors_total") > 0, 30,
                 "a write to fail for want of space")
        # the window closes on the full disk: the decision plans a launch, and defers it
        wait_for(lambda: any(f"{j}: not launched" in d.log for j in jobs), 60,
                 "a launch deferred for want of space")
        assert all(d.state(j) in ("buffered", "queued") for j in jobs), \
            [d.state(j) for j in jobs]
        assert not list(d.path("jobs").iterdir())  # no process was started
        filler.unlink()
        for job in jobs:
            wait_for(lambda j=job: d.state(j) == "finished", 120, f"{job} to finish")
            assert len(d.events("launched", job)) == 1
        assert sorted(p.name for p in d.path("jobs").glob("*.exit")) == sorted(
            f"{j}.exit" for j in jobs)  # each launched once, each ran once
    finally:
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(30)
