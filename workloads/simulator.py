"""Discrete-event simulation of one node running a trace under an allocation policy.

The scheduler side is the real one — arrival and completion buffers (A-Dloader §III-C5),
a policy from ``adloader.allocation.POLICIES`` fed by a fitted TPM — while time runs on a
device profile's ground truth: between events every running job progresses at a fluid
rate, limited by its loading rate λ = d/D·L(D) and by its GPUs, which jobs sharing them
time-slice (max-min fair water-filling of GPU time). A job whose workers change pauses for
the reallocation cost (the paper's pause-and-retrieve: 16 s).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from adloader.allocation import JobDemand, get_policy
from adloader.errors import InputError
from adloader.models import features
from adloader.throughput import ThroughputModel
from adloader.workloads.profile import DeviceProfile
from adloader.workloads.trace import Trace, TraceJob

EPS = 1e-9


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
    busy_s: float = 0.0  # GPU-seconds spent in steps (per GPU)
    held_s: float = 0.0  # seconds holding its GPUs

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class SimConfig:
    policy: str = "waa"
    realloc: bool = True
    capacity: int | None = None  # loading workers; the profile's when None
    arrival_window_s: float = 30.0
    completion_window_s: float = 30.0
    realloc_cost_s: float | None = None  # the profile's when None
    keep_threshold: float = 0.02  # a resize must change the job's predicted T by more


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
    """Iterations/s of each job: max-min fair shares u_j of GPU time, capped by loading.

    u_j = r_j · s_j is the share of each of its GPUs that job j's steps take; every GPU's
    shares sum to at most 1. Shares rise together until a job hits its loading cap
    λ_j·s_j/B_j (or 1) or a GPU fills; those freeze and the rest go on.
    """
    cap = {j.name: min(1.0, loading(j) * j.step_s / j.spec.batch_size) for j in jobs}
    share = dict.fromkeys(cap, 0.0)
    active = {j.name for j in jobs if cap[j.name] > EPS}
    on_gpu: dict[int, list[SimJob]] = {}
    for j in jobs:
        for g in j.gpu_ids:
            on_gpu.setdefault(g, []).append(j)
    while active:
        level = min(cap[n] for n in active)
        for jobs_g in on_gpu.values():
            free = [j.name for j in jobs_g if j.name in active]
            if free:
                used = sum(share[j.name] for j in jobs_g if j.name not in active)
                level = min(level, (1.0 - used) / len(free))
        for n in active:
            share[n] = level
        frozen = {n for n in active if cap[n] <= level + EPS}
        for jobs_g in on_gpu.values():
            if sum(share[j.name] for j in jobs_g) >= 1.0 - EPS:
                frozen |= {j.name for j in jobs_g if j.name in active}
        active -= frozen
    return {j.name: share[j.name] / j.step_s for j in jobs}


class Simulator:
    """Runs a trace on a profile, scheduling with a fitted TPM under one policy."""

    def __init__(self, trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                 config: SimConfig | None = None):
        self.profile, self.model = profile, model
        self.cfg = config or SimConfig()
        self.policy = get_policy(self.cfg.policy)
        self.capacity = self.cfg.capacity or profile.loading_workers
        self.realloc_cost = (
            profile.realloc_cost_s if self.cfg.realloc_cost_s is None else self.cfg.realloc_cost_s
        )
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
            step = profile.step_time(spec.batch_size / spec.gpus, feat.flops_g, feat.params_m,
                                     spec.gpus)
            self.jobs.append(SimJob(spec, feat.flops_g, feat.params_m, step))
        self.table = model.loading_table(self.capacity)
        self.t = 0.0
        self.timeline: list[dict] = []
        self.events: list[dict] = []
        self.reallocations = 0
        self.flush_at: float | None = None
        self.gpu_busy = self.gpu_held = 0.0

    # -- scheduler -------------------------------------------------------------------
    def _running(self) -> list[SimJob]:
        return [j for j in self.jobs if j.state == "running"]

    def _place(self, job: SimJob, load: list[int]) -> tuple[int, ...] | None:
        limit = self.profile.max_jobs_per_gpu
        if job.spec.gpu_ids:
            ids = tuple(job.spec.gpu_ids)
            return ids if all(load[g] < limit for g in ids) else None
        free = sorted((g for g in range(self.gpus) if load[g] < limit), key=lambda g: (load[g], g))
        return tuple(sorted(free[: job.spec.gpus])) if len(free) >= job.spec.gpus else None

    def _demands(self, jobs: list[SimJob]) -> list[JobDemand]:
        """The TPM's view of each job: its B·F_μ, reduced to the share of its GPUs it would get
        next to the jobs it shares them with (the same water-filling, on predicted steps,
        each job loading at most what the whole node could give it)."""
        proxies = []
        for job in jobs:
            mu = self.model.training_throughput(job.spec.batch_size, job.spec.gpus, job.flops_g,
                                                job.params_m)
            proxies.append(SimJob(job.spec, job.flops_g, job.params_m, job.spec.batch_size / mu,
                                  gpu_ids=job.gpu_ids))
        most = float(self.table[self.capacity, self.capacity])
        rates = gpu_rates(proxies, lambda _: most)
        return [JobDemand(j.name, rates[j.name] * j.spec.batch_size, j.params_m, j.spec.workers)
                for j in jobs]

    @staticmethod
    def _remaining(job: SimJob) -> float:
        return (job.spec.iterations - job.done) * job.spec.batch_size

    def _predicted(self, demand: JobDemand, workers: int, node: int) -> float:
        return min(demand.training_rate, self.table[min(node, self.capacity), workers])

    def _plan(self) -> None:
        """Close the buffers: admit what fits, ask the policy, resize and launch."""
        running = self._running()
        load = [0] * self.gpus
        for j in running:
            for g in j.gpu_ids:
                load[g] += 1
        waiting = sorted((j for j in self.jobs if j.state in ("buffered", "queued")),
                         key=lambda j: (j.spec.arrival_s, self.jobs.index(j)))
        fixed = sum(j.workers for j in running)
        room = self.capacity - (len(running) if self.cfg.realloc else fixed)
        new = []
        for job in waiting:
            ids = self._place(job, load) if len(new) < room else None
            if ids is None:
                job.state = "queued"
                continue
            job.gpu_ids = ids
            for g in ids:
                load[g] += 1
            new.append(job)
        if not new and not (self.cfg.realloc and running):
            return
        if self.cfg.realloc:  # shortest remaining time first: the policies break ties in order
            active = running + new
            demands = self._demands(active)
            order = sorted(range(len(active)),
                           key=lambda i: self._remaining(active[i]) / demands[i].training_rate)
            active, demands = [active[i] for i in order], [demands[i] for i in order]
            plan = self.policy(demands, self.capacity, self.table)
            plan = self._keep_unneeded_changes(active, demands, plan)
        else:
            demands = sorted(self._demands(running + new)[len(running):],
                             key=lambda d: d.training_rate, reverse=True)
            plan = self.policy(demands, self.capacity - fixed, self.table) if new else {}
            plan.update({j.name: j.workers for j in running})
        resized = []
        for job in running:
            if plan[job.name] != job.workers:
                resized.append(job.name)
                job.workers = plan[job.name]
                job.paused_until = self.t + self.realloc_cost
                self.reallocations += 1
        for job in new:
            if plan.get(job.name, 0) < 1:
                job.state, job.gpu_ids = "queued", ()
                continue
            job.state, job.workers, job.start_s = "running", plan[job.name], self.t
            job.workers_initial = job.workers
        self.events.append({"t_s": round(self.t, 3), "kind": "plan", "resized": resized,
                            "launched": [j.name for j in new if j.state == "running"]})
        self._record()

    def _keep_unneeded_changes(self, active, demands, plan) -> dict[str, int]:
        """A running job keeps its workers when the new count would not change its predicted
        throughput by more than the threshold and the plan still fits (no needless pause)."""
        node = sum(plan.values())
        out = dict(plan)
        for job, demand in zip(active, demands, strict=True):
            if job.state != "running" or plan[job.name] == job.workers:
                continue
            now = self._predicted(demand, job.workers, node)
            then = self._predicted(demand, plan[job.name], node)
            if abs(then - now) <= self.cfg.keep_threshold * max(now, EPS):
                trial = dict(out, **{job.name: job.workers})
                if sum(trial.values()) <= self.capacity:
                    out = trial
        return out

    def _record(self) -> None:
        workers = {j.name: j.workers for j in self._running()}
        if self.timeline and self.timeline[-1]["t_s"] == round(self.t, 3):
            self.timeline[-1]["workers"] = workers
        else:
            self.timeline.append({"t_s": round(self.t, 3), "workers": workers})

    # -- time ------------------------------------------------------------------------
    def _rates(self) -> dict[str, float]:
        busy = [j for j in self._running() if j.paused_until <= self.t + EPS]
        node = sum(j.workers for j in busy)
        return gpu_rates(busy, lambda j: self.profile.loading_rate(j.workers, node))

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
            for j in self._running():
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
            while i < len(pending) and arrivals[i] <= self.t + EPS:
                pending[i].state = "buffered"
                i += 1
                self._open_window(self.cfg.arrival_window_s)
            for j in self._running():
                if j.spec.iterations - j.done <= 1e-6 * j.spec.iterations:
                    j.state, j.end_s, j.done = "done", self.t, j.spec.iterations
                    self.events.append({"t_s": round(self.t, 3), "kind": "finish",
                                        "job": j.name})
                    self._open_window(self.cfg.completion_window_s)
                    self._record()
            if self.flush_at is not None and self.flush_at <= self.t + EPS:
                self.flush_at = None
                self._plan()
        return SimResult(self.cfg.policy, self.cfg.realloc, self.capacity, self.jobs,
                         self.timeline, self.reallocations, self.gpu_busy, self.gpu_held,
                         self.events)

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
            j.busy_s += r * j.step_s * dt
            self.gpu_busy += r * j.step_s * dt * len(j.gpu_ids)
            held.update(j.gpu_ids)
        self.gpu_held += dt * len(held)


def simulate(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
             config: SimConfig | None = None) -> SimResult:
    return Simulator(trace, profile, model, config).run()
