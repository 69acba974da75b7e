"""What a previous daemon left, taken up by the next (``daemon.node.Node``'s start): terminal
jobs stay terminal, a launched job whose supervisor recorded an exit gets its final state, a
live one (or a job started by hand) gets a grace period to be heard again, and a job whose
launch was recorded but that never started waits to be launched again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from adloader.rest import JobSpec

from ..control.live import ACTIVE, TERMINAL, LiveJob
from ..control.scheduler import Scheduler
from ..store.store import Store
from .launcher import ExitStatus, Launcher

RECOVERY_GRACE_S = 5.0  # a recovered job's time to be heard again


def recover(store: Store, scheduler: Scheduler, launcher: Launcher, gpus: int,
            live_job: Callable[[str, JobSpec, str, str], LiveJob],
            record_event: Callable[[str | None, str, dict], None],
            ) -> list[tuple[str, ExitStatus]]:
    """Reconcile what a previous daemon left in ``store`` with ``scheduler``: terminal jobs
    stay terminal; a live one (or a job started by hand) gets a grace period to be heard
    again; a job whose launch was recorded but that never started (the daemon died in
    between) waits to be launched again — it never ran, so at most once still holds. A
    launched job still running is adopted by ``launcher``. ``live_job(job_id, spec,
    token_digest, origin)`` makes each job's ``LiveJob``; ``gpus`` is the node's. Returns the
    launched jobs whose supervisor ended meanwhile, or cannot be found again, with their exit
    status: the caller settles them (``JobProcesses.exited``), in this order."""
    grace = time.monotonic() + RECOVERY_GRACE_S
    ended: list[tuple[str, ExitStatus]] = []
    for rec in store.list_jobs():
        if rec.state in TERMINAL:
            scheduler.ended[rec.id] = rec.state
            continue
        job = live_job(rec.id, rec.spec, rec.token_digest, rec.origin)
        job.workers, job.submitted, job.uid = rec.workers or 0, rec.submitted_at, rec.uid
        job.supervisor = rec.supervisor or ("launcher" if rec.origin == "rest" else None)
        launched = rec.origin == "rest" and rec.started_at is not None
        never_ran = (launched and rec.state in ACTIVE and launcher.status(rec.id) is None
                     and not launcher.ever_started(rec.id)
                     and launcher.find(rec.id) is None)
        if never_ran:
            launched, rec = False, replace(rec, state="queued")
            record_event(rec.id, "launch_deferred", {
                "reason": "the daemon stopped between recording the launch and starting it"})
        if rec.state in ACTIVE or rec.state == "lost":
            job.state = "running" if rec.state in ACTIVE else "lost"
            job.last_seen, job.registered = grace, True
            job.gpu_ids = tuple(range(min(job.gpus, gpus)))
        scheduler.add(job)
        if launched and rec.state not in ("queued", "buffered"):
            status = launcher.status(rec.id)
            if status is not None:
                ended.append((rec.id, status))
            elif not launcher.adopt(rec.id, rec.pid or launcher.find(rec.id)):
                ended.append((rec.id, ExitStatus(None, None, recorded=False, pgid=rec.pid)))
        record_event(rec.id, "recovered", {"state": rec.state})
    return ended
