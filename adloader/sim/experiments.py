"""Benchmarks of the scheduling brain, each against a baseline measured in the same run.

- static: the Fig. 3 mix under every policy; the paper's manual allocations are fixed
  (no reallocation), the schedulers reallocate at completions; ratios against balance.
- dynamic: Table III; every policy with reallocation against the no-reallocation run
  with each job's requested workers (Fig. 8 vs Fig. 9); ratios of makespan.
- tpm: held-out R² of every regressor for F_μ and F_λ (Table I) on noisy profile samples.
- allocation: time to allocate 1,000 jobs over 1,024 workers, per policy, side by side.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from rich.progress import Progress

from adloader.allocation import POLICIES, JobDemand, get_policy, total_throughput
from adloader.sim.device_profile import DeviceProfile
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import Trace
from adloader.throughput import ThroughputModel

FIXED = ("proportion", "balance", "inverse", "requested")  # the paper's manual allocations
SCHEDULED = ("waa", "optimal")


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
    return runs


def dynamic(trace: Trace, profile: DeviceProfile, model: ThroughputModel,
            base: SimConfig | None = None) -> list[dict]:
    """Requested workers without reallocation (the baseline), then every policy with it."""
    base = base or SimConfig()
    configs = [SimConfig(**{**base.__dict__, "policy": "requested", "realloc": False})]
    configs += [SimConfig(**{**base.__dict__, "policy": p, "realloc": True}) for p in POLICIES]
    runs = _runs(trace, profile, model, configs, "bench dynamic")
    ref = runs[0]
    for r in runs:
        r["ratio"] = r["makespan_s"] / ref["makespan_s"]
        r["throughput_ratio"] = r["aggregate_throughput"] / ref["aggregate_throughput"]
    return runs


def allocation_timing(jobs: int = 1000, capacity: int = 1024, repeats: int = 7,
                      seed: int = 0) -> list[dict]:
    """Median wall time of each policy on one random instance, with its Σ T."""
    rng = np.random.default_rng(seed)
    node = np.arange(capacity + 1)
    knee, sat = capacity * 0.3, capacity * 0.7
    capacity_rate = 100 * np.minimum(node, knee) + 40 * np.clip(node - knee, 0, sat - knee)
    d = node[None, :]
    table = np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * capacity_rate[:, None],
                     0.0)
    demands = [JobDemand(f"j{i}", float(rng.uniform(20, 250)), float(rng.uniform(0.2, 25)),
                         int(rng.integers(1, 8))) for i in range(jobs)]
    rows = []
    for name in POLICIES:
        policy: Callable = get_policy(name)
        times, plan = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            plan = policy(demands, capacity, table)
            times.append(time.perf_counter() - start)
        rows.append({"policy": name, "median_ms": statistics.median(times) * 1000,
                     "workers": sum(plan.values()),
                     "throughput": total_throughput(demands, plan, table)})
    return rows
