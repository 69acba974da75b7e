"""What a node does without adloader, simulated: the baselines users run (issue 23), beside
the daemon's policies, on one truth.

No daemon means no arrival or completion buffer and no capacity cap: each job runs from its
arrival with a fixed ``num_workers`` — the trace's own (``requested``), the node's loading
workers split evenly (``even``), or the node's cores each (``cores``) — and the CPU is shared
as ``cpu_sharing`` says (``kernel``: sleeping workers yield, as a Linux node does; ``static``:
the model's own assumption). The policies run as the daemon runs them: its buffers, its
capacity, reallocation, on the same truth. Every ratio is against ``even`` in the same call,
and the makespan here runs from the first arrival (the simulator's own ``makespan_s`` starts
at the first job's start, which leaves the daemon's arrival buffer out).
"""

from __future__ import annotations

from dataclasses import replace

from adloader.sim.device_profile import DeviceProfile
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import Trace

SETTINGS = ("requested", "even", "cores")


def fixed_workers(trace: Trace, setting: str, capacity: int, cores: int) -> dict[str, int]:
    even = max(1, capacity // max(len(trace.jobs), 1))
    return {j.name: {"requested": j.workers or even, "even": even, "cores": cores}[setting]
            for j in trace.jobs}


def compare(trace: Trace, profile: DeviceProfile, model, base: SimConfig,
            policies: tuple[str, ...] = ("balance", "ftf"),
            cpu_sharing: str = "kernel") -> list[dict]:
    """Each no-daemon setting and each policy once on ``trace``, under ``cpu_sharing``."""
    capacity = base.capacity or profile.loading_workers
    rows = []
    for setting in SETTINGS:
        workers = fixed_workers(trace, setting, capacity, profile.cores)
        fixed = trace.model_copy(update={"jobs": tuple(
            j.model_copy(update={"workers": workers[j.name]}) for j in trace.jobs)})
        config = replace(base, policy="requested", realloc=False, correct=False,
                         capacity=sum(workers.values()), arrival_window_s=0.0,
                         arrival_settle_s=0.0, completion_window_s=0.0,
                         cpu_sharing=cpu_sharing)
        rows.append({"setting": f"no daemon: {setting}",
                     **simulate(fixed, profile, model, config).to_json()})
    for policy in policies:
        config = replace(base, policy=policy, realloc=True, cpu_sharing=cpu_sharing)
        rows.append({"setting": f"daemon: {policy}",
                     **simulate(trace, profile, model, config).to_json()})
    for r in rows:
        r["makespan_s"] = max(j["end_s"] for j in r["jobs"]) - min(
            j["arrival_s"] for j in r["jobs"])
    even = next(r for r in rows if r["setting"] == "no daemon: even")
    for r in rows:
        r["makespan_x_even"] = r["makespan_s"] / even["makespan_s"]
        r["mean_jct_x_even"] = r["mean_jct_s"] / even["mean_jct_s"]
        r["sum_x_even"] = r["aggregate_throughput"] / even["aggregate_throughput"]
        jct = {j["name"]: j["jct_s"] for j in even["jobs"]}
        r["worst_jct_x_even"] = max(j["jct_s"] / jct[j["name"]] for j in r["jobs"])
    return rows
