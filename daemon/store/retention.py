"""Retention: what the daemon keeps of jobs that have ended, and for how long.

A job the daemon manages is held in memory (the scheduler's ``LiveJob``, the store's
record). Once it has ended for good (finished, failed, cancelled) and its record is written,
it is *retired* (``daemon.store.retirement``): memory lets it go and its history is read
from the store. Ended jobs (``lost`` ones too, once no longer held) are then kept
``max_age_s`` and at most ``max_jobs`` of them, the oldest going first; with a job go its
events and its files (its log, its supervisor's exit record). Events are kept ``max_age_s``
too, and at most ``max_events`` in all, so the node's own events (plans, refusals) are
bounded as well. The TPM's samples outlive the jobs they were measured on
(``daemon.store.tpm`` bounds them). Here: the rule (``Retention``), the store's side of it
(``Pruner``) and what one prune removed (``Pruned``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .database import Database
from .job_record import JobRecord

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


class Pruner:
    """Prunes the jobs and events of ``database`` by a ``Retention``; ``held`` is the
    store's jobs held in memory, by id (never pruned; read, never changed here)."""

    def __init__(self, database: Database, held: dict[str, JobRecord]):
        self._database = database
        self._held = held

    def prune(self, retention: Retention, now: float | None = None) -> Pruned:
        """Delete ended jobs older than ``max_age_s``, then the oldest beyond ``max_jobs``
        (jobs still held in memory are skipped), with their events; then events older than
        ``max_age_s`` and beyond ``max_events``."""
        now = time.time() if now is None else now
        cutoff = now - retention.max_age_s
        ended = f"state IN ({','.join('?' * len(ENDED_STATES))})"
        out = Pruned()
        with self._database.transaction() as db:
            (count,) = db.execute(f"SELECT COUNT(*) FROM jobs WHERE {ended}",
                                  ENDED_STATES).fetchone()
            excess = max(0, count - retention.max_jobs)
            rows = db.execute(
                f"SELECT id, log_path, finished_at FROM jobs WHERE {ended} "
                "ORDER BY finished_at, id LIMIT ?",
                (*ENDED_STATES, retention.batch + len(self._held)),
            ).fetchall()
            for job_id, log_path, finished_at in rows:
                if len(out.jobs) >= retention.batch:
                    break
                old = finished_at is None or finished_at < cutoff
                if not old and len(out.jobs) >= excess:
                    break  # the rest are younger still
                if job_id not in self._held:
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
