"""The rounds of ``adloader bench live``, summarised: per setting the medians over rounds,
each ratio paired with the reference's run of the same round, against the best fixed setting
and the requested one, and which of issue 23's targets the medians meet."""

from __future__ import annotations

import statistics

from adloader.sim.no_daemon import SETTINGS as FIXED_SETTINGS

REFERENCE = "no daemon: even"  # the even split a user sets by hand, on torch's own loader
FIXED = tuple(f"no daemon: {s}" for s in FIXED_SETTINGS)  # as the simulator's fixed ones
# issue 23's targets for a policy under the daemon, on medians of paired ratios
TARGETS = {"makespan_vs_best_fixed": ("<=", 1.00), "makespan_vs_requested": ("<=", 0.95),
           "jct_vs_best_fixed": ("<=", 1.00)}
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
    round and the requested one (best fixed: the fixed setting with the least median, per
    figure); and which of issue 23's targets the medians meet."""
    ref = REFERENCE if REFERENCE in labels else ("balance" if "balance" in labels
                                                 else labels[0])
    base = {r["round"]: r for r in runs if r["policy"] == ref}
    # the best fixed setting: per figure, the fixed no-daemon setting with the least median
    # over rounds, paired round by round (a per-round minimum of three noisy runs would be
    # biased low: every setting itself would land above it)
    fixed = {label: [r for r in runs if r["policy"] == label] for label in FIXED}
    fixed = {label: rs for label, rs in fixed.items() if rs}
    best = {key: {r["round"]: r for r in fixed[min(fixed, key=lambda label: statistics.median(
        r[key] for r in fixed[label]))]} for key in ("makespan_s", "mean_jct_s")} \
        if fixed else {}
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
        row |= {"reference": ref, "makespan_paired": statistics.median(makespan),
                "spread": [min(makespan), max(makespan)],
                "jct_paired": statistics.median(_paired(mine, base, "mean_jct_s")),
                "sum_paired": statistics.median(_paired(mine, base, "aggregate_throughput")),
                "worst_jct_paired": statistics.median(worst_jct),
                "worst_job": statistics.median(worst_rate),
                "jobs": {n: statistics.median(x) for n, x in sorted(per_job.items())}}
        if best:
            row["makespan_vs_best_fixed"] = statistics.median(
                _paired(mine, best["makespan_s"], "makespan_s"))
            row["jct_vs_best_fixed"] = statistics.median(
                _paired(mine, best["mean_jct_s"], "mean_jct_s"))
            row["best_fixed"] = {key: next(iter(b.values()))["policy"]
                                 for key, b in best.items()}
        if requested:
            row["makespan_vs_requested"] = statistics.median(
                _paired(mine, requested, "makespan_s"))
        row["met"] = [k for k, (op, v) in TARGETS.items() if row["daemon"] and k in row
                      and (row[k] >= v if op == ">=" else row[k] <= v)]
        summary.append(row)
    return summary
