"""A master's Register, the scheduler's half that takes it (A-Dloader §III-C3: the application
master embedded in each job reports to the daemon): a job started by hand attaches (trust on
first use of its token), a launched job's master says hello, a job declared lost speaks again.

Each step is a function of the live job: it changes the job and returns what the node is to
do (``Actions``). What it needs of the node comes in as values and lookups; filing a new job
and opening the arrival buffer is the caller's (``daemon.control.scheduler.Scheduler``).

What the kernel says of the connecting process decides two things here: its Slurm name is
checked against the Slurm job it is in (``name_check``: ``daemon.control.slurm_identity``),
and, when it may run on only part of the node's CPUs (``cpus_of``, its affinity: a Slurm
step's cpuset), its workers are capped at that part of the node's (``LiveJob.max_workers``).
Both lookups are the node's: this module touches no process itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from adloader.protocol import Allocation, Register, Resize, Stop

from .live import RESERVED_ID, WAITING, Actions, LiveJob, refuse
from .tokens import TokenDigest

CpusOf = Callable[[int], tuple[int, float] | None]  # pid -> (CPUs, share of the node's)
NameCheck = Callable[[str, int], tuple[bool | None, str]]  # (name, pid) -> (verified, why)


def attach(identity: bytes, msg: Register, *, uid: int | None, ended: Mapping[str, str],
           tokens: TokenDigest, name_check: NameCheck, cpus_of: CpusOf, free: int,
           capacity: int, gpus: int, heartbeat_s: float, now: float
           ) -> tuple[LiveJob | None, Actions]:
    """A job started by hand registers itself over connection ``identity``: trust on first use
    of its token (and of its user, ``uid``, where the kernel says it); it keeps its workers
    (within the ``free`` ones of the node's ``capacity``) until the next decision.

    Returns the new job, for the caller to file, and what to do; ``(None, refusal)`` when the
    id has ``ended`` (id -> state), is one the daemon gives, or its name fails ``name_check``."""
    if msg.job in ended:
        return None, refuse(identity, msg, f"job has ended ({ended[msg.job]})")
    if msg.job.startswith(RESERVED_ID):
        return None, refuse(identity, msg, f"ids {RESERVED_ID}* are the daemon's to give")
    verified, why = name_check(msg.name, msg.pid) if msg.name else (None, "")
    if verified is False:
        return None, refuse(identity, msg, why)
    feats = msg.features
    cpus, share = (cpus_of(msg.pid) if msg.pid else None) or (None, None)
    job = LiveJob(msg.job, tokens.digest(msg.token), feats.batch_size, feats.gpus,
                  feats.flops_g, feats.params_m, feats.iterations, msg.requested,
                  "attached", state="running",
                  workers=min(max(msg.workers, 1), max(free, 1)),
                  gpu_ids=tuple(range(min(feats.gpus, gpus))), last_seen=now,
                  submitted=now, registered=True, supervisor=msg.supervisor,
                  peer=identity, name=msg.name or "", data=msg.data, pid=msg.pid or None,
                  protocol=msg.protocol or 0, cpus=cpus, cpu_share=share, uid=uid)
    most = job.max_workers(capacity)
    job.workers = min(job.workers, most or job.workers)
    job.seq += 1
    return job, Actions(changed=[job], events=[(job.id, "attached", {
                            "workers": job.workers, "pid": msg.pid, "cpu_group": msg.cpu_group,
                            "supervisor": msg.supervisor, "cpus": cpus, "max_workers": most,
                            "name_verified": verified})],
                        send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                                  heartbeat_s=heartbeat_s))])


def revive(job: LiveJob, msg, *, free: int, gpus: int) -> Actions:
    """A job declared lost speaks again (it was only slow): it runs with what it has, within
    the node's ``free`` workers, until the next decision (the caller opens the arrival
    buffer for it)."""
    job.state, job.registered = "running", True
    job.workers = min(max(msg.workers, 1), max(1, free))
    if not job.gpu_ids:
        job.gpu_ids = tuple(range(min(job.gpus, gpus)))
    job.seq += 1
    return Actions(changed=[job], events=[(job.id, "revived", {"workers": job.workers})],
                   send=[(job.id, Resize(seq=job.seq, workers=job.workers))])


def confirm(job: LiveJob, msg: Register, *, cpus_of: CpusOf, capacity: int,
            heartbeat_s: float, cancel_grace_s: float) -> Actions:
    """A launched job's master says hello: confirm its workers (and ask it to stop, within
    ``cancel_grace_s``, when it was cancelled before its master was there to ask)."""
    job.registered, job.data, job.protocol = True, msg.data, msg.protocol or 0
    if job.supervisor != "launcher":  # a launched job's own pid comes from its supervisor
        job.pid = msg.pid or None
    job.cpus, job.cpu_share = (cpus_of(msg.pid) if msg.pid else None) or (None, None)
    if job.state in WAITING:  # registered before it was planned: run what it has
        job.state, job.workers = "running", min(max(msg.workers, 1), capacity)
    most = job.max_workers(capacity)
    job.workers = min(job.workers, most or job.workers)
    job.seq += 1
    out = Actions(changed=[job], events=[(job.id, "registered", {
                      "pid": msg.pid, "cpus": job.cpus, "max_workers": most})],
                  send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                            heartbeat_s=heartbeat_s))])
    if job.cancel_at is not None:
        job.seq += 1
        out.send.append((job.id, Stop(seq=job.seq, grace_s=cancel_grace_s)))
    return out
