"""The daemon's side of each job's CPU share (``adloader.host.cpu_share``): a group made for
a job before it is launched (its supervisor joins it, so the job and its workers start in
it), weights that follow the allocation after every decision, and the group dropped when the
job has ended. A job started by hand (``adloader run``, ``attach``) is moved into its group
when it registers: the process the kernel says connected (``SO_PEERCRED``, never the pid a
job reports) and every process it has started, so its workers forked later start there —
except a Slurm step on cgroup v2, weighted in the step's own cgroup instead (moved out, it
would leave Slurm's tracking and cpuset; ``CpuShares.keep``).
Off unless the ``cpu_shares`` setting names the groups' parent; a node where the groups
cannot be made runs without them, and says so once. Under the rule ``turn``
(``cpu_share_rule``) a job the plan holds at one worker while others hold more runs on the
CPU they leave; while any job is held, the jobs' loading rates are not what the TPM's d/D
split describes, so ``for_the_model`` keeps them out of the TPM's samples. Under the rule
``order`` the weights rank the running jobs (``end_order``: the ranking a fluid node with the
jobs' GPU ceilings ends best, kept while it stays near the best), and while more than one
runs their loading rates stay out of the model too."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence

import psutil

from adloader.errors import StorageError
from adloader.host.cpu_share import CpuShares, held
from adloader.scheduling.model.samples import LoadingSample
from adloader.scheduling.policies.fluid_order import Lane, rank

from ..control.live import ACTIVE
from ..control.slurm_identity import slurm_step_group

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
        return self.groups is not None and self.groups.group(job_id).is_dir()

    def adopt(self, job, peer) -> bool:
        """A job started by hand, as its master registers: move the process the kernel says
        connected (``daemon.control.broker.Peer``) and its descendants into the job's group (a
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
            step = slurm_step_group(pid) if self.groups.version == 2 else None
            if step is not None:  # Slurm's: weighted where it is, never moved (the module)
                return self._keep(job_id, step)
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

    def _keep(self, job_id: str, step: str) -> bool:
        try:
            self.groups.keep(job_id, step)
        except StorageError as exc:
            log.warning("%s: no CPU share in its Slurm step: %s", job_id, exc)
            self.record(job_id, "cpu_group_refused", {"cgroup": step, "reason": str(exc)})
            return False
        self.written.pop(job_id, None)
        self.record(job_id, "cpu_group_kept", {"cgroup": step})
        return True

    def follow(self, jobs: Mapping, table=None) -> None:
        """Weights for the running jobs' workers; groups of ended jobs dropped. ``table``:
        the TPM's loading table (``end_order``), for the rule ``order``."""
        if self.groups is None:
            return
        running = {k: j.workers for k, j in jobs.items() if j.state == "running"}
        for gone in [k for k in self.written if k not in running]:
            self.groups.remove(gone)
            self.written.pop(gone)
        order = end_order([jobs[k] for k in running], table, self.order) \
            if self.rule == "order" and table is not None else []
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


def end_order(jobs: list, table, current: Sequence[str] = ()) -> list[str]:
    """The jobs' ids in order of priority: the ranking a fluid node ends best
    (``adloader.scheduling.policies.fluid_order.rank``; ``current``: the ranking in force). The node
    loads ``table``'s L(D), D the jobs' workers (``table[D, d]``: a job's loading with d of
    the node's D workers, the TPM's); a job takes at most its plan's GPU ceiling
    (c_i·B·F_μ × its GPU share) and, while others run, what its own workers load with the
    node to themselves, L(d_i). A job with no ceiling planned is bound by its workers
    alone."""
    top = table.shape[0] - 1
    d = {j.id: min(max(1, int(j.workers)), top) for j in jobs}
    node = min(sum(d.values()), top)
    peak = float(table[node, node]) or float(table.max()) or 1.0
    lanes = []
    for j in jobs:
        gpu = j.ceiling if j.ceiling > 0 else math.inf
        own = float(table[d[j.id], d[j.id]]) or math.inf
        lanes.append(Lane(j.id, float(j.remaining_samples), min(gpu, own), gpu))
    return rank(lanes, peak, current)
