"""``bench cache``: every cache policy's hit ratio on an ImageNet-sized clairvoyant stream.

The node's access sequence (``adloader.datapath.access_stream.node_sequence``: its ranks' local
batches, step
by step) for ``epochs`` epochs; each policy of ``adloader.datapath.cache_policies.POLICIES`` with a
cache of
``fraction`` × dataset samples; hit ratios over the whole run and over epochs ≥ 2 (the cache
starts cold), each against Belady's MIN measured on the same sequence. For uniformly shuffled
epochs LRU's expected hit ratio after the first epoch is c + (1 − c)·ln(1 − c) at cache
fraction c (≈ c²/2 for small c), reported as ``expected`` on the LRU rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from adloader.datapath.access_stream import access_stream, node_sequence
from adloader.datapath.cache_policies import evaluate, get_cache_policy
from adloader.datapath.eviction import CacheStats, lru_expected
from adloader.datapath.reuse import lru_stack_distance
from adloader.errors import InputError

POLICY_ORDER = ("belady", "lru", "lobster", "nopfs")
QUICK = {"size": 20_000, "epochs": 3, "global_batch": 256}


def _stats_from_hits(hit: np.ndarray) -> CacheStats:
    hits = int(hit.sum())
    return CacheStats(hits, hit.size - hits, hits / hit.size, 0, None, hit)


def run_cache_bench(size: int = 1_281_167, epochs: int = 3, world_size: int = 8,
                    global_batch: int = 1024, fractions=(0.1, 0.3, 0.5), seed: int = 0,
                    quick: bool = False, ranks_per_node: int | None = None,
                    policies=POLICY_ORDER,
                    progress: Callable[[dict], None] | None = None) -> list[dict]:
    """One row per (fraction, policy): hit ratios, their ratio to Belady, and seconds.

    ``quick``: a small stream (``QUICK``) for tests. ``ranks_per_node``: the node holds ranks
    0..k−1 of the job (default: all, one node). LRU's stack distances serve every size, so
    its rows show that one pass's time. ``progress`` is called with each row as it is done.
    """
    if quick:
        size, epochs, global_batch = QUICK["size"], QUICK["epochs"], QUICK["global_batch"]
    check_settings("bench cache", epochs, fractions, policies)
    k = world_size if ranks_per_node is None else int(ranks_per_node)
    if not 1 <= k <= world_size:
        raise InputError(f"bench cache: ranks per node must be in 1..{world_size}, got {k}")
    stream = access_stream(seed, epochs, size, global_batch, world_size)
    seq = node_sequence(stream, range(k))
    warm = seq.accesses_per_epoch
    order = ["belady"] + [p for p in policies if p != "belady"]
    lru_dist = lru_seconds = None
    rows: list[dict] = []
    for fraction in fractions:
        capacity = int(round(fraction * size))
        ref: tuple[CacheStats, CacheStats] = (None, None)  # type: ignore[assignment]
        for policy in order:
            t0 = time.perf_counter()
            if policy == "lru":
                if lru_dist is None:
                    lru_dist = lru_stack_distance(seq.samples)
                    lru_seconds = time.perf_counter() - t0
                stats = _stats_from_hits(lru_dist < capacity)
                seconds = lru_seconds
            else:
                stats = evaluate(policy, seq, capacity)
                seconds = time.perf_counter() - t0
            after = stats.window(warm)
            if policy == "belady":
                ref = (stats, after)
            row = {
                "fraction": fraction,
                "capacity": capacity,
                "policy": policy,
                "hit_ratio": stats.hit_ratio,
                "hit_ratio_after_first": after.hit_ratio,
                "ratio_to_belady": _ratio(stats.hits, ref[0].hits),
                "ratio_to_belady_after_first": _ratio(after.hits, ref[1].hits),
                "expected": (lru_expected(fraction)
                             if policy == "lru" and k == world_size else None),
                "seconds": seconds,
                "accesses": len(seq),
            }
            if policy in policies:
                rows.append(row)
                if progress is not None:
                    progress(row)
    return rows


def _ratio(hits: int, best: int) -> float:
    return hits / best if best else 1.0


def check_settings(bench: str, epochs: int, fractions, policies) -> None:
    """≥ 2 epochs (the first is cold), cache fractions in (0, 1], known policies."""
    if epochs < 2:
        raise InputError(f"{bench}: needs at least 2 epochs (the first is cold), got {epochs}")
    for f in fractions:
        if not 0 < f <= 1:
            raise InputError(f"{bench}: cache fraction must be in (0, 1], got {f}")
    for p in policies:
        get_cache_policy(p)

