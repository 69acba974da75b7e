"""``bench shared-cache``: one node cache shared by three jobs and arbitrated.

Jobs A and B read dataset X (two hyper-parameter runs: seeds 0 and 1), C reads dataset Y of
another size; each job's node sequence (``adloader.datapath.access_stream``) advances at its own
rate, and
``adloader.datapath.shared_cache.merge_streams`` interleaves them into the node stream, samples
keyed
(dataset, index). The node cache holds ``fraction`` × (|X| + |Y|) samples. Rows:

- ``private-lru`` / ``private-lobster`` / ``private-nopfs``: C split evenly, each job its
  own cache on its own stream (what three loaders each with a cache get);
- ``arbitrated-lobster``: one partition per dataset, shared by its jobs, sized once at the
  start by ``adloader.datapath.cache_arbiter`` (predicted MIN hits), Lobster inside each;
- ``shared-arbitrated``: the same partitions re-split by the arbiter's plan (at the jobs'
  predicted departures; re-planned at arrivals and unpredicted departures), next-use
  eviction inside (``belady_resized``: the streams are known, so MIN is the policy);
- ``shared-lobster``: one cache, one next-use order over all datasets (no split);
- ``shared-min``: Belady's MIN on the node stream, the multi-job reference.

``x_min`` = hits / MIN's, ``x_best_private`` = hits / the best private row's. "Come and go":
C leaves halfway through its run, unannounced; the split before and after, and the hits of
keeping the first plan against re-planning at the departure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from adloader.datapath.access_stream import access_stream, node_sequence
from adloader.datapath.cache_arbiter import CacheArbiter, live_splits
from adloader.datapath.shared_cache import (
    JobAccesses,
    evaluate_partitioned,
    evaluate_private,
    evaluate_resplit,
    evaluate_shared,
    even_split,
    hits_by_job,
    merge_streams,
)
from adloader.errors import InputError

PRIVATE = ("lru", "lobster", "nopfs")
# name, dataset, seed, iterations per unit time, epochs. A, B: one model, two seeds (B's
# hyper-parameters a little slower); C: another model, faster, more epochs of a smaller set
JOBS = (("A", "X", 0, 1.0, 3), ("B", "X", 1, 0.9, 3), ("C", "Y", 2, 1.2, 8))
SIZES = {"X": 20_000, "Y": 8_000}
QUICK = {"sizes": {"X": 3_000, "Y": 1_200}, "global_batch": 64, "points": 20}


def make_jobs(sizes, global_batch: int, jobs=JOBS) -> list[JobAccesses]:
    """One single-rank ``JobAccesses`` per (name, dataset, seed, rate, epochs)."""
    return [JobAccesses(name, d, sizes[d],
                        node_sequence(access_stream(seed, epochs, sizes[d], global_batch)), rate)
            for name, d, seed, rate, epochs in jobs]


def run_shared_cache_bench(sizes=None, global_batch: int = 256, fractions=(0.1, 0.3, 0.5),
                           points: int = 25, jobs=JOBS, quick: bool = False,
                           progress: Callable[[dict], None] | None = None) -> dict:
    """``{"config", "rows": [one per (fraction, policy)], "come_and_go": [one per fraction]}``.

    ``sizes``: samples per dataset (``SIZES``); ``jobs``: (name, dataset, seed, rate, epochs)
    each, the last one leaves in "come and go"; ``points``: the arbiter's grid (C / points
    samples a step). ``quick``: ``QUICK``, seconds.
    """
    sizes = dict(sizes or SIZES)
    if quick:
        sizes, global_batch, points = dict(QUICK["sizes"]), QUICK["global_batch"], QUICK["points"]
    for f in fractions:
        if not 0 < f <= 1:
            raise InputError(f"bench shared-cache: cache fraction must be in (0, 1], got {f}")
    t0 = time.perf_counter()
    spec = tuple(jobs)
    jobs = make_jobs(sizes, global_batch, spec)
    merged = merge_streams(jobs)
    names = [j.name for j in jobs]
    rows, churn = [], []
    for fraction in fractions:
        capacity = int(round(fraction * merged.distinct))
        arbiter = CacheArbiter(capacity, points=points)
        start = arbiter.split(jobs, now=0.0)
        schedule = live_splits(arbiter, jobs)
        found = [(f"private-{p}", evaluate_private(merged, even_split(names, capacity), p),
                  even_split(names, capacity)) for p in PRIVATE]
        found += [("arbitrated-lobster", evaluate_partitioned(merged, start, "lobster"), start),
                  ("shared-arbitrated", evaluate_resplit(merged, schedule), schedule),
                  ("shared-lobster", evaluate_shared(merged, capacity, "lobster"), None),
                  ("shared-min", evaluate_shared(merged, capacity, "belady"), None)]
        best_min = found[-1][1].hits
        best_private = max(s.hits for name, s, _ in found if name.startswith("private-"))
        for policy, stats, split in found:
            row = {"fraction": fraction, "capacity": capacity, "policy": policy,
                   "hits": stats.hits, "accesses": stats.hits + stats.misses,
                   "hit_ratio": stats.hit_ratio, "x_min": _ratio(stats.hits, best_min),
                   "x_best_private": _ratio(stats.hits, best_private),
                   "hits_by_job": hits_by_job(merged, stats), "split": split}
            rows.append(row)
            if progress is not None:
                progress(row)
        churn.append(_come_and_go(jobs, fraction, capacity, points))
    return {"config": {"sizes": sizes, "global_batch": global_batch,
                       "jobs": [dict(zip(("name", "dataset", "seed", "rate", "epochs"), j,
                                         strict=True)) for j in spec],
                       "distinct": merged.distinct, "accesses": len(merged.sequence),
                       "fractions": list(fractions), "points": points,
                       "seconds": time.perf_counter() - t0},
            "rows": rows, "come_and_go": churn}


def _come_and_go(jobs, fraction: float, capacity: int, points: int) -> dict:
    """C leaves halfway through its run; the daemon expected it to run to the end."""
    c = jobs[-1]
    leave = c.start + (c.end - c.start) / 2
    actual = [*jobs[:-1], c.until(leave)]
    merged = merge_streams(actual)
    arbiter = CacheArbiter(capacity, points=points)
    first = arbiter.plan(jobs, now=0.0)  # made at the start, C's whole run predicted
    kept = [(t, s) for t, s in first if t < leave] or first[:1]
    replanned = live_splits(arbiter, actual, predicted={c.name: c})
    best = evaluate_shared(merged, capacity, "belady").hits
    before = [s for t, s in replanned if t < leave][-1]
    after = next((s for t, s in replanned if t >= leave), before)
    out = {"fraction": fraction, "capacity": capacity, "leaves": c.name, "at": leave,
           "split_before": before, "split_after": after, "schedule": replanned,
           "accesses": len(merged.sequence), "min_hits": best}
    for name, schedule in (("kept", kept), ("replanned", replanned)):
        hits = evaluate_resplit(merged, schedule).hits
        out[f"{name}_hits"] = hits
        out[f"{name}_x_min"] = _ratio(hits, best)
    return out


def shared_cache_table(result: dict) -> tuple[str, list[str], list[list[str]]]:
    """(title, columns, rows) of the main table, for the command line."""
    cfg = result["config"]
    jobs = ", ".join(f"{j['name']} on {j['dataset']} ({j['epochs']} epochs, rate {j['rate']:g})"
                     for j in cfg["jobs"])
    title = (f"shared node cache: {jobs}; X {cfg['sizes']['X']:,}, Y {cfg['sizes']['Y']:,} "
             f"samples; cache = fraction of the {cfg['distinct']:,} distinct")
    columns = ["cache", "policy", "hit ratio", "hits", "× MIN", "× best private", "split"]
    rows = [[f"{r['fraction']:.0%}", r["policy"], f"{r['hit_ratio']:.4f}", f"{r['hits']:,}",
             f"{r['x_min']:.3f}", f"{r['x_best_private']:.2f}", _split_text(r["split"])]
            for r in result["rows"]]
    return title, columns, rows


def _split_text(split) -> str:
    if split is None:
        return ""
    if isinstance(split, dict):
        return " ".join(f"{k}:{v}" for k, v in split.items())
    return " → ".join(f"t{t:g} " + _split_text(s) for t, s in split)


def _ratio(hits: int, best: int) -> float:
    return hits / best if best else 1.0
