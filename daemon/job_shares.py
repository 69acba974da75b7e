"""The daemon's side of each job's CPU share (``adloader.host.cpu_share``): a group made for
a job before it is launched (its supervisor joins it, so the job and its workers start in
it), weights that follow the allocation after every decision, and the group dropped when the
job has ended. A job started by hand (``adloader run``, ``attach``) is moved into its group
when it registers: the process the kernel says connected (``SO_PEERCRED``, never the pid a
job reports) and every process it has started, so its workers forked later start there.
Off unless the ``cpu_shares`` setting names the groups' parent; a node where the groups
cannot be made runs without them, and says so once. Under the rule ``turn``
(``cpu_share_rule``) a job the plan holds at one worker while others hold more runs on the
CPU they leave; while any job is held, the jobs' loading rates are not what the TPM's d/D
split describes, so ``for_the_model`` keeps them out of the TPM's samples. Under the rule
``order`` the weights rank the running jobs (``end_order``: the jobs their GPU binds first,
then the fewest samples left), and while more than one runs their loading rates stay out of
the model too."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Mapping

import psutil

from adloader.errors import StorageError
from adloader.host.cpu_share import CpuShares, held
from adloader.scheduling.samples import LoadingSample

from .live import ACTIVE

log = logging.getLogger("adloader.daemon.shares")


def _started_s(pid: int) -> float:
    """When process ``pid`` started, in seconds since boot (``/proc/PID/stat``'s 22nd field,
    in clock ticks: exact where psutil's wall-clock ``create_time`` drifts with the clock)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


class JobShares:
    def __init__(self, parent: str, record: Callable[[str | None, str, dict], None],
                 rule: str = "workers"):
        self.groups: CpuShares | None = None
        self.record, self.rule = record, rule
        self.written: dict[str, int] = {}
        self.order: list[str] = []  # the rule ``order``'s last ranking
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

    def has_group(self, job_id: str) -> bool:
        """Is ``job_id``'s group made (its processes then share the CPU by its weight)?"""
        return self.groups is not None and (self.groups.base / job_id).is_dir()

    def adopt(self, job, peer) -> bool:
        """A job started by hand, as its master registers: move the process the kernel says
        connected (``daemon.broker.Peer``) and its descendants into the job's group (a
        launched job's supervisor joined it before the job started). Only that process:
        owned by the peer's uid and started before its first message came (a pid the kernel
        reused since names a process started later)."""
        if self.groups is None or job is None or job.supervisor == "launcher" \
                or job.state not in ACTIVE:
            return False
        job_id, pid = job.id, peer.pid
        try:
            proc = psutil.Process(pid)
            if proc.uids().real != peer.uid or _started_s(pid) > peer.seen:
                log.warning("%s: pid %d is no longer the process that connected", job_id, pid)
                return False
            self.groups.add(job_id, pid)  # first: what it starts from now on starts there
        except (psutil.Error, OSError) as exc:
            log.warning("%s: not moved into its CPU group: %s", job_id, exc)
            return False
        moved = [pid]
        for _ in range(3):  # a child not moved yet may have forked meanwhile: look again
            try:
                left = [c.pid for c in proc.children(recursive=True) if c.pid not in moved]
            except psutil.Error:
                break
            for child in left:
                with contextlib.suppress(OSError):  # gone already
                    self.groups.add(job_id, child)
                    moved.append(child)
            if not left:
                break
        self.written.pop(job_id, None)  # its weight is written at the next follow
        self.record(job_id, "cpu_group_joined", {"pids": moved})
        return True

    def follow(self, jobs: Mapping, peak: float = math.inf) -> None:
        """Weights for the running jobs' workers; groups of ended jobs dropped. ``peak``: the
        node's most loading rate L* (samples/s), for the rule ``order``."""
        if self.groups is None:
            return
        running = {k: j.workers for k, j in jobs.items() if j.state == "running"}
        for gone in [k for k in self.written if k not in running]:
            self.groups.remove(gone)
            self.written.pop(gone)
        order = end_order([jobs[k] for k in running], peak) if self.rule == "order" else []
        if running and (running != {k: self.written.get(k) for k in running}
                        or order != self.order):
            try:
                weights = self.groups.set_workers(running, self.rule, order)
            except OSError as exc:
                log.error("CPU shares not written: %s", exc)
                return
            self.written, self.order = dict(running), order
            data = {"weights": weights, "rule": self.rule}
            if order:  # the ranking, and each job's GPU ceiling (samples/s) that decided it
                data.update(order=order,
                            ceilings={k: round(jobs[k].ceiling, 1) for k in order})
            self.record(None, "cpu_shares", data)

    def for_the_model(self, samples: list) -> list:
        """The TPM's samples of one turn, less loading rates taken while jobs are held under
        the rule ``turn``, or while more than one job runs under ``order`` (they follow the
        weights then, not the workers)."""
        if self.groups is None or not (self.rule == "turn" and held(self.written)
                                       or self.rule == "order" and len(self.written) > 1):
            return samples
        return [s for s in samples if not isinstance(s[1], LoadingSample)]


def end_order(jobs: list, peak: float = math.inf) -> list[str]:
    """The jobs' ids in order of priority. A job whose GPU trains slower than the node loads
    (its plan's GPU ceiling c_i·B·F_μ under L*, the node's most loading) goes first, the one
    with the longest time to its end at that ceiling first: ahead of the others it still takes
    only what its GPU trains (its workers sleep once its queue is full), and behind them it
    would end late and then train alone at its GPU's rate while the node's CPU sat idle. The
    jobs the node's loading binds follow, the fewest remaining samples first (the least mean
    completion time); of those alike the slowest GPU first, then the earliest submitted. A
    job with no ceiling planned counts as loading-bound."""
    def gpu_bound(job) -> bool:
        return 0 < job.ceiling < peak

    def key(job):
        if gpu_bound(job):
            return (0, -job.remaining_samples / job.ceiling, job.submitted, job.id)
        ceiling = job.ceiling if job.ceiling > 0 else math.inf
        return (1, job.remaining_samples, ceiling, job.submitted, job.id)
    return [j.id for j in sorted(jobs, key=key)]
