"""A real daemon process on a free port and a temp state dir, for integration tests."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll until predicate() is truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


class Daemon:
    def __init__(self, state_dir: Path, capacity: int = 4, gpus: int = 2, window: float = 0.3,
                 heartbeat: float = 0.25, port: int | None = None):
        self.state_dir, self.port = Path(state_dir), port or free_port()
        self.args = [sys.executable, "-m", "adloader.cli", "daemon", "--state-dir",
                     str(state_dir), "--port", str(self.port), "--capacity", str(capacity),
                     "--gpus", str(gpus), "--arrival-window", str(window),
                     "--completion-window", str(window), "--heartbeat", str(heartbeat)]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Daemon:
        log = open(self.state_dir.with_suffix(".daemon.log"), "ab")  # noqa: SIM115
        env = dict(os.environ, ADLOADER_GPU_LOCK_DIR=str(self.state_dir.parent))
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for(self._healthy, 60, "the daemon to answer /healthz")
        self.token = (self.state_dir / "token").read_text().strip()
        self.http = httpx.Client(base_url=self.url,
                                 headers={"Authorization": f"Bearer {self.token}"}, timeout=10)
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}")
        try:
            return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def submit(self, name: str, model: str = "smResnet20", batch: int = 8,
               iterations: int = 30, workers: int | None = None, step_scale: float = 1.0):
        command = [sys.executable, "-m", "adloader.workloads.train", "--model", model,
                   "--batch-size", str(batch), "--iterations", str(iterations), "--images", "16",
                   "--crop", "32", "--step-scale", str(step_scale),
                   "--data", str(self.state_dir.parent / "jpeg")]
        body = {"name": name, "command": command, "model": model, "batch_size": batch,
                "iterations": iterations}
        if workers is not None:
            body["workers"] = workers
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def job(self, job_id: str) -> dict:
        return self.http.get(f"/v1/jobs/{job_id}").json()

    def events(self, kind: str | None = None, job: str | None = None) -> list[dict]:
        out = self.http.get("/v1/events", params={"limit": 5000}).json()
        return [e for e in out if (kind is None or e["kind"] == kind)
                and (job is None or e["job"] == job)]

    def metric(self, name: str) -> float:
        for line in self.http.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


REPORT_GROUP = [sys.executable, "-c",
                "from adloader.client.cpu_group import cpu_group; print(cpu_group(), flush=True)"]


def group_of_a_new_session() -> str | None:
    """What a process started in a new session reports (as a job from another terminal)."""
    out = subprocess.run(REPORT_GROUP, start_new_session=True, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return None if out in ([], ["None"]) else out[0]


@functools.cache
def sessions_split_cpu() -> bool:
    """Does the kernel here give a new session its own CPU share (autogroup in effect)?"""
    from adloader.client.cpu_group import cpu_group

    return cpu_group() is not None and group_of_a_new_session() != cpu_group()
