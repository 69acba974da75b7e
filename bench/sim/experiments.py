"""Benchmarks of the scheduling brain, each against a baseline measured in the same run.

- static: the Fig. 3 mix under every policy; the paper's manual allocations are fixed
  (no reallocation), the schedulers reallocate at completions; ratios against balance.
- dynamic: Table III; every policy with reallocation against the no-reallocation run
  with each job's requested workers (Fig. 8 vs Fig. 9); ratios of makespan.
- tpm: held-out R² of every regressor for F_μ and F_λ (Table I) on noisy profile samples.
- allocation: time to allocate 1,000 jobs over 1,024 workers, per policy, against ``optimal``;
  ``fair`` re-solving after one change and after one arrival on a 16-job node.

The development random mixes (``adloader bench mixes``) are ``adloader.bench.sim.held_out_mixes``;
the held-out set (``adloader bench held-out``, once per release) is ``adloader.bench.sim.held_out``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.progress import Progress

from adloader.device.device_profile import DeviceProfile
from adloader.scheduling.model.throughput import ThroughputModel
from adloader.scheduling.policies.allocation import JobDemand, total_throughput
from adloader.scheduling.policies.fair import FairAllocator
from adloader.scheduling.policies.registry import POLICIES, get_policy
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import Trace

FIXED = ("proportion", "balance", "inverse", "requested")  # the paper's manual allocations
SCHEDULED = ("waa", "optimal", "fair", "jct", "ftf", "ftf:0")  # ftf:0: no floor, the most Σ


def _runs(trace, profile, model, configs, label) -> list[dict]:
    out = []
    with Progress(transient=True) as progress:
        task = progress.add_task(label, total=len(configs))
        for cfg in configs:
            out.append(simulate(trace, profile, model, cfg).to_json())
            progress.advance(task)
    return out


def static(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
           base: SimConfig | None = None) -> list[dict]:
    """Every policy on the static mix, with and without reallocation; ratio vs fixed balance."""
    base = base or SimConfig()
    configs = [
        SimConfig(**{**base.__dict__, "policy": p, "realloc": r})
        for p in FIXED + SCHEDULED
        for r in (False, True)
    ]
    runs = _runs(trace, profile, model, configs, "bench static")
    ref = next(r for r in runs if r["policy"] == "balance" and not r["realloc"])
    for r in runs:
        r["ratio"] = r["aggregate_throughput"] / ref["aggregate_throughput"]
        r["paper_setting"] = (r["policy"] in SCHEDULED) == r["realloc"]
        job_ratios(r, ref)
    return runs


def instant_frontier(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                     base: SimConfig | None = None) -> list[dict]:
    """The Pareto set (Σ T against balance, worst job against its balance rate) over every
    allocation of the jobs present at t = 0, by exhaustive search (``pareto_frontier``)."""
    from adloader.scheduling.bounds.fair_frontier import pareto_frontier
    from adloader.scheduling.planner import PlanJob, _place, demands
    from adloader.sim.simulator import Simulator

    sim = Simulator(trace, profile, model, base or SimConfig())
    views = [PlanJob(j.name, j.spec.batch_size, j.spec.gpus, j.flops_g, j.params_m,
                     j.spec.iterations * j.spec.batch_size)
             for j in sim.jobs if j.spec.arrival_s == 0]
    load, placement = [0] * sim.gpus, {}
    for view in views:
        ids = _place(view, load, profile.max_jobs_per_gpu)
        if ids is None:
            continue
        for g in ids:
            load[g] += 1
        placement[view.name] = ids
    views = [v for v in views if v.name in placement]
    wanted = demands(views, placement, sim.model, sim.table)
    return pareto_frontier(wanted, sim.capacity, sim.table)


def static_bounds(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                  balance_run: dict, alpha: float = 0.95, base: SimConfig | None = None) -> dict:
    """``schedule_bounds`` on the simulator's ground truth for the jobs present at t = 0:
    no schedule, however its allocations change over time, finishes sooner than
    ``makespan_lb`` or, with every job at ≥ α × its rate in ``balance_run``, reaches more
    than ``sum_ub`` Σ samples/s. Each subset's best node rate is found by exhaustive search
    over allocations (``all_plans``) on its GPUs as placed at t = 0."""
    from adloader.scheduling.bounds.fair_frontier import all_plans, schedule_bounds
    from adloader.sim.schedule_oracle import jobs_at_start
    from adloader.sim.simulator import gpu_rates

    sim, jobs = jobs_at_start(trace, profile, model, base)
    cache: dict[frozenset, float] = {}

    def best_rate(subset: frozenset) -> float:
        if subset not in cache:
            members = [jobs[i] for i in sorted(subset)]
            best = 0.0
            for plan in all_plans(len(members), sim.capacity):
                node = int(plan.sum())
                workers = dict(zip((j.name for j in members), plan.tolist(), strict=True))
                rates = gpu_rates(members, lambda j, w=workers, n=node:
                                  profile.loading_rate(w[j.name], n))
                best = max(best, sum(rates[j.name] * j.spec.batch_size for j in members))
            cache[subset] = best
        return cache[subset]

    samples = [j.spec.iterations * j.spec.batch_size for j in jobs]
    jct = {j["name"]: j["jct_s"] for j in balance_run["jobs"]}
    out = schedule_bounds(samples, best_rate, [best_rate(frozenset([i])) for i in
                                               range(len(jobs))],
                          [jct[j.name] / alpha for j in jobs])
    out["order"] = [jobs[i].name for i in out["order"]] if out["order"] else None
    out["makespan_lb_ratio"] = out["makespan_lb"] / balance_run["makespan_s"]
    out["sum_ub_ratio"] = out["sum_ub"] / balance_run["aggregate_throughput"]
    out["alpha"] = alpha
    return out


FRONTIER_ALPHAS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.5, 0.0)  # floors on the worst job's ratio


def schedule_limits(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                    balance_run: dict, alpha: float = 0.95, base: SimConfig | None = None,
                    alphas: tuple[float, ...] = FRONTIER_ALPHAS) -> dict:
    """What no schedule of the jobs present at t = 0 can beat against ``balance_run``:
    ``static_bounds`` (makespan, Σ under the floor α); the schedule LP with every job
    keeping a worker and with pausing allowed (``static_schedule_oracle``) at α, and at
    each floor of ``alphas`` — the frontier of Σ against the worst job's ratio, with the
    makespan of the schedule reaching it."""
    from adloader.sim.schedule_oracle import static_schedule_oracle

    def lps(a: float) -> list[dict]:
        return [static_schedule_oracle(trace, profile, model, balance_run, a, pause=pause,
                                       base=base) for pause in (False, True)]

    at = lps(alpha)
    return {"bounds": static_bounds(trace, profile, model, balance_run, alpha, base),
            "schedule_lp": at,
            "frontier": [o for a in alphas for o in (at if a == alpha else lps(a))]}


def correction_runs(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                    job: str, factor: float = 2.0, policy: str = "fair",
                    base: SimConfig | None = None) -> list[dict]:
    """``job`` runs ``factor`` × slower than any prediction says: the schedule without the
    online correction, with it (warm-up skipped, then a step sample every 2 s, as the daemon),
    and with the truth known at once (a sample every 10 ms: the bound); when the correction
    first re-planned."""
    base = base or SimConfig()
    cases = (("no correction", False, 2.0, 10.0), ("online correction", True, 2.0, 10.0),
             ("truth known (bound)", True, 0.01, 0.0))
    out = []
    for label, correct, every, warmup in cases:
        cfg = SimConfig(**{**base.__dict__, "policy": policy, "realloc": True,
                           "correct": correct, "observe_s": every, "warmup_s": warmup,
                           "slow": ((job, factor),)})
        run = simulate(trace, profile, model, cfg).to_json()
        slow = next(j for j in run["jobs"] if j["name"] == job)
        first = next((e["t_s"] for e in run["events"] if e["kind"] == "corrected"
                      and e.get("job") == job), None)
        out.append({"case": label, "policy": policy, "makespan_s": run["makespan_s"],
                    "mean_jct_s": run["mean_jct_s"], "job": job, "job_jct_s": slow["jct_s"],
                    "job_start_s": slow["start_s"],
                    "corrected_after_s": None if first is None else
                    round(first - slow["start_s"], 3)})
    return out


def job_ratios(run: dict, ref: dict) -> None:
    """Each job's rate (samples / JCT) against its rate in ``ref``; the worst, and makespan
    and mean JCT against ``ref``'s."""
    base = {j["name"]: j for j in ref["jobs"]}
    for j in run["jobs"]:
        b = base[j["name"]]
        j["rate_ratio"] = round(b["jct_s"] / max(j["jct_s"], 1e-9), 4)
    run["worst_job_ratio"] = min(j["rate_ratio"] for j in run["jobs"])
    run["makespan_ratio"] = run["makespan_s"] / max(ref["makespan_s"], 1e-9)
    run["mean_jct_ratio"] = run["mean_jct_s"] / max(ref["mean_jct_s"], 1e-9)


def dynamic(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
            base: SimConfig | None = None) -> list[dict]:
    """Requested workers without reallocation (the baseline), then every policy with it."""
    base = base or SimConfig()
    configs = [SimConfig(**{**base.__dict__, "policy": "requested", "realloc": False})]
    configs += [SimConfig(**{**base.__dict__, "policy": p, "realloc": True}) for p in POLICIES]
    runs = _runs(trace, profile, model, configs, "bench dynamic")
    ref = runs[0]
    bal = next(r for r in runs if r["policy"] == "balance" and r["realloc"])
    for r in runs:
        r["ratio"] = r["makespan_s"] / ref["makespan_s"]
        r["throughput_ratio"] = r["aggregate_throughput"] / ref["aggregate_throughput"]
        job_ratios(r, bal)  # each job against balance with reallocation
    return runs


def dynamic_bound(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
                  base: SimConfig | None = None) -> dict:
    """``fair_frontier.arrival_bound`` on the simulator's ground truth: R* = the most the
    node loads, max_D L(D) over its capacity, and each job's best rate its GPUs' B / step
    (its training rate F_μ alone on them; loading never makes it faster)."""
    from adloader.scheduling.bounds.fair_frontier import arrival_bound
    from adloader.sim.simulator import Simulator

    sim = Simulator(trace, profile, model, base or SimConfig())
    r_star = max(profile.node_loading_rate(d) for d in range(sim.capacity + 1))
    jobs = sim.jobs
    out = arrival_bound([j.spec.arrival_s for j in jobs],
                        [j.spec.iterations * j.spec.batch_size for j in jobs],
                        [min(j.spec.batch_size / j.step_s, r_star) for j in jobs], r_star)
    kind, what = out["binding"]
    out["binding"] = jobs[what].name if kind == "job" else f"arrivals from {what:g} s"
    out["node_rate_max"] = r_star
    return out


def _loading_table(capacity: int) -> np.ndarray:
    """λ(d; D) = d/D·L(D), L piecewise linear: knee at 0.3 C, saturation at 0.7 C."""
    node = np.arange(capacity + 1)
    knee, sat = capacity * 0.3, capacity * 0.7
    rate = 100 * np.minimum(node, knee) + 40 * np.clip(node - knee, 0, sat - knee)
    d = node[None, :]
    return np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * rate[:, None], 0.0)


def _demand(rng, name: str) -> JobDemand:
    return JobDemand(name, float(rng.uniform(20, 250)), float(rng.uniform(0.2, 25)),
                     int(rng.integers(1, 8)), remaining=float(rng.uniform(1e4, 1e6)))


def _timed(call: Callable[[], dict]) -> tuple[float, dict]:
    start = time.perf_counter()
    plan = call()
    return time.perf_counter() - start, plan


def _row(policy: str, case: str, jobs, capacity: int, table, times: list[float],
         plan: dict) -> dict:
    return {"policy": policy, "case": case, "jobs": len(jobs), "capacity": capacity,
            "median_ms": statistics.median(times) * 1000, "workers": sum(plan.values()),
            "throughput": total_throughput(jobs, plan, table)}


def _against_optimal(rows: list[dict]) -> list[dict]:
    """Each row's time and Σ T against ``optimal`` on the same case, in the same run."""
    for r in rows:
        ref = next(x for x in rows if x["case"] == r["case"] and x["policy"] == "optimal")
        r["time_ratio"] = r["median_ms"] / ref["median_ms"]
        r["throughput_ratio"] = r["throughput"] / ref["throughput"]
    return rows


def allocation_timing(jobs: int = 1000, capacity: int = 1024, repeats: int = 7,
                      seed: int = 0, small: tuple[int, int] = (16, 64)) -> list[dict]:
    """Median wall time of each policy on one random instance, with its Σ T; then ``fair``
    re-solving with a warm :class:`FairAllocator` after one job's rate changes (N × C) and
    after one arrival on a small node (16 jobs, 64 workers), each beside ``optimal``."""
    rng = np.random.default_rng(seed)
    table = _loading_table(capacity)
    demands = [_demand(rng, f"j{i}") for i in range(jobs)]
    case = f"{jobs} jobs × {capacity} workers"
    rows = []
    for name in POLICIES:
        policy = get_policy(name)
        if policy.most_jobs is not None and jobs > policy.most_jobs:
            continue  # it is another policy there (ftf: ``fair``); timed on the small node below
        runs = [_timed(lambda p=policy: p(demands, capacity, table)) for _ in range(repeats)]
        rows.append(_row(name, case, demands, capacity, table, [t for t, _ in runs],
                         runs[-1][1]))
    # one job's rate changes: a solver warm from the previous instance re-solves
    changed = []
    for r in range(repeats):
        i = (r * 7919) % jobs
        after = list(demands)
        after[i] = JobDemand(demands[i].name, float(rng.uniform(20, 250)))
        changed.append(after)
    rows += _incremental(f"{case}, one rate changed", demands, changed, capacity, table)
    # one arrival on a small node
    n, cap = small
    small_table = _loading_table(cap)
    base = [_demand(rng, f"s{i}") for i in range(n)]
    arrivals = [base + [_demand(rng, f"new{r}")] for r in range(5 * repeats)]
    rows += _incremental(f"{n} + 1 arrival × {cap} workers", base, arrivals, cap, small_table)
    return _against_optimal(rows)


def _incremental(case: str, before, afters, capacity: int, table) -> list[dict]:
    """``optimal``, one-call ``fair``, ``jct`` (and ``ftf`` on a small node: past ``MAX_JOBS``
    it is ``fair``) on each instance, each on a fresh copy of the table (``ftf`` reads which
    rows a table has once: cold); then warm ``fair`` and ``ftf`` re-solving it after the last
    decision (``before``) was made on the same table, untimed."""
    small = len(afters[-1]) <= get_policy("ftf").most_jobs
    rows = []
    for name in ("optimal", "fair", "jct") + (("ftf",) if small else ()):
        policy = get_policy(name)
        runs = []
        for after in afters:
            own = table.copy()
            runs.append(_timed(lambda p=policy, a=after, t=own: p(a, capacity, t)))
        rows.append(_row(name, case, afters[-1], capacity, table, [t for t, _ in runs],
                         runs[-1][1]))
    times = []
    for after in afters:
        solver = FairAllocator(table)
        previous = solver.allocate(before, capacity)  # the last decision, untimed
        took, plan = _timed(lambda s=solver, a=after, p=previous: s.allocate(a, capacity, p))
        times.append(took)
    rows.append(_row("fair, warm re-solve", case, afters[-1], capacity, table, times, plan))
    if small:
        ftf, times = get_policy("ftf"), []
        for after in afters:
            own = table.copy()
            ftf(before, capacity, own)  # the last decision, untimed: its table's rows known
            took, plan = _timed(lambda a=after, t=own: ftf(a, capacity, t))
            times.append(took)
        rows.append(_row("ftf, warm re-solve", case, afters[-1], capacity, table, times, plan))
    return rows
