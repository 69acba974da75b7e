"""What an operator runs the daemon with, against real daemons: ``--version`` and the
version in ``/healthz``, ``--log-level`` / ``--log-format json``, metrics that Prometheus
takes as they are (``job_id``, counters, the process and build info), and systemd's
``Type=notify`` with the watchdog over a real unix datagram socket."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest
from daemon_harness import Daemon, wait_for
from prometheus_client.parser import text_string_to_metric_families

from adloader.host.build_info import build_info
from adloader.remote.process import DaemonProcess
from adloader.version import __version__

BURN = [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 60: pass\n"]


def test_version_is_printed_and_served(tmp_path):
    out = subprocess.run([sys.executable, "-m", "adloader", "--version"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.startswith(f"adloader {__version__} (") and "Python" in out
    with DaemonProcess(tmp_path / "state") as d:
        assert d.client.health()["version"] == __version__


def test_metrics_label_jobs_job_id_and_count_what_grows(tmp_path):
    d = Daemon(tmp_path / "state").start()
    try:
        job = d.submit("burner", command=BURN)

        def families():
            text = d.http.get("/metrics").text
            return {f.name: f for f in text_string_to_metric_families(text)}

        def cpu_seconds():
            samples = families()["adloader_job_cpu_seconds"].samples
            return [s for s in samples if s.labels == {"job_id": job} and s.value > 0.5]

        wait_for(cpu_seconds, 30, "the job's CPU seconds to be counted")
        got = families()
        assert got["adloader_job_cpu_seconds"].type == "counter"
        assert got["adloader_job_cpu_seconds"].samples[0].name == \
            "adloader_job_cpu_seconds_total"
        assert got["adloader_job_samples"].type == "counter"
        assert [s.labels for s in got["adloader_job_workers"].samples] == [{"job_id": job}]
        assert not [f for f in got.values() for s in f.samples if "job" in s.labels]
        assert "adloader_job_samples_per_second" not in got
        assert "adloader_job_cpu_percent" not in got
        first = cpu_seconds()[0].value
        wait_for(lambda: cpu_seconds()[0].value > first, 30, "the counter to grow")
        [build] = got["adloader_build_info"].samples
        assert build.value == 1 and build.labels == build_info()
        assert got["process_cpu_seconds"].samples[0].value > 0
        assert got["process_resident_memory_bytes"].samples[0].value > 0
    finally:
        d.stop()


def test_the_objects_alive_at_start_are_left_out_of_collections(tmp_path):
    """Once serving, the daemon froze what its start left alive (``gc.freeze``): a full
    collection walks only what came after. The 75,000 frozen here (2026-11-28) had made each
    full collection 51-68 ms, a read's wait under a burst of jobs (docs/benchmarks.md)."""
    with DaemonProcess(tmp_path / "state") as d:
        text = d.http.get("/metrics").text
    got = {f.name: f for f in text_string_to_metric_families(text)}
    [frozen] = got["adloader_gc_frozen_objects"].samples
    assert frozen.value >= 20_000  # 0 on a daemon that does not freeze
    generations = {s.labels["generation"] for s in got["python_gc_collections"].samples}
    assert generations == {"0", "1", "2"}


def test_json_logs_at_the_level_asked(tmp_path):
    with DaemonProcess(tmp_path / "state", ["--log-format", "json",
                                            "--log-level", "debug"]) as d:
        d.client.health()
    lines = [line for line in d.log.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert {"time", "level", "logger", "message"} <= set(records[0])
    said = [r for r in records if r["message"].startswith("adloader daemon: REST")]
    assert said and said[0]["level"] == "info" and said[0]["logger"] == "adloader.daemon"
    assert any(r["message"].startswith("adloader daemon: stopped") for r in records)
    with DaemonProcess(tmp_path / "quiet", ["--log-level", "error"]) as d:
        d.client.health()
    assert "adloader daemon: REST" in d.log  # the operator's line is printed at any level


@pytest.fixture
def notify_socket(tmp_path):
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    yield sock, path
    sock.close()


def _messages(sock, until, timeout: float) -> list[str]:
    """Datagrams received until ``until(messages)`` holds (AssertionError at the deadline)."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(got):
        with contextlib.suppress(TimeoutError):
            got.append(sock.recv(4096).decode())
    assert until(got), f"timed out after {timeout} s; received {got!r}"
    return got


def test_systemd_hears_ready_then_the_watchdog(tmp_path, notify_socket):
    sock, path = notify_socket
    env = dict(os.environ, NOTIFY_SOCKET=str(path), WATCHDOG_USEC="1000000")  # 1 s
    d = Daemon(tmp_path / "state")
    d.env = {**d.env, **env}
    d.start()
    try:
        got = _messages(sock, lambda m: sum(x == "WATCHDOG=1" for x in m) >= 2, 30)
        ready = [m for m in got if m.startswith("READY=1")]
        assert ready and got.index(ready[0]) < got.index("WATCHDOG=1")
        assert "STATUS=serving on 127.0.0.1:" in ready[0]
        job = d.submit("env", command=[sys.executable, "-c", "import os; print('inherited', "
                                       "[k for k in os.environ if k in ('NOTIFY_SOCKET', "
                                       "'WATCHDOG_USEC')])"])
        wait_for(lambda: d.job(job)["state"] == "finished", 30, "the job to finish")
        assert "inherited []" in d.http.get(f"/v1/jobs/{job}/log").text
    finally:
        assert d.stop() == 0
    _messages(sock, lambda m: "STOPPING=1" in m, 10)


def test_without_systemd_nothing_is_sent_and_nothing_breaks(tmp_path):
    from adloader.daemon.ops.systemd import Notifier

    env = {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    quiet = Notifier.from_environment(env)
    assert env == {} and quiet.address is None and quiet.interval_s is None
    assert not quiet.ready() and quiet.watchdog(lambda t: True) is None
    other = Notifier.from_environment({"NOTIFY_SOCKET": "@abstract", "WATCHDOG_USEC": "4",
                                       "WATCHDOG_PID": str(os.getpid() + 1)})
    assert other.address == "\0abstract" and other.interval_s is None  # not this process's
