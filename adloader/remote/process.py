"""``DaemonProcess``: a real ``adloader daemon`` in a state dir on a free port — the one
harness behind ``adloader demo``, the live benchmarks and the integration tests.

It starts ``python -m adloader daemon``, waits for ``/healthz`` (or says why the daemon
exited, with the end of its log), and hands out a ``DaemonClient`` and a raw ``httpx``
client. ``stop`` is a graceful SIGTERM (the exit status is returned); ``kill`` a SIGKILL.
``wrap`` prefixes the command (e.g. ``unshare ...`` to give it a mount namespace), and
``path`` then reads the state dir as the daemon sees it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .rest_client import DaemonClient

START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaemonProcess:
    def __init__(self, state_dir: str | os.PathLike, args: list[str] | tuple = (),
                 port: int | None = None, wrap: tuple = (), env: dict | None = None):
        self.state_dir, self.port = Path(state_dir), port or free_port()
        self.args = [*wrap, sys.executable, "-m", "adloader", "daemon", "--state-dir",
                     str(self.state_dir), "--port", str(self.port), *args]
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log_path = self.state_dir.with_suffix(".daemon.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.state_dir / 'control.sock'}"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def path(self, name: str) -> Path:
        """A file of the state dir as the daemon sees it (through /proc/PID/root when it
        runs in a mount namespace of its own)."""
        return Path(f"/proc/{self.proc.pid}/root{self.state_dir}") / name

    def start(self) -> DaemonProcess:
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._healthy():
            if self.proc.poll() is not None:
                tail = "\n".join(self.log.splitlines()[-5:])
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the daemon did not answer within {START_TIMEOUT_S:g} s")
            time.sleep(0.1)
        self.token = self.path("token").read_text().strip()
        self.client = DaemonClient(self.url, self.token, token_source=str(self.path("token")),
                                   timeout_s=30)
        self.http = httpx.Client(base_url=self.url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.token}"})
        return self

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def call(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One REST call through the typed client (errors as DaemonClient raises them)."""
        return self.client.request(method, path, **kwargs)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (a graceful stop), SIGKILL after ``timeout_s``; the exit status."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
