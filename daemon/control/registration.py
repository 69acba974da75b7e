"""A master's Register, the scheduler's half that takes it (A-Dloader §III-C3: the application
master embedded in each job reports to the daemon): a job started by hand attaches (trust on
first use of its token), a launched job's master says hello, a job declared lost speaks again.

What the kernel says of the connecting process decides two things here: its Slurm name is
checked against the Slurm job it is in (``daemon.control.slurm_identity``), and, when it may run on
only part of the node's CPUs (its affinity: a Slurm step's cpuset), its workers are capped
at that part of the node's (``Scheduler.max_workers``). Both lookups are the node's
(``Scheduler(cpus_of=..., name_check=...)``): this module touches no process itself.
"""

from __future__ import annotations

from adloader.protocol import Allocation, Register, Resize, Stop

from .live import RESERVED_ID, WAITING, Actions, LiveJob


class RegistrationMixin:
    """Registers (``daemon.control.scheduler.Scheduler`` provides ``jobs``, ``ended``, ``tokens``,
    ``clock``, the windows, ``cpus_of``, ``name_check``, ``_open`` and ``_refuse``)."""

    def _attach(self, identity: bytes, msg: Register, uid: int | None = None) -> Actions:
        """A job started by hand registers itself: trust on first use of its token (and of
        its user, ``uid``, where the kernel says it); it keeps its workers (within what is
        free) until the next decision."""
        if msg.job in self.ended:
            return self._refuse(identity, msg, f"job has ended ({self.ended[msg.job]})", None)
        if msg.job.startswith(RESERVED_ID):
            return self._refuse(identity, msg, f"ids {RESERVED_ID}* are the daemon's to give",
                                None)
        verified, why = self.name_check(msg.name, msg.pid) if msg.name else (None, "")
        if verified is False:
            return self._refuse(identity, msg, why, None)
        feats = msg.features
        free = max(0, self.capacity - self.node_workers())
        cpus, share = (self.cpus_of(msg.pid) if msg.pid else None) or (None, None)
        now = self.clock()
        job = LiveJob(msg.job, self.tokens.digest(msg.token), feats.batch_size, feats.gpus,
                      feats.flops_g, feats.params_m, feats.iterations, msg.requested,
                      "attached", state="running",
                      workers=min(max(msg.workers, 1), max(free, 1)),
                      gpu_ids=tuple(range(min(feats.gpus, self.gpus))), last_seen=now,
                      submitted=now, registered=True, supervisor=msg.supervisor,
                      peer=identity, name=msg.name or "", data=msg.data, pid=msg.pid or None,
                      protocol=msg.protocol or 0, cpus=cpus, cpu_share=share, uid=uid)
        job.workers = min(job.workers, self.max_workers(job) or job.workers)
        self.jobs[job.id] = job
        self._open(self.arrival_window_s)
        job.seq += 1
        return Actions(changed=[job], events=[(job.id, "attached", {
                           "workers": job.workers, "pid": msg.pid, "cpu_group": msg.cpu_group,
                           "supervisor": msg.supervisor, "cpus": cpus,
                           "max_workers": self.max_workers(job),
                           "name_verified": verified})],
                       send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                                 heartbeat_s=self.heartbeat_s))])

    def _revive(self, job: LiveJob, msg) -> Actions:
        """A job declared lost speaks again (it was only slow): it runs with what it has
        until the next decision, which the arrival buffer brings."""
        job.state, job.registered = "running", True
        job.workers = min(max(msg.workers, 1), max(1, self.capacity - self.node_workers()))
        if not job.gpu_ids:
            job.gpu_ids = tuple(range(min(job.gpus, self.gpus)))
        self._open(self.arrival_window_s)
        job.seq += 1
        return Actions(changed=[job], events=[(job.id, "revived", {"workers": job.workers})],
                       send=[(job.id, Resize(seq=job.seq, workers=job.workers))])

    def _registered(self, job: LiveJob, msg: Register) -> Actions:
        """A launched job's master says hello: confirm its workers."""
        job.registered, job.data, job.protocol = True, msg.data, msg.protocol or 0
        if job.supervisor != "launcher":  # a launched job's own pid comes from its supervisor
            job.pid = msg.pid or None
        job.cpus, job.cpu_share = (self.cpus_of(msg.pid) if msg.pid else None) or (None, None)
        if job.state in WAITING:  # registered before it was planned: run what it has
            job.state, job.workers = "running", min(max(msg.workers, 1), self.capacity)
        job.workers = min(job.workers, self.max_workers(job) or job.workers)
        job.seq += 1
        out = Actions(changed=[job], events=[(job.id, "registered", {
                          "pid": msg.pid, "cpus": job.cpus, "max_workers": self.max_workers(job)})],
                      send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                                heartbeat_s=self.heartbeat_s))])
        if job.cancel_at is not None:  # cancelled before its master was there to ask
            job.seq += 1
            out.send.append((job.id, Stop(seq=job.seq, grace_s=self.cancel_grace_s)))
        return out
