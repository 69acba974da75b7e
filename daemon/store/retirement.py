"""Retirement: the node lets go of ended jobs and prunes its store by its ``Retention``
(``daemon.store.retention``), deleting the pruned jobs' files."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from adloader.host import heap

from ..control.live import TERMINAL
from .retention import Pruned, Retention

log = logging.getLogger("adloader.daemon")


class Retirement:
    """The node's side: at each tick of its clock, retire ended jobs from memory (so a burst
    of them is not held until the store is next looked at); each time it looks at its store,
    prune it by ``retention`` (a count when there is nothing to prune), delete the pruned
    jobs' files and give the heap's freed memory back (``adloader.host.heap``)."""

    def __init__(self, retention: Retention, store, scheduler, online, launcher,
                 views: dict, record_event):
        self.retention, self.store, self.scheduler = retention, store, scheduler
        self.online, self.launcher, self.views = online, launcher, views
        self.record_event = record_event
        self.pruned_jobs = self.pruned_events = 0

    def retire(self, dirty: set, keep: dict) -> None:
        """Let memory go of what has ended (not a job whose record is unwritten, in
        ``dirty``, or one still watched, in ``keep``)."""
        sched = self.scheduler
        for job_id in [k for k, j in sched.jobs.items() if j.state in TERMINAL
                       and k not in dirty and k not in keep]:
            job = sched.jobs.pop(job_id)
            sched.ended[job_id] = job.state  # a message naming it is refused as ended
            self.store.release(job_id)
            self.views.pop(job_id, None)
            self.online.forget(job_id)

    def prune(self, lock) -> Pruned:
        """Prune the store under its own lock alone (not under the node's ``lock``, which
        requests take); then, under ``lock``, what memory still names of the pruned jobs;
        their files last, under neither."""
        pruned = self.store.retention.prune(self.retention)
        if pruned.jobs or pruned.events:
            with lock:
                for job_id, _ in pruned.jobs:
                    self.scheduler.ended.pop(job_id, None)
                    self.views.pop(job_id, None)
                self.pruned_jobs += len(pruned.jobs)
                self.pruned_events += pruned.events
                log.info("pruned %d ended jobs and %d events", len(pruned.jobs),
                         pruned.events)
                self.record_event(None, "pruned", {"jobs": len(pruned.jobs),
                                                   "events": pruned.events})
            for job_id, log_path in pruned.jobs:
                self._remove_files(job_id, log_path)
            heap.trim()  # what the deletes' pages and rows took, back to the system
        return pruned

    def _remove_files(self, job_id: str, log_path: str | None) -> None:
        status = Path(self.launcher.status_path(job_id))
        paths = [Path(log_path)] if log_path else []
        paths += [Path(self.launcher.log_path(job_id)), status,
                  status.with_name(status.name + ".started")]
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
