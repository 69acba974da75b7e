"""Launcher: starts submitted jobs as processes with their allocation in the environment.

Each job runs under a supervisor (``daemon.jobs.supervise``) in its own process group, as the
daemon's user, with stdout and stderr in ``STATE_DIR/logs/<job>.log``. The supervisor
records the job's exit status in ``STATE_DIR/jobs/<job>.exit`` whether or not the daemon
is alive, so a restarted daemon reconciles every job it launched (as kubelet reconciles
containers): finished, failed with its code or signal, or still running and re-attaching.
A job is launched at most once: the node records the intent before ``start`` runs, and
``start`` refuses a job that has a supervisor, a start record or an exit status already;
a job whose intent was recorded but whose supervisor never recorded its start never ran,
and may be launched again.

The environment carries the job contract (``adloader.env``): ADLOADER_ENDPOINT, ADLOADER_JOB,
ADLOADER_JOB_TOKEN (this job's token only), ADLOADER_WORKERS, ADLOADER_GPU_IDS and
ADLOADER_SUPERVISOR (plus CUDA_VISIBLE_DEVICES); the REST token is never passed on.

Not its own *session*: with the kernel's autogroup on (most distributions), every session is
one scheduling group and CFS shares the CPU equally between groups, so each job would get
the same CPU whatever its workers and the allocation would change nothing on a node where
workers outnumber cores. In the daemon's session the kernel shares the CPU per process, so a
job's workers are its share — the premise of λ(d; D) = d/D · L(D).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from adloader import env as names

# standard library only, so no ``site``; ``-P``: not the script's folder on its path either
SUPERVISOR = [sys.executable, "-S", "-P", str(Path(__file__).with_name("supervise.py"))]
TAIL_LINES = 20
# the kernel lists each thread's children (CONFIG_PROC_CHILDREN; Linux ≥ 3.5, on by default)
CHILD_LISTS = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


class LaunchError(RuntimeError):
    """A job's process could not be started; the message says why."""


class LogUnwritable(LaunchError):
    """The job's log file could not be opened in the state folder (full, read-only, an I/O
    error): the node's fault, not the job's — it waits and is launched again."""


@dataclass
class Launched:
    pid: int
    log_path: str


@dataclass(frozen=True)
class ExitStatus:
    """How a job's process ended: ``recorded`` by its supervisor, or only inferred."""

    exit_code: int | None
    signal: int | None
    error: str | None = None
    recorded: bool = True
    pgid: int | None = None  # not recorded: the job's process group, which may live on
    note: str | None = None  # what the daemon adds (how an unrecorded ending was settled)
    seen: bool = False  # not recorded: its supervisor was seen to end just now (the group id
    # is fresh, not one read back from an earlier boot that may name someone else's group)


class Launcher:
    def __init__(self, state_dir: Path, endpoint: str):
        self.log_dir = Path(state_dir) / "logs"
        self.status_dir = Path(state_dir) / "jobs"
        self.endpoint = endpoint
        for folder in (self.log_dir, self.status_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.checkpoint_dir = Path(state_dir) / "checkpoints"
        self.children: dict[str, subprocess.Popen] = {}  # launched by this daemon
        self.adopted: dict[str, psutil.Process] = {}  # launched by an earlier one
        self._meters: dict[int, psutil.Process] = {}  # kept: cpu_percent measures between calls
        self.job_pids: dict[str, int] = {}  # job id -> its own process (its supervisor's child)
        self._cpu_s: dict[str, float] = {}  # job id -> CPU seconds counted so far (monotonic)

    def status_path(self, job_id: str) -> Path:
        return self.status_dir / f"{job_id}.exit"

    def ever_started(self, job_id: str) -> bool:
        """Whether the job's supervisor ever ran (it records that before the command)."""
        return Path(f"{self.status_path(job_id)}.started").exists()

    def log_path(self, job_id: str) -> Path:
        return self.log_dir / f"{job_id}.log"

    def start(self, job_id: str, token: str, command: list[str], cwd: str | None,
              env: dict[str, str], workers: int, gpu_ids: tuple[int, ...],
              cgroups: tuple[str, ...] = ()) -> Launched:
        """Start the job under its supervisor (in ``cgroups``, its CPU groups, when given);
        LaunchError (with the reason) if it cannot."""
        status = self.status_path(job_id)
        if (job_id in self.children or job_id in self.adopted or status.exists()
                or self.ever_started(job_id)):
            raise LaunchError(f"job {job_id} was launched already")
        full_env = {k: v for k, v in os.environ.items()
                    if k not in (names.API_TOKEN, *names.JOB_CONTRACT)}
        full_env.update(env)
        ids = ",".join(str(g) for g in gpu_ids)
        full_env.update({
            names.ENDPOINT: self.endpoint,
            names.JOB: job_id,
            names.JOB_TOKEN: token,
            names.WORKERS: str(workers),
            names.GPU_IDS: ids,
            names.SUPERVISOR: "launcher",
            "CUDA_VISIBLE_DEVICES": ids,
            "PYTHONUNBUFFERED": "1",
        })
        full_env.setdefault(names.CHECKPOINT_DIR, str(self.checkpoint_dir))
        log_path = self.log_path(job_id)
        try:
            for folder in (self.log_dir, self.status_dir):  # a state folder mounted afresh
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            log = open(log_path, "ab")  # noqa: SIM115  (closed below, once the child has it)
        except OSError as exc:
            raise LogUnwritable(f"cannot open the log of job {job_id} ({log_path}): "
                                f"{exc.strerror}") from None
        try:
            with log:
                groups = [arg for d in cgroups for arg in ("--cgroup", d)]
                proc = subprocess.Popen([*SUPERVISOR, *groups, str(status), "--", *command],
                                        cwd=cwd or None, env=full_env, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        process_group=0, umask=0o022)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise LaunchError(f"cannot start job {job_id}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        self.children[job_id] = proc
        return Launched(proc.pid, str(log_path))

    def status(self, job_id: str) -> ExitStatus | None:
        """The exit status the job's supervisor recorded, if it has ended."""
        try:
            data = json.loads(self.status_path(job_id).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        code, sig = data.get("exit_code"), data.get("signal")
        return ExitStatus(code if isinstance(code, int) else None,
                          sig if isinstance(sig, int) else None, data.get("error"))

    def started_record(self, job_id: str) -> dict:
        """What the job's supervisor recorded as it started: ``pid`` (its own) and, once the
        command runs, ``job_pid``; {} when there is none."""
        try:
            data = json.loads(Path(f"{self.status_path(job_id)}.started").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def new_job_pids(self) -> list[tuple[str, int]]:
        """The launched jobs whose own pid was read since the last call (one small file
        read per running job whose pid is not known yet, usually none); an adopted job's
        comes on the first call after its adoption."""
        found = []
        for job_id in (*self.children, *self.adopted):
            if job_id not in self.job_pids:
                pid = self.started_record(job_id).get("job_pid")
                if isinstance(pid, int) and pid > 0:
                    self.job_pids[job_id] = pid
                    found.append((job_id, pid))
        return found

    def supervisor_pid(self, job_id: str) -> int | None:
        """The pid of a running job's supervisor (the leader of its process group)."""
        proc = self.children.get(job_id) or self.adopted.get(job_id)
        return proc.pid if proc is not None else None

    def adopt(self, job_id: str, pid: int | None) -> bool:
        """Watch a job an earlier daemon launched; False if its supervisor is gone."""
        proc = self._supervisor(job_id, pid)
        if proc is None:
            return False
        self.adopted[job_id] = proc
        return True

    def _supervisor(self, job_id: str, pid: int | None) -> psutil.Process | None:
        """The live supervisor of ``job_id`` (at ``pid``, else searched for): a process whose
        command line names the job's status file, so a reused pid is never mistaken."""
        marker = str(self.status_path(job_id))
        candidates = [pid] if pid else [p.pid for p in psutil.process_iter()]
        for candidate in candidates:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(candidate)
                if marker in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE:
                    return proc
        return None

    def find(self, job_id: str) -> int | None:
        """The pid of a job's supervisor that is running without a record of it."""
        proc = self._supervisor(job_id, None)
        return proc.pid if proc else None

    def reap(self) -> list[tuple[str, ExitStatus]]:
        """Jobs whose supervisor exited since the last call, with their exit status."""
        done = []
        for job_id, proc in list(self.children.items()):
            code = proc.poll()
            if code is None:
                continue
            del self.children[job_id]
            self._forget(job_id)
            status = self.status(job_id)
            if status is None:  # the supervisor itself was killed: all that is known
                status = (ExitStatus(None, -code, recorded=False, pgid=proc.pid, seen=True)
                          if code < 0 else
                          ExitStatus(code if code < 128 else None,
                                     code - 128 if code > 128 else None, recorded=False,
                                     pgid=proc.pid, seen=True))
            done.append((job_id, status))
        for job_id, proc in list(self.adopted.items()):
            try:
                gone = proc.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            except psutil.Error:
                gone = False
            if gone:
                del self.adopted[job_id]
                self._forget(job_id)
                done.append((job_id, self.status(job_id) or ExitStatus(
                    None, None, recorded=False, pgid=proc.pid, seen=True)))
        return done

    def _forget(self, job_id: str) -> None:
        self.job_pids.pop(job_id, None)
        self._cpu_s.pop(job_id, None)

    def signal(self, job_id: str, sig: int) -> bool:
        """Send ``sig`` to a launched job's process group (only ever to a group this
        daemon's launcher started); False if there is none."""
        pid = self.supervisor_pid(job_id)
        if pid is None:
            return False
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def cpu_percent(self, job_id: str) -> float | None:
        """CPU % of a launched job's processes (its workers included) since the last call
        for it (the first call measures nothing yet: 0); None for a job not launched here."""
        usage = self.cpu_usage(job_id)
        return None if usage is None else usage[0]

    @staticmethod
    def process_tree() -> dict[int, list[int]] | None:
        """``psutil_tree()``, read once for every job of a reading — None where the kernel
        lists each thread's children (``/proc/PID/task/TID/children``): ``family`` reads a
        job's own few files instead (the pass costs ~70 µs a process here, 5 ms at 70
        processes, every reading; a node runs hundreds)."""
        return None if CHILD_LISTS else psutil_tree()

    def cpu_usage(self, job_id: str, tree: dict[int, list[int]] | None = None
                  ) -> tuple[float, float] | None:
        """(CPU % since the last call, CPU seconds so far) of a launched job's processes —
        its supervisor, the job, its workers, and what those have reaped (the kernel adds a
        waited-for child's time to its parent's); the seconds never go down (a counter).
        None for a job not launched here. ``tree``: ``process_tree()``, read once for every
        job of a reading."""
        pid = self.supervisor_pid(job_id)
        if pid is None:
            return None
        percent = seconds = 0.0
        for member in family(pid, self.process_tree() if tree is None else tree):
            with contextlib.suppress(psutil.Error):
                meter = self._meters.get(member)
                if meter is None:
                    meter = self._meters[member] = psutil.Process(member)
                percent += meter.cpu_percent(None)
                t = meter.cpu_times()
                seconds += t.user + t.system + t.children_user + t.children_system
        seconds = self._cpu_s[job_id] = max(seconds, self._cpu_s.get(job_id, 0.0))
        return percent, seconds

    def forget_meters(self) -> None:
        """Drop the meters of processes that are gone."""
        for pid, meter in list(self._meters.items()):
            if not meter.is_running():
                del self._meters[pid]

    def tail(self, job_id: str, lines: int = TAIL_LINES, max_bytes: int = 4096) -> str:
        """The last lines of a job's output (kept with a failed job's final event)."""
        try:
            with open(self.log_path(job_id), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - max_bytes))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop_all(self) -> None:
        for job_id in list(self.children):
            self.signal(job_id, signal.SIGKILL)


def psutil_tree() -> dict[int, list[int]]:
    """Each process's children, from one pass over the node's processes (psutil's
    ``children()`` makes that pass once per call)."""
    tree: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        tree.setdefault(proc.info["ppid"], []).append(proc.pid)
    return tree


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid``, as the kernel lists them (none once it is
    gone)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    return out


def family(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    """``pid`` and its descendants: from ``tree`` (``Launcher.process_tree``) when given,
    else from the kernel's children lists."""
    members, todo = [], [pid]
    while todo:
        member = todo.pop()
        members.append(member)
        todo.extend(_children(member) if tree is None else tree.get(member, ()))
    return members


def group_of_job(pgid: int, job_id: str) -> bool:
    """Whether a live process of group ``pgid`` carries ``job_id`` in its environment (the
    launcher put it there): a group id read back from an earlier boot is the job's, not a
    stranger's that took the number since."""
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if (os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE
                    and proc.environ().get(names.JOB) == job_id):
                return True
    return False


def group_alive(pgid: int) -> bool:
    """Whether a live process (not a zombie waiting to be reaped) is left in group ``pgid``."""
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
    return False
