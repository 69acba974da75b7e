"""`adloader bench install`: what an install without a compiler, and the client alone, cost.

- **Per planner decision**: the simulator runs the bundled traces and generated mixes
  (20 jobs each, seeds from 1000) under ``ftf`` (the default policy) once with the compiled
  loops and once with their source run as plain Python (``adloader.scheduling.kernels.loops.use``),
  timing every call of the planner — a whole decision: ``ftf`` three times with the GPU
  shares its plans leave, and balance's shadow. The two runs must make the same decisions
  (their event logs equal), or the bench fails.
- **The client's import**: ``from adloader import ElasticDataLoader`` alone, then with
  ``import adloader.client`` and ``attach`` (the master: pydantic messages, ZeroMQ), timed in
  a fresh interpreter right after ``import torch`` (the baseline: a training script imports
  torch anyway), and the heavy modules it loaded.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

TRACES = ("paper-static", "paper-dynamic", "small-mix")
MIX_SEED, MIX_JOBS = 1000, 20
HEAVY = ("fastapi", "uvicorn", "sklearn", "scipy", "matplotlib", "httpx", "rich")
IMPORT_PROBE = (
    "import sys, time\n"
    "import torch\n"
    "t = time.perf_counter()\n"
    "from adloader import ElasticDataLoader\n"
    "loader = (time.perf_counter() - t) * 1000\n"
    "import adloader.client\n"
    "from adloader import attach\n"
    "ms = (time.perf_counter() - t) * 1000\n"
    "print(ms, loader, ','.join(m for m in {heavy!r} if m in sys.modules))\n")


def _quantiles(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"decisions": len(ordered), "median_ms": statistics.median(ordered) * 1e3,
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1e3, "max_ms": ordered[-1] * 1e3,
            "total_s": sum(ordered)}


def planner_decisions(traces=TRACES, mixes: int = 10) -> list[dict]:
    """Each side's time per planner decision under ``ftf`` over ``traces`` and ``mixes``
    generated mixes (the same decisions on both, checked)."""
    from dataclasses import replace

    from adloader.bench.sim import report
    from adloader.scheduling.kernels import loops
    from adloader.sim import simulator
    from adloader.sim.generator import generate
    from adloader.sim.trace import load_trace

    profile, model, config = report.setup("paper")
    config = replace(config, policy="ftf")
    runs = [load_trace(name) for name in traces]
    runs += [generate(MIX_JOBS, MIX_SEED + i, "paper", 1 / 60, profile.gpus)
             for i in range(mixes)]
    sides = [True, False] if loops.BUILT else [False]
    real_plan, times, cpu, events = simulator.plan, {}, {}, {}

    def timed(*args, **kw):
        t0, c0 = time.perf_counter(), time.thread_time()
        out = real_plan(*args, **kw)
        times[side].append(time.perf_counter() - t0)
        cpu[side].append(time.thread_time() - c0)
        return out

    try:
        simulator.plan = timed
        for side in sides:
            loops.use(side)
            times[side], cpu[side], events[side] = [], [], []
            for trace in runs:
                sim = simulator.Simulator(trace, profile, model, config)
                events[side].append(sim.run().events)
    finally:
        simulator.plan = real_plan
        loops.use(loops.BUILT)
    if len(sides) == 2 and events[True] != events[False]:
        raise AssertionError("the Python loops decided otherwise than the compiled ones")
    rows = [{"loops": "compiled" if side else "python", "traces": len(runs),
             **_quantiles(times[side]),
             "cpu_median_ms": statistics.median(cpu[side]) * 1e3} for side in sides]
    for r in rows:  # the thread's CPU time too: a loaded machine stretches the wall time
        r["x_compiled"] = r["median_ms"] / rows[0]["median_ms"]
        r["cpu_x_compiled"] = r["cpu_median_ms"] / rows[0]["cpu_median_ms"]
    return rows


def arrival_decision(repeats: int = 30, jobs: int = 16, capacity: int = 64) -> list[dict]:
    """One ``ftf`` call on an arrival (``jobs`` + 1 on ``capacity`` workers, staged rows: knee
    at 0.3 C, saturation at 0.7 C), each side, ``repeats`` random instances (medians)."""
    import numpy as np

    from adloader.scheduling.kernels import loops
    from adloader.scheduling.policies.allocation import JobDemand
    from adloader.scheduling.policies.registry import get_policy

    rng = np.random.default_rng(0)
    node = np.arange(capacity + 1)
    knee, sat = capacity * 0.3, capacity * 0.7
    rate = 100 * np.minimum(node, knee) + 40 * np.clip(node - knee, 0, sat - knee)
    d = node[None, :]
    table = np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * rate[:, None], 0.0)
    cases = [[JobDemand(f"j{i}", float(rng.uniform(20, 250)),
                        remaining=float(rng.uniform(1e4, 1e6))) for i in range(jobs + 1)]
             for _ in range(repeats)]
    rows = []
    try:
        for side in ([True, False] if loops.BUILT else [False]):
            loops.use(side)
            took, cpu = [], []
            for case in cases:
                own = table.copy()  # cold: ftf reads which rows a table has once
                t0, c0 = time.perf_counter(), time.thread_time()
                get_policy("ftf")(case, capacity, own)
                took.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
            rows.append({"loops": "compiled" if side else "python",
                         "case": f"{jobs} + 1 arrival × {capacity} workers",
                         "median_ms": statistics.median(took) * 1e3,
                         "cpu_median_ms": statistics.median(cpu) * 1e3})
    finally:
        loops.use(loops.BUILT)
    return rows


def client_import(rounds: int = 7) -> dict:
    """ms the client's import adds to ``import torch`` (median and min over fresh
    interpreters), and the heavy modules it loaded (none expected)."""
    ms, loader, heavy = [], [], set()
    for _ in range(rounds):
        out = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(heavy=HEAVY)],
                             capture_output=True, text=True, check=True).stdout.split()
        ms.append(float(out[0]))
        loader.append(float(out[1]))
        heavy.update(m for m in (out[2] if len(out) > 2 else "").split(",") if m)
    return {"rounds": rounds, "median_ms": statistics.median(ms), "min_ms": min(ms),
            "loader_median_ms": statistics.median(loader), "loader_min_ms": min(loader),
            "heavy_loaded": sorted(heavy)}


def run_install_bench(quick: bool = False) -> dict:
    return {"planner": planner_decisions(TRACES[:1], 1) if quick else planner_decisions(),
            "arrival": arrival_decision(10 if quick else 30),
            "client_import": client_import(3 if quick else 7)}
