"""``adloader bench tuner``: the competent per-job tuner's bar, live — alone on the node,
each job of the static mix with the tuner (``adloader.scheduling.tuners.climb``, from the even
split's count, within the node's workers) reaches at least ``BAR`` × its rate at its best
fixed ``num_workers`` in hindsight (the same loader, ``ElasticDataLoader``, no daemon; every
count from 1 to the node's workers run, in alternating order over rounds; medians).

A job's rate is its own training loop's: its samples over its time from its first to its
last batch, cold start and the tuner's trials included."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from adloader import env as names
from adloader.sim.trace import load_trace
from adloader.workloads.dataset import ensure_images
from adloader.workloads.measure import logical_cores
from adloader.workloads.replay import job_command

BAR = 0.95  # the tuner alone reaches this × the job's best fixed count's rate


def run_alone(job, workers: int, climb: int, *, iterations: int, step_scale: float,
              crop: int, data: str, images: int, out: Path, env: dict,
              timeout_s: float) -> dict:
    """One job alone on ``ElasticDataLoader`` with ``workers`` (``climb`` > 0: the tuner
    climbs from there within ``climb``); its report."""
    tag = f"{job.name}-{workers}-{climb}-{time.monotonic_ns()}"
    report = out / f"{tag}.json"
    cmd = job_command(job, iterations, step_scale, crop, data, images)
    cmd += ["--loader", "elastic", "--workers", str(workers), "--report", str(report)]
    if climb:
        cmd += ["--climb", str(climb)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    if proc.returncode:
        raise RuntimeError(f"{job.name} with {workers} workers exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-400:]}")
    return json.loads(report.read_text())


def tuner_bar(*, capacity: int = 0, iterations_scale: float = 0.6, rounds: int = 3,
              step_scale: float = 1.2, crop: int = 112, images: int = 128,
              trace_name: str = "paper-static", timeout_s: float = 900.0,
              workdir: str | None = None, progress=None) -> dict:
    """Each job of ``trace_name`` alone: every fixed count and the tuner, ``rounds`` times in
    alternating order; per job the best fixed count's median rate, the tuner's, their ratio
    and the tuner's counts over its run (its last round)."""
    root = Path(workdir or tempfile.mkdtemp(prefix="adloader-tuner-"))
    data = root / "jpeg"
    ensure_images(data, images, seed=0)
    trace = load_trace(trace_name)
    capacity = capacity or 3 * logical_cores()
    start = max(1, capacity // len(trace.jobs))  # the even split's count: the tuner's start
    env = {**os.environ, names.STEP_PROFILE: "paper", names.GPU_LOCK_DIR: str(root)}
    size = dict(step_scale=step_scale, crop=crop, data=str(data), images=images, out=root,
                env=env, timeout_s=timeout_s)
    settings = [(d, 0) for d in range(1, capacity + 1)] + [(start, capacity)]
    jobs = []
    for job in trace.jobs:
        iterations = max(1, round(job.iterations * iterations_scale))
        runs: dict[tuple[int, int], list[dict]] = {s: [] for s in settings}
        for round_ in range(rounds):
            order = settings if round_ % 2 == 0 else list(reversed(settings))
            for workers, climb in order:
                report = run_alone(job, workers, climb, iterations=iterations, **size)
                runs[(workers, climb)].append(report)
                if progress:
                    what = f"tuner from {workers}" if climb else f"{workers} workers"
                    progress(f"{job.name} alone, {what} (round {round_ + 1}/{rounds}): "
                             f"{report['rate']:.1f} samples/s")
        rate = {s: statistics.median(r["rate"] for r in rs) for s, rs in runs.items()}
        fixed = {w: rate[(w, 0)] for w in range(1, capacity + 1)}
        best = max(fixed, key=fixed.get)
        tuned = rate[(start, capacity)]
        jobs.append({"name": job.name, "iterations": iterations, "fixed": fixed,
                     "best_fixed": best, "best_fixed_rate": fixed[best], "tuner_rate": tuned,
                     "ratio": tuned / fixed[best], "tuner_start": start,
                     "tuner_counts": runs[(start, capacity)][-1].get("workers_at"),
                     "met": tuned >= BAR * fixed[best]})
    return {"trace": trace_name, "capacity": capacity, "rounds": rounds, "bar": BAR,
            "iterations_scale": iterations_scale, "jobs": jobs,
            "met": all(j["met"] for j in jobs)}
