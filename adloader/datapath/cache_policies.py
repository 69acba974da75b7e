"""The cache policies, one registry for both forms: each name has an offline form that runs on a
whole known access sequence (``eviction``: simulations, the arbiter, the benches) and an online
form that a job's cache applies access by access (``online_cache``). The two take the same
decisions for the same name (the tests hold them to it).

Adding a policy: its offline function in ``eviction``, its ``OnlinePolicy`` in ``online_cache``,
one ``CachePolicy`` line below, and its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from adloader.datapath import eviction, online_cache
from adloader.datapath.access_stream import NodeSequence
from adloader.datapath.eviction import CacheStats
from adloader.errors import InputError


@dataclass(frozen=True)
class CachePolicy:
    """One cache policy: its name, its offline and online forms."""

    name: str
    offline: Callable[..., CacheStats]  # (sequence, capacity, **kw) -> CacheStats
    online: type[online_cache.OnlinePolicy]
    stepped: bool = False  # the offline form reads a NodeSequence's iterations


POLICIES: dict[str, CachePolicy] = {p.name: p for p in (
    CachePolicy("lru", eviction.lru, online_cache.LRU),
    CachePolicy("belady", eviction.belady, online_cache.Belady),
    CachePolicy("lobster", eviction.lobster, online_cache.Lobster, stepped=True),
    CachePolicy("nopfs", eviction.nopfs, online_cache.NoPFS),
    CachePolicy("lobster-lazy", eviction.lobster_lazy, online_cache.LobsterLazy, stepped=True),
)}


def get_cache_policy(name: str) -> CachePolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise InputError(
            f"unknown cache policy {name!r}; choose one of {', '.join(POLICIES)}") from None


def online_policy(name: str, plan: online_cache.AccessPlan | None) -> online_cache.OnlinePolicy:
    """The online form of policy ``name``, over this rank's access ``plan``."""
    return get_cache_policy(name).online(plan)


def evaluate(policy, sequence, capacity: int, **kw) -> CacheStats:
    """Run ``policy`` (a name, or an offline function) on ``sequence`` with ``capacity`` samples."""
    if isinstance(policy, str):
        entry = get_cache_policy(policy)
        fn, stepped = entry.offline, entry.stepped
    else:
        fn = policy
        stepped = any(p.stepped and p.offline is fn for p in POLICIES.values())
    if int(capacity) != capacity or capacity < 0:
        raise InputError(f"cache capacity must be a whole number of samples >= 0, "
                         f"got {capacity}")
    seq = sequence.samples if isinstance(sequence, NodeSequence) else np.asarray(sequence)
    if seq.ndim != 1 or (seq.size and (seq.dtype.kind not in "iu" or seq.min() < 0)):
        raise InputError("cache: the access sequence must be a flat array of sample ids >= 0")
    if isinstance(sequence, NodeSequence) and stepped:
        return fn(sequence, int(capacity), **kw)
    return fn(seq, int(capacity), **kw)
