"""Discrete-event simulation of one node running a trace under an allocation policy.

The scheduler side is the real one — arrival and completion buffers (A-Dloader §III-C5;
an arrival that could start now is decided after a settle, as the daemon decides it),
a policy from ``scheduling.policies.allocation.POLICIES`` fed by a fitted TPM — while time runs on a
device profile's ground truth: between events every running job progresses at a fluid
rate, limited by its loading rate λ = d/D·L(D) and by its GPUs, which jobs sharing them
time-slice (max-min fair water-filling of GPU time). A job whose workers change pauses for
the reallocation cost (adloader's live resize by default; the paper's
pause-and-retrieve took 16 s).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from adloader.config import ARRIVAL_SETTLE_S
from adloader.device.device_profile import DeviceProfile
from adloader.errors import InputError
from adloader.models import features
from adloader.scheduling.closed_loop import ClosedLoop, LoopSettings
from adloader.scheduling.model import correction
from adloader.scheduling.model.throughput import ThroughputModel
from adloader.scheduling.planner import PlanJob, admit, plan
from adloader.scheduling.policies.gpushare import iteration_rates
from adloader.scheduling.policies.registry import get_policy
from adloader.sim.colocation import Colocation
from adloader.sim.cpu_sharing import MODES as CPU_SHARING
from adloader.sim.cpu_sharing import kernel_rates
from adloader.sim.trace import Trace, TraceJob
from adloader.sim.truth import DEFAULT_TRUTH, load_truth

EPS = 1e-9
# A resized job's stall. adloader resizes live at a batch boundary (ElasticDataLoader:
# `adloader bench resize` measures the stall, target ≤ 0.1 s); the paper's pause, checkpoint
# and relaunch took 16 s a round (§IV-B) — `--realloc-cost 16` simulates that mechanism.
LIVE_RESIZE_S = 0.1
PAPER_PAUSE_RETRIEVE_S = 16.0


@dataclass
class SimJob:
    spec: TraceJob
    flops_g: float
    params_m: float
    step_s: float  # ground-truth step on its own GPUs
    state: str = "pending"  # pending | buffered | queued | running | done
    gpu_ids: tuple[int, ...] = ()
    workers: int = 0
    workers_initial: int | None = None
    done: float = 0.0  # iterations
    paused_until: float = 0.0
    start_s: float | None = None
    end_s: float | None = None
    scale: float = 1.0  # c_i, the online correction of its predicted B·F_μ
    planned_scale: float = 1.0  # c_i when it was last planned
    observe_at: float | None = None  # its next heartbeat sample (correction on)
    # the truth's cost of sharing a GPU (adloader.sim.colocation); None: perfect time-slicing
    colocation: Colocation | None = None

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class SimConfig:
    policy: str = "waa"
    realloc: bool = True
    capacity: int | None = None  # loading workers; the profile's when None
    arrival_window_s: float = 30.0  # an arrival that cannot start now waits this long
    arrival_settle_s: float = ARRIVAL_SETTLE_S  # one that could start is decided then
    hold_arrivals: bool = False  # every arrival waits the whole window (the paper's buffer)
    completion_window_s: float = 30.0
    realloc_cost_s: float = LIVE_RESIZE_S  # stall of a resized job; paper's mechanism: 16 s
    keep_threshold: float = 0.02  # a resize must change the job's predicted T by more
    prediction_error: float = 0.0  # ε: predicted B·F_μ off by up to ±ε per job (truth intact)
    error_seed: int = 0
    # correct each job's B·F_μ online from its steps (adloader.scheduling.model.correction)
    correct: bool = True
    observe_s: float = 2.0  # one step sample a job this often (the daemon's CORRECT_EVERY_S)
    warmup_s: float = 10.0  # its first sample this long after its start (correction.WARMUP_S)
    slow: tuple[tuple[str, float], ...] = ()  # (job, k): its true steps k × the profile's
    # how the truth shares the CPU among loader workers (adloader.sim.cpu_sharing): static,
    # the model's own assumption; kernel, sleeping workers yield their CPU
    cpu_sharing: str = "static"
    # the ground truth of steps and GPU sharing (adloader.sim.truth): model, eq. 6 and perfect
    # time-slicing (the TPM's own forms, the ablation); published, published measurements
    truth: str = DEFAULT_TRUTH
    # the daemon's closed loop (adloader.scheduling.closed_loop): even split first, each move
    # toward the plan kept only if the node's measured rate did not fall; heartbeats this often
    closed_loop: bool = False
    heartbeat_s: float = 0.5
    # the loop's capacity probes, workers past ``capacity`` (LoopSettings.grow_to): none by
    # default, as the truths' L(D) keeps rising past the workers a node is given (the paper
    # profile: 18 workers, L(D) measured to 24), a gain from CPUs no baseline is given
    grow_to: float = 1.0


@dataclass
class SimResult:
    policy: str
    realloc: bool
    cores: int
    jobs: list[SimJob]
    timeline: list[dict]
    reallocations: int
    gpu_busy_s: float
    gpu_held_s: float
    events: list[dict] = field(default_factory=list)

    @property
    def makespan_s(self) -> float:
        return max(j.end_s for j in self.jobs) - min(j.start_s for j in self.jobs)

    def job_throughput(self, job: SimJob) -> float:
        """Samples per second over the job's own run (the paper's per-job throughput)."""
        return job.spec.batch_size * job.spec.iterations / max(job.end_s - job.start_s, EPS)

    def to_json(self) -> dict:
        jobs = [
            {
                "name": j.name,
                "model": j.spec.model,
                "batch_size": j.spec.batch_size,
                "gpus": j.spec.gpus,
                "gpu_ids": list(j.gpu_ids),
                "iterations": j.spec.iterations,
                "arrival_s": j.spec.arrival_s,
                "start_s": round(j.start_s, 3),
                "end_s": round(j.end_s, 3),
                "jct_s": round(j.end_s - j.spec.arrival_s, 3),
                "workers_initial": j.workers_initial,
                "throughput": round(self.job_throughput(j), 3),
            }
            for j in self.jobs
        ]
        return {
            "policy": self.policy,
            "realloc": self.realloc,
            "cores": self.cores,
            "makespan_s": round(self.makespan_s, 3),
            "aggregate_throughput": round(sum(j["throughput"] for j in jobs), 3),
            "mean_jct_s": round(float(np.mean([j["jct_s"] for j in jobs])), 3),
            "gpu_idle_fraction": round(1.0 - self.gpu_busy_s / max(self.gpu_held_s, EPS), 4),
            "reallocations": self.reallocations,
            "jobs": jobs,
            "timeline": self.timeline,
            "events": self.events,
        }


def gpu_rates(jobs: list[SimJob], loading: Callable[[SimJob], float]) -> dict[str, float]:
    """Iterations/s of each running job: its fair GPU share, capped by its loading; jobs
    sharing a GPU slowed as the truth's co-location says (``SimJob.colocation``)."""
    steps = {j.name: j.step_s for j in jobs}
    load = {j.name: loading(j) for j in jobs}
    shared = next((j.colocation for j in jobs if j.colocation is not None), None)
    if shared is not None:
        steps, load = shared.apply(jobs, steps, load)
    return iteration_rates({j.name: j.gpu_ids for j in jobs}, steps,
                           {j.name: j.spec.batch_size for j in jobs}, load)


class Simulator:
    """Runs a trace on a profile, scheduling with a fitted TPM under one policy."""

    def __init__(self, trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                 config: SimConfig | None = None):
        self.profile, self.model = profile, model
        self.cfg = config or SimConfig()
        self.truth = load_truth(self.cfg.truth, profile)
        if self.cfg.cpu_sharing not in CPU_SHARING:
            raise InputError(f"cpu_sharing must be one of {', '.join(CPU_SHARING)}, not "
                             f"{self.cfg.cpu_sharing!r}")
        if self.cfg.prediction_error > 0:
            from adloader.sim.noisy_model import NoisyModel

            self.model = NoisyModel(model, self.cfg.prediction_error, self.cfg.error_seed)
        self.policy = get_policy(self.cfg.policy)
        self.capacity = self.cfg.capacity or profile.loading_workers
        self.realloc_cost = self.cfg.realloc_cost_s
        self.completion_window = 0.0 if self.policy.replans_at_completion else \
            self.cfg.completion_window_s
        node_gpus = trace.gpus or profile.gpus
        if node_gpus > profile.gpus:
            raise InputError(f"trace needs {node_gpus} GPUs, profile {profile.name!r} has "
                             f"{profile.gpus}")
        self.gpus = profile.gpus
        self.jobs = []
        for spec in trace.jobs:
            if spec.gpus > self.gpus:
                raise InputError(f"job {spec.name!r}: field 'gpus': {spec.gpus} > the node's "
                                 f"{self.gpus}")
            feat = features(spec.model)
            step = self.truth.step_time(spec.model, spec.batch_size / spec.gpus, spec.gpus)
            step *= dict(self.cfg.slow).get(spec.name, 1.0)
            self.jobs.append(SimJob(spec, feat.flops_g, feat.params_m, step,
                                    colocation=self.truth.colocation))
        unknown = set(dict(self.cfg.slow)) - {j.name for j in self.jobs}
        if unknown:
            raise InputError(f"slow: no job named {', '.join(sorted(unknown))} in the trace")
        self.table = model.loading_table(self.capacity)
        self.policy.rebase(self.capacity, self.table)
        self.t = 0.0
        self.timeline: list[dict] = []
        self.events: list[dict] = []
        self.reallocations = 0
        self.flush_at: float | None = None
        self.gpu_busy = self.gpu_held = 0.0
        # each job's intake ceiling (samples/s) where the truth has one: its rate's cap
        intake = getattr(self.truth, "intake", None)
        self.intake = {j.name: intake(j.spec.model) for j in self.jobs} if intake else {}
        self.loop = ClosedLoop(self.capacity, LoopSettings(grow_to=self.cfg.grow_to)
                               .for_heartbeat(self.cfg.heartbeat_s)) \
            if self.cfg.closed_loop else None
        self.next_beat = math.inf
        self.beaten: set[str] = set()  # jobs the loop has heard: their C_j is measured
        self.node_rates: list[tuple[float, float]] = []  # (time, the truth's node rate)

    # -- scheduler (the real decision code: adloader.scheduling.planner) ------------------------
    def _running(self) -> list[SimJob]:
        return [j for j in self.jobs if j.state == "running"]

    def _plan(self) -> None:
        """Close the buffers: admit what fits, ask the policy, resize and launch."""
        running = self._running()
        waiting = self._waiting()
        if not waiting and not (self.cfg.realloc and running):
            return
        by_name = {j.name: j for j in running + waiting}
        decision = plan(self._views(running + waiting), capacity=self.capacity, gpus=self.gpus,
                        model=self.model, table=self.table, policy=self.policy,
                        realloc=self.cfg.realloc,
                        max_jobs_per_gpu=self.profile.max_jobs_per_gpu,
                        keep_threshold=self.cfg.keep_threshold, now=self.t,
                        window=self.completion_window)
        for name in decision.queued:
            by_name[name].state = "queued"
        counts, resized = decision.workers, decision.resized
        if self.loop is not None:
            counts, resized = self._loop_counts(decision, by_name)
        for name in resized:
            self._resize(by_name[name], counts[name])
        for name in decision.launched:
            job = by_name[name]
            job.state, job.start_s = "running", self.t
            job.workers = job.workers_initial = counts[name]
            job.gpu_ids = decision.gpu_ids[name]
            if self.cfg.correct:  # the daemon skips a job's warm-up steps
                job.observe_at = self.t + max(self.cfg.observe_s, self.cfg.warmup_s)
        for job in running + [by_name[n] for n in decision.launched]:
            job.planned_scale = job.scale
        if not decision.launched and not decision.resized and not running:
            return
        self.events.append({"t_s": round(self.t, 3), "kind": "plan",
                            "resized": resized, "launched": decision.launched})
        self._record()

    def _resize(self, job: SimJob, workers: int) -> None:
        job.workers = workers
        job.paused_until = self.t + self.realloc_cost
        self.reallocations += 1
        if self.loop is not None:
            self.loop.resized(self.t, job.name)

    def _loop_counts(self, decision, by_name) -> tuple[dict[str, int], list[str]]:
        """The daemon's rule (``Scheduler._loop_counts``): a new set of jobs starts from the
        counts they asked for and the even split, measured; the plan is the loop's target."""
        loop, table = self.loop, self.table
        loop.target = dict(decision.workers)
        node = min(sum(decision.workers.values()), self.capacity)
        ceiling = dict(decision.ceiling)
        loop.predict = lambda name, d: float(min(ceiling.get(name, 0.0),
                                                 table[node, max(0, min(d, node))]))
        loop.ceiling = ceiling
        planned = {k: by_name[k].spec.batch_size for k in decision.workers}
        if set(planned) == loop.names:
            return {k: by_name[k].workers for k in planned}, []
        counts = loop.reset(self.t, planned, requested={k: by_name[k].spec.workers
                                                         for k in planned},
                            current={k: by_name[k].workers for k in planned},
                            planned=decision.workers)
        self.beaten -= set(planned)  # C_j measured beside other jobs: measured anew
        resized = [k for k in planned if k not in decision.launched
                   and by_name[k].workers != counts[k]]
        return counts, resized

    def _rebase(self) -> None:
        """A job ended: with the loop, the others split the node evenly now (the daemon's
        ``Scheduler.rebase``); the plan follows after the completion window."""
        running = self._running()
        if self.loop is None or not running or {j.name for j in running} == self.loop.names:
            return
        counts = self.loop.reset(self.t, {j.name: j.spec.batch_size for j in running},
                                 requested={j.name: j.spec.workers for j in running},
                                 first="even", current={j.name: j.workers for j in running})
        self.beaten -= set(counts)
        for j in running:
            if j.workers != counts[j.name]:
                self._resize(j, counts[j.name])

    def _beat(self) -> None:
        """Every running job's heartbeat; the loop's move, judgement or guard."""
        running = self._running()
        for j in running:
            self.loop.beat(self.t, j.name, int(j.done), j.paused_until <= self.t + EPS)
            if j.name not in self.beaten and j.done >= 1:
                self.beaten.add(j.name)  # a first C_j: the plan the loop walks toward
                self._open_window(0.0)
        if running and {j.name for j in running} == self.loop.names:
            counts = self.loop.step(self.t, {j.name: j.workers for j in running},
                                    {j.name: (j.spec.iterations - j.done) * j.spec.batch_size
                                     for j in running})
            by_name = {j.name: j for j in running}
            for name, workers in counts.items():
                self._resize(by_name[name], workers)
            if counts:
                self._record()
            self.events.extend({"t_s": round(self.t, 3), "kind": kind, **data}
                               for _, kind, data in self.loop.events)
            self.loop.events.clear()

    def _waiting(self) -> list[SimJob]:
        return sorted((j for j in self.jobs if j.state in ("buffered", "queued")),
                      key=lambda j: (j.spec.arrival_s, self.jobs.index(j)))

    def _views(self, jobs: list[SimJob]) -> list[PlanJob]:
        return [PlanJob(j.name, j.spec.batch_size, j.spec.gpus, j.flops_g, j.params_m,
                        (j.spec.iterations - j.done) * j.spec.batch_size, j.state == "running",
                        j.workers,
                        j.gpu_ids if j.state == "running" else tuple(j.spec.gpu_ids or ()),
                        j.spec.workers, j.scale,
                        intake=self.intake.get(j.name, 0.0) if j.name in self.beaten else 0.0)
                for j in jobs]

    def _arrival_wait(self, job: SimJob) -> float:
        """The daemon's rule (``Scheduler._arrival_wait``): the settle when the planner would
        admit ``job`` now, else (and always with ``hold_arrivals``) the arrival window."""
        if self.cfg.hold_arrivals:
            return self.cfg.arrival_window_s
        placed = admit(self._views(self._running() + self._waiting()), capacity=self.capacity,
                       gpus=self.gpus, realloc=self.cfg.realloc,
                       max_jobs_per_gpu=self.profile.max_jobs_per_gpu)
        return min(self.cfg.arrival_settle_s, self.cfg.arrival_window_s) \
            if job.name in placed else self.cfg.arrival_window_s

    def _record(self) -> None:
        workers = {j.name: j.workers for j in self._running()}
        if self.timeline and self.timeline[-1]["t_s"] == round(self.t, 3):
            self.timeline[-1]["workers"] = workers
        else:
            self.timeline.append({"t_s": round(self.t, 3), "workers": workers})

    # -- time ------------------------------------------------------------------------
    def _rates(self) -> dict[str, float]:
        busy = [j for j in self._running() if j.paused_until <= self.t + EPS]
        surface = self.truth.surface  # loading measured side by side, or None: d/D · L(D)
        workers = {j.name: j.workers for j in busy}
        if self.cfg.cpu_sharing == "kernel":
            by_name = {j.name: j for j in busy}
            return kernel_rates(workers, self.profile.node_loading_rate,
                                lambda load: gpu_rates(busy, lambda j: load(j.name)),
                                {n: j.spec.batch_size for n, j in by_name.items()},
                                surface.factors(workers) if surface is not None else None)
        if surface is not None:
            load = surface.rates(workers)
            return self._capped(gpu_rates(busy, lambda j: load[j.name]), busy)
        node = sum(workers.values())
        return self._capped(gpu_rates(busy, lambda j: self.profile.loading_rate(j.workers, node)),
                            busy)

    def _node_and_even(self) -> tuple[float, float]:
        """Samples/s the node trains now, and would with its running jobs split evenly."""
        running = self._running()

        def rate() -> float:
            now = self._rates()
            return sum(now.get(j.name, 0.0) * j.spec.batch_size for j in running)

        actual = rate()
        kept = {j.name: j.workers for j in running}
        even_counts = self.loop.even([j.name for j in running])
        for j in running:
            j.workers = even_counts[j.name]
        even = rate()
        for j in running:
            j.workers = kept[j.name]
        return actual, even

    def _capped(self, rates: dict[str, float], jobs: list[SimJob]) -> dict[str, float]:
        """Iterations/s, each job at most its intake ceiling where the truth has one."""
        if not self.intake:
            return rates
        return {j.name: min(rates.get(j.name, 0.0), self.intake[j.name] / j.spec.batch_size)
                for j in jobs}

    def run(self) -> SimResult:
        pending = sorted(self.jobs, key=lambda j: j.spec.arrival_s)
        arrivals = [j.spec.arrival_s for j in pending]
        i = 0
        while any(j.state != "done" for j in self.jobs):
            rates = self._rates()
            horizon = [math.inf]
            if i < len(pending):
                horizon.append(arrivals[i])
            if self.flush_at is not None:
                horizon.append(self.flush_at)
            if self.loop is not None and self._running():
                if self.next_beat == math.inf:
                    self.next_beat = self.t + self.cfg.heartbeat_s
                horizon.append(self.next_beat)
            for j in self._running():
                if j.observe_at is not None:
                    horizon.append(j.observe_at)
                if j.paused_until > self.t + EPS:
                    horizon.append(j.paused_until)
                elif rates.get(j.name, 0) > 0:
                    horizon.append(self.t + (j.spec.iterations - j.done) / rates[j.name])
            nxt = min(horizon)
            if nxt == math.inf:
                stuck = [j.name for j in self.jobs if j.state != "done"]
                raise InputError(f"simulation cannot make progress: jobs {stuck} never run")
            self._advance(nxt - self.t, rates)
            self.t = nxt
            for j in self._running():
                if j.spec.iterations - j.done <= 1e-6 * j.spec.iterations:
                    j.state, j.end_s, j.done = "done", self.t, j.spec.iterations
                    self.events.append({"t_s": round(self.t, 3), "kind": "finish",
                                        "job": j.name})
                    self._open_window(self.completion_window)
                    self._rebase()
                    self._record()
            while i < len(pending) and arrivals[i] <= self.t + EPS:  # after the ends: their
                pending[i].state = "buffered"  # GPUs are free, as in the daemon
                self._open_window(self._arrival_wait(pending[i]))
                i += 1
            self._observe()
            if self.flush_at is not None and self.flush_at <= self.t + EPS:
                self.flush_at = None
                self._plan()
            if self.loop is not None and self.next_beat <= self.t + EPS:
                self.next_beat = self.t + self.cfg.heartbeat_s if self._running() else math.inf
                self._beat()
            if self.loop is not None:  # the node's rate from here on, and the even split's
                self.node_rates.append((round(self.t, 3), *self._node_and_even()))
        return SimResult(self.cfg.policy, self.cfg.realloc, self.capacity, self.jobs,
                         self.timeline, self.reallocations, self.gpu_busy, self.gpu_held,
                         self.events)

    def _observe(self) -> None:
        """Heartbeat samples of the steps: update c_i (``scheduling.model.correction``) and plan
        again at once when it moved; a job stops sampling once c_i is within 1 %."""
        for j in self._running():
            if j.observe_at is None or j.observe_at > self.t + EPS:
                continue
            predicted = j.scale * self.model.training_throughput(
                j.spec.batch_size, j.spec.gpus, j.flops_g, j.params_m)
            observed = j.spec.batch_size / j.step_s  # its steps as the GPU reports them
            j.scale = correction.update(j.scale, observed, predicted)
            near = abs(observed / max(predicted, EPS) - 1) < 0.01
            j.observe_at = None if near else self.t + self.cfg.observe_s
            if self.cfg.realloc and correction.moved(j.scale, j.planned_scale):
                self.events.append({"t_s": round(self.t, 3), "kind": "corrected",
                                    "job": j.name, "scale": round(j.scale, 3)})
                self._open_window(0.0)

    def _open_window(self, window: float) -> None:
        due = self.t + window
        self.flush_at = due if self.flush_at is None else min(self.flush_at, due)

    def _advance(self, dt: float, rates: dict[str, float]) -> None:
        if dt <= 0:
            return
        held = set()
        for j in self._running():
            r = rates.get(j.name, 0.0)
            j.done += r * dt
            self.gpu_busy += r * j.step_s * dt * len(j.gpu_ids)
            held.update(j.gpu_ids)
        self.gpu_held += dt * len(held)


def simulate(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
             config: SimConfig | None = None) -> SimResult:
    return Simulator(trace, profile, model, config).run()
