"""The state folder fails under a running daemon, on real file systems the test makes: a
tmpfs filled to the brim, an ext4 loop mount that turns read-only after an error (the
kernel's ``trigger_fs_error``, as ``errors=remount-ro`` does on a disk error), the same
shut down so that every access answers EIO (``EXT4_IOC_SHUTDOWN``, as xfstests' ``godown``),
a FUSE pass-through that answers EIO on demand and then recovers (``tests/fuse_faults.py``:
this machine's kernel has no device-mapper for dm-error or dm-flakey), and immutable files
(``chattr +i``).

In each the daemon stays up, answers writes with 503 naming the cause, says so in
``/healthz``, keeps its jobs, and — once the fault clears — writes what it held, records the
fault and its end as events, and takes writes again. These need root and mount; under
``CI=true`` a test that cannot run fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ci_rules import cannot
from daemon_harness import Daemon, wait_for

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
SHUTDOWN_NOLOGFLUSH = 2


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@pytest.fixture
def mounts(tmp_path):
    """``make(kind)`` mounts a fresh file system at a new mount point and returns it;
    everything is unmounted at the end."""
    if os.geteuid() != 0:
        cannot("mounting file systems needs root")
    made: list[tuple[Path, str | None]] = []
    servers: list[subprocess.Popen] = []

    def make(kind: str, size: str = "16m") -> Path:
        point = tmp_path / f"mnt{len(made)}"
        point.mkdir()
        loop = None
        try:
            if kind == "fuse":  # the switch beside it: ``point.switch`` holds an errno name
                servers.append(_fuse(point, tmp_path / f"{point.name}.backing",
                                     _switch(point)))
            elif kind == "tmpfs":
                _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                     str(point))
            else:
                if not (shutil.which("mkfs.ext4") and shutil.which("losetup")):
                    cannot("mkfs.ext4 and losetup are needed (e2fsprogs, util-linux)")
                image = tmp_path / f"disk{len(made)}.img"
                _run("truncate", "-s", "64M", str(image))
                _run("mkfs.ext4", "-q", "-F", str(image))
                loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True,
                                      capture_output=True, text=True).stdout.strip()
                _run("mount", "-o", "errors=remount-ro", loop, str(point))
        except subprocess.CalledProcessError as exc:
            cannot(f"{' '.join(exc.cmd)}: {exc.stderr.strip()}")
        made.append((point, loop))
        return point

    yield make
    for point, loop in reversed(made):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
    for server in servers:
        server.terminate()
        server.wait(10)


def _switch(point: Path) -> Path:
    return point.with_name(f"{point.name}.switch")


def _fuse(point: Path, backing: Path, switch: Path) -> subprocess.Popen:
    """``tests/fuse_faults.py`` serving ``backing`` at ``point`` (fails as ``switch`` says)."""
    if not Path("/dev/fuse").exists():
        cannot("/dev/fuse is missing (the kernel's FUSE)")
    try:
        import fuse  # noqa: F401  (fusepy: the dev extra)
    except (ImportError, OSError) as exc:  # OSError: libfuse.so.2 missing (libfuse2)
        cannot(f"fusepy over libfuse2 is needed: {exc}")
    backing.mkdir()
    server = subprocess.Popen([sys.executable, str(Path(__file__).parents[2] / "fuse_faults.py"),
                               str(backing), str(point), str(switch)],
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.ismount(point) or server.poll() is not None, 30,
                 "the FUSE mount")
    except AssertionError:
        server.kill()
        raise
    if server.poll() is not None:
        cannot(f"FUSE mount failed: {server.stderr.read().strip()}")
    return server


def _job(name: str, seconds: float) -> dict:
    return {"name": name, "model": "smResnet20", "batch_size": 8, "iterations": 10,
            "command": [sys.executable, "-c", f"import time; time.sleep({seconds})"]}


def _fault(daemon) -> dict:
    return daemon.http.get("/healthz").json().get("store_fault") or {}


def _refused(daemon, cause: str, words: str) -> None:
    r = daemon.http.post("/v1/jobs", json=_job("refused", 1))
    assert r.status_code == 503 and words in r.json()["detail"], r.text
    health = daemon.http.get("/healthz").json()
    assert health["status"] == "degraded" and health["store_fault"]["cause"] == cause, health
    assert daemon.proc.poll() is None


def _recovered(daemon, running: str) -> None:
    """Writes go through again: health ok, the job that ended meanwhile recorded as it
    ended, the fault and its end as events, a new job taken."""
    wait_for(lambda: daemon.http.get("/healthz").json()["status"] == "ok", 30,
             "the daemon to write what it held")
    wait_for(lambda: daemon.state(running) == "finished", 30,
             f"{running}'s end recorded as it ended (exit 0)")
    kinds = [e["kind"] for e in daemon.events()]
    assert "store_fault" in kinds and "store_recovered" in kinds, kinds
    r = daemon.http.post("/v1/jobs", json=_job("after", 0.1))
    assert r.status_code == 201, r.text


def _reads_answer(daemon, job: str) -> None:
    """While the disk fails, every read answers: what the daemon holds in memory (the
    running job, the node) 200, the history 200 from SQLite's cache or 503 naming the I/O
    error — never a 500, never a hang."""
    for path in (f"/v1/jobs/{job}", "/v1/node", "/v1/allocations", "/healthz"):
        r = daemon.http.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text)
    for path in ("/v1/jobs", "/v1/jobs?state=finished", "/v1/events?limit=500"):
        r = daemon.http.get(path)
        assert r.status_code == 200 or (r.status_code == 503 and "I/O error"
                                        in r.json()["detail"]), (path, r.status_code, r.text)


@pytest.fixture
def started(mounts):
    """A daemon whose state folder is on a file system of the kind asked for, with one job
    running (it ends while the fault lasts)."""
    daemons = []

    def start(kind: str) -> tuple[Daemon, Path, str]:
        point = mounts(kind)
        daemon = Daemon(point / "state").start()
        daemons.append(daemon)
        r = daemon.http.post("/v1/jobs", json=_job("running", 4))
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        wait_for(lambda: daemon.job(job)["pid"], 30, "the job to start")
        return daemon, point, job

    yield start
    for daemon in daemons:
        with contextlib.suppress(Exception):
            daemon.stop()


def test_a_full_disk_refuses_writes_keeps_the_job_and_recovers(started):
    daemon, point, job = started("tmpfs")
    filler = point / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", "count=64"],
                   capture_output=True)
    _refused(daemon, "full", "the disk is full")
    wait_for(lambda: daemon.http.get("/healthz").json().get("unwritten_jobs"), 30,
             "the job's end, held in memory")  # it ended: its record waits for space
    filler.unlink()
    _recovered(daemon, job)


def test_a_read_only_file_system_refuses_writes_and_a_fresh_one_takes_the_state(started,
                                                                                mounts):
    daemon, point, job = started("ext4")
    loop = next(line.split()[0] for line in Path("/proc/mounts").read_text().splitlines()
                if line.split()[1] == str(point))
    trigger = Path(f"/sys/fs/ext4/{Path(loop).name}/trigger_fs_error")
    if not trigger.exists():
        cannot(f"{trigger} is missing (the kernel's ext4 has no error trigger)")
    trigger.write_text("test: read-only\n")
    _refused(daemon, "read_only", "read-only")
    wait_for(lambda: daemon.http.get("/healthz").json().get("unwritten_jobs"), 30,
             "the job's end, held in memory")
    # the operator's fix: the broken disk off, a good one mounted where the state was
    subprocess.run(["umount", "-l", str(point)], check=True)
    _run("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(point))
    _recovered(daemon, job)
    assert any(e["kind"] == "store_restored" for e in daemon.events())  # from its open copy


def test_an_io_error_refuses_writes_and_the_daemon_stays_up(started):
    daemon, point, job = started("ext4")
    fd = os.open(point, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
    except OSError as exc:
        cannot(f"EXT4_IOC_SHUTDOWN: {exc.strerror}")
    finally:
        os.close(fd)
    _refused(daemon, "io_error", "I/O error")
    # the job goes on and ends; the daemon, with nothing readable on its disk, stays up
    wait_for(lambda: _fault(daemon) and daemon.proc.poll() is None, 10, "the fault, stated")
    assert daemon.http.get("/healthz").status_code == 200


def test_io_errors_that_clear_refuse_writes_keep_the_job_and_recover(started):
    """A disk that answers EIO to everything for a while (a FUSE layer that fails on
    demand), then comes back: the daemon answers 503 naming the I/O error, holds the end of
    the job that finished meanwhile, and writes it once the disk answers again."""
    daemon, point, job = started("fuse")
    _switch(point).write_text("EIO")
    _refused(daemon, "io_error", "I/O error")
    _reads_answer(daemon, job)
    wait_for(lambda: daemon.http.get("/healthz").json().get("unwritten_jobs"), 30,
             "the job's end, held in memory")
    assert daemon.proc.poll() is None
    _switch(point).write_text("")
    _recovered(daemon, job)


def test_immutable_state_files_hold_a_launch_back_until_they_are_writable(mounts):
    point = mounts("tmpfs")
    if not shutil.which("chattr"):
        cannot("chattr is needed (e2fsprogs)")
    daemon = Daemon(point / "state").start()
    try:
        logs = point / "state" / "logs"
        _run("chattr", "+i", str(logs))
        try:
            r = daemon.http.post("/v1/jobs", json=_job("held", 0.5))
            assert r.status_code == 201, r.text
            job = r.json()["id"]
            wait_for(lambda: daemon.events("launch_deferred", job), 30,
                     "the launch held back (its log cannot be created)")
            assert daemon.state(job) in ("queued", "buffered")  # waiting, not failed
        finally:
            _run("chattr", "-i", str(logs))
        wait_for(lambda: daemon.state(job) == "finished", 60, "the job launched and ended")
    finally:
        daemon.stop()
