"""What a node does without adloader, simulated: the baselines users run, beside
the daemon's policies, on one truth.

No daemon means no arrival or completion buffer and no capacity cap: each job runs from its
arrival with a fixed ``num_workers`` — the trace's own (``requested``), the node's workers
split evenly (``even``), the node's cores each (``cores``), or one each (``one``, the best
fixed setting) — or with its own tuner (``adloader.sim.autotuned``, the tuners the live
baselines run: ``climb``, the competent one, and ``autotune``, a named weaker one), and the CPU is
shared as ``cpu_sharing`` says (``kernel``: sleeping workers yield, as a Linux node does;
``static``: the model's own assumption). The policies run as the daemon runs them: its
buffers, reallocation, on the same truth, and its capacity as ``adloader daemon`` takes it by
default — the node's cores (``base.capacity`` when given); ``even`` splits the same count.

Beside them, the baselines a careful user without a daemon could also run: each job's own
fixed count chosen in hindsight (``best_per_job``: coordinate descent on the mean JCT from the
best uniform setting, ``HINDSIGHT``), and the jobs one at a time, each alone with the node's
workers, in arrival order or shortest first (``adloader.sim.queues``).

Every ratio is against ``even`` in the same call, and against the best fixed setting in
hindsight: per figure, the least of the uniform settings ``requested``, ``even``, ``cores`` and
``one`` (the simulation is exact, so a minimum is not a biased pick of noise; a user would not
know it beforehand). The makespan here runs from the first arrival (the simulator's own
``makespan_s`` starts at the first job's start, which leaves the daemon's arrival buffer out).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from adloader.device.device_profile import DeviceProfile
from adloader.sim.queues import no_daemon_config
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import Trace

SETTINGS = ("requested", "even", "cores", "one")  # fixed num_workers
AUTOTUNE = "autotune"  # the weak per-job tuner: a named weaker row
CLIMB = "climb"  # the competent per-job tuner
FIGURES = ("makespan_s", "mean_jct_s", "worst_jct_s")
HINDSIGHT = "best per-job counts (hindsight)"  # each job's own fixed count, searched
HINDSIGHT_PASSES = 4  # coordinate descent stops after this many passes at most
QUEUES = (("fifo", "fifo queue"), ("shortest", "shortest-first queue"))  # order, row name
# across_mixes' ratios of the policy to the careful user's other baselines: key: (row, figure)
BASELINE_KEYS = {
    "mean_jct_x_hindsight": (HINDSIGHT, "mean_jct_s"),
    "makespan_x_hindsight": (HINDSIGHT, "makespan_s"),
    "mean_jct_x_fifo_queue": ("fifo queue", "mean_jct_s"),
    "mean_jct_x_shortest_queue": ("shortest-first queue", "mean_jct_s"),
}
MIX_FLOOR_LIMIT_S = 60.0  # the whole-trace program of one mix stops here (dual bound)


def fixed_workers(trace: Trace, setting: str, capacity: int, cores: int) -> dict[str, int]:
    even = max(1, capacity // max(len(trace.jobs), 1))
    return {j.name: {"requested": j.workers or even, "even": even, "cores": cores,
                     "one": 1}[setting]
            for j in trace.jobs}


def fixed_run(trace: Trace, workers: dict[str, int], profile: DeviceProfile, model,
              base: SimConfig, cpu_sharing: str) -> dict:
    """``trace`` with no daemon, each job with its ``workers`` fixed: ``SimResult.to_json``."""
    fixed = trace.model_copy(update={"jobs": tuple(
        j.model_copy(update={"workers": workers[j.name]}) for j in trace.jobs)})
    config = no_daemon_config(base, sum(workers.values()), cpu_sharing)
    return simulate(fixed, profile, model, config).to_json()


def best_per_job(trace: Trace, profile: DeviceProfile, model, base: SimConfig,
                 start: dict[str, int], cpu_sharing: str = "kernel",
                 passes: int = HINDSIGHT_PASSES) -> tuple[dict[str, int], dict]:
    """Each job's own fixed ``num_workers``, chosen in hindsight for the least mean JCT:
    coordinate descent from ``start`` (the best uniform setting's counts), trying each job's
    count in 1..the profile's cores in turn (the others held) and keeping a change where the
    mean JCT falls, until a full pass changes nothing or ``passes`` passes. A local optimum
    of an exhaustive search no user could run beforehand: an upper bound on what any fixed
    per-job choice reaches from it. (counts, its run's ``to_json``)."""
    runs: dict[tuple[int, ...], dict] = {}

    def run(counts: dict[str, int]) -> dict:
        key = tuple(counts[j.name] for j in trace.jobs)
        if key not in runs:
            runs[key] = fixed_run(trace, counts, profile, model, base, cpu_sharing)
        return runs[key]

    counts = dict(start)
    best = run(counts)
    for _ in range(passes):
        changed = False
        for job in trace.jobs:
            for n in range(1, profile.cores + 1):
                if n == counts[job.name]:
                    continue
                trial = {**counts, job.name: n}
                result = run(trial)
                if result["mean_jct_s"] < best["mean_jct_s"] - 1e-9:
                    counts, best, changed = trial, result, True
        if not changed:
            break
    return counts, best


def compare(trace: Trace, profile: DeviceProfile, model, base: SimConfig,
            policies: tuple[str, ...] = ("balance", "ftf"),
            cpu_sharing: str = "kernel", hindsight: bool = True,
            queues: bool = True) -> list[dict]:
    """Each no-daemon setting and each policy once on ``trace``, under ``cpu_sharing``; in
    this order: the uniform fixed settings (``SETTINGS``), the weak and the competent
    per-job tuners (``AUTOTUNE``, ``CLIMB``), the policies,
    then (``hindsight``) each job's own best fixed count in hindsight (``best_per_job``)
    and (``queues``) the FIFO and shortest-first queues (``adloader.sim.queues``)."""
    from adloader.sim.autotuned import simulate_autotuned
    from adloader.sim.queues import simulate_queue

    capacity = base.capacity or profile.cores
    rows = []
    for setting in SETTINGS:
        workers = fixed_workers(trace, setting, capacity, profile.cores)
        rows.append({"setting": f"no daemon: {setting}",
                     **fixed_run(trace, workers, profile, model, base, cpu_sharing)})
    for tuner in (AUTOTUNE, CLIMB):
        rows.append({"setting": f"no daemon: {tuner}", **simulate_autotuned(
            trace, profile, model, replace(base, cpu_sharing=cpu_sharing, capacity=capacity),
            tuner).to_json()})
    for policy in policies:
        config = replace(base, policy=policy, realloc=True, cpu_sharing=cpu_sharing,
                         capacity=capacity)
        rows.append({"setting": f"daemon: {policy}",
                     **simulate(trace, profile, model, config).to_json()})
    if hindsight:  # from the uniform setting with the least mean JCT (of the same figure)
        uniform = min(rows[:len(SETTINGS)], key=lambda r: r["mean_jct_s"])
        start = fixed_workers(trace, uniform["setting"].removeprefix("no daemon: "),
                              capacity, profile.cores)
        _, searched = best_per_job(trace, profile, model, base, start, cpu_sharing)
        rows.append({"setting": f"no daemon: {HINDSIGHT}", **searched})
    if queues:
        for order, name in QUEUES:
            rows.append({"setting": f"no daemon: {name}", **simulate_queue(
                trace, profile, model, replace(base, cpu_sharing=cpu_sharing), order)})
    for r in rows:
        r["makespan_s"] = max(j["end_s"] for j in r["jobs"]) - min(
            j["arrival_s"] for j in r["jobs"])
        r["worst_jct_s"] = max(j["jct_s"] for j in r["jobs"])
    even = next(r for r in rows if r["setting"] == "no daemon: even")
    tuned = next(r for r in rows if r["setting"] == f"no daemon: {AUTOTUNE}")
    climbed = next(r for r in rows if r["setting"] == f"no daemon: {CLIMB}")
    best = {f: r[f] for f, r in best_fixed(rows).items()}
    for r in rows:
        r["makespan_x_even"] = r["makespan_s"] / even["makespan_s"]
        r["mean_jct_x_even"] = r["mean_jct_s"] / even["mean_jct_s"]
        r["sum_x_even"] = r["aggregate_throughput"] / even["aggregate_throughput"]
        jct = {j["name"]: j["jct_s"] for j in even["jobs"]}
        r["worst_jct_x_even"] = max(j["jct_s"] / jct[j["name"]] for j in r["jobs"])
        for f in ("makespan_s", "mean_jct_s"):
            r[f"{f[:-2]}_x_best_fixed"] = r[f] / best[f]
            r[f"{f[:-2]}_x_autotune"] = r[f] / tuned[f]
            r[f"{f[:-2]}_x_climb"] = r[f] / climbed[f]
    return rows


def best_fixed(rows: list[dict]) -> dict[str, dict]:
    """Per figure of ``FIGURES``, the uniform fixed no-daemon row of ``compare`` with the
    least (``SETTINGS``: one rule for every job): the best fixed setting in hindsight, picked
    after seeing every setting's figures. Each job's own best count (``HINDSIGHT``) is not
    among them: it is its own row."""
    fixed = [r for r in rows if r["setting"] in {f"no daemon: {s}" for s in SETTINGS}]
    return {f: min(fixed, key=lambda r, f=f: r[f]) for f in FIGURES}


def floor(trace: Trace, profile: DeviceProfile, model, base: SimConfig,
          slot_s: float | None = None, time_limit_s: float = 600.0) -> dict:
    """``schedule_oracle.jct_floor`` on the node ``compare`` gives the daemon; with
    ``slot_s``, where jobs arrive apart, also ``whole_trace_floor`` in slots of that many
    seconds, and the higher of the two (both are floors) as ``mean_jct`` (``method`` says
    which; ``groups_mean_jct`` and ``whole_trace`` keep each). A program stopped at
    ``time_limit_s`` gives its dual bound: still a floor, looser."""
    from adloader.sim.schedule_oracle import jct_floor, whole_trace_floor

    node = replace(base, capacity=base.capacity or profile.cores)
    out = jct_floor(trace, profile, model, node)
    out.update(groups_mean_jct=out["mean_jct"], method="groups")
    arrivals = len({j.arrival_s for j in trace.jobs})
    if slot_s and (arrivals > 1 or out["groups"] > arrivals):  # apart, or a group cut in parts
        whole = whole_trace_floor(trace, profile, model, node, slot_s, time_limit_s,
                                  peak=out["peak_loading"])
        out["whole_trace"] = whole
        if whole["mean_jct"] > out["mean_jct"]:
            out.update(mean_jct=whole["mean_jct"], method=f"whole trace, {slot_s:g} s slots")
    return out


def fair_floor(trace: Trace, profile: DeviceProfile, model, base: SimConfig, rows: list[dict],
               slot_s: float, time_limit_s: float = 600.0, slack: float = 1 / 0.95) -> dict:
    """The floor of the schedules that keep every job within ``slack`` × its JCT under the
    even split (``rows``: ``compare``'s, the even split's measured on the same truth): the
    whole-trace program with those deadlines. The targets ask a gain and that bound at once:
    where this floor is above 1/1.2 of the best fixed setting's mean JCT, no schedule meets
    both, whatever its workers or placement."""
    from adloader.sim.schedule_oracle import whole_trace_floor

    even = next(r for r in rows if r["setting"] == "no daemon: even")
    node = replace(base, capacity=base.capacity or profile.cores)
    due = {j["name"]: j["jct_s"] * slack for j in even["jobs"]}
    return whole_trace_floor(trace, profile, model, node, slot_s, time_limit_s,
                             deadlines=due)


def targets(row: dict, floor: float = 1 / 0.95) -> dict[str, bool]:
    """The simulated targets for a policy's row of ``compare``: ≥ 1.2× better makespan
    or mean JCT than the best uniform fixed setting in hindsight (``best_fixed``), ≥ 1.1×
    than the competent per-job tuner (``CLIMB``), no job's JCT worse than 1/0.95 of its
    even-split JCT."""
    return {
        "1.2x best fixed": min(row["makespan_x_best_fixed"], row["mean_jct_x_best_fixed"])
        <= 1 / 1.2,
        "1.1x climb": min(row["makespan_x_climb"], row["mean_jct_x_climb"]) <= 1 / 1.1,
        "every job within 1/0.95 of even": row["worst_jct_x_even"] <= floor + 1e-9,
    }


def across_mixes(profile: DeviceProfile, model, base: SimConfig, seeds: list[int],
                 jobs: int, mix: str = "paper", rate: float = 1 / 60,
                 policy: str = "ftf", floor_slot: float | None = None,
                 baselines: bool = True) -> dict:
    """``compare`` on each generated mix (the development seeds ``bench mixes`` runs, or the
    held-out set ``bench held-out`` runs once): ``policy`` against the best uniform fixed
    setting in hindsight and the competent tuner (and the weak one), per mix, with the floor
    no schedule goes under (``floor``: per group of jobs present together, and with
    ``floor_slot`` over the whole trace too, the higher taken); medians, min and max over
    the mixes, and in how many each of ``targets`` held. ``baselines``: also ``policy``
    against each job's own best fixed count in hindsight and the FIFO and shortest-first
    queues (``BASELINE_KEYS``)."""
    from adloader.sim.generator import generate

    capacity = base.capacity or profile.cores
    per_mix = []
    for s in seeds:
        trace = generate(jobs, s, mix, rate, profile.gpus)
        rows = compare(trace, profile, model, base, (policy,), hindsight=baselines,
                       queues=baselines)
        mine = next(r for r in rows if r["setting"] == f"daemon: {policy}")
        others = {r["setting"]: r for r in rows}
        best = best_fixed(rows)["mean_jct_s"]
        least = floor(trace, profile, model, base, floor_slot, MIX_FLOOR_LIMIT_S)
        per_mix.append({
            "seed": s, **{k: mine[k] for k in (
                "makespan_x_best_fixed", "mean_jct_x_best_fixed", "makespan_x_autotune",
                "mean_jct_x_autotune", "makespan_x_climb", "mean_jct_x_climb",
                "worst_jct_x_even")},
            "best_fixed": best["setting"],
            "floor_x_best_fixed": float(least["mean_jct"]) / best["mean_jct_s"],
            "floor_method": least["method"],
            "targets": targets(mine)})
        if baselines:
            for key, (setting, figure) in BASELINE_KEYS.items():
                per_mix[-1][key] = mine[figure] / others[f"no daemon: {setting}"][figure]
    summary = {}
    for key in ("makespan_x_best_fixed", "mean_jct_x_best_fixed", "makespan_x_autotune",
                "mean_jct_x_autotune", "makespan_x_climb", "mean_jct_x_climb",
                "worst_jct_x_even", "floor_x_best_fixed", *(BASELINE_KEYS if baselines else ())):
        values = [m[key] for m in per_mix]
        summary[key] = {"median": statistics.median(values), "min": min(values),
                        "max": max(values)}
    held = {name: sum(m["targets"][name] for m in per_mix) for name in per_mix[0]["targets"]}
    possible = sum(bool(m["floor_x_best_fixed"] <= 1 / 1.2) for m in per_mix)
    return {"policy": policy, "capacity": capacity, "mixes": len(per_mix), "summary": summary,
            "targets_held": held, "gain_possible": possible, "per_mix": per_mix}
