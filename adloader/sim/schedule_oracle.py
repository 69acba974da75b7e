"""The schedule oracle on the simulator's ground truth: ``schedule_lp.best_schedule`` for
the jobs present at t = 0, every allocation of the node's workers (by exhaustive search)
rated as the simulator rates it (loading λ(d; D), GPUs time-shared)."""

from __future__ import annotations

import collections
import itertools

import numpy as np

from adloader.device.device_profile import DeviceProfile
from adloader.scheduling.model.throughput import ThroughputModel
from adloader.sim.simulator import SimConfig, Simulator, gpu_rates
from adloader.sim.trace import Trace


def jobs_at_start(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                  base: SimConfig | None = None):
    """(the simulator, its jobs arriving at t = 0 placed on GPUs as the planner would)."""
    from adloader.scheduling.planner import PlanJob, _place

    sim = Simulator(trace, profile, model, base or SimConfig())
    jobs = [j for j in sim.jobs if j.spec.arrival_s == 0]
    load = [0] * sim.gpus
    for j in jobs:
        view = PlanJob(j.name, j.spec.batch_size, j.spec.gpus, j.flops_g, j.params_m, 0)
        j.gpu_ids = _place(view, load, profile.max_jobs_per_gpu) or ()
        for g in j.gpu_ids:
            load[g] += 1
    return sim, [j for j in jobs if j.gpu_ids]


def static_schedule_oracle(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                           balance_run: dict, alpha: float = 0.95, pause: bool = True,
                           base: SimConfig | None = None) -> dict:
    """Max Σ S_i/C_i over every schedule with each job's JCT ≤ its ``balance_run`` JCT / α
    (``sum`` reached, ``sum_upper`` bounding; α = 0: no floor), as ratios to balance's Σ
    too, and the reached schedule's makespan against balance's. ``pause``:
    a schedule may leave a present job with no worker; else every job keeps one, as the
    daemon's policies do."""
    from adloader.scheduling.bounds.fair_frontier import all_plans
    from adloader.scheduling.bounds.schedule_lp import best_schedule

    sim, jobs = jobs_at_start(trace, profile, model, base)
    n = len(jobs)

    def options(present: tuple[int, ...]) -> np.ndarray:
        rows = []
        sizes = range(1, len(present) + 1) if pause else [len(present)]
        for size in sizes:
            for subset in itertools.combinations(present, size):
                members = [jobs[i] for i in subset]
                for plan in all_plans(size, sim.capacity):
                    node = int(plan.sum())
                    workers = dict(zip((j.name for j in members), plan.tolist(), strict=True))
                    rates = gpu_rates(members, lambda j, w=workers, d=node:
                                      profile.loading_rate(w[j.name], d))
                    row = np.zeros(n)
                    for i, j in zip(subset, members, strict=True):
                        row[i] = rates[j.name] * j.spec.batch_size
                    rows.append(row)
        return np.array(rows).reshape(len(rows), n)  # none: C < jobs that must keep one

    by_name = {j["name"]: j for j in balance_run["jobs"]}
    # a job's ratio is balance's JCT over its own, both from its arrival; the LP's C_i
    # count from the start, after the same arrival buffer every policy waits
    wait = [by_name[j.name]["start_s"] - by_name[j.name]["arrival_s"] for j in jobs]
    # + 1 ms: the run's times are rounded to it (at α = 1 balance itself is on the boundary)
    floor = [by_name[j.name]["jct_s"] / alpha - w + 1e-3 if alpha > 0 else np.inf
             for j, w in zip(jobs, wait, strict=True)]
    out = best_schedule([j.spec.iterations * j.spec.batch_size for j in jobs], options,
                        floor)
    ref = balance_run["aggregate_throughput"]
    span = max(c + w for c, w in zip(out["ends"], wait, strict=True)) - min(wait) \
        if out["ends"] else None  # from the first start, as the simulator's makespan
    out.update(sum_ratio=out["sum"] / ref, sum_upper_ratio=out["sum_upper"] / ref,
               alpha=alpha, pause=pause,
               makespan_ratio=span / balance_run["makespan_s"] if span is not None else None,
               order=[jobs[i].name for i in out["order"]] if out["order"] else None,
               ends={j.name: c for j, c in zip(jobs, out["ends"], strict=True)}
               if out["ends"] else None)
    return out


GROUP = 6  # jobs of one linear program at most: every order of them is tried (6! = 720)


def peak_loading(profile: DeviceProfile) -> float:
    """The most samples/s the node's CPU loads, whatever its workers: the peak of L(D), or of
    a measured point's jobs side by side when the profile has a contention surface."""
    side_by_side = [sum(p.rates) for p in profile.loading_surface]
    return float(max([*profile.node_loading, *side_by_side]))


def jct_floor(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
              base: SimConfig | None = None, peak: float | None = None) -> dict:
    """A floor under the mean JCT of every schedule of ``trace`` on the simulator's truth —
    with a daemon or without, any workers, any placement (co-location interference only
    adds): ``schedule_lp.least_mean_jct`` on the node's peak loading and each job's true GPU
    seconds a sample, per group of jobs that arrive together. Each group alone can only do
    better than beside the others (a schedule of every job, cut to one group's, is one of
    that group's), so the groups' floors add up to a floor of the whole; a group of more than
    ``GROUP`` jobs is cut into parts of ``GROUP`` the same way (looser: every order of every
    part is tried, not of the whole group). Where the truth caps each job at an intake
    ceiling (``gpu-node``), the floor holds each job to it too. ``peak``: the node's
    peak loading when known otherwise (a live bench run's own)."""
    from adloader.scheduling.bounds.schedule_lp import least_mean_jct

    sim = Simulator(trace, profile, model, base or SimConfig())
    groups: dict[float, list] = {}
    for j in sim.jobs:
        groups.setdefault(j.spec.arrival_s, []).append(j)
    peak = peak or peak_loading(profile)
    total, ends, span = 0.0, {}, 0.0
    parts = []  # a group of more than GROUP jobs in parts: each alone is a relaxation too
    for arrival, jobs in sorted(groups.items()):
        parts += [(arrival, jobs[i:i + GROUP]) for i in range(0, len(jobs), GROUP)]
    for arrival, jobs in parts:
        out = least_mean_jct([j.spec.iterations * j.spec.batch_size for j in jobs], peak,
                             [j.step_s / j.spec.batch_size for j in jobs],
                             gpus=[j.spec.gpus for j in jobs], node_gpus=sim.gpus,
                             intake=[sim.intake.get(j.name, 0.0) for j in jobs])
        total += out["mean_jct"] * len(jobs)
        ends.update({j.name: arrival + c for j, c in zip(jobs, out["ends"], strict=True)})
        span = max(span, arrival + out["makespan"])
    first = min(groups)
    return {"mean_jct": total / len(sim.jobs), "makespan": span - first, "ends": ends,
            "groups": len(parts), "peak_loading": peak}


def whole_trace_floor(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                      base: SimConfig | None = None, slot_s: float = 4.0,
                      time_limit_s: float = 600.0, peak: float | None = None,
                      deadlines: dict[str, float] | None = None) -> dict:
    """A floor under the mean JCT of every schedule of ``trace``, its arrivals included: the
    time-indexed program of ``schedule_mip.least_total_completion`` on the same node as
    ``jct_floor`` (the peak loading, each job's true GPU seconds a sample, any placement);
    tighter than ``jct_floor``'s sum of groups where a group's jobs run into the next
    arrival, looser by at most the program's slots inside one. ``deadlines`` (job name ->
    seconds after its arrival, as a JCT): the floor of the schedules that meet them."""
    from adloader.scheduling.bounds.schedule_mip import least_total_completion

    sim = Simulator(trace, profile, model, base or SimConfig())
    jobs = sim.jobs
    out = least_total_completion([j.spec.iterations * j.spec.batch_size for j in jobs],
                                 [j.spec.arrival_s for j in jobs], peak or peak_loading(profile),
                                 [j.step_s / j.spec.batch_size for j in jobs],
                                 [j.spec.gpus for j in jobs], sim.gpus, slot_s=slot_s,
                                 time_limit_s=time_limit_s, deadlines=None if deadlines is None
                                 else [j.spec.arrival_s + deadlines[j.name] for j in jobs],
                                 intake=[sim.intake.get(j.name, 0.0) for j in jobs])
    if out["ends"] is not None:
        out["ends"] = {j.name: c for j, c in zip(jobs, out["ends"], strict=True)}
    return out


def placed_floor(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                 base: SimConfig | None = None, loading: float | None = None,
                 jct_limit: dict[str, float] | None = None) -> dict:
    """A floor under the mean JCT of every schedule of the node's workers, on GPUs as the
    planner places them (``planner.admit``; no policy moves a job's GPUs):
    ``schedule_lp.least_mean_jct_arriving`` over consecutive arrivals of at most ``GROUP``
    jobs together. The first part starts on an empty node, so its placement is exact where
    every job asks as many GPUs (none waits while a later arrival takes GPUs); a later part
    is bounded alone, each of its jobs on GPUs of its own (jobs left from before only slow
    it), and the parts' floors add up. ``loading``: samples/s the node loads at
    most (default L(capacity), the daemon's workers at best); each job held to its intake
    ceiling where the truth has one. ``jct_limit`` (job -> seconds): the schedules that
    end each job within it (e.g. 1/0.95 of its even-split JCT)."""
    from adloader.scheduling.bounds.schedule_lp import least_mean_jct_arriving
    from adloader.scheduling.planner import PlanJob, admit

    sim = Simulator(trace, profile, model, base or SimConfig())
    loading = loading or profile.node_loading_rate(sim.capacity)
    jobs = sorted(sim.jobs, key=lambda j: j.spec.arrival_s)  # stable: the trace's order
    together = collections.Counter(j.spec.arrival_s for j in jobs)  # jobs an arrival brings
    parts: list[list] = []
    for j in jobs:
        last = parts[-1] if parts else None
        if last and len(last) < GROUP and (last[-1].spec.arrival_s == j.spec.arrival_s
                                           or len(last) + together[j.spec.arrival_s] <= GROUP):
            last.append(j)
        else:
            parts.append([j])
    same = len({j.spec.gpus for j in jobs}) == 1  # else a later arrival may take GPUs first
    total, jct = 0.0, {}
    for k, part in enumerate(parts):
        def place(placed, waiting, part=part, exact=k == 0 and same):
            if not exact:  # GPUs of its own: true of every placement
                return {i: tuple(range(100 * (i + 1), 100 * (i + 1) + part[i].spec.gpus))
                        for i in waiting}
            views = [PlanJob(part[i].name, part[i].spec.batch_size, part[i].spec.gpus,
                             part[i].flops_g, part[i].params_m, 1.0, i in placed, 1,
                             placed.get(i, tuple(part[i].spec.gpu_ids or ())))
                     for i in [*placed, *waiting]]
            ids = admit(views, capacity=sim.capacity, gpus=sim.gpus,
                        max_jobs_per_gpu=profile.max_jobs_per_gpu)
            return {i: ids[part[i].name] for i in waiting if part[i].name in ids}

        out = least_mean_jct_arriving(
            [j.spec.iterations * j.spec.batch_size for j in part],
            [j.spec.arrival_s for j in part], loading,
            [j.step_s / j.spec.batch_size for j in part], place,
            intake=[sim.intake.get(j.name, 0.0) for j in part],
            jct_limit=None if jct_limit is None else [jct_limit[j.name] for j in part])
        if out["jct"] is None:
            return {"mean_jct": float("inf"), "jct": None, "parts": len(parts),
                    "loading": loading, "capacity": sim.capacity}
        total += out["mean_jct"] * len(part)
        jct.update({j.name: c for j, c in zip(part, out["jct"], strict=True)})
    return {"mean_jct": total / len(jobs), "jct": jct, "parts": len(parts), "loading": loading,
            "capacity": sim.capacity}
