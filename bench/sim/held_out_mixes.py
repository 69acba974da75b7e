"""The development random mixes: traces from the generator with seeds no test or calibration
uses (from ``MIX_SEED``), every policy against no reallocation and against ``balance`` on
the same mix; median and min–max over mixes (``adloader bench mixes``).

They were held out once; the mixes from seeds 1030–1089 have since been used to choose
between candidate changes, so they are development mixes now: a figure from them is no
longer an unbiased estimate. The held-out set is ``adloader.bench.sim.held_out`` (its seeds fixed
in ``held_out.json``, run once per release by ``adloader bench held-out``); ``random_mixes``
refuses its seeds unless that command asks. (The module and ``held_out`` keep their names:
tests still may not generate these seeds, see tests/conftest.py.)"""

from __future__ import annotations

import statistics
import time

from rich.progress import Progress

from adloader.bench.sim.experiments import job_ratios
from adloader.device.device_profile import DeviceProfile
from adloader.errors import InputError
from adloader.scheduling.model.throughput import ThroughputModel
from adloader.sim.simulator import SimConfig, simulate

MIX_SEED = 1000  # generator seeds of the development mixes start here (tests use 0–11)


def held_out(seed: int) -> bool:
    """A generator seed kept out of the tests (a development mix from ``MIX_SEED``, or the
    held-out set of ``adloader.bench.sim.held_out`` above it): no test may generate its mix
    (tests/conftest.py fails one that does)."""
    return seed >= MIX_SEED
MIX_POLICIES = ("balance", "waa", "optimal", "fair", "jct", "ftf")
MIX_METRICS = ("makespan_x_norealloc", "makespan_x_balance", "mean_jct_x_balance",
               "sum_x_balance", "worst_x_balance")


def mix_seeds(count: int, seed: int = 0) -> list[int]:
    """The generator seeds of ``count`` development mixes: MIX_SEED + seed·count + i, so
    each ``seed`` draws a disjoint set, and none is a seed a test or a calibration used."""
    return [MIX_SEED + seed * count + i for i in range(count)]


def random_mixes(profile: DeviceProfile, model: ThroughputModel, base: SimConfig | None = None,
                 count: int = 10, seed: int = 0, jobs: int = 8, rate: float = 1 / 60,
                 mix: str = "paper", policies: tuple[str, ...] = MIX_POLICIES,
                 alpha: float = 0.95, seeds: list[int] | None = None,
                 placed_as_balance: bool = False, allow_held_out: bool = False) -> dict:
    """``count`` random traces from the generator (Poisson arrivals at ``rate``, ``jobs`` jobs
    of ``mix``) with development seeds (``mix_seeds``), each simulated with the requested
    workers and no reallocation (the baseline) and under every policy with reallocation.
    Each run against the same mix's baseline and its ``balance`` run; then per policy the
    median, min and max over mixes, and in how many mixes every job kept ≥ α × its rate
    under balance (rate: samples / JCT). ``seeds``: other generator seeds (a test's own).
    A seed of the held-out set (``adloader.bench.sim.held_out``) is refused unless
    ``allow_held_out`` (``bench held-out`` alone sets it). ``placed_as_balance``: every run
    of a mix with each job pinned to the GPUs balance's run gave it, so every policy
    co-locates its jobs as balance does."""
    from adloader.sim.generator import generate
    from adloader.sim.trace import pinned

    if count < 1:
        raise InputError(f"mixes must be at least 1, got {count}")
    if "balance" not in policies:
        raise InputError("the mixes are judged against balance: policies must include it")
    base = base or SimConfig()
    configs = [SimConfig(**{**base.__dict__, "policy": "requested", "realloc": False})]
    configs += [SimConfig(**{**base.__dict__, "policy": p, "realloc": True}) for p in policies]
    seeds = list(seeds) if seeds is not None else mix_seeds(count, seed)
    if not allow_held_out:
        from adloader.bench.sim import held_out as held_out_set

        kept = [s for s in seeds if held_out_set.is_held_out(s)]
        if kept:
            raise InputError(f"generator seeds {kept[0]}–{kept[-1]} are the held-out set "
                             "(bench/sim/held_out.json): only `adloader bench held-out` "
                             "runs them, once per release")
    per_mix: list[dict] = []
    start = time.perf_counter()
    with Progress(transient=True) as progress:
        task = progress.add_task("bench mixes", total=len(seeds) * len(configs))
        for s in seeds:
            trace = generate(jobs, s, mix, rate, profile.gpus)
            if placed_as_balance:  # balance's placement, replayed in every run of the mix
                placed = simulate(trace, profile, model, configs[policies.index("balance") + 1])
                trace = pinned(trace, {j["name"]: j["gpu_ids"] for j in placed.to_json()["jobs"]})
            runs = []
            for cfg in configs:
                runs.append(simulate(trace, profile, model, cfg).to_json())
                progress.advance(task)
            ref = runs[0]
            bal = next(r for r in runs if r["policy"] == "balance" and r["realloc"])
            for r in runs:
                job_ratios(r, bal)
                per_mix.append({
                    "seed": s, "policy": r["policy"], "realloc": r["realloc"],
                    "makespan_s": r["makespan_s"], "mean_jct_s": r["mean_jct_s"],
                    "aggregate_throughput": r["aggregate_throughput"],
                    "reallocations": r["reallocations"],
                    "makespan_x_norealloc": r["makespan_s"] / max(ref["makespan_s"], 1e-9),
                    "makespan_x_balance": r["makespan_ratio"],
                    "mean_jct_x_balance": r["mean_jct_ratio"],
                    "sum_x_balance": r["aggregate_throughput"]
                    / max(bal["aggregate_throughput"], 1e-9),
                    "worst_x_balance": r["worst_job_ratio"],
                    "every_job_kept": r["worst_job_ratio"] >= alpha - 1e-9})
    seconds = time.perf_counter() - start
    rows = []
    for cfg in configs:
        mine = [m for m in per_mix if m["policy"] == cfg.policy and m["realloc"] == cfg.realloc]
        row: dict = {"policy": cfg.policy, "realloc": cfg.realloc, "mixes": len(mine),
                     "every_job_kept": sum(m["every_job_kept"] for m in mine)}
        for key in MIX_METRICS:
            values = [m[key] for m in mine]
            row[key] = {"median": statistics.median(values), "min": min(values),
                        "max": max(values)}
        rows.append(row)
    return {"seeds": seeds, "jobs": jobs, "rate_per_s": rate, "mix": mix, "alpha": alpha,
            "placed_as_balance": placed_as_balance,
            "gpus": profile.gpus, "simulations": len(per_mix), "seconds": seconds,
            "rows": rows, "runs": per_mix}
