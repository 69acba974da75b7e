"""What a previous daemon left, taken up by the next (``daemon.node.Node``'s start): terminal
jobs stay terminal, a launched job whose supervisor recorded an exit gets its final state, a
live one (or a job started by hand) gets a grace period to be heard again, and a job whose
launch was recorded but that never started waits to be launched again."""

from __future__ import annotations

import time
from dataclasses import replace

from ..control.scheduler import ACTIVE, TERMINAL
from .launcher import ExitStatus

RECOVERY_GRACE_S = 5.0  # a recovered job's time to be heard again


class RecoveryMixin:
    """``_recover`` (``Node`` provides the store, the launcher, the scheduler, ``_live``,
    ``_apply``, ``_exited`` and ``_record_event``)."""

    def _recover(self) -> None:
        """Reconcile what a previous daemon left: terminal jobs stay terminal; a launched
        job whose supervisor recorded an exit gets its final state; a live one (or a job
        started by hand) gets a grace period to be heard again; a job whose launch was
        recorded but that never started (the daemon died in between) waits to be launched
        again — it never ran, so at most once still holds."""
        grace = time.monotonic() + RECOVERY_GRACE_S
        ended: list[tuple[str, ExitStatus]] = []
        for rec in self.store.list_jobs():
            if rec.state in TERMINAL:
                self.scheduler.ended[rec.id] = rec.state
                continue
            job = self._live(rec.id, rec.spec, rec.token_digest, rec.origin)
            job.workers, job.submitted, job.uid = rec.workers or 0, rec.submitted_at, rec.uid
            job.supervisor = rec.supervisor or ("launcher" if rec.origin == "rest" else None)
            launched = rec.origin == "rest" and rec.started_at is not None
            never_ran = (launched and rec.state in ACTIVE and self.launcher.status(rec.id) is None
                         and not self.launcher.ever_started(rec.id)
                         and self.launcher.find(rec.id) is None)
            if never_ran:
                launched, rec = False, replace(rec, state="queued")
                self._record_event(rec.id, "launch_deferred", {
                    "reason": "the daemon stopped between recording the launch and starting it"})
            if rec.state in ACTIVE or rec.state == "lost":
                job.state = "running" if rec.state in ACTIVE else "lost"
                job.last_seen, job.registered = grace, True
                job.gpu_ids = tuple(range(min(job.gpus, self.gpus)))
            self.scheduler.add(job)
            if launched and rec.state not in ("queued", "buffered"):
                status = self.launcher.status(rec.id)
                if status is not None:
                    ended.append((rec.id, status))
                elif not self.launcher.adopt(rec.id, rec.pid or self.launcher.find(rec.id)):
                    ended.append((rec.id, ExitStatus(None, None, recorded=False,
                                                     pgid=rec.pid)))
            self._record_event(rec.id, "recovered", {"state": rec.state})
        for job_id, status in ended:
            self._apply(self._exited(job_id, status))

