"""Retention: what the daemon keeps of jobs that have ended, and for how long.

A job the daemon manages is held in memory (the scheduler's ``LiveJob``, the store's
record). Once it has ended for good (finished, failed, cancelled) and its record is written,
it is *retired*: memory lets it go and its history is read from the store. Ended jobs
(``lost`` ones too, once no longer held) are then kept ``max_age_s`` and at most
``max_jobs`` of them, the oldest going first; with a job go its events and its files (its
log, its supervisor's exit record). Events are kept ``max_age_s`` too, and at most
``max_events`` in all, so the node's own events (plans, refusals) are bounded as well. The
TPM's samples outlive the jobs they were measured on (``daemon.store.tpm`` bounds them).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from adloader.host import heap

from ..control.live import TERMINAL

log = logging.getLogger("adloader.daemon")
ENDED_STATES = ("finished", "failed", "cancelled", "lost")
DAY_S = 86400.0


@dataclass(frozen=True)
class Retention:
    """How much history is kept (``adloader.config``: retain_days, retain_jobs, retain_events)."""

    max_age_s: float = 7 * DAY_S
    max_jobs: int = 10_000
    max_events: int = 200_000
    batch: int = 1_000  # jobs pruned at most per call: the store's lock is held that long


@dataclass
class Pruned:
    """What one ``prune`` removed: job ids with their log paths, and how many events."""

    jobs: list[tuple[str, str | None]] = field(default_factory=list)
    events: int = 0


class RetentionMixin:
    """``prune`` of ``daemon.store.store.Store`` (which provides ``_transaction`` and ``_jobs``)."""

    def prune(self, retention: Retention, now: float | None = None) -> Pruned:
        """Delete ended jobs older than ``max_age_s``, then the oldest beyond ``max_jobs``
        (jobs still held in memory are skipped), with their events; then events older than
        ``max_age_s`` and beyond ``max_events``."""
        now = time.time() if now is None else now
        cutoff = now - retention.max_age_s
        ended = f"state IN ({','.join('?' * len(ENDED_STATES))})"
        out = Pruned()
        with self._transaction() as db:
            (count,) = db.execute(f"SELECT COUNT(*) FROM jobs WHERE {ended}",
                                  ENDED_STATES).fetchone()
            excess = max(0, count - retention.max_jobs)
            rows = db.execute(
                f"SELECT id, log_path, finished_at FROM jobs WHERE {ended} "
                "ORDER BY finished_at, id LIMIT ?",
                (*ENDED_STATES, retention.batch + len(self._jobs)),
            ).fetchall()
            for job_id, log_path, finished_at in rows:
                if len(out.jobs) >= retention.batch:
                    break
                old = finished_at is None or finished_at < cutoff
                if not old and len(out.jobs) >= excess:
                    break  # the rest are younger still
                if job_id not in self._jobs:
                    out.jobs.append((job_id, log_path))
            ids = [job_id for job_id, _ in out.jobs]
            for start in range(0, len(ids), 500):  # SQLite's bound on parameters
                chunk = ids[start:start + 500]
                marks = ",".join("?" * len(chunk))
                db.execute(f"DELETE FROM jobs WHERE id IN ({marks})", chunk)
                out.events += db.execute(f"DELETE FROM events WHERE job IN ({marks})",
                                         chunk).rowcount
            out.events += db.execute("DELETE FROM events WHERE t < ?", (cutoff,)).rowcount
            last = db.execute("SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?",
                              (retention.max_events,)).fetchone()
            if last is not None:
                out.events += db.execute("DELETE FROM events WHERE id <= ?", last).rowcount
        return out


class Retirement:
    """The node's side: at each tick of its clock, retire ended jobs from memory (a burst
    that ends ~1,600 jobs between two looks at the store is not held that long: under
    ``adloader bench soak`` the objects it held raised Python's arenas for good, ~5 MB);
    each time it looks at its store, prune it (a count when there is nothing to prune),
    delete the pruned jobs' files and give the heap's freed memory back
    (``adloader.host.heap``)."""

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
        """Prune the store under its own lock alone (a batch of 1,000 jobs took 60-125 ms
        under ``adloader bench soak``: under the node's ``lock`` too, every request that takes
        it waited as long); then, under ``lock``, what memory still names of the pruned
        jobs; their files last, under neither."""
        pruned = self.store.prune(self.retention)
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
