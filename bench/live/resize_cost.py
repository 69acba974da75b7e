"""What a resize costs the node, and how far apart a measuring window reads, from a live run.

Read from ``bench live``'s ``live.json`` (its runs' progress marks and worker timelines), for
reports already written as well as new ones (``adloader bench resize-cost LIVE.json ...``):

- **after a resize**: for each change of the workers under a daemon with no other change
  ``BEFORE_S`` before it or ``AFTER_S`` after it, every job still training, the samples per
  second in each second after it against the rate over the ``BEFORE_S`` before it — for the
  jobs resized and for the others; the median over those resizes, second by second. A pool
  started anew at each resize shows as a dip for every job (its workers' start-up takes the
  node's CPU); workers forked into a running pool barely do.
- **a window's halves**: for each setting, over consecutive ``WINDOW_S`` windows from
  ``FROM_S`` into each run, how far apart the node's rate reads over the window's two
  halves, relative to the whole window's: the noise a measuring window at fixed counts has
  (the closed loop's *floor*), median over the windows.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

BEFORE_S, AFTER_S = 4.0, 10  # a resize's baseline before it; the seconds read after it
WINDOW_S, FROM_S = 8.0, 4.0  # a window's length; where the first starts in a run
MERGE_S = 0.2  # changes this close are one resize (one plan's commands)


def _marks(run: dict) -> dict[str, list[tuple[float, float]]]:
    """Each job's (seconds from the run's start, samples trained) marks; the marks' clock
    is aligned on each job's last batch (its ``end_s``)."""
    out = {}
    for job in run["jobs"]:
        progress = job.get("progress") or []
        if len(progress) < 2:
            continue
        origin = progress[-1][0] - job["end_s"]
        out[job["name"]] = [(t - origin, i * job["batch_size"]) for t, i in progress]
    return out


def _samples_at(marks: Sequence[tuple[float, float]], t: float) -> float | None:
    for (ta, a), (tb, b) in zip(marks, marks[1:], strict=False):
        if ta <= t <= tb:
            return a if tb <= ta else a + (b - a) * (t - ta) / (tb - ta)
    return None


def rate(marks: dict[str, list], names: Iterable[str], since: float, until: float
         ) -> float | None:
    """Samples/s of the jobs ``names`` between two times (None where one is not training)."""
    total = 0.0
    for name in names:
        a, b = _samples_at(marks[name], since), _samples_at(marks[name], until)
        if a is None or b is None:
            return None
        total += (b - a) / (until - since)
    return total


def resizes(run: dict) -> list[tuple[float, set[str]]]:
    """The run's resizes (time, the jobs whose workers changed), changes within ``MERGE_S``
    merged; only while the same jobs run."""
    out: list[tuple[float, set[str]]] = []
    before = None
    for entry in run.get("timeline") or []:
        workers = entry["workers"]
        if before is not None and workers != before and set(workers) == set(before):
            changed = {n for n in workers if workers[n] != before[n]}
            if out and entry["t_s"] - out[-1][0] < MERGE_S:
                out[-1][1].update(changed)
            else:
                out.append((entry["t_s"], changed))
        before = workers
    return out


def after_resize(runs: Iterable[dict]) -> dict:
    """Median, second by second after an isolated resize, of the resized jobs' and the other
    jobs' rate against theirs over the ``BEFORE_S`` before it (module docstring)."""
    rows: dict[str, list[list[float]]] = {"resized": [], "others": []}
    for run in runs:
        marks = _marks(run)
        if not marks:
            continue
        first_end = min(j["end_s"] for j in run["jobs"])
        found = resizes(run)
        for k, (t, changed) in enumerate(found):
            alone = (k == 0 or t - found[k - 1][0] >= BEFORE_S) and (
                k + 1 == len(found) or found[k + 1][0] - t >= AFTER_S)
            if not alone or t < BEFORE_S or t + AFTER_S > first_end:
                continue
            for who, names in (("resized", changed & set(marks)),
                               ("others", set(marks) - changed)):
                base = rate(marks, names, t - BEFORE_S, t) if names else None
                if not base:
                    continue
                seconds = [rate(marks, names, t + s, t + s + 1) for s in range(AFTER_S)]
                rows[who].append([r / base for r in seconds if r is not None]
                                 if None not in seconds else [])
    out = {}
    for who, series in rows.items():
        series = [s for s in series if s]
        columns = zip(*series, strict=False)
        out[who] = {"resizes": len(series),
                    "after": [round(statistics.median(c), 3) for c in columns] if series else []}
    return out


def window_spread(runs: Iterable[dict]) -> dict[str, dict]:
    """Per setting, the median (and count) of its windows' half-to-half spreads."""
    spreads: dict[str, list[float]] = {}
    for run in runs:
        marks = _marks(run)
        if not marks:
            continue
        end = min(j["end_s"] for j in run["jobs"])
        t = FROM_S
        while t + WINDOW_S <= end:
            whole = rate(marks, marks, t, t + WINDOW_S)
            first = rate(marks, marks, t, t + WINDOW_S / 2)
            second = rate(marks, marks, t + WINDOW_S / 2, t + WINDOW_S)
            if whole and first is not None and second is not None:
                spreads.setdefault(run["policy"], []).append(abs(first - second) / whole)
            t += WINDOW_S
    return {k: {"windows": len(v), "median": round(statistics.median(v), 3)}
            for k, v in spreads.items()}


def resize_cost(lives: Iterable[dict]) -> dict:
    """``after_resize`` over the daemon's runs and ``window_spread`` over every run of the
    ``live.json`` documents ``lives``."""
    runs = [run for live in lives for run in live.get("runs", [])]
    daemon = [run for run in runs if run.get("realloc")]
    return {"after_resize": after_resize(daemon), "window_spread": window_spread(runs),
            "seconds_after": list(range(AFTER_S)), "before_s": BEFORE_S,
            "window_s": WINDOW_S}
