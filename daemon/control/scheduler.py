"""The scheduler (A-Dloader §III-C3/5): buffers, decisions, and the commands they cause.

No sockets, processes or disk: it takes events (a submitted job, a master's message, a
process's exit, the clock) and returns what to do — jobs to launch, messages to send,
processes to signal. The node (``daemon.node``) carries those out. Decisions come from
``adloader.scheduling.planner``, the code the simulator runs too.

Trust: a message is judged by its (job id, token) pair alone. A message whose token does
not prove the job it names changes nothing and is answered only to its sender. Commands for
a job go to the connection (``peer``) that last proved its token, so a process that takes a
job's routing id hears nothing. ``finished``, ``failed`` and ``cancelled`` are terminal: no
message brings such a job back. ``lost`` (nothing is known) is the one state a job leaves
again, when it proves itself, or when its exit status turns up.

How a job ends — truthfully — is ``daemon.control.endings``; how a master registers,
``daemon.control.registration``: functions of the live job that this class calls with what
they need of the node and whose outcome on the job set (a job filed, a decision opened, the
policy told) it carries out. What is tracked of a job is ``daemon.control.live``.
"""

from __future__ import annotations

from collections.abc import Callable

from adloader.config import ARRIVAL_SETTLE_S
from adloader.errors import ConflictError
from adloader.protocol import (
    Exit,
    Finish,
    Heartbeat,
    Pause,
    Paused,
    Register,
    Resize,
    Resume,
)
from adloader.scheduling.closed_loop import ClosedLoop, LoopSettings
from adloader.scheduling.model import correction
from adloader.scheduling.model.intake import IntakeCeiling
from adloader.scheduling.model.samples import LoadingSample, TrainingSample
from adloader.scheduling.model.throughput import ThroughputModel
from adloader.scheduling.planner import PlanJob, admit, plan
from adloader.scheduling.policies.registry import get_policy

from . import endings, registration
from .endings import Ending
from .live import (  # noqa: F401  (the states, for the scheduler's users)
    ACTIVE,
    ENDED,
    RESERVED_ID,
    TERMINAL,
    WAITING,
    Actions,
    LiveJob,
    exit_text,
    refuse,
)
from .registration import CpusOf, NameCheck
from .tokens import TokenDigest

REVIEW_MIN_S = 5.0  # ftf: a plan is looked at again no sooner than this
CORRECT_EVERY_S = 2.0  # one correction of c_i a job this often (heartbeats come faster)
TRAINING_BOUND = 0.05  # a beat waiting at most this part of its iterations: a μ sample
LOADING_BOUND = 0.25  # a beat waiting at least this part: a λ sample (between: neither)


class Scheduler:
    """One node's jobs and the decisions on them; every input returns the ``Actions`` the
    node is to carry out."""

    def __init__(self, *, capacity: int, gpus: int, policy: str, model: ThroughputModel,
                 tokens: TokenDigest, arrival_window_s: float = 30.0,
                 arrival_settle_s: float = ARRIVAL_SETTLE_S, hold_arrivals: bool = False,
                 completion_window_s: float = 30.0, heartbeat_s: float = 1.0,
                 lost_timeout_s: float = 3.0, max_jobs_per_gpu: int = 2,
                 cancel_grace_s: float = 10.0, clock: Callable[[], float],
                 cpus_of: CpusOf | None = None, name_check: NameCheck | None = None,
                 closed_loop: bool = False, loop_most: float = LoopSettings.grow_to):
        self.capacity, self.gpus = capacity, gpus
        self.policy = get_policy(policy)  # this node's own: its state (ftf's shadow) lives here
        self.tokens = tokens
        self.arrival_window_s, self.completion_window_s = arrival_window_s, completion_window_s
        self.arrival_settle_s, self.hold_arrivals = arrival_settle_s, hold_arrivals
        if self.policy.replans_at_completion:
            self.completion_window_s = 0.0
        self.heartbeat_s, self.lost_timeout_s = heartbeat_s, lost_timeout_s
        self.max_jobs_per_gpu = max_jobs_per_gpu
        self.cancel_grace_s = cancel_grace_s
        self.exit_wait_s = max(4 * lost_timeout_s, 5.0)  # for the supervisor after Finish
        self.clock = clock
        # (CPUs, share of the node's) a process is confined to (the kernel's affinity of a
        # job's master, where it is part of the node's): its part of the workers at most;
        # None: it runs wherever the daemon does, or not known (no cap)
        self.cpus_of = cpus_of or (lambda pid: None)
        # a launcher-derived name against what the kernel says of the process (a Slurm job's
        # cgroup): False refuses it, None is not checked (``daemon.control.slurm_identity``)
        self.name_check = name_check or (lambda name, pid: (None, "not checked"))
        self.jobs: dict[str, LiveJob] = {}
        self._node_workers: tuple[float, int] | None = None  # (clock, D) for loading samples
        self.ended: dict[str, str] = {}  # terminal jobs of earlier daemons: id -> state
        self.flush_at: float | None = None
        self.ending = False  # a job is being cancelled or its exit awaited (see tick)
        # measured, then kept (``adloader.scheduling.closed_loop``): the policy's plan is
        # walked toward in moves the node's measurements keep or undo; None: applied at once
        self.loop = ClosedLoop(capacity, LoopSettings(grow_to=loop_most).for_heartbeat(
            heartbeat_s)) if closed_loop else None
        self.set_model(model)

    def set_model(self, model: ThroughputModel, table=None) -> None:
        """Use ``model`` from now on (``table``: its loading table, if made already — making
        it for a large node is the slow part, best done before taking any lock)."""
        self.model = model
        self.table = model.loading_table(self.capacity) if table is None else table
        self.policy.rebase(self.capacity, self.table)

    def set_capacity(self, capacity: int) -> Actions:
        """The node's workers changed (its cgroup was resized): plan every job again now."""
        self.capacity = max(1, int(capacity))
        self.set_model(self.model)
        if self.loop is not None:  # the even split of another node: measured anew
            self.loop.capacity, self.loop.jobs = self.capacity, {}
        self._open(0.0)
        return Actions()

    # -- inputs ------------------------------------------------------------------------
    def add(self, job: LiveJob) -> Actions:
        """A submitted job enters the arrival buffer (or a recovered one its old state): it
        is decided after the settle when it could start now, else after the arrival window."""
        self.jobs[job.id] = job
        if job.state in WAITING:
            job.state = "buffered"
            self._open(self._arrival_wait(job))
        return Actions(events=[(job.id, "buffered", {})])

    def _arrival_wait(self, job: LiveJob) -> float:
        """§III-C5's buffer, shortened: ``arrival_settle_s`` (jobs submitted together share
        a decision) when the planner would admit the job now (GPU room beside the running and
        earlier jobs), else and with ``hold_arrivals`` ``arrival_window_s``."""
        if self.hold_arrivals:
            return self.arrival_window_s
        settle = min(self.arrival_settle_s, self.arrival_window_s)
        try:
            placed = admit(self._views(self._running() + self._waiting()),
                           capacity=self.capacity, gpus=self.gpus,
                           max_jobs_per_gpu=self.max_jobs_per_gpu)
        except Exception:  # a job the planner cannot take: the decision fails it, soon
            return settle
        return settle if job.id in placed else self.arrival_window_s

    def _running(self) -> list[LiveJob]:
        """The running jobs a decision plans (not those ending or cancelled)."""
        return [j for j in self.jobs.values() if j.state == "running"
                and j.ending_since is None and j.cancel_at is None]

    def _waiting(self) -> list[LiveJob]:
        """Buffered and queued jobs, in arrival order."""
        return sorted((j for j in self.jobs.values() if j.state in WAITING),
                      key=lambda j: (j.submitted, j.id))

    def message(self, identity: bytes, msg, uid: int | None = None) -> Actions:
        """A message from a job's connection ``identity``: judged by (job id, token) and,
        where the kernel says who connected (``uid``: ``SO_PEERCRED``), by the user the job
        is bound to — the one whose process first registered it."""
        job = self.jobs.get(msg.job)
        if isinstance(msg, Register) and job is None:
            return self._attach(identity, msg, uid)
        if job is None or not self.tokens.verify(msg.token, job.token_digest):
            why = ("the token does not match the job" if job is not None
                   else f"job has ended ({self.ended[msg.job]})" if msg.job in self.ended
                   else "unknown job")
            return refuse(identity, msg, why, job)
        if job.state in TERMINAL:
            return refuse(identity, msg, f"job has ended ({job.state})", job)
        if uid is not None and job.uid is not None and uid != job.uid:  # a token is not enough
            return refuse(identity, msg, "the job belongs to another user", job)
        if uid is not None and job.uid is None and isinstance(msg, Register):
            job.uid = uid  # bound by its first registration the kernel vouches for
        job.peer = identity  # a new connection takes over only by proving the token
        job.last_seen = self.clock()
        if isinstance(msg, Exit):
            return self.exited(job.id, msg.exit_code, msg.signal)
        if job.state == "lost" and isinstance(msg, Register | Heartbeat):
            # a lost job holds no workers: what the others hold is all that is taken
            out = registration.revive(job, msg, free=self.capacity - self.node_workers(),
                                      gpus=self.gpus)
            self._open(self.arrival_window_s)
            return out
        if isinstance(msg, Register):
            return registration.confirm(job, msg, cpus_of=self.cpus_of,
                                        capacity=self.capacity, heartbeat_s=self.heartbeat_s,
                                        cancel_grace_s=self.cancel_grace_s)
        if isinstance(msg, Heartbeat):
            return self._heartbeat(job, msg)
        if isinstance(msg, Paused):
            job.state, job.workers = "paused", 0
            self._open(0.0)  # its workers go to the others now
            return Actions(changed=[job], events=[(job.id, "paused", {
                "seq": msg.seq, "checkpoint": msg.checkpoint})])
        if isinstance(msg, Finish):
            return self._settle(job, endings.finish(job, msg, self.clock()))
        return Actions()

    def _attach(self, identity: bytes, msg: Register, uid: int | None) -> Actions:
        """A job started by hand registers itself (``registration.attach``): filed, and
        decided on after the arrival window."""
        job, out = registration.attach(
            identity, msg, uid=uid, ended=self.ended, tokens=self.tokens,
            name_check=self.name_check, cpus_of=self.cpus_of,
            free=self.capacity - self.node_workers(), capacity=self.capacity, gpus=self.gpus,
            heartbeat_s=self.heartbeat_s, now=self.clock())
        if job is not None:
            self.jobs[job.id] = job
            self._open(self.arrival_window_s)
        return out

    # -- endings (``daemon.control.endings``) ------------------------------------------
    def exited(self, job_id: str, exit_code: int | None, signal: int | None = None,
               tail: str | None = None, note: str | None = None) -> Actions:
        """The job's process ended: its final state, from what is known of the exit (and a
        ``note`` on how the daemon learned it, kept with the final event). An unknown or
        terminal job: nothing."""
        job = self.jobs.get(job_id)
        if job is None:
            return Actions()
        return self._settle(job, endings.exited(job, exit_code, signal, tail, note))

    def finished(self, job_id: str, state: str, exit_code: int | None = None,
                 iterations: int | None = None, data: dict | None = None) -> Actions:
        """A job ended by the daemon's own decision (cancelled while waiting, lost, a launch
        that failed): its workers go back to the pool. An unknown or terminal job: nothing."""
        job = self.jobs.get(job_id)
        if job is None:
            return Actions()
        return self._settle(job, endings.finished(job, state, exit_code, iterations, data))

    def cancel(self, job_id: str, signal: int | None = None) -> Actions:
        """Cancel (``endings.cancel``, with ``cancel_grace_s``): a waiting job never starts, a
        running one is asked to stop, or signalled with ``signal`` (launched jobs only). An
        unknown or terminal job: nothing."""
        job = self.jobs.get(job_id)
        if job is None:
            return Actions()
        return self._settle(job, endings.cancel(job, self.clock(), self.cancel_grace_s,
                                                signal))

    def _settle(self, job: LiveJob, ending: Ending) -> Actions:
        """Carry out what an ending asks of the job set; return what the node is to do."""
        if ending.left:
            self.policy.forget(job.id)  # e.g. ftf's shadow: balance would not have run it on
        if ending.freed:
            self._open(0.0 if ending.left else self.completion_window_s)
            ending.actions.extend(self.rebase())
        return ending.actions

    def pause(self, job_id: str, checkpoint: bool = False) -> Actions:
        """Suspension or preemption (§III-C): the master pauses at its next batch boundary,
        releases its workers (checkpointing first if asked) and answers Paused."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "running" or not job.registered or job.cancel_at:
            state = "cancelled" if job and job.cancel_at else job.state if job else "unknown"
            raise ConflictError(f"job {job_id!r} is {state}: only a running job can pause")
        job.seq += 1
        return Actions(send=[(job.id, Pause(seq=job.seq, checkpoint=checkpoint))],
                       events=[(job.id, "pause", {"seq": job.seq, "checkpoint": checkpoint})])

    def resume(self, job_id: str) -> Actions:
        """A paused job runs again with one worker; the next decision gives it its share."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "paused" or job.cancel_at:
            state = job.state if job else "unknown"
            raise ConflictError(f"job {job_id!r} is {state}: only a paused job can resume")
        job.seq += 1
        job.state, job.workers, job.last_seen = "running", 1, self.clock()
        self._open(0.0)
        return Actions(changed=[job], send=[(job.id, Resume(seq=job.seq, workers=1))],
                       events=[(job.id, "resume", {"seq": job.seq})])

    def tick(self) -> Actions:
        """Lost jobs, overdue exits and cancels, and buffers whose window closed."""
        now = self.clock()
        out = Actions()
        self.ending = False  # a job on its way out: the clock is needed at every tick
        for job in list(self.jobs.values()):
            if job.state not in ACTIVE:
                continue
            self.ending |= job.cancel_at is not None or job.ending_since is not None
            if job.cancel_at is not None:
                out.extend(self._settle(job, endings.escalate(
                    job, now, self.cancel_grace_s, self.lost_timeout_s)))
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
        if self.loop is not None:
            out.extend(self.loop_step())
        return out

    def _open(self, window: float) -> None:
        due = self.clock() + window
        self.flush_at = due if self.flush_at is None else min(self.flush_at, due)

    def node_workers(self) -> int:
        return sum(j.workers for j in self.jobs.values() if j.state in ACTIVE)

    def _recent_node_workers(self) -> int:
        """D for a loading sample, recounted at most every 0.1 s: a thousand heartbeats a
        second must not each sum over a thousand jobs."""
        now = self.clock()
        if self._node_workers is None or now - self._node_workers[0] > 0.1:
            self._node_workers = (now, self.node_workers())
        return self._node_workers[1]

    def _views(self, jobs: list[LiveJob]) -> list[PlanJob]:
        return [PlanJob(j.id, j.batch_size, j.gpus, j.flops_g, j.params_m, j.remaining_samples,
                        j.state in ACTIVE, j.workers, j.gpu_ids, j.requested, j.rate_scale,
                        length_known=bool(j.iterations), started=j.iteration > 0,
                        max_workers=j.max_workers(self.capacity),
                        intake=j.intake.rate(j.batch_size) if self.loop is not None else 0.0)
                for j in jobs]

    def _plan(self, jobs: list[LiveJob]):
        return plan(self._views(jobs), capacity=self.capacity, gpus=self.gpus,
                    model=self.model, table=self.table, policy=self.policy,
                    max_jobs_per_gpu=self.max_jobs_per_gpu, now=self.clock(),
                    window=self.completion_window_s)

    def replan(self) -> Actions:
        """Close the buffers: admit, allocate, launch new jobs, resize running ones. A job
        the planner cannot take fails alone; the others are planned as if it never was."""
        running, waiting = self._running(), self._waiting()
        if not running and not waiting:
            if self.loop is not None:  # none left: whoever runs next starts a new set
                self.loop.jobs = {}
            return Actions()
        out = Actions()
        try:
            decision = self._plan(running + waiting)
        except Exception as exc:  # isolate the job that breaks it
            bad = [j for j in waiting if not self._plans(running + [j])]
            for job in bad:
                out.extend(self._settle(job, endings.end(job, "failed", None, {
                    "exit": f"the scheduler could not plan it: {type(exc).__name__}: {exc}"})))
            waiting = [j for j in waiting if j not in bad]
            decision = self._plan(running + waiting)
        counts = dict(decision.workers)
        resized = list(decision.resized)
        if self.loop is not None:  # the plan is the loop's target; these counts are sent
            counts, resized = self._loop_counts(decision)
        data = {"workers": counts, "resized": resized, "launched": decision.launched,
                "queued": decision.queued,
                "predicted": {k: round(v, 1) for k, v in decision.predicted.items()}}
        if self.loop is not None:
            data["target"] = dict(decision.workers)
        out.events.append((None, "plan", data))
        for job_id, ceiling in decision.ceiling.items():
            job = self.jobs[job_id]
            job.ceiling, job.planned_scale = ceiling, job.rate_scale
        if self.policy.replans_at_completion and decision.predicted:
            # a policy that plans on completions counts on its predicted ones: look again when
            # the first is due, so a job that runs longer than it said does not keep the
            # workers it was lent
            due = min(self.jobs[k].remaining_samples / max(v, 1e-9)
                      for k, v in decision.predicted.items())
            self._open(max(REVIEW_MIN_S, 1.1 * due))
        for job_id in decision.queued:
            job = self.jobs[job_id]
            if job.state != "queued":
                job.state = "queued"
                out.changed.append(job)
        for job_id in resized:
            out.extend(self._resize(self.jobs[job_id], counts[job_id]))
        for job_id in decision.launched:
            job = self.jobs[job_id]
            job.state, job.workers = "running", counts[job_id]
            job.gpu_ids, job.last_seen = decision.gpu_ids[job_id], self.clock()
            out.launch.append(job)
            out.changed.append(job)
        return out

    def _resize(self, job: LiveJob, workers: int, why: str | None = None) -> Actions:
        job.workers = workers
        job.seq += 1
        if self.loop is not None:
            self.loop.resized(self.clock(), job.id)
        data = {"workers": job.workers, "seq": job.seq}
        if why:
            data["loop"] = why
        return Actions(send=[(job.id, Resize(seq=job.seq, workers=job.workers))],
                       changed=[job], events=[(job.id, "resize", data)])

    def _loop_counts(self, decision) -> tuple[dict[str, int], list[str]]:
        """The closed loop's counts for a decision: a new set of jobs starts from the
        counts they asked for, then the even split, measured (launched jobs with the first,
        running ones resized to it); the policy's plan becomes the loop's target, walked
        toward in measured moves (``loop_step``)."""
        loop = self.loop
        planned = {k: self.jobs[k].batch_size for k in decision.workers}
        loop.target = dict(decision.workers)
        node = min(sum(decision.workers.values()), self.capacity)
        ceiling, table = dict(decision.ceiling), self.table
        loop.predict = lambda name, d: float(min(ceiling.get(name, 0.0),
                                                 table[node, max(0, min(d, node))]))
        loop.ceiling = ceiling
        if set(planned) == loop.names:
            return {k: self.jobs[k].workers for k in planned}, []
        counts = loop.reset(self.clock(), planned,
                            {k: self.jobs[k].max_workers(self.capacity) for k in planned},
                            {k: self.jobs[k].requested for k in planned},
                            current={k: self.jobs[k].workers for k in planned},
                            planned=decision.workers)
        for k in planned:  # C_j was measured beside other jobs: measured anew
            self.jobs[k].intake = IntakeCeiling()
        resized = [k for k in planned if k not in decision.launched
                   and self.jobs[k].workers != counts[k]]
        return counts, resized

    def rebase(self) -> Actions:
        """A job left the running set (it ended, paused or was lost): with the loop, the
        others split the node evenly now (the counts they asked for measured next); the
        policy's plan follows after the completion window, as before."""
        loop, out = self.loop, Actions()
        running = {j.id: j for j in self._running()}
        if loop is None or not running or set(running) == loop.names:
            return out
        counts = loop.reset(self.clock(), {k: j.batch_size for k, j in running.items()},
                            {k: j.max_workers(self.capacity) for k, j in running.items()},
                            {k: j.requested for k, j in running.items()}, first="even",
                            current={k: j.workers for k, j in running.items()})
        for job_id, job in running.items():
            job.intake = IntakeCeiling()
            if job.workers != counts[job_id]:
                out.extend(self._resize(job, counts[job_id], "even"))
        return out

    def loop_step(self) -> Actions:
        """The closed loop's move, judgement or guard, now (called from ``tick``)."""
        loop, out = self.loop, Actions()
        running = {j.id: j for j in self._running()}
        if loop is None or not running or set(running) != loop.names:
            return out
        counts = loop.step(self.clock(), {k: j.workers for k, j in running.items()},
                           {k: j.remaining_samples for k, j in running.items()})
        for job_id, workers in counts.items():
            out.extend(self._resize(running[job_id], workers, loop.phase))
        out.events.extend(loop.events)
        loop.events.clear()
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

    def _correct(self, job: LiveJob, observed: float) -> Actions:
        """c_i from the job's own steps, one update per ``CORRECT_EVERY_S``; a re-plan at
        once when it moved since the job's last plan (``adloader.scheduling.model.correction``)."""
        now = self.clock()
        if job.corrected_at == 0.0:  # its first GPU-bound beat: skip what is left of its
            # warm-up (its first seconds of steps, however fed: a job that waited on a loader
            # it shared is not warming up when its workers come)
            left = max(0.0, correction.WARMUP_S - job.busy_s - job.wait_s)
            job.corrected_at = now + left - CORRECT_EVERY_S
        if job.ceiling <= 0 or now - job.corrected_at < CORRECT_EVERY_S:
            return Actions()
        predicted = job.ceiling * job.rate_scale / job.planned_scale  # with today's c_i
        job.rate_scale, job.corrected_at = correction.update(job.rate_scale, observed,
                                                             predicted), now
        if not correction.moved(job.rate_scale, job.planned_scale):
            return Actions()
        self._open(0.0)
        return Actions(events=[(job.id, "corrected", {
            "scale": round(job.rate_scale, 3), "observed": round(observed, 1),
            "predicted": round(predicted, 1)})])

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
        if job.state == "running":
            job.intake.observe(msg.step_s, msg.data_wait_s)  # C_j: from the first beat on
            if self.loop is not None:
                self.loop.beat(self.clock(), job.id, msg.iteration, msg.applied_seq >= job.seq,
                               msg.samples_per_s)
                if job.intake.beats == 1:  # a first C_j: the plan the loop walks toward
                    self._open(0.0)
        if msg.step_s > 0 and iteration_s > 0 and job.state == "running":
            b = max(1, job.batch_size // job.gpus)
            if msg.data_wait_s <= TRAINING_BOUND * iteration_s:  # BP ≥ 95 % (§III-B)
                out.samples.append((job.id, TrainingSample(b, job.gpus, job.flops_g,
                                                           job.params_m, msg.step_s)))
                out.extend(self._correct(job, job.batch_size / msg.step_s))
            elif msg.data_wait_s >= LOADING_BOUND * iteration_s and msg.workers > 0 \
                    and msg.samples_per_s > 0:  # the loader binds it: its rate is λ's
                node = max(self._recent_node_workers(), msg.workers)
                out.samples.append((job.id, LoadingSample(msg.workers, node,
                                                          msg.samples_per_s)))
        return out
