"""Queue baselines: what a careful user without a daemon can do instead of sharing the node —
run the jobs one at a time, each ALONE with the whole node's loading workers, non-preemptive.

- ``fifo``: in arrival order (ties: the trace's order);
- ``shortest``: whenever the node frees, among the jobs that have arrived, the one with the
  fewest stated samples (iterations × batch size; ties: arrival, then the trace's order).

Each job's solo duration is simulated once — a one-job trace of it arriving at 0, with the
no-daemon config ``no_daemon.compare`` runs its fixed settings with (no buffers, no
reallocation, no correction) and ``workers`` = the node's (``base.capacity`` or the profile's
cores) — and read off as its end time; the queue arithmetic (``queue_times``, pure) then
places the jobs in time: a job starts at max(its arrival, the previous job's end).
"""

from __future__ import annotations

from dataclasses import replace

from adloader.device.device_profile import DeviceProfile
from adloader.errors import InputError
from adloader.sim.simulator import SimConfig, SimResult, simulate
from adloader.sim.trace import Trace

ORDERS = {"fifo": "fifo queue", "shortest": "shortest-first queue"}  # order: its row's name


def no_daemon_config(base: SimConfig, capacity: int, cpu_sharing: str) -> SimConfig:
    """A node without the daemon: each job keeps its ``workers``, no buffers, no
    reallocation, no correction, no closed loop, ``capacity`` workers in all (no cap below the
    jobs' sum)."""
    return replace(base, policy="requested", realloc=False, correct=False, capacity=capacity,
                   closed_loop=False,
                   arrival_window_s=0.0, arrival_settle_s=0.0, completion_window_s=0.0,
                   cpu_sharing=cpu_sharing)


def queue_times(durations: list[float], arrivals: list[float], lengths: list[float],
                order: str) -> list[tuple[float, float]]:
    """(start, end) of each job (in the given order) run one at a time, non-preemptive: when
    the node frees, among the jobs that have arrived, FIFO takes the earliest arrival,
    ``shortest`` the least ``lengths`` (ties: arrival, then index); with none arrived, the
    node idles until the next arrival."""
    if order not in ORDERS:
        raise InputError(f"queue order must be one of {', '.join(ORDERS)}, got {order!r}")
    if not len(durations) == len(arrivals) == len(lengths):
        raise InputError("durations, arrivals and lengths must have one entry per job")
    if order == "fifo":
        def key(i: int) -> tuple:
            return (arrivals[i], i)
    else:
        def key(i: int) -> tuple:
            return (lengths[i], arrivals[i], i)
    waiting = set(range(len(durations)))
    times: dict[int, tuple[float, float]] = {}
    free = min(arrivals, default=0.0)
    while waiting:
        ready = [i for i in waiting if arrivals[i] <= free]
        if not ready:  # idle until the next arrival
            free = min(arrivals[i] for i in waiting)
            continue
        i = min(ready, key=key)
        start = max(arrivals[i], free)
        times[i] = (start, start + durations[i])
        free = times[i][1]
        waiting.discard(i)
    return [times[i] for i in range(len(durations))]


def solo_runs(trace: Trace, profile: DeviceProfile, model, base: SimConfig) -> list[SimResult]:
    """Each job of ``trace`` simulated alone, arriving at 0, with the whole node's workers
    (``base.capacity`` or the profile's cores) under ``compare``'s no-daemon config."""
    capacity = base.capacity or profile.cores
    config = no_daemon_config(base, capacity, base.cpu_sharing)
    return [simulate(trace.model_copy(update={"jobs": (j.model_copy(update={
        "arrival_s": 0.0, "workers": capacity}),)}), profile, model,
        replace(config, slow=tuple((n, k) for n, k in base.slow if n == j.name)))
        for j in trace.jobs]  # a slowed job is as slow alone


def simulate_queue(trace: Trace, profile: DeviceProfile, model, base: SimConfig,
                   order: str) -> dict:
    """``trace`` as a queue in ``order`` ("fifo" or "shortest"): a dict shaped like
    ``SimResult.to_json()`` (jobs with their queue start and end, JCT from arrival; makespan
    from the first start, which is the first arrival; Σ of each job's samples/s over its own
    run, as ``to_json`` sums it; a timeline of who holds the node)."""
    if order not in ORDERS:
        raise InputError(f"queue order must be one of {', '.join(ORDERS)}, got {order!r}")
    capacity = base.capacity or profile.cores
    solos = solo_runs(trace, profile, model, base)
    durations = [max(j.end_s for j in s.jobs) for s in solos]
    arrivals = [j.arrival_s for j in trace.jobs]
    lengths = [j.iterations * j.batch_size for j in trace.jobs]
    times = queue_times(durations, arrivals, lengths, order)
    jobs = []
    for job, solo, (start, end) in zip(trace.jobs, solos, times, strict=True):
        row = solo.to_json()["jobs"][0]
        throughput = job.batch_size * job.iterations / max(end - start, 1e-9)
        row.update(arrival_s=job.arrival_s, start_s=round(start, 3), end_s=round(end, 3),
                   jct_s=round(end - job.arrival_s, 3), throughput=round(throughput, 3))
        jobs.append(row)
    timeline: list[dict] = []  # who holds the node, from each start; {} while it idles
    last_end = None
    for job, (start, end) in sorted(zip(trace.jobs, times, strict=True),
                                    key=lambda p: p[1][0]):
        if last_end is not None and last_end < start - 1e-9:
            timeline.append({"t_s": round(last_end, 3), "workers": {}})
        timeline.append({"t_s": round(start, 3), "workers": {job.name: capacity}})
        last_end = end
    if last_end is not None:
        timeline.append({"t_s": round(last_end, 3), "workers": {}})
    busy = sum(s.gpu_busy_s for s in solos)
    held = sum(s.gpu_held_s for s in solos)
    return {
        "policy": ORDERS[order],
        "realloc": False,
        "cores": capacity,
        "makespan_s": round(max(e for _, e in times) - min(s for s, _ in times), 3)
        if times else 0.0,
        "aggregate_throughput": round(sum(j["throughput"] for j in jobs), 3),
        "mean_jct_s": round(sum(j["jct_s"] for j in jobs) / max(len(jobs), 1), 3),
        "gpu_idle_fraction": round(1.0 - busy / max(held, 1e-9), 4),
        "reallocations": 0,
        "jobs": jobs,
        "timeline": timeline,
        "events": [],
    }
