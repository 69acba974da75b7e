"""A real daemon process on a free port and a temp state dir, for integration tests."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from waiting import wait_for  # noqa: F401  (for the tests)

from adloader.remote.process import DaemonProcess, free_port  # noqa: F401  (for the tests)

PRIOR = "ADLOADER_TEST_PRIOR"  # a fitted prior model for every daemon the tests start


def fitted_prior() -> Path:
    """The paper profile's prior model as a daemon keeps it (``prior-model.json`` in its state
    dir), fitted once a test run (or the file ``$ADLOADER_TEST_PRIOR`` names): a daemon a test
    starts reads it instead of fitting the same model again (~2 s here, ~35 s in the QEMU
    guest). The daemon checks the profile's digest, so one started on another profile fits
    its own."""
    named = os.environ.get(PRIOR)
    if named and Path(named).is_file():
        return Path(named)
    from adloader.daemon.model.online_model import prior_model

    folder = tempfile.mkdtemp(prefix="adloader-test-prior-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / "prior-model.json"
    prior_model("paper", path)
    os.environ[PRIOR] = str(path)
    return path


class Daemon(DaemonProcess):
    """A real daemon for a test: small windows and fast heartbeats, test helpers on top."""

    def __init__(self, state_dir: Path, capacity: int = 4, gpus: int = 2, window: float = 0.3,
                 heartbeat: float = 0.25, port: int | None = None, extra: tuple = (),
                 wrap: tuple = ()):
        args = ["--capacity", str(capacity), "--gpus", str(gpus), "--arrival-window",
                str(window), "--completion-window", str(window), "--heartbeat", str(heartbeat),
                *extra]
        env = dict(os.environ, ADLOADER_GPU_LOCK_DIR=str(Path(state_dir).parent))
        super().__init__(state_dir, args, port=port, wrap=wrap, env=env)

    def start(self) -> Daemon:
        kept = self.state_dir / "prior-model.json"
        if not kept.exists():
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.copyfile(fitted_prior(), kept)
        return super().start()

    def train_command(self, model: str = "smResnet20", batch: int = 8, iterations: int = 30,
                      step_scale: float = 1.0) -> list[str]:
        return [sys.executable, "-m", "adloader.workloads.train", "--model", model,
                "--batch-size", str(batch), "--iterations", str(iterations), "--images", "16",
                "--crop", "32", "--step-scale", str(step_scale),
                "--data", str(self.state_dir.parent / "jpeg")]

    def submit(self, name: str, model: str = "smResnet20", batch: int = 8,
               iterations: int = 30, workers: int | None = None, step_scale: float = 1.0,
               command: list[str] | None = None):
        command = command or self.train_command(model, batch, iterations, step_scale)
        body = {"name": name, "command": command, "model": model, "batch_size": batch,
                "iterations": iterations}
        if workers is not None:
            body["workers"] = workers
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def state(self, job_id: str) -> str:
        return self.job(job_id)["state"]

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
                "from adloader.host.cpu_group import cpu_group; print(cpu_group(), flush=True)"]


def group_of_a_new_session() -> str | None:
    """What a process started in a new session reports (as a job from another terminal)."""
    out = subprocess.run(REPORT_GROUP, start_new_session=True, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return None if out in ([], ["None"]) else out[0]


@functools.cache
def sessions_split_cpu() -> bool:
    """Does the kernel here give a new session its own CPU share (autogroup in effect)?"""
    from adloader.host.cpu_group import cpu_group

    return cpu_group() is not None and group_of_a_new_session() != cpu_group()


class RawMaster:
    """A hand-made master on a raw DEALER socket: it sends exactly what a test tells it, as a
    careless or hostile tenant's process would."""

    def __init__(self, endpoint: str, identity: bytes | None = None):
        import zmq

        self._zmq = zmq
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        if identity:
            self.sock.setsockopt(zmq.ROUTING_ID, identity)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.connect(endpoint)

    def send(self, message) -> None:
        from adloader.protocol import encode

        self.sock.send(message if isinstance(message, bytes) else encode(message))

    def received(self, timeout_s: float = 0.5) -> list:
        """Everything that arrives within ``timeout_s`` (decoded commands)."""
        from adloader.protocol import decode_to_job

        out, deadline = [], time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                out.append(decode_to_job(self.sock.recv()))
        return out

    def register(self, job: str, token: str, workers: int = 1, iterations: int = 10**6,
                 **extra) -> None:
        from adloader.protocol import JobFeatures, Register

        feats = JobFeatures(model="smResnet20", batch_size=8, flops_g=0.3, params_m=0.9,
                            iterations=iterations)
        self.send(Register(job=job, token=token, features=feats, workers=workers, **extra))

    def beat(self, job: str, token: str, iteration: int, **fields) -> None:
        from adloader.protocol import Heartbeat

        values = {"step_s": 0.05, "data_wait_s": 0.001, "samples_per_s": 160.0, "workers": 1}
        values.update(fields)
        self.send(Heartbeat(job=job, token=token, iteration=iteration, **values))

    def close(self) -> None:
        self.sock.close()
        self.context.term()

    def __enter__(self) -> RawMaster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """A Python job script written to ``tmp_path/name``; returns the command that runs it."""
    path = Path(tmp_path) / name
    path.write_text(body)
    return [sys.executable, str(path)]


ATTACHED_LOOP = """
import os, sys, time
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader
loader = ElasticDataLoader(list(range(100000)), batch_size=4, num_workers=0)
job = attach(loader, model="smResnet20", batch_size=4, iterations=100000)
print("attached", flush=True)
for i, batch in enumerate(loader):
    time.sleep(0.02)  # pacing: a training step
    {body}
"""


def attached_script(tmp_path: Path, name: str, body: str = "pass") -> list[str]:
    """A job that attaches and iterates a plain loader; ``body`` runs at every batch (with
    ``i``, the batch index): e.g. ``if i == 20: raise ValueError('boom')``."""
    return script(tmp_path, name, ATTACHED_LOOP.replace("{body}", body))
