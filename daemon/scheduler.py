"""The scheduler (A-Dloader §III-C3/5): buffers, decisions, and the commands they cause.

No sockets, processes or disk: it takes events (a submitted job, a master's message, a
process's exit, the clock) and returns what to do — jobs to launch, messages to send,
processes to signal. The node (``daemon.node``) carries those out. Decisions come from
``adloader.planner``, the code the simulator runs too.

Trust: a message is judged by its (job id, token) pair alone. A message whose token does
not prove the job it names changes nothing and is answered only to its sender. Commands for
a job go to the connection (``peer``) that last proved its token, so a process that takes a
job's routing id hears nothing. ``finished``, ``failed`` and ``cancelled`` are terminal: no
message brings such a job back. ``lost`` (nothing is known) is the one state a job leaves
again, when it proves itself, or when its exit status turns up.

Job state tells the truth: a job is ``finished`` when its process exited 0, ``failed`` with
the exit code or signal otherwise, ``cancelled`` when it ended after a cancel. The master's
Finish frees the job's workers at once; the final state waits for the exit status from the
job's supervisor (the launcher, or ``adloader run``) when it has one.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable
from dataclasses import dataclass, field

from adloader.errors import InputError
from adloader.planner import PlanJob, plan
from adloader.protocol import (
    Allocation,
    Exit,
    Finish,
    Heartbeat,
    Pause,
    Paused,
    Refused,
    Register,
    Resize,
    Resume,
    Stop,
)
from adloader.samples import LoadingSample, TrainingSample
from adloader.throughput import ThroughputModel

from .tokens import TokenDigest

ACTIVE = ("running", "paused")
WAITING = ("buffered", "queued")
TERMINAL = ("finished", "failed", "cancelled")  # never left again
ENDED = (*TERMINAL, "lost")
RESERVED_ID = "j-"  # ids the daemon gives submitted jobs; a job started by hand may not


@dataclass
class LiveJob:
    """What the scheduler tracks of one job."""

    id: str
    token_digest: str
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
    reason: str | None = None  # how it ended, in words
    supervisor: str | None = None  # "launcher" or "run": who reports the exit status
    peer: bytes | None = None  # the connection that last proved the token
    ending_since: float | None = None  # its master said Finish; the exit status is awaited
    finish: Finish | None = None  # what the master said
    cancel_at: float | None = None  # a cancel was asked at this time
    signalled: int = 0  # signals sent to stop it (launched jobs): 0, SIGTERM, SIGKILL
    busy_s: float = 0.0  # Σ steps × step time from heartbeats: GPU busy
    wait_s: float = 0.0  # Σ steps × data wait: GPU idle for want of data

    @property
    def remaining_samples(self) -> float:
        left = float(self.iterations or 10 * (self.iteration + 100)) - self.iteration
        return max(left, 1.0) * self.batch_size


@dataclass
class Actions:
    """What a scheduler step asks the node to do."""

    launch: list[LiveJob] = field(default_factory=list)
    send: list[tuple[str, object]] = field(default_factory=list)  # (job id, message)
    reply: list[tuple[bytes, object]] = field(default_factory=list)  # (sender, message)
    kill: list[tuple[str, int]] = field(default_factory=list)  # (job id, signal) launched jobs
    events: list[tuple[str | None, str, dict]] = field(default_factory=list)
    samples: list[tuple[str, TrainingSample | LoadingSample]] = field(default_factory=list)
    changed: list[LiveJob] = field(default_factory=list)  # jobs whose record changed

    def extend(self, other: Actions) -> None:
        for name in ("launch", "send", "reply", "kill", "events", "samples", "changed"):
            getattr(self, name).extend(getattr(other, name))


def exit_text(exit_code: int | None, signal: int | None) -> str:
    if signal:
        try:
            return f"killed by {signals.Signals(signal).name}"
        except ValueError:
            return f"killed by signal {signal}"
    return "exit status unknown" if exit_code is None else f"exit code {exit_code}"


class Scheduler:
    def __init__(self, *, capacity: int, gpus: int, policy: str, model: ThroughputModel,
                 tokens: TokenDigest, arrival_window_s: float = 30.0,
                 completion_window_s: float = 30.0, heartbeat_s: float = 1.0,
                 lost_timeout_s: float = 3.0, max_jobs_per_gpu: int = 2,
                 cancel_grace_s: float = 10.0, clock: Callable[[], float]):
        self.capacity, self.gpus, self.policy = capacity, gpus, policy
        self.tokens = tokens
        self.arrival_window_s, self.completion_window_s = arrival_window_s, completion_window_s
        self.heartbeat_s, self.lost_timeout_s = heartbeat_s, lost_timeout_s
        self.max_jobs_per_gpu = max_jobs_per_gpu
        self.cancel_grace_s = cancel_grace_s
        self.exit_wait_s = max(4 * lost_timeout_s, 5.0)  # for the supervisor after Finish
        self.clock = clock
        self.jobs: dict[str, LiveJob] = {}
        self.ended: dict[str, str] = {}  # terminal jobs of earlier daemons: id -> state
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

    def message(self, identity: bytes, msg) -> Actions:
        """A message from a job's connection ``identity``: judged by (job id, token)."""
        job = self.jobs.get(msg.job)
        if isinstance(msg, Register) and job is None:
            return self._attach(identity, msg)
        if job is None or not self.tokens.verify(msg.token, job.token_digest):
            why = ("the token does not match the job" if job is not None
                   else f"job has ended ({self.ended[msg.job]})" if msg.job in self.ended
                   else "unknown job")
            return self._refuse(identity, msg, why, job)
        if job.state in TERMINAL:
            return self._refuse(identity, msg, f"job has ended ({job.state})", job)
        job.peer = identity  # a new connection takes over only by proving the token
        job.last_seen = self.clock()
        if isinstance(msg, Exit):
            return self.exited(job.id, msg.exit_code, msg.signal)
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
            return self._finish(job, msg)
        return Actions()

    def _refuse(self, identity: bytes, msg, why: str, job: LiveJob | None) -> Actions:
        """Answer the sender only; nothing about any job changes."""
        return Actions(reply=[(identity, Refused(reason=why))],
                       events=[(job.id if job else None, "refused",
                                {"type": msg.type, "job": msg.job[:64], "reason": why})])

    def _finish(self, job: LiveJob, msg: Finish) -> Actions:
        """The master's last word: its workers go back now; the final state comes with the
        exit status (from the supervisor), or from this word for a job without one."""
        job.iteration = max(job.iteration, msg.iterations)
        if job.supervisor is None:  # no one else will say: the master's word is final
            if msg.exit_code < 0:  # it saw the signal that ends it (Ctrl-C)
                return self.exited(job.id, None, -msg.exit_code, msg.error)
            return self.exited(job.id, msg.exit_code, None, msg.error)
        job.finish = msg
        if job.ending_since is None:
            job.ending_since = self.clock()
        return self._release(job, "finishing", {"exit_code": msg.exit_code,
                                                "iterations": msg.iterations})

    def _release(self, job: LiveJob, kind: str, data: dict) -> Actions:
        was = job.workers
        job.workers = 0
        if was and job.state == "running":
            self._open(self.completion_window_s)
        return Actions(changed=[job], events=[(job.id, kind, data)])

    def exited(self, job_id: str, exit_code: int | None, signal: int | None = None,
               tail: str | None = None) -> Actions:
        """The job's process ended: its final state, from what is known of the exit."""
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL:
            return Actions()
        if exit_code is None and signal is None and job.finish is not None:
            exit_code, tail = job.finish.exit_code, tail or job.finish.error
            if exit_code < 0:
                exit_code, signal = None, -exit_code
        if job.cancel_at is not None and job.state not in WAITING:
            state = "cancelled"
        elif exit_code == 0 and not signal:
            state = "finished"
        elif exit_code is None and not signal:
            state = "lost"  # nothing is known
        else:
            state = "failed"
        code = -signal if signal else exit_code
        data = {"exit": exit_text(exit_code, signal)}
        if tail:
            data["tail"] = tail[-4096:]
        return self._end(job, state, code, data)

    def finished(self, job_id: str, state: str, exit_code: int | None = None,
                 iterations: int | None = None, data: dict | None = None) -> Actions:
        """A job ended by the daemon's own decision (cancelled while waiting, lost, a launch
        that failed): its workers go back to the pool."""
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL or (job.state == "lost" and state == "lost"):
            return Actions()
        if iterations is not None:
            job.iteration = iterations
        return self._end(job, state, exit_code, data or {})

    def _end(self, job: LiveJob, state: str, exit_code: int | None, data: dict) -> Actions:
        was_running = job.state in ACTIVE
        job.state, job.workers, job.gpu_ids = state, 0, ()
        job.exit_code, job.reason = exit_code, data.get("exit")
        out = Actions(changed=[job], events=[(job.id, state, {
            "exit_code": exit_code, "iterations": job.iteration,
            "busy_s": round(job.busy_s, 3), "wait_s": round(job.wait_s, 3), **data})])
        if was_running:
            # a finish waits in the completion buffer; a lost or failed job frees its
            # workers at once (DESIGN.md: reclaimed and redistributed)
            self._open(self.completion_window_s if state == "finished" else 0.0)
        return out

    def cancel(self, job_id: str) -> Actions:
        """Cancel: a waiting job never starts; a running one is asked to stop at its next
        batch boundary, and a launched one is signalled if it has not after the grace."""
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL:
            return Actions()
        if job.state in WAITING or job.state == "lost":
            out = Actions()
            if job.state == "lost" and job.supervisor == "launcher":
                out.kill.append((job.id, signals.SIGKILL))  # whatever is left of it
            job.cancel_at = self.clock()
            out.extend(self._end(job, "cancelled", None, {
                "exit": "never started" if job.state in WAITING else "cancelled while lost"}))
            return out
        if job.cancel_at is not None:
            return Actions()
        job.cancel_at = self.clock()
        job.seq += 1
        out = Actions(events=[(job.id, "cancel", {"seq": job.seq,
                                                  "grace_s": self.cancel_grace_s})])
        if job.registered:
            out.send.append((job.id, Stop(seq=job.seq, grace_s=self.cancel_grace_s)))
        elif job.supervisor == "launcher":
            out.kill.append((job.id, signals.SIGTERM))  # no master yet to ask
            job.signalled = signals.SIGTERM
        return out

    def pause(self, job_id: str, checkpoint: bool = False) -> Actions:
        """Suspension or preemption (§III-C): the master pauses at its next batch boundary,
        releases its workers (checkpointing first if asked) and answers Paused."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "running" or not job.registered or job.cancel_at:
            state = "cancelled" if job and job.cancel_at else job.state if job else "unknown"
            raise InputError(f"job {job_id!r} is {state}: only a running job can pause")
        job.seq += 1
        return Actions(send=[(job.id, Pause(seq=job.seq, checkpoint=checkpoint))],
                       events=[(job.id, "pause", {"seq": job.seq, "checkpoint": checkpoint})])

    def resume(self, job_id: str) -> Actions:
        """A paused job runs again with one worker; the next decision gives it its share."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "paused" or job.cancel_at:
            state = job.state if job else "unknown"
            raise InputError(f"job {job_id!r} is {state}: only a paused job can resume")
        job.seq += 1
        job.state, job.workers, job.last_seen = "running", 1, self.clock()
        self._open(0.0)
        return Actions(changed=[job], send=[(job.id, Resume(seq=job.seq, workers=1))],
                       events=[(job.id, "resume", {"seq": job.seq})])

    def tick(self) -> Actions:
        """Lost jobs, overdue exits and cancels, and buffers whose window closed."""
        now = self.clock()
        out = Actions()
        for job in list(self.jobs.values()):
            if job.state not in ACTIVE:
                continue
            if job.cancel_at is not None:
                out.extend(self._escalate(job, now))
            elif job.ending_since is not None:
                if now - job.ending_since > self.exit_wait_s:  # no word from the supervisor
                    out.extend(self.exited(job.id, None, None))
                    out.events.append((job.id, "exit_unconfirmed", {
                        "note": "the supervisor never reported the exit status; the state "
                                "is the master's last word"}))
            elif job.registered and now - job.last_seen > self.lost_timeout_s:
                out.extend(self.finished(job.id, "lost", data={
                    "exit": f"no heartbeat for {self.lost_timeout_s:g} s"}))
        if self.flush_at is not None and now >= self.flush_at:
            self.flush_at = None
            out.extend(self.replan())
        return out

    def _escalate(self, job: LiveJob, now: float) -> Actions:
        """A cancelled job that has not stopped: a launched one gets SIGTERM after the
        grace, then SIGKILL; one started by hand ends itself (its master does), and is
        cancelled once it is no longer heard."""
        late = now - job.cancel_at
        if job.supervisor == "launcher":
            if late > self.cancel_grace_s and job.signalled == 0:
                job.signalled = signals.SIGTERM
                return Actions(kill=[(job.id, signals.SIGTERM)])
            if late > 2 * self.cancel_grace_s and job.signalled == signals.SIGTERM:
                job.signalled = signals.SIGKILL
                return Actions(kill=[(job.id, signals.SIGKILL)])
            return Actions()
        if now - job.last_seen > self.lost_timeout_s and late > self.lost_timeout_s:
            return self._end(job, "cancelled", None, {"exit": "no longer heard after cancel"})
        return Actions()

    # -- decisions ---------------------------------------------------------------------
    def _open(self, window: float) -> None:
        due = self.clock() + window
        self.flush_at = due if self.flush_at is None else min(self.flush_at, due)

    def node_workers(self) -> int:
        return sum(j.workers for j in self.jobs.values() if j.state in ACTIVE)

    def _views(self, jobs: list[LiveJob]) -> list[PlanJob]:
        return [PlanJob(j.id, j.batch_size, j.gpus, j.flops_g, j.params_m, j.remaining_samples,
                        j.state in ACTIVE, j.workers, j.gpu_ids, j.requested) for j in jobs]

    def _plan(self, jobs: list[LiveJob]):
        return plan(self._views(jobs), capacity=self.capacity, gpus=self.gpus,
                    model=self.model, table=self.table, policy=self.policy,
                    max_jobs_per_gpu=self.max_jobs_per_gpu)

    def replan(self) -> Actions:
        """Close the buffers: admit, allocate, launch new jobs, resize running ones. A job
        the planner cannot take fails alone; the others are planned as if it never was."""
        running = [j for j in self.jobs.values() if j.state == "running"
                   and j.ending_since is None and j.cancel_at is None]
        waiting = sorted((j for j in self.jobs.values() if j.state in WAITING),
                         key=lambda j: (j.submitted, j.id))
        if not running and not waiting:
            return Actions()
        out = Actions()
        try:
            decision = self._plan(running + waiting)
        except Exception as exc:  # isolate the job that breaks it
            bad = [j for j in waiting if not self._plans(running + [j])]
            for job in bad:
                out.extend(self._end(job, "failed", None, {
                    "exit": f"the scheduler could not plan it: {type(exc).__name__}: {exc}"}))
            waiting = [j for j in waiting if j not in bad]
            decision = self._plan(running + waiting)
        out.events.append((None, "plan", {"workers": decision.workers,
                                          "resized": decision.resized,
                                          "launched": decision.launched,
                                          "queued": decision.queued}))
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

    def _plans(self, jobs: list[LiveJob]) -> bool:
        try:
            self._plan(jobs)
        except Exception:
            return False
        return True

    def unlaunched(self, job: LiveJob, why: str) -> Actions:
        """A planned launch that did not happen (its intent could not be recorded): the
        job waits again, and the next decision tries once more."""
        job.state, job.workers, job.gpu_ids = "queued", 0, ()
        self._open(max(self.arrival_window_s, 5.0))
        return Actions(changed=[job], events=[(job.id, "launch_deferred", {"reason": why})])

    # -- the master's side -------------------------------------------------------------
    def _attach(self, identity: bytes, msg: Register) -> Actions:
        """A job started by hand registers itself: trust on first use of its token; it keeps
        its workers (within what is free) until the next decision."""
        if msg.job in self.ended:
            return self._refuse(identity, msg, f"job has ended ({self.ended[msg.job]})", None)
        if msg.job.startswith(RESERVED_ID):
            return self._refuse(identity, msg, f"ids {RESERVED_ID}* are the daemon's to give",
                                None)
        feats = msg.features
        free = max(0, self.capacity - self.node_workers())
        now = self.clock()
        job = LiveJob(msg.job, self.tokens.digest(msg.token), feats.batch_size, feats.gpus,
                      feats.flops_g, feats.params_m, feats.iterations, msg.requested,
                      "attached", state="running",
                      workers=min(max(msg.workers, 1), max(free, 1)),
                      gpu_ids=tuple(range(min(feats.gpus, self.gpus))), last_seen=now,
                      submitted=now, registered=True, supervisor=msg.supervisor,
                      peer=identity)
        self.jobs[job.id] = job
        self._open(self.arrival_window_s)
        job.seq += 1
        return Actions(changed=[job], events=[(job.id, "attached", {
                           "workers": job.workers, "pid": msg.pid, "cpu_group": msg.cpu_group,
                           "supervisor": msg.supervisor})],
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
        job.registered = True
        if job.state in WAITING:  # registered before it was planned: run what it has
            job.state, job.workers = "running", min(max(msg.workers, 1), self.capacity)
        job.seq += 1
        out = Actions(changed=[job], events=[(job.id, "registered", {"pid": msg.pid})],
                      send=[(job.id, Allocation(seq=job.seq, workers=job.workers,
                                                heartbeat_s=self.heartbeat_s))])
        if job.cancel_at is not None:  # cancelled before its master was there to ask
            job.seq += 1
            out.send.append((job.id, Stop(seq=job.seq, grace_s=self.cancel_grace_s)))
        return out

    def _heartbeat(self, job: LiveJob, msg: Heartbeat) -> Actions:
        """Progress, and samples for the TPM: μ when the GPU never waits, λ when it does."""
        job.registered = True
        steps = max(0, msg.iteration - job.iteration)
        job.busy_s += steps * msg.step_s
        job.wait_s += steps * msg.data_wait_s
        job.iteration, job.throughput = msg.iteration, msg.samples_per_s
        job.step_s, job.data_wait_s = msg.step_s, msg.data_wait_s
        job.seq = max(job.seq, msg.applied_seq)  # after a restart: what it already applied
        out = Actions()
        iteration_s = msg.step_s + msg.data_wait_s
        if msg.step_s > 0 and iteration_s > 0 and job.state == "running":
            b = max(1, job.batch_size // job.gpus)
            if msg.data_wait_s <= 0.05 * iteration_s:  # BP ≥ 95 % of the iteration (§III-B)
                out.samples.append((job.id, TrainingSample(b, job.gpus, job.flops_g,
                                                           job.params_m, msg.step_s)))
            elif msg.workers > 0 and msg.samples_per_s > 0:
                node = max(self.node_workers(), msg.workers)
                out.samples.append((job.id, LoadingSample(msg.workers, node,
                                                          msg.samples_per_s)))
        return out
