"""Launcher: starts submitted jobs as processes with their allocation in the environment.

Each job runs in its own process group (so a daemon restart or a Ctrl-C at the daemon's
terminal does not take it down, and cancelling stops its workers too), as the daemon's user,
with stdout and stderr in ``STATE_DIR/logs/<job>.log``. The environment carries what
``adloader.client.attach`` reads: ADLOADER_ENDPOINT, ADLOADER_JOB, ADLOADER_TOKEN,
ADLOADER_WORKERS and ADLOADER_GPU_IDS (plus CUDA_VISIBLE_DEVICES).

Not its own *session*: with the kernel's autogroup on (most distributions), every session is
one scheduling group and CFS shares the CPU equally between groups, so each job would get
the same CPU whatever its workers and the allocation would change nothing on a node where
workers outnumber cores. In the daemon's session the kernel shares the CPU per process, so a
job's workers are its share — the premise of λ(d; D) = d/D · L(D).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass
class Launched:
    pid: int
    log_path: str


class Launcher:
    def __init__(self, log_dir: Path, endpoint: str):
        self.log_dir, self.endpoint = Path(log_dir), endpoint
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children: dict[str, subprocess.Popen] = {}

    def start(self, job_id: str, token: str, command: list[str], cwd: str | None,
              env: dict[str, str], workers: int, gpu_ids: tuple[int, ...]) -> Launched:
        log_path = self.log_dir / f"{job_id}.log"
        full_env = dict(os.environ)
        full_env.update(env)
        ids = ",".join(str(g) for g in gpu_ids)
        full_env.update({
            "ADLOADER_ENDPOINT": self.endpoint,
            "ADLOADER_JOB": job_id,
            "ADLOADER_TOKEN": token,
            "ADLOADER_WORKERS": str(workers),
            "ADLOADER_GPU_IDS": ids,
            "CUDA_VISIBLE_DEVICES": ids,
            "PYTHONUNBUFFERED": "1",
        })
        full_env.setdefault("ADLOADER_CHECKPOINT_DIR", str(self.log_dir.parent / "checkpoints"))
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(command, cwd=cwd or None, env=full_env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    process_group=0)
        self.children[job_id] = proc
        return Launched(proc.pid, str(log_path))

    def reap(self) -> list[tuple[str, int]]:
        """Children that exited since the last call, with their exit codes."""
        done = []
        for job_id, proc in list(self.children.items()):
            code = proc.poll()
            if code is not None:
                done.append((job_id, code))
                del self.children[job_id]
        return done

    @staticmethod
    def alive(pid: int | None) -> bool:
        """For jobs started by an earlier daemon (not our children): is the pid still there?"""
        if not pid:
            return False
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def stop(self, job_id: str, pid: int | None, grace_s: float = 5.0) -> None:
        """SIGTERM the job's process group, SIGKILL after the grace period."""
        proc = self.children.get(job_id)
        pid = proc.pid if proc else pid
        if not pid:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            return
        try:
            if proc:
                proc.wait(grace_s)
            else:
                psutil.Process(pid).wait(grace_s)
        except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        except psutil.Error:
            pass

    def stop_all(self) -> None:
        for job_id in list(self.children):
            self.stop(job_id, None, grace_s=2.0)


def job_cpu_percent(pid: int | None) -> float:
    """CPU % of a job's process and its children (its loader workers), from psutil."""
    if not pid:
        return 0.0
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.cpu_percent(interval=None)
    return total
