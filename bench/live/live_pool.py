"""Several ``bench live`` reports of one mix, their rounds as one sample.

Three rounds give a median that one slow round can move across a target: on the emulated
GPU node the same processes at the same counts read up to 8 % apart a round
(``docs/benchmarks.md``). Pooled, the rounds of
several runs of one member keep their pairing (each ratio is a setting's run against the
reference's run of the *same* round; a round of one report is never paired with another's)
and give the median of many rounds with an interval: the 95 % interval of the median by
bootstrap (the rounds drawn with replacement ``DRAWS`` times, seeded: the same reports give
the same interval), and per target how many rounds meet it. The best fixed setting in
hindsight (and the best no-daemon row: queues, tuners and our loader alone included) is chosen
once over the pooled rounds, as ``live_rounds`` chooses it in one run; a setting some reports
did not run is paired in the rounds that ran it.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

from adloader.bench.live.live_rounds import TARGETS, summarise_rounds
from adloader.errors import InputError

DRAWS = 4000
LEVEL = 0.95
SPAN = 1000  # rounds of report i are numbered i·SPAN + round
# (figure in ``summarise_rounds``' rounds, what it reads, the target a round meets): the
# closed loop's against the even split, then ``live_rounds.TARGETS``' own
FIGURES = (("makespan_paired", "makespan × even", 1.00),
           ("jct_paired", "mean JCT × even", 0.95),
           ("worst_jct_paired", "worst job × even", 1 / 0.95),
           *((key, what, TARGETS[key][1]) for key, what in (
               ("makespan_vs_best_fixed", "makespan × best fixed"),
               ("jct_vs_best_fixed", "mean JCT × best fixed"),
               ("makespan_vs_best_nodaemon", "makespan × best no-daemon"),
               ("jct_vs_best_nodaemon", "mean JCT × best no-daemon"))))


def pooled_runs(lives: Sequence[dict], names: Sequence[str]) -> tuple[list[dict], list[str]]:
    """Every run of ``lives`` (``live.json`` dicts, named ``names`` in errors) with its round
    renumbered apart per report, and the settings in the order first seen. InputError where
    the reports ran different mixes or members, or one holds no round."""
    if not lives:
        raise InputError("bench pooled: name at least one live.json")
    first = _mix(lives[0])
    runs, labels = [], []
    for i, (live, name) in enumerate(zip(lives, names, strict=True)):
        if _mix(live) != first:
            raise InputError(f"{name}: ran {_mix(live)[0]!r} ({_mix(live)[1]}), not "
                             f"{first[0]!r} ({first[1]}) as {names[0]}: pool runs of one mix")
        if not live["runs"]:
            raise InputError(f"{name}: no runs")
        for run in live["runs"]:
            runs.append({**run, "round": i * SPAN + int(run.get("round", 0))})
            if run["policy"] not in labels:
                labels.append(run["policy"])
    return runs, labels


def _mix(live: dict) -> tuple[str, str]:
    config = live.get("config") or {}
    return str(config.get("trace", "")), str(config.get("mix") or "the paper's GPUs")


def interval(values: Sequence[float], draws: int = DRAWS, seed: int = 0) -> tuple[float, float]:
    """The ``LEVEL`` interval of the median of ``values`` (one at least) by bootstrap
    (seeded)."""
    if len(values) < 2:  # one round: nothing to draw
        return values[0], values[0]
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(draws))
    cut = int(draws * (1 - LEVEL) / 2)
    return medians[cut], medians[draws - 1 - cut]


def pool(lives: Sequence[dict], names: Sequence[str]) -> dict:
    """The pooled summary: per setting, per figure of ``FIGURES``, the median over the rounds,
    its interval and the rounds meeting the target (``≤``); ``reference``: the row the
    ``× even`` figures are paired with (``summarise_rounds``': the even split where a report
    ran it)."""
    runs, labels = pooled_runs(lives, names)
    rows = summarise_rounds(runs, labels)
    out = []
    for row in rows:
        figures = {}
        for key, _, target in FIGURES:
            values = row["rounds"].get(key)
            if not values:
                continue
            low, high = interval(values)
            figures[key] = {"median": row[key], "low": low, "high": high,
                            "met": sum(v <= target for v in values), "rounds": len(values),
                            "target": target}
        out.append({"policy": row["policy"], "rounds": len(row["each"]),
                    "best_fixed": row.get("best_fixed"),
                    "best_nodaemon": row.get("best_nodaemon"), "figures": figures})
    return {"reports": list(names), "mix": _mix(lives[0]), "level": LEVEL, "draws": DRAWS,
            "reference": rows[0]["reference"] if rows else None, "settings": out}
