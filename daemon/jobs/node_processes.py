"""The launched jobs' processes as the node sees them (``JobProcesses``, held by
``daemon.node.Node``, speaking to ``daemon.jobs.launcher``): a launch recorded before it
starts, each job's own pid once its supervisor records it, its CPU, and how it ended — from
its supervisor's record, or, when the supervisor itself was killed, settled by ending what
is left of its process group. What the scheduler answers to a launch that did not happen or
to an ending is returned as ``Actions`` for the node to carry out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace

from adloader.errors import StorageError

from ..control.live import ACTIVE, Actions, LiveJob, exit_text
from ..control.scheduler import Scheduler
from ..control.tokens import TokenDigest, new_token
from ..store.store import Store
from .job_shares import JobShares
from .launcher import (
    ExitStatus,
    Launcher,
    LaunchError,
    LogUnwritable,
    group_alive,
    group_of_job,
)

log = logging.getLogger("adloader.daemon")
ORPHAN_GRACE_S = 3.0  # a job whose supervisor died: its group's time to be seen gone


def cpu_share_of(pid: int) -> tuple[int, float] | None:
    """(CPUs, their share of this daemon's CPUs) that the kernel lets process ``pid`` run
    on, when that is a strict subset of the daemon's own (a Slurm step's cpuset, a
    ``taskset``); None when it may run wherever the daemon does, or cannot be read (gone,
    another PID namespace)."""
    try:
        job, node = os.sched_getaffinity(pid), os.sched_getaffinity(0)
    except OSError:
        return None
    if not job or not job < node:
        return None
    return len(job), len(job) / len(node)


class JobProcesses:
    """Launch, pids, CPU and endings of the jobs the node launches, over the node's store,
    scheduler, launcher, token digests and CPU shares (None: no CPU groups of their own).
    ``counters`` takes the node's storage and launch failures, ``record_event(job_id, kind,
    data)`` the events. ``orphans``: job id -> (exit status, since) of the jobs whose
    supervisor died while their group was still there."""

    def __init__(self, store: Store, scheduler: Scheduler, launcher: Launcher,
                 tokens: TokenDigest, shares: JobShares | None, counters: Counter,
                 record_event: Callable[[str | None, str, dict], None]):
        self.store, self.scheduler, self.launcher = store, scheduler, launcher
        self.tokens, self.shares, self.counters = tokens, shares, counters
        self.record_event = record_event
        self.orphans: dict[str, tuple[ExitStatus, float]] = {}

    def launch(self, job: LiveJob) -> Actions | None:
        """At most once: the intent is on disk before the process starts, or it never does.
        None once started; else the scheduler's answer to the launch that did not happen
        (the job waits again, or it failed), for the caller to apply."""
        rec = self.store.get_job(job.id)
        token = new_token()  # made now, handed to this process only, kept as a digest
        try:
            self.store.update_job(job.id, state="running", workers=job.workers, pid=None,
                                  started_at=time.time(), supervisor="launcher",
                                  token_digest=self.tokens.digest(token))
        except StorageError as exc:
            self.counters["storage_errors"] += 1
            log.error("%s: not launched, its launch could not be recorded: %s", job.id, exc)
            return self.scheduler.unlaunched(job, str(exc))
        try:
            job.token_digest, job.supervisor = self.tokens.digest(token), "launcher"
            started = self.launcher.start(job.id, token, rec.spec.command,
                                          rec.spec.cwd, rec.spec.env, job.workers, job.gpu_ids,
                                          self.shares.dirs(job.id) if self.shares else ())
        except LogUnwritable as exc:  # the state folder's fault: the job waits, not fails
            self.counters["launch_failures"] += 1
            log.error("%s: not launched: %s", job.id, exc)
            with contextlib.suppress(StorageError):
                self.store.update_job(job.id, state="queued", workers=0, started_at=None)
            return self.scheduler.unlaunched(job, str(exc))
        except LaunchError as exc:
            self.counters["launch_failures"] += 1
            return self.scheduler.exited(job.id, 127, None, str(exc))
        with contextlib.suppress(StorageError):  # found again by its supervisor's command
            self.store.update_job(job.id, pid=started.pid, log_path=started.log_path)
        self.record_event(job.id, "launched", {"supervisor_pid": started.pid,
                                               "workers": job.workers,
                                               "gpu_ids": list(job.gpu_ids)})
        return None

    def measure_cpu(self) -> None:
        """Each launched job's CPU since the last reading."""
        launched = [job for job in self.scheduler.jobs.values()
                    if job.state in ACTIVE and job.origin == "rest"]
        tree = self.launcher.process_tree() if launched else None  # None: read per job
        for job in launched:
            usage = self.launcher.cpu_usage(job.id, tree)
            job.cpu_percent = None if usage is None else usage[0]
            if usage is not None:
                job.cpu_s = usage[1]
        self.launcher.forget_meters()

    def job_started(self, job_id: str, pid: int) -> None:
        """A launched job's own process is known (its supervisor recorded it): an event
        when this daemon launched it (an adopted job's was recorded by an earlier one)."""
        job = self.scheduler.jobs.get(job_id)
        if job is not None:
            job.pid = pid
        if job_id in self.launcher.children:
            self.record_event(job_id, "started", {
                "pid": pid, "supervisor_pid": self.launcher.supervisor_pid(job_id)})

    def watch_orphans(self) -> Iterator[Actions]:
        """The orphans settled now, one ``Actions`` each: the caller applies each before the
        next orphan is looked at. A group seen gone ends its job as its supervisor did; one
        still there after ORPHAN_GRACE_S runs on unsupervised."""
        for job_id, (status, since) in list(self.orphans.items()):
            job = self.scheduler.jobs.get(job_id)
            if job is None or job.state not in ACTIVE:
                del self.orphans[job_id]
            elif not group_alive(status.pgid):
                del self.orphans[job_id]
                ours = job.signalled == signal.SIGKILL  # the daemon's own kill: no news
                ended = replace(status, recorded=True,
                                note=None if ours else _orphan_note(status))
                if job.finish is not None:  # its master's last word: how the job ended
                    ended = replace(ended, exit_code=None, signal=None)
                yield self.exited(job_id, ended)
            elif time.monotonic() - since > ORPHAN_GRACE_S:
                del self.orphans[job_id]
                job.supervisor = None
                yield Actions(events=[(job_id, "unsupervised", {
                    "note": "its supervisor ended while the job runs on; its master's last "
                            "word will be its final state"})])

    def exited(self, job_id: str, status: ExitStatus) -> Actions:
        """A launched job's supervisor ended: the job's final state from its exit status.
        Without a recorded status (the supervisor itself was killed) the job goes with it:
        it got SIGKILL as its supervisor died (``daemon.jobs.supervise``), and what is left of
        its process group (workers, a command's children) gets it now; once the group is
        seen gone (``watch_orphans``) the job ends as its supervisor did, with a note that
        says so. A group still there after ORPHAN_GRACE_S (a process the kernel cannot kill
        yet) runs on unsupervised and is watched as one started by hand, by its heartbeats."""
        job = self.scheduler.jobs.get(job_id)
        if job is None:
            return Actions()
        if not status.recorded and status.pgid and job.state in ACTIVE:
            self.orphans[job_id] = (status, time.monotonic())
            if status.seen or group_of_job(status.pgid, job_id):  # never a stranger's group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(status.pgid, signal.SIGKILL)
            return Actions()
        failed = status.signal or (status.exit_code not in (0, None))
        tail = status.error or (self.launcher.tail(job_id) if failed else None)
        return self.scheduler.exited(job_id, status.exit_code, status.signal, tail,
                                     note=status.note)


def _orphan_note(status: ExitStatus) -> str:
    """How a job whose supervisor was killed was settled, in words."""
    how = exit_text(None, status.signal).replace("killed", "was killed", 1) \
        if status.signal else "ended without recording the job's exit"
    return (f"its supervisor (pid {status.pgid}) {how}; the job was ended with it "
            "(SIGKILL to its process group)")
