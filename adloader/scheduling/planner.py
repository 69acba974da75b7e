"""One scheduling decision (A-Dloader §III-C3): admit, place, allocate, decide who resizes.

Shared by the daemon's scheduler and the node simulator, so the simulator runs the real
decision code. Given the running jobs and the waiting ones (buffered arrivals, queue):

1. admit waiting jobs in arrival order while the node has GPU room (at most
   ``max_jobs_per_gpu`` a GPU) and a worker for each (C ≥ N);
2. predict each job's ceiling B·F_μ with the TPM, cut to its measured intake ceiling C_j
   where known (``intake``) and reduced to the GPU share it would get next to the jobs on
   its GPUs (``gpushare``, on predicted steps);
3. order jobs by predicted remaining time, shortest first — policies break ties in order,
   so equal throughput goes to the job that will finish (and free its workers) first;
4. ask the policy; a running job keeps its workers when the new count would not move its
   predicted throughput by more than ``keep_threshold`` (no needless pause, as WAA avoids
   reallocating when app4 already has enough workers, §IV-C).

Without reallocation running jobs keep their workers and new jobs share what is free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from adloader.scheduling.model.throughput import ThroughputModel
from adloader.scheduling.policies.allocation import JobDemand
from adloader.scheduling.policies.gpushare import gpu_ceilings
from adloader.scheduling.policies.policy import Decision, Policy
from adloader.scheduling.policies.registry import get_policy


@dataclass(frozen=True)
class PlanJob:
    """A job as the planner sees it; ``workers``/``gpu_ids`` are current for running jobs."""

    name: str
    batch_size: int
    gpus: int
    flops_g: float
    params_m: float
    remaining_samples: float
    running: bool = False
    workers: int = 0
    gpu_ids: tuple[int, ...] = ()  # running: where it is; waiting: where it must go, if pinned
    requested: int | None = None
    rate_scale: float = 1.0  # c_i: observed / predicted B·F_μ (``scheduling.model.correction``)
    length_known: bool = True  # it stated its iterations (``ftf`` plans on them)
    started: bool = True  # it has trained a batch: its start-up (no worker shortens it) is over
    max_workers: int | None = None  # confined to part of the node's CPUs: its most workers
    intake: float = 0.0  # C_j, what its training loop can take in, samples/s (0: unknown)


@dataclass
class Plan:
    workers: dict[str, int] = field(default_factory=dict)  # running and launched jobs
    gpu_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    launched: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)
    predicted: dict[str, float] = field(default_factory=dict)  # T_i samples/s
    ceiling: dict[str, float] = field(default_factory=dict)  # c_i·B·F_μ × GPU share, samples/s


def _place(job: PlanJob, load: list[int], limit: int) -> tuple[int, ...] | None:
    return _fit(job.gpu_ids, job.gpus, load, limit)


def _fit(gpu_ids: tuple[int, ...], gpus: int, load: list[int],
         limit: int) -> tuple[int, ...] | None:
    """The GPUs a job gets: its own ``gpu_ids`` if they have room, else the ``gpus`` least
    loaded ones (ties: lowest id); None when they are full (``limit`` jobs a GPU)."""
    if gpu_ids:
        return gpu_ids if all(load[g] < limit for g in gpu_ids) else None
    free = sorted((g for g in range(len(load)) if load[g] < limit), key=lambda g: (load[g], g))
    return tuple(sorted(free[:gpus])) if len(free) >= gpus else None


def place_in_order(jobs: Sequence[tuple[str, int]], gpus: int,
                   limit: int) -> dict[str, tuple[int, ...]]:
    """(name, GPUs) arriving in this order on an empty node: the GPUs ``plan`` gives each
    (what the no-daemon baselines run on, so they are placed as the daemon places)."""
    load, out = [0] * gpus, {}
    for name, count in jobs:
        ids = _fit((), count, load, limit)
        if ids is None:
            raise ValueError(f"{name}: no {count} GPUs with room ({limit} jobs a GPU)")
        for g in ids:
            load[g] += 1
        out[name] = ids
    return out


def solo_rates(jobs: Sequence[PlanJob], model: ThroughputModel) -> dict[str, float]:
    """c_i · B·F_μ of each job alone on its GPUs, samples/s."""
    return {j.name: j.rate_scale * model.training_throughput(j.batch_size, j.gpus, j.flops_g,
                                                             j.params_m) for j in jobs}


def demands(jobs: Sequence[PlanJob], placement: dict[str, tuple[int, ...]],
            model: ThroughputModel, table: np.ndarray,
            workers: Mapping[str, int] | None = None,
            solo: Mapping[str, float] | None = None) -> list[JobDemand]:
    """c_i · B·F_μ of each job, cut to its predicted fair share of the GPUs it shares, then
    to its measured intake ceiling C_j where known (no worker lifts a job past what its
    training loop takes in, ``adloader.scheduling.model.intake``; C_j is measured beside the jobs
    it shares its GPUs with, so it is not shared again).

    Each partner is taken to load as fast as any job could — or, given ``workers`` (a
    plan), as fast as its workers there let it: a starved partner leaves the GPU free.
    ``solo``: the jobs' ``solo_rates`` where the caller has them (one plan predicts once)."""
    capacity = table.shape[0] - 1
    mu = solo_rates(jobs, model) if solo is None else solo
    loads = None
    if workers is not None:
        node = min(sum(workers.values()), capacity)
        loads = {k: float(table[node, min(d, node)]) for k, d in workers.items()}
    ceiling = gpu_ceilings({j.name: placement[j.name] for j in jobs}, mu,
                           float(table[capacity, capacity]), loads)
    return [JobDemand(j.name, min(ceiling[j.name], j.intake) if j.intake > 0
                      else ceiling[j.name], j.params_m, j.requested,
                      remaining=j.remaining_samples) for j in jobs]


def admit(jobs: Sequence[PlanJob], *, capacity: int, gpus: int, realloc: bool = True,
          max_jobs_per_gpu: int = 2) -> dict[str, tuple[int, ...]]:
    """Step 1 of ``plan``: the waiting jobs (``running`` False) the node has room for now,
    taken in the order given, each with its GPUs — room on its GPUs (at most
    ``max_jobs_per_gpu`` a GPU, beside the running jobs and those admitted before it) and a
    worker for each (C ≥ N). The others queue. The daemon's scheduler and the simulator ask
    it too: an arrival it admits could start now (no arrival window to wait)."""
    running = [j for j in jobs if j.running]
    load = [0] * gpus
    for j in running:
        for g in j.gpu_ids:
            load[g] += 1
    room = capacity - (len(running) if realloc else sum(j.workers for j in running))
    placed: dict[str, tuple[int, ...]] = {}
    for job in jobs:
        if job.running:
            continue
        ids = _place(job, load, max_jobs_per_gpu) if len(placed) < room else None
        if ids is None:
            continue
        for g in ids:
            load[g] += 1
        placed[job.name] = ids
    return placed


def plan(
    jobs: Sequence[PlanJob],
    *,
    capacity: int,
    gpus: int,
    model: ThroughputModel,
    table: np.ndarray,
    policy: Policy | str,
    realloc: bool = True,
    max_jobs_per_gpu: int = 2,
    keep_threshold: float = 0.02,
    now: float | None = None,
    window: float = 0.0,
) -> Plan:
    """Admit, place and allocate; ``table`` is ``model.loading_table(capacity)``.

    ``policy``: the caller's ``Policy`` (a name: a fresh one, no state kept); ``now`` and
    ``window`` (how long the caller waits to re-plan after a completion) reach its ``decide``.
    """
    policy = get_policy(policy)
    running = [j for j in jobs if j.running]
    waiting = [j for j in jobs if not j.running]
    fixed = sum(j.workers for j in running)
    placed = admit(jobs, capacity=capacity, gpus=gpus, realloc=realloc,
                   max_jobs_per_gpu=max_jobs_per_gpu)
    out = Plan(gpu_ids={j.name: j.gpu_ids for j in running})
    out.queued = [j.name for j in waiting if j.name not in placed]
    out.gpu_ids.update(placed)
    new = [j for j in waiting if j.name in placed]
    active = running + new
    if not active:
        return out
    solo = solo_rates(active, model)
    wanted = demands(active, out.gpu_ids, model, table, solo=solo)
    if realloc:
        order = _order(active, wanted, float(table[capacity, capacity]))
        active, wanted = [active[i] for i in order], [wanted[i] for i in order]
        placement = out.gpu_ids
        # with measured ceilings, a shadow (ftf's) takes each job's ceiling as given: what
        # a job was measured to take in already holds its GPUs' sharing
        measured = any(j.intake > 0 for j in active)
        workers, wanted = policy.decide(Decision(
            wanted, capacity, table, [j.length_known for j in active],
            lambda alloc: demands(active, placement, model, table, alloc, solo), now, window,
            [j.started for j in active],
            None if measured else [solo[j.name] for j in active],
            None if measured else [placement[j.name] for j in active]))
        workers = _keep(active, wanted, workers, capacity, table, keep_threshold)
    else:
        fresh = [(j, d) for j, d in zip(active, wanted, strict=True) if not j.running]
        fresh.sort(key=lambda jd: -jd[1].training_rate)
        workers = policy([d for _, d in fresh], capacity - fixed, table) if fresh \
            else {}
        workers.update({j.name: j.workers for j in running})
    for job in active:  # a job confined to part of the CPUs: at most its part of the workers
        if job.max_workers is not None and workers.get(job.name, 0) > job.max_workers:
            workers[job.name] = max(job.max_workers, 1)
    node = sum(workers.values())
    for job, demand in zip(active, wanted, strict=True):
        d = workers.get(job.name, 0)
        if not job.running and d < 1:
            out.queued.append(job.name)
            out.gpu_ids.pop(job.name, None)
            continue
        out.workers[job.name] = d
        out.predicted[job.name] = float(min(demand.training_rate, table[min(node, capacity), d]))
        out.ceiling[job.name] = float(demand.training_rate)
        if job.running and d != job.workers:
            out.resized.append(job.name)
        if not job.running:
            out.launched.append(job.name)
    return out


def _order(active, wanted, node_rate: float) -> list[int]:
    """Shortest predicted remaining time first — except the critical job (the longest) goes
    first when even at full speed it would outlast the node's time to load everyone
    else's remaining samples: then it bounds the makespan, and starving it now only leaves
    workers idle at the end."""
    finish = [j.remaining_samples / max(d.training_rate, 1e-9)
              for j, d in zip(active, wanted, strict=True)]
    order = sorted(range(len(active)), key=lambda i: finish[i])
    if len(order) > 1:
        crit = order[-1]
        others = sum(j.remaining_samples for i, j in enumerate(active) if i != crit)
        if finish[crit] > others / max(node_rate, 1e-9):
            order = [crit] + order[:-1]
    return order


def _keep(active, wanted, workers, capacity, table, threshold) -> dict[str, int]:
    """Running jobs keep their count unless the change moves their predicted T enough."""
    node = min(sum(workers.values()), capacity)
    out = dict(workers)
    for job, demand in zip(active, wanted, strict=True):
        if not job.running or workers[job.name] == job.workers:
            continue
        kept = min(job.workers, capacity)  # priced on the node total it would have kept
        kept_node = min(node - workers[job.name] + kept, capacity)
        now = min(demand.training_rate, table[kept_node, kept])
        then = min(demand.training_rate, table[node, workers[job.name]])
        if abs(then - now) <= threshold * max(now, 1e-9):
            trial = dict(out, **{job.name: job.workers})
            if sum(trial.values()) <= capacity:
                out = trial
    return out
