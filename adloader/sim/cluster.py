"""A cluster of nodes, each running adloader's allocation, planned at scale.

N nodes × G GPUs and ``profile``'s loading (each node loads λ = d/D·L(D) with its own C
workers). Jobs arrive (Poisson) with 1–2 GPUs, or span ``span`` nodes with all G GPUs of
each (multi-node DDP: the job advances at its slowest part's rate). Placement, at arrival
and whenever GPUs free up (FIFO, a job waits until it fits), gives GPUs exclusively, as the
Kubernetes device plugin does:

- ``spread``: the nodes with the most free GPUs (the default scheduler's LeastAllocated);
- ``binpack``: the fewest free GPUs that still fit (MostAllocated);
- ``loading``: the highest ``spare_rate`` of the node summary (``adloader.scheduling.node_summary``:
  what a new job could load there now), most free GPUs to break ties.

Every node whose job set changed is re-planned at once with the daemon's planner and
policy (``adloader.scheduling.planner.plan``, predicted rates from the fitted TPM), truth from the
profile. Event-driven: between events each job runs at its fluid rate; only changed nodes
are re-planned. Reported: makespan, mean JCT (from arrival), GPU idle (held but waiting for
data, and not held at all), and the simulator's speed in simulated node-hours per second.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from adloader.device.device_profile import DeviceProfile
from adloader.errors import InputError
from adloader.models import features
from adloader.scheduling.model.throughput import ThroughputModel
from adloader.scheduling.node_summary import summary
from adloader.scheduling.planner import PlanJob, demands, plan
from adloader.scheduling.policies.gpushare import iteration_rates
from adloader.scheduling.policies.registry import DEFAULT_POLICY
from adloader.sim.generator import PAPER_MIX, batch_for

PLACEMENTS = ("spread", "binpack", "loading")


@dataclass
class CJob:
    name: str
    model: str
    batch: int
    gpus_per_node: int
    nodes: int
    iterations: int
    arrival: float
    flops_g: float = 0.0
    params_m: float = 0.0
    step_s: float = 0.0
    done: float = 0.0
    rate: float = 0.0  # iterations/s, the slowest part's
    parts: dict[int, tuple[int, ...]] = field(default_factory=dict)  # node -> GPU ids
    start: float | None = None
    end: float | None = None


def cluster_trace(nodes: int, gpus: int, jobs_per_node: float, seed: int = 0,
                  multi_share: float = 0.1, span: int = 2, rate_per_node_s: float = 1 / 900,
                  iterations=(500, 3000)) -> list[CJob]:
    """A seeded trace: ``jobs_per_node`` × N jobs, Poisson arrivals at N × ``rate``; a
    ``multi_share`` of them span ``span`` nodes with all their GPUs."""
    rng = np.random.default_rng(seed)
    n = max(1, int(round(jobs_per_node * nodes)))
    gaps = rng.exponential(1 / (rate_per_node_s * nodes), size=n)
    out = []
    for i, t in enumerate(np.cumsum(gaps) - gaps[0]):
        model = PAPER_MIX[int(rng.integers(len(PAPER_MIX)))]
        multi = nodes >= span and rng.random() < multi_share
        out.append(CJob(f"c{i}", model, batch_for(model),
                        gpus if multi else int(rng.integers(1, min(2, gpus) + 1)),
                        span if multi else 1,
                        int(rng.integers(iterations[0] // 100, iterations[1] // 100 + 1)) * 100,
                        float(t)))
    return out


class Cluster:
    def __init__(self, nodes: int, profile: DeviceProfile, model: ThroughputModel,
                 placement: str = "spread", policy: str = DEFAULT_POLICY) -> None:
        if placement not in PLACEMENTS:
            raise InputError(f"placement must be one of {', '.join(PLACEMENTS)}")
        self.n, self.profile, self.model = int(nodes), profile, model
        self.placement, self.policy = placement, policy
        self.gpus, self.capacity = profile.gpus, profile.loading_workers
        self.table = model.loading_table(self.capacity)
        self.free = [list(range(self.gpus)) for _ in range(self.n)]
        self.on: list[dict[str, CJob]] = [{} for _ in range(self.n)]
        self.workers: list[dict[str, int]] = [{} for _ in range(self.n)]
        self.ceil: list[dict[str, float]] = [{} for _ in range(self.n)]
        self.part_rate: dict[tuple[str, int], float] = {}
        self.spare = [float(self.table[self.capacity, self.capacity])] * self.n  # summaries
        self.t, self.busy, self.held = 0.0, 0.0, 0.0
        self.plans = 0

    # -- placement --------------------------------------------------------------------
    def _fits(self, job: CJob) -> list[int]:
        return [k for k in range(self.n) if len(self.free[k]) >= job.gpus_per_node]

    def _place(self, job: CJob) -> bool:
        fit = self._fits(job)
        if len(fit) < job.nodes:
            return False
        if self.placement == "spread":
            key = {k: -len(self.free[k]) for k in fit}
        elif self.placement == "binpack":
            key = {k: len(self.free[k]) for k in fit}
        else:
            key = {k: (-self.spare[k], -len(self.free[k])) for k in fit}
        chosen = sorted(fit, key=lambda k: (key[k], k))[: job.nodes]
        for k in chosen:
            ids, self.free[k] = (tuple(self.free[k][: job.gpus_per_node]),
                                 self.free[k][job.gpus_per_node:])
            job.parts[k] = ids
            self.on[k][job.name] = job
        job.start = self.t
        return True

    # -- one node: the daemon's planner, then the truth ----------------------------------
    def _replan(self, k: int) -> None:
        jobs = list(self.on[k].values())
        self.plans += 1
        views = [PlanJob(j.name, j.batch // j.nodes, j.gpus_per_node, j.flops_g, j.params_m,
                         (j.iterations - j.done) * j.batch / j.nodes, True,
                         self.workers[k].get(j.name, 1), j.parts[k]) for j in jobs]
        if views:
            d = plan(views, capacity=self.capacity, gpus=self.gpus, model=self.model,
                     table=self.table, policy=self.policy, max_jobs_per_gpu=1)
            self.workers[k] = dict(d.workers)
            self.ceil[k] = {w.name: w.training_rate for w in demands(
                views, {v.name: v.gpu_ids for v in views}, self.model, self.table)}
        else:
            self.workers[k], self.ceil[k] = {}, {}
        node = sum(self.workers[k].values())
        rates = iteration_rates({j.name: j.parts[k] for j in jobs},
                                {j.name: j.step_s for j in jobs},
                                {j.name: j.batch // j.nodes for j in jobs},
                                {j.name: self.profile.loading_rate(self.workers[k][j.name], node)
                                 for j in jobs})
        for j in jobs:
            self.part_rate[(j.name, k)] = rates[j.name]
        self.spare[k] = summary(self.ceil[k], self.workers[k], self.capacity,
                                self.table)["spare_rate"]

    def run(self, trace: list[CJob]) -> dict:
        for j in trace:
            f = features(j.model)
            j.flops_g, j.params_m = f.flops_g, f.params_m
            j.step_s = self.profile.step_time(j.batch / (j.gpus_per_node * j.nodes), f.flops_g,
                                              f.params_m, j.gpus_per_node * j.nodes)
        pending = sorted(trace, key=lambda j: j.arrival)
        queue: list[CJob] = []
        running: dict[str, CJob] = {}
        i, wall = 0, time.perf_counter()
        while i < len(pending) or queue or running:
            ends = [(self.t + (j.iterations - j.done) / j.rate, j.name)
                    for j in running.values() if j.rate > 0]
            nxt = min([e for e, _ in ends] + ([pending[i].arrival] if i < len(pending)
                                               else []) + [math.inf])
            if nxt == math.inf:
                raise InputError("cluster simulation cannot make progress (a job never fits)")
            dt = nxt - self.t
            for j in running.values():
                j.done += j.rate * dt
                self.busy += j.rate * j.step_s * dt * j.gpus_per_node * j.nodes
            self.held += dt * sum(self.gpus - len(f) for f in self.free)
            self.t = nxt
            changed: set[int] = set()
            for j in [j for j in running.values() if j.iterations - j.done <= 1e-6 * j.iterations]:
                j.end = self.t
                del running[j.name]
                for k, ids in j.parts.items():
                    self.free[k] = sorted(self.free[k] + list(ids))
                    del self.on[k][j.name]
                    self.part_rate.pop((j.name, k), None)
                    changed.add(k)
            while i < len(pending) and pending[i].arrival <= self.t + 1e-9:
                queue.append(pending[i])
                i += 1
            waiting = []
            top = max(len(f) for f in self.free)  # the most free GPUs on one node
            for j in queue:  # FIFO with backfill: a job that fits starts
                if j.gpus_per_node <= top and self._place(j):
                    running[j.name] = j
                    changed.update(j.parts)
                    top = max(len(self.free[k]) for k in range(self.n)) if top <= \
                        j.gpus_per_node else top
                else:
                    waiting.append(j)
            queue = waiting
            for k in changed:
                self._replan(k)
            touched = {j.name for k in changed for j in self.on[k].values()}
            for name in touched:
                j = running[name]
                j.rate = min(self.part_rate[(name, k)] for k in j.parts)
        wall = time.perf_counter() - wall
        makespan = max(j.end for j in trace) - min(j.arrival for j in trace)
        total = self.n * self.gpus * makespan
        return {"placement": self.placement, "nodes": self.n, "jobs": len(trace),
                "multi_node_jobs": sum(j.nodes > 1 for j in trace),
                "makespan_s": makespan,
                "mean_jct_s": float(np.mean([j.end - j.arrival for j in trace])),
                "gpu_idle_held": 1 - self.busy / max(self.held, 1e-9),
                "gpu_idle": 1 - self.busy / max(total, 1e-9),
                "plans": self.plans, "wall_s": wall,
                "node_hours_per_s": self.n * makespan / 3600 / max(wall, 1e-9)}


def compare(nodes: int, profile: DeviceProfile, model: ThroughputModel, seed: int = 0,
            jobs_per_node: float = 6.0, placements=PLACEMENTS, **trace_kw) -> list[dict]:
    """Every placement on one trace; ratios against ``spread`` (the default scheduler)."""
    rows = []
    for p in placements:
        trace = cluster_trace(nodes, profile.gpus, jobs_per_node, seed, **trace_kw)
        rows.append(Cluster(nodes, profile, model, p).run(trace))
    base = rows[0]
    for r in rows:
        r["makespan_x_spread"] = r["makespan_s"] / base["makespan_s"]
        r["mean_jct_x_spread"] = r["mean_jct_s"] / base["mean_jct_s"]
    return rows
