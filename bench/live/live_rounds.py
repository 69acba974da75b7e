"""The rounds of ``adloader bench live``, summarised: per setting the medians over rounds,
each ratio paired with the reference's run of the same round, against the best fixed setting
in hindsight, the best no-daemon row in hindsight (queues, tuners and our loader alone
included) and the requested one, and which of the live targets the medians meet."""

from __future__ import annotations

import statistics

from adloader.sim.no_daemon import SETTINGS as FIXED_SETTINGS

REFERENCE = "no daemon: even"  # the even split a user sets by hand, on torch's own loader
FIXED = tuple(f"no daemon: {s}" for s in FIXED_SETTINGS)  # as the simulator's fixed ones
# the live targets for a policy under the daemon, on medians of paired ratios
TARGETS = {"makespan_vs_best_fixed": ("<=", 1.00), "makespan_vs_requested": ("<=", 0.95),
           "jct_vs_best_fixed": ("<=", 1.00), "makespan_vs_best_nodaemon": ("<=", 1.00),
           "jct_vs_best_nodaemon": ("<=", 1.00)}
KEYS = ("aggregate_throughput", "makespan_s", "first_batch_s", "node_rate", "steady_rate",
        "mean_jct_s",
        "worst_jct_s", "memory_mb",
        "overhead_cpu_per_training_s", "overhead_after_start_cpu_per_training_s",
        "overhead_resizes_cpu_per_training_s", "reallocations")


def _paired(mine: list[dict], by_round: dict[int, dict], key: str) -> list[float]:
    return [r[key] / by_round[r["round"]][key] for r in mine if r["round"] in by_round]


def summarise_rounds(runs: list[dict], labels) -> list[dict]:
    """Per setting: medians over rounds, and each ratio paired with the reference's run of
    the same round (drift between rounds cancels): Σ of the jobs' rates, makespan, mean JCT,
    the worst job's JCT ratio (max_i JCT_i / JCT_i there), every job's rate; the spread
    (min–max of the makespan ratio over rounds); against the best fixed setting of the same
    round and the requested one (best fixed in hindsight: the fixed setting with the least
    median, per figure; best no-daemon in hindsight: the same over every no-daemon row); and
    which of the live targets the medians meet. ``rounds``: each paired figure's values, round
    by round (what ``live_pool`` pools over several runs)."""
    ref = REFERENCE if REFERENCE in labels else ("balance" if "balance" in labels
                                                 else labels[0])
    base = {r["round"]: r for r in runs if r["policy"] == ref}
    # the best fixed setting: per figure, the fixed no-daemon setting with the least median
    # over rounds, paired round by round (a per-round minimum of three noisy runs would be
    # biased low: every setting itself would land above it)
    best = _least(runs, FIXED)
    nodaemon = _least(runs, [label for label in labels if label.startswith("no daemon")])
    requested = {r["round"]: r for r in runs if r["policy"] == "no daemon: requested"}
    summary = []
    for label in labels:
        mine = [r for r in runs if r["policy"] == label]
        if not mine:
            continue
        row = {key: statistics.median(r.get(key) or 0 for r in mine) for key in KEYS}
        row |= {"policy": label, "daemon": not label.startswith("no daemon"),
                "each": [r["makespan_s"] for r in mine]}
        makespan = _paired(mine, base, "makespan_s")
        worst_jct, worst_rate, per_job = [], [], {}
        for r in mine:
            b = {j["name"]: j for j in base[r["round"]]["jobs"]}
            worst_jct.append(max(j["jct_s"] / b[j["name"]]["jct_s"] for j in r["jobs"]))
            ratios = {j["name"]: j["throughput"] / b[j["name"]]["throughput"]
                      for j in r["jobs"] if b[j["name"]]["throughput"]}
            for name, x in ratios.items():
                per_job.setdefault(name, []).append(x)
            worst_rate.append(min(ratios.values()) if ratios else float("nan"))
        rounds = {"makespan_paired": makespan, "jct_paired": _paired(mine, base, "mean_jct_s"),
                  "worst_jct_paired": worst_jct}
        for name, least in (("best_fixed", best), ("best_nodaemon", nodaemon)):
            if least:
                rounds[f"makespan_vs_{name}"] = _paired(mine, least["makespan_s"], "makespan_s")
                rounds[f"jct_vs_{name}"] = _paired(mine, least["mean_jct_s"], "mean_jct_s")
                row[name] = {key: next(iter(b.values()))["policy"] for key, b in least.items()}
        row |= {key: statistics.median(values) for key, values in rounds.items()}
        row |= {"reference": ref, "spread": [min(makespan), max(makespan)],
                "sum_paired": statistics.median(_paired(mine, base, "aggregate_throughput")),
                "worst_job": statistics.median(worst_rate),
                "jobs": {n: statistics.median(x) for n, x in sorted(per_job.items())},
                "rounds": rounds}
        if requested:
            row["makespan_vs_requested"] = statistics.median(
                _paired(mine, requested, "makespan_s"))
        row["met"] = [k for k, (op, v) in TARGETS.items() if row["daemon"] and k in row
                      and (row[k] >= v if op == ">=" else row[k] <= v)]
        summary.append(row)
    return summary


def _least(runs: list[dict], labels) -> dict[str, dict[int, dict]]:
    """Per figure (makespan, mean JCT), the runs by round of the label among ``labels`` with
    the least median over rounds (paired round by round after: a per-round minimum of noisy
    runs would be biased low, every setting itself landing above it)."""
    by_label = {label: [r for r in runs if r["policy"] == label] for label in labels}
    by_label = {label: rs for label, rs in by_label.items() if rs}
    if not by_label:
        return {}
    return {key: {r["round"]: r for r in by_label[min(by_label, key=lambda label: (
        statistics.median(r[key] for r in by_label[label])))]}
        for key in ("makespan_s", "mean_jct_s")}
