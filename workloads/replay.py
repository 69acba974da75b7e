"""Replay a trace against a running daemon: each job submitted at its arrival time as the
reference training job, then the same result JSON (and timeline) as ``adloader sim``.

The replay is the benchmark's own client, not something a user's jobs do: between arrivals
it asks the daemon how its jobs stand every ``POLL_S`` (2 s), and wakes early only for the
next arrival. Each call costs the daemon a REST request (a few milliseconds of CPU here), so a
faster cadence would be counted as the daemon's overhead by ``bench live``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.progress import Progress

from adloader import rest
from adloader.sim.trace import Trace

FINAL = ("finished", "failed", "lost", "cancelled")
POLL_S = 2.0  # how often the replay asks the daemon how its jobs stand (arrivals wake it)


def job_command(job, iterations: int, step_scale: float, crop: int, data: str,
                images: int, report_dir: str = "") -> list[str]:
    """The reference job's command for one job of a trace (``report_dir``: each job writes
    what it measured of itself there, as ``NAME.json``)."""
    report = ["--report", str(Path(report_dir) / f"{job.name}.json")] if report_dir else []
    return [sys.executable, "-m", "adloader.workloads.train", "--model", job.model,
            "--batch-size", str(job.batch_size), "--gpus", str(job.gpus), "--iterations",
            str(iterations), "--step-scale", str(step_scale), "--crop", str(crop), "--data",
            data, "--images", str(images), *report]


def replay(trace: Trace, call: Callable, *, time_scale: float = 1.0,
           iterations_scale: float = 1.0, step_scale: float = 1.0, crop: int = 224,
           data: str = "", images: int = 256, timeout_s: float = 3600,
           progress: Progress | None = None, report_dir: str = "",
           poll_s: float = POLL_S) -> dict:
    """Submit every job of ``trace`` at arrival × time_scale; wait; summarise.

    ``call(method, path, **kw)`` talks to the daemon (returns an httpx.Response); the jobs'
    states are read every ``poll_s`` (and at each arrival). The jobs' times come from the
    daemon's own records, so the cadence only moves when the replay notices the end.
    """
    data = data or str(Path("/tmp") / "adloader-jpeg")
    start = time.time()
    ids: dict[str, str] = {}
    iterations = {j.name: max(1, round(j.iterations * iterations_scale)) for j in trace.jobs}
    task = progress.add_task("replay", total=len(trace.jobs)) if progress else None
    pending = sorted(trace.jobs, key=lambda j: j.arrival_s)
    deadline = start + timeout_s
    views: dict[str, dict] = {}
    while time.time() < deadline:
        now = time.time() - start
        while pending and pending[0].arrival_s * time_scale <= now:
            job = pending.pop(0)
            body = {"name": job.name, "model": job.model, "batch_size": job.batch_size,
                    "gpus": job.gpus, "iterations": iterations[job.name],
                    "command": job_command(job, iterations[job.name], step_scale, crop, data,
                                           images, report_dir)}
            if job.workers is not None:
                body["workers"] = job.workers
            ids[job.name] = call("POST", rest.JOBS, json=body).json()["id"]
        # the jobs submitted since the replay began, one request (a plain listing pages
        # oldest first: a long-lived daemon's first page is its history)
        listed = call("GET", f"{rest.JOBS}?since={start - 1:.3f}&limit={rest.PAGE_MAX}").json()
        views = {v["id"]: v for v in listed if v["id"] in ids.values()}
        done = sum(v["state"] in FINAL for v in views.values())
        if progress:
            progress.update(task, completed=done,
                            description=f"replay: {len(ids)}/{len(trace.jobs)} submitted")
        if not pending and done == len(trace.jobs):
            break
        wake = poll_s
        if pending:  # the next arrival, on time
            wake = min(wake, pending[0].arrival_s * time_scale - (time.time() - start))
        time.sleep(max(0.01, min(wake, deadline - time.time())))
    else:
        raise TimeoutError(f"replay: jobs still running after {timeout_s:g} s")
    events, since = [], 0
    while True:  # every event, page by page
        page = call("GET", rest.EVENTS, params={"since": since, "limit": 5000}).json()
        events += page
        if len(page) < 5000:
            break
        since = page[-1]["id"]
    alloc = call("GET", rest.ALLOCATIONS).json()
    return summarise(trace, ids, views, events, alloc, iterations, start)


def summarise(trace, ids, views, events, alloc, iterations, start) -> dict:
    """The `adloader sim` result shape, from the daemon's job views and events."""
    by_id = {v: k for k, v in ids.items()}
    spec = {j.name: j for j in trace.jobs}
    jobs, busy, held = [], 0.0, 0.0
    finished = {e["job"]: e["data"] for e in events if e["kind"] in FINAL and e["job"] in by_id}
    first_workers, registered = {}, {}
    for e in events:
        if e["kind"] == "launched" and e["job"] in by_id:
            first_workers.setdefault(e["job"], e["data"]["workers"])
        if e["kind"] in ("registered", "attached") and e["job"] in by_id:
            registered.setdefault(e["job"], e["t"])  # training starts: the process is up
    for job_id, view in views.items():
        name = by_id[job_id]
        t0 = registered.get(job_id) or view["started_at"] or view["submitted_at"]
        t1 = view["finished_at"] or time.time()
        samples = spec[name].batch_size * (view["iteration"] or iterations[name])
        info = finished.get(job_id, {})
        busy += info.get("busy_s", 0.0)
        held += info.get("busy_s", 0.0) + info.get("wait_s", 0.0)
        jobs.append({"name": name, "id": job_id, "model": spec[name].model,
                     "batch_size": spec[name].batch_size, "gpus": spec[name].gpus,
                     "iterations": view["iteration"], "state": view["state"],
                     "arrival_s": round(view["submitted_at"] - start, 3),
                     "start_s": round(t0 - start, 3), "end_s": round(t1 - start, 3),
                     "jct_s": round(t1 - view["submitted_at"], 3),
                     "workers_initial": first_workers.get(job_id),
                     "throughput": round(samples / max(t1 - t0, 1e-9), 3)})
    timeline, current = [], {}
    for e in events:
        if e["job"] is not None and e["job"] not in by_id:
            continue
        t = round(e["t"] - start, 3)
        if e["kind"] == "plan":
            current = {by_id[j]: w for j, w in e["data"]["workers"].items() if j in by_id}
        elif e["kind"] in ("resize", "revived", "attached"):
            current[by_id[e["job"]]] = e["data"]["workers"]
        elif e["kind"] in FINAL or e["kind"] == "finishing":  # its workers went back
            current.pop(by_id[e["job"]], None)
        else:
            continue
        timeline.append({"t_s": t, "workers": dict(current)})
    plans = [e for e in events if e["kind"] == "plan"]
    resized = {e["job"] for e in events if e["kind"] == "resize"}
    return {
        "policy": alloc["policy"], "realloc": True, "cores": alloc["capacity"], "live": True,
        "makespan_s": round(max(j["end_s"] for j in jobs) - min(j["start_s"] for j in jobs), 3),
        "aggregate_throughput": round(sum(j["throughput"] for j in jobs), 3),
        "mean_jct_s": round(sum(j["jct_s"] for j in jobs) / len(jobs), 3),
        "gpu_idle_fraction": round(1 - busy / held, 4) if held else None,
        "reallocations": sum(1 for e in events if e["kind"] == "resize"),
        "jobs": sorted(jobs, key=lambda j: j["start_s"]),
        "timeline": timeline,
        "events": [{"t_s": round(e["t"] - start, 3), "kind": "plan",
                    "resized": [by_id.get(j, j) for j in e["data"]["resized"]]}
                   for e in plans] + _share_events(events, by_id, start)
        + _loop_events(events, by_id, start),
        "resized_jobs": sorted(by_id[j] for j in resized if j in by_id),
    }


LOOP_EVENTS = ("loop_even", "loop_start", "loop_base", "loop_kept", "loop_reverted",
               "loop_guard", "loop_untold")


def _loop_events(events, by_id, start) -> list[dict]:
    """What the closed loop measured and did (its trials, kept or reverted, and the guard),
    by the trace's names."""
    out = []
    for e in events:
        if e["kind"] in LOOP_EVENTS:
            data = {k: by_id.get(v, v) if k in ("from", "to") else v
                    for k, v in e["data"].items()}
            out.append({"t_s": round(e["t"] - start, 3), "kind": e["kind"], **data})
    return out


def _share_events(events, by_id, start) -> list[dict]:
    """The daemon's CPU weights as it wrote them (``cpu_shares``: each job's weight, and under
    the rule ``order`` the ranking and each job's GPU ceiling), by the trace's names."""
    def named(by_job: dict) -> dict:
        return {by_id.get(j, j): v for j, v in by_job.items()}

    out = []
    for e in events:
        if e["kind"] != "cpu_shares":
            continue
        data = e["data"]
        share = {"t_s": round(e["t"] - start, 3), "kind": "cpu_shares",
                 "weights": named(data["weights"])}
        if data.get("order"):
            share.update(order=[by_id.get(j, j) for j in data["order"]],
                         ceilings=named(data.get("ceilings", {})))
        out.append(share)
    return out
