"""The daemon's side of each job's CPU share (``adloader.host.cpu_share``): a group made for
a job before it is launched (its supervisor joins it, so the job and its workers start in
it), weights that follow the allocation after every decision, and the group dropped when the
job has ended. Off unless the ``cpu_shares`` setting names the groups' parent; a node where
the groups cannot be made runs without them, and says so once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from adloader.errors import StorageError
from adloader.host.cpu_share import CpuShares

log = logging.getLogger("adloader.daemon.shares")


class JobShares:
    def __init__(self, parent: str, record: Callable[[str | None, str, dict], None]):
        self.groups: CpuShares | None = None
        self.record = record
        self.written: dict[str, int] = {}
        try:
            self.groups = CpuShares(parent=parent)
        except StorageError as exc:
            log.error("CPU shares off: %s", exc)
            record(None, "cpu_shares_off", {"reason": str(exc)})

    def dirs(self, job_id: str) -> tuple[str, ...]:
        """The group folders a job's supervisor joins (made now); none when shares are off."""
        if self.groups is None:
            return ()
        try:
            return tuple(str(d) for d in self.groups.prepare(job_id))
        except OSError as exc:
            log.error("%s: no CPU group: %s", job_id, exc)
            return ()

    def follow(self, jobs: Mapping) -> None:
        """Weights for the running jobs' workers; groups of ended jobs dropped."""
        if self.groups is None:
            return
        running = {k: j.workers for k, j in jobs.items() if j.state == "running"}
        for gone in [k for k in self.written if k not in running]:
            self.groups.remove(gone)
            self.written.pop(gone)
        if running and running != {k: self.written.get(k) for k in running}:
            try:
                weights = self.groups.set_workers(running)
            except OSError as exc:
                log.error("CPU shares not written: %s", exc)
                return
            self.written = dict(running)
            self.record(None, "cpu_shares", {"weights": weights})
