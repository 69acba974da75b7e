"""The scheduler (A-Dloader §III-C3/5): buffers, decisions, and the commands they cause.

No sockets, processes or disk: it takes events (a submitted job, a master's message, a lost
job, the clock) and returns what to do — jobs to launch and messages to send. The node
(``daemon.node``) carries those out. Decisions come from ``adloader.planner``, the code the
simulator runs too.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field

from adloader.errors import InputError
from adloader.planner import PlanJob, plan
from adloader.protocol import (
    Allocation,
    Finish,
    Heartbeat,
    Pause,
    Paused,
    Refused,
    Register,
    Resize,
    Resume,
)
from adloader.samples import LoadingSample, TrainingSample
from adloader.throughput import ThroughputModel

ACTIVE = ("running", "paused")
WAITING = ("buffered", "queued")


@dataclass
class LiveJob:
    """What the scheduler tracks of one job."""

    id: str
    token: str
    batch_size: int
    gpus: int
    flops_g: float
    params_m: float
    iterations: int | None
    requested: int | None = None
    origin: str = "rest"  # rest | attached
    state: str = "buffered"
    workers: int = 0
    gpu_ids: tuple[int, ...] = ()
    seq: int = 0  # last command sent
    iteration: int = 0
    throughput: float = 0.0
    step_s: float = 0.0
    data_wait_s: float = 0.0
    last_seen: float = 0.0
    submitted: float = 0.0
    registered: bool = False  # heard from its master: only then can it be lost
    exit_code: int | None = None
    busy_s: float = 0.0  # Σ steps × step time from heartbeats: GPU busy
    wait_s: float = 0.0  # Σ steps × data wait: GPU idle for want of data

    @property
    def remaining_samples(self) -> float:
        left = (self.iterations or 10 * (self.iteration + 100)) - self.iteration
        return max(left, 1) * self.batch_size


@dataclass
class Actions:
    """What a scheduler step asks the node to do."""

    launch: list[LiveJob] = field(default_factory=list)
    send: list[tuple[str, object]] = field(default_factory=list)  # (job id, message)
    events: list[tuple[str | None, str, dict]] = field(default_factory=list)
    samples: list[tuple[str, TrainingSample | LoadingSample]] = field(default_factory=list)
    changed: list[LiveJob] = field(default_factory=list)  # jobs whose record changed

    def extend(self, other: Actions) -> None:
        for name in ("launch", "send", "events", "samples", "changed"):
            getattr(self, name).extend(getattr(other, name))


class Scheduler:
    def __init__(self, *, capacity: int, gpus: int, policy: str, model: ThroughputModel,
                 arrival_window_s: float = 30.0, completion_window_s: float = 30.0,
                 heartbeat_s: float = 1.0, lost_timeout_s: float = 3.0,
                 max_jobs_per_gpu: int = 2, clock: Callable[[], float]):
        self.capacity, self.gpus, self.policy = capacity, gpus, policy
        self.arrival_window_s, self.completion_window_s = arrival_window_s, completion_window_s
        self.heartbeat_s, self.lost_timeout_s = heartbeat_s, lost_timeout_s
        self.max_jobs_per_gpu = max_jobs_per_gpu
        self.clock = clock
        self.jobs: dict[str, LiveJob] = {}
        self.flush_at: float | None = None
        self.set_model(model)

    def set_model(self, model: ThroughputModel) -> None:
        self.model = model
        self.table = model.loading_table(self.capacity)

    # -- inputs ------------------------------------------------------------------------
    def add(self, job: LiveJob) -> Actions:
        """A submitted job enters the arrival buffer (or a recovered one its old state)."""
        self.jobs[job.id] = job
        if job.state in WAITING:
            job.state = "buffered"
            self._open(self.arrival_window_s)
        return Actions(events=[(job.id, "buffered", {})])

    def message(self, identity: str, msg) -> Actions:
        """A master's message; a message for another job, or with a wrong token, is refused."""
        job = self.jobs.get(msg.job)
        now = self.clock()
        if isinstance(msg, Register) and job is None:
            return self._attach(identity, msg)
        if job is None or identity != msg.job or not hmac.compare_digest(job.token, msg.token):
            why = "unknown job" if job is None else "job may only speak for itself"
            return Actions(send=[(identity, Refused(reason=why))],
                           events=[(msg.job if job else None, "refused",
                                    {"from": identity, "type": msg.type, "reason": why})])
        job.last_seen = now
        if job.state == "lost" and isinstance(msg, Register | Heartbeat):
            return self._revive(job, msg)
        if isinstance(msg, Register):
            return self._registered(job, msg)
        if isinstance(msg, Heartbeat):
            return self._heartbeat(job, msg)
        if isinstance(msg, Paused):
            job.state, job.workers = "paused", 0
            self._open(0.0)  # its workers go to the others now
            return Actions(changed=[job], events=[(job.id, "paused", {
                "seq": msg.seq, "checkpoint": msg.checkpoint})])
        if isinstance(msg, Finish):
            return self.finished(job.id, "finished", msg.exit_code, msg.iterations)
        return Actions()

    def finished(self, job_id: str, state: str, exit_code: int | None = None,
                 iterations: int | None = None) -> Actions:
        """A job ended (finished, failed, lost, cancelled): its workers go back to the pool."""
        job = self.jobs.get(job_id)
        if job is None or job.state in ("finished", "failed", "lost", "cancelled"):
            return Actions()
        was_running = job.state in ACTIVE
        job.state, job.workers, job.gpu_ids = state, 0, ()
        job.exit_code = exit_code
        if iterations is not None:
            job.iteration = iterations
        out = Actions(changed=[job], events=[(job.id, state, {
            "exit_code": exit_code, "iterations": job.iteration,
            "busy_s": round(job.busy_s, 3), "wait_s": round(job.wait_s, 3)})])
        if was_running:
            # a finish waits in the completion buffer; a lost or failed job frees its
            # workers at once (DESIGN.md: reclaimed and redistributed)
            self._open(self.completion_window_s if state == "finished" else 0.0)
        return out

    def pause(self, job_id: str, checkpoint: bool = False) -> Actions:
        """Suspension or preemption (§III-C): the master pauses at its next batch boundary,
        releases its workers (checkpointing first if asked) and answers Paused."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "running" or not job.registered:
            state = job.state if job else "unknown"
            raise InputError(f"job {job_id!r} is {state}: only a running job can pause")
        job.seq += 1
        return Actions(send=[(job.id, Pause(seq=job.seq, checkpoint=checkpoint))],
                       events=[(job.id, "pause", {"seq": job.seq, "checkpoint": checkpoint})])

    def resume(self, job_id: str) -> Actions:
        """A paused job runs again with one worker; the next decision gives it its share."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "paused":
            state = job.state if job else "unknown"
            raise InputError(f"job {job_id!r} is {state}: only a paused job can resume")
        job.seq += 1
        job.state, job.workers, job.last_seen = "running", 1, self.clock()
        self._open(0.0)
        return Actions(changed=[job], send=[(job.id, Resume(seq=job.seq, workers=1))],
                       events=[(job.id, "resume", {"seq": job.seq})])

    def tick(self) -> Actions:
        """Lost jobs (no heartbeat within the timeout) and buffers whose window closed."""
        now = self.clock()
        out = Actions()
        for job in list(self.jobs.values()):
            if (job.state in ACTIVE and job.registered
                    and now - job.last_seen > self.lost_timeout_s):
                out.extend(self.finished(job.id, "lost"))
        if self.flush_at is not None and now >= self.flush_at:
            self.flush_at = None
            out.extend(self.replan())
        return out

    # -- decisions ---------------------------------------------------------------------
    def _open(self, window: float) -> None:
        due = self.clock() + window
        self.flush_at = due if self.flush_at is None else min(self.flush_at, due)

    def node_workers(self) -> int:
        return sum(j.workers for j in self.jobs.values() if j.state in ACTIVE)

    def replan(self) -> Actions:
        """Close the buffers: admit, allocate, launch new jobs, resize running ones."""
        running = [j for j in self.jobs.values() if j.state == "running"]  # paused: no workers
        waiting = sorted((j for j in self.jobs.values() if j.state in WAITING),
                         key=lambda j: (j.submitted, j.id))
        if not running and not waiting:
            return Actions()
        views = [PlanJob(j.id, j.batch_size, j.gpus, j.flops_g, j.params_m, j.remaining_samples,
                         j.state in ACTIVE, j.workers, j.gpu_ids, j.requested)
                 for j in running + waiting]
        decision = plan(views, capacity=self.capacity, gpus=self.gpus, model=self.model,
                        table=self.table, policy=self.policy,
                        max_jobs_per_gpu=self.max_jobs_per_gpu)
        out = Actions(events=[(None, "plan", {"workers": decision.workers,
                                              "resized": decision.resized,
                                              "launched": decision.launched,
                                              "queued": decision.queued})])
        for job_id in decision.queued:
            job = self.jobs[job_id]
            if job.state != "queued":
                job.state = "queued"
                out.changed.append(job)
        for job_id in decision.resized:
            job = self.jobs[job_id]
            job.workers = decision.workers[job_id]
            job.seq += 1
            out.send.append((job.id, Resize(seq=job.seq, workers=job.workers)))
            out.changed.append(job)
            out.events.append((job.id, "resize", {"workers": job.workers, "seq": job.seq}))
        for job_id in decision.launched:
            job = self.jobs[job_id]
            job.state, job.workers = "running", decision.workers[job_id]
            job.gpu_ids, job.last_seen = decision.gpu_ids[job_id], self.clock()
            out.launch.append(job)
            out.changed.append(job)
        return out

    # -- the master's side -------------------------------------------------------------
    def _attach(self, identity: str, msg: Register) -> Actions:
        """A job started by hand registers itself: trust on first use of its token; it keeps
        its workers (within what is free) until the next decision."""
        if identity != msg.job:
            return Actions(send=[(identity, Refused(reason="job may only speak for itself"))])
        feats = msg.features
        free = max(0, self.capacity - self.node_workers())
        job = LiveJob(msg.job, msg.token, feats.batch_size, feats.gpus, feats.flops_g,
                      feats.params_m, feats.iterations, msg.requested, "attached",
                      state="running", workers=min(max(msg.workers, 1), max(free, 1)),
                      gpu_ids=tuple(range(min(feats.gpus, self.gpus))), last_seen=self.clock(),
                      submitted=self.clock(), registered=True)
        self.jobs[job.id] = job
        self._open(self.arrival_window_s)
        job.seq += 1
        return Actions(changed=[job], events=[(job.id, "attached", {"workers": job.workers,
                                                               "pid": msg.pid,
                                                               "cpu_group": msg.cpu_group})],
                       send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                                 heartbeat_s=self.heartbeat_s))])

    def _revive(self, job: LiveJob, msg) -> Actions:
        """A job declared lost speaks again (it was only slow): it runs with what it has
        until the next decision, which the arrival buffer brings."""
        job.state, job.registered = "running", True
        job.workers = min(max(msg.workers, 1), max(1, self.capacity - self.node_workers()))
        self._open(self.arrival_window_s)
        job.seq += 1
        return Actions(changed=[job], events=[(job.id, "revived", {"workers": job.workers})],
                       send=[(job.id, Resize(seq=job.seq, workers=job.workers))])

    def _registered(self, job: LiveJob, msg: Register) -> Actions:
        """A launched job's master says hello: confirm its workers."""
        job.registered = True
        if job.state in WAITING:  # registered before it was planned: run what it has
            job.state, job.workers = "running", min(max(msg.workers, 1), self.capacity)
        job.seq += 1
        return Actions(changed=[job], events=[(job.id, "registered", {"pid": msg.pid})],
                       send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                                 heartbeat_s=self.heartbeat_s))])

    def _heartbeat(self, job: LiveJob, msg: Heartbeat) -> Actions:
        """Progress, and samples for the TPM: μ when the GPU never waits, λ when it does."""
        job.registered = True
        steps = max(0, msg.iteration - job.iteration)
        job.busy_s += steps * msg.step_s
        job.wait_s += steps * msg.data_wait_s
        job.iteration, job.throughput = msg.iteration, msg.samples_per_s
        job.step_s, job.data_wait_s = msg.step_s, msg.data_wait_s
        job.seq = max(job.seq, msg.applied_seq)
        out = Actions()
        iteration_s = msg.step_s + msg.data_wait_s
        if msg.step_s > 0 and iteration_s > 0:
            b = max(1, job.batch_size // job.gpus)
            if msg.data_wait_s <= 0.05 * iteration_s:  # BP ≥ 95 % of the iteration (§III-B)
                out.samples.append((job.id, TrainingSample(b, job.gpus, job.flops_g,
                                                           job.params_m, msg.step_s)))
            elif msg.workers > 0 and msg.samples_per_s > 0:
                node = max(self.node_workers(), msg.workers)
                out.samples.append((job.id, LoadingSample(msg.workers, node,
                                                          msg.samples_per_s)))
        return out
