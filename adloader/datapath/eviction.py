"""Cache policies evaluated on a node's access sequence (clairvoyant: the future is known).

Model (the same for every policy, so Belady's MIN is the upper bound): the node reads
``sequence`` in order; an access is a *hit* when the sample is in the node cache (capacity in
samples), otherwise a *miss* — one read from storage (a prefetch into the staging buffer is
still a storage read, and the staging buffer holds no sample for a later access). On a miss
the policy decides whether the sample enters the cache and what leaves.
``adloader.datapath.cache_policies.evaluate(name, sequence, capacity, **kw)`` runs one by name:

- ``belady``: MIN — evict the sample whose next use is farthest, the incoming one included
  (a sample used farther ahead than everything cached is not cached: optimal with bypass).
  It is *the* optimum of this model: no policy, clairvoyant or not, has more hits at any
  capacity (the tests check every policy against it and it against exhaustive search).
- ``lobster``: Lobster §4.4 — the node's own future, step by step: keys are each cached
  sample's next use by the node's GPUs in iterations (its reuse distance); a sample not read
  again leaves (reuse count); one not read in the next epoch has a large key and leaves first
  when room is needed (reuse distance); a miss stays only if it is needed sooner than the
  farthest-needed cached sample ("prioritizing the prefetches with the nearest reuse
  distance"), looked up ``prefetch`` iterations ahead. That is MIN with iterations for
  positions, so it stays within a hair of it (ties inside an iteration, and a hit keeps its
  slot until its iteration is consumed).
  ``lobster-lazy``: every miss is let in at the farthest-needed sample's cost, as the paper's
  prefetcher does — below MIN when the cache is not much larger than what the prefetch
  window reads. ``lobster(eager=True)``: the paper's reuse-distance rule taken literally
  (evict what the next epoch does not read at once, room or not) — a node reading part of
  each epoch then keeps only next-epoch reuse, and its hit ratio no longer grows with the
  cache.
- ``nopfs``: NoPFS §5.1 — static placement of the samples the node reads most often (r_k),
  each filled on its first access and never evicted; optional tiers (RAM, SSD) → per-tier
  hits. Optimal among static placements, equal to MIN when every sample is read equally often
  (one node, all ranks) or the cache holds all the node reuses; below it otherwise (it cannot
  reuse a slot within the run). Each policy's hit ratio against MIN: ``adloader bench
  cache`` (docs/benchmarks.md).
- ``lru``: least recently used, the non-clairvoyant reference; hit iff the LRU stack distance
  (distinct samples since the last access) is < capacity — computed for all accesses at once
  (wavelet counting, numpy). On shuffled epochs ≈ c²/2 at cache fraction c (``lru_expected``).

Every policy here is a demand cache whose hits grow with capacity (tested on random streams).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from adloader.datapath.access_stream import NodeSequence
from adloader.datapath.reuse import lru_stack_distance, next_access, previous_access
from adloader.errors import InputError


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    hit_ratio: float
    evictions: int
    tier_hits: tuple[int, ...] | None = None  # nopfs with tiers: hits per tier, fastest first
    hit: np.ndarray | None = field(default=None, repr=False, compare=False)  # per access

    def window(self, start: int = 0, stop: int | None = None) -> CacheStats:
        """Hits and misses of accesses [start, stop) only (e.g. after the cold first epoch).

        ``evictions`` stays the whole run's count.
        """
        if self.hit is None:
            raise ValueError("these stats carry no per-access hits")
        part = self.hit[start:stop]
        hits = int(part.sum())
        return CacheStats(hits, part.size - hits, hits / part.size if part.size else 0.0,
                          self.evictions, None, part)


def _stats(hit: np.ndarray, evictions: int, tier_hits=None) -> CacheStats:
    hits = int(hit.sum())
    return CacheStats(hits, hit.size - hits, hits / hit.size if hit.size else 0.0,
                      int(evictions), tier_hits, hit)


# ---------------------------------------------------------------- LRU


def lru(sequence, capacity: int) -> CacheStats:
    hit = lru_stack_distance(sequence) < capacity
    misses = hit.size - int(hit.sum())
    return _stats(hit, max(0, misses - capacity) if capacity else 0)


# ---------------------------------------------------------------- Belady's MIN


def belady(sequence, capacity: int) -> CacheStats:
    """MIN: keep the samples whose next use is nearest; O(n log n) with a heap of next uses.

    The cache is a set of *keys*, each the position of a cached sample's next use. At time t
    key t leaves (a hit); the accessed sample enters with key next(t); past ``capacity`` the
    largest key is dropped (which may be the new one: the sample is then not cached).
    """
    seq = np.asarray(sequence)
    n = seq.size
    nxt = next_access(seq).tolist()
    alive = bytearray(n + 1)
    heap: list[int] = []  # −key; keys of samples already used stay as dead entries
    size = hits = evictions = 0
    hit = np.zeros(n, dtype=bool)
    push, replace = heapq.heappush, heapq.heapreplace
    for t, k in enumerate(nxt):
        if alive[t]:
            hit[t] = True
            hits += 1
            size -= 1
        if k == n:  # not used again: never worth a slot
            continue
        if size < capacity:
            push(heap, -k)
            alive[k] = 1
            size += 1
        elif capacity:
            m = -heap[0]  # the largest key; alive, since size >= 1
            if k < m:
                replace(heap, -k)
                alive[m] = 0
                alive[k] = 1
                evictions += 1
    return _stats(hit, evictions)


# ---------------------------------------------------------------- NoPFS


def nopfs(sequence, capacity: int, tiers: tuple[int, ...] | None = None) -> CacheStats:
    """NoPFS §5.1: the samples with the largest access frequency r_k go to the fastest tier.

    Static placement over tiers of sizes ``tiers`` (default: one tier of ``capacity``): the
    node's samples ranked by r_k (ties: earlier first access first), the top ``tiers[0]`` in
    RAM, the next ``tiers[1]`` on SSD, …; each is fetched into its tier on its first access
    (a miss) and never evicted. ``tier_hits`` counts the hits of each tier.
    """
    seq = np.asarray(sequence)
    sizes = (capacity,) if tiers is None else tuple(int(s) for s in tiers)
    if any(s < 0 for s in sizes):
        raise InputError(f"nopfs: tier sizes must not be negative, got {sizes}")
    prev = previous_access(seq)
    first = np.flatnonzero(prev < 0)  # first touches, in order
    ids = seq[first]
    freq = np.bincount(seq)[ids] if seq.size else ids
    ranked = ids[np.argsort(-freq, kind="stable")]  # most frequent first, then first touched
    tier_of = np.full(int(seq.max(initial=0)) + 1, len(sizes), dtype=np.int64)
    tier_of[ranked] = np.searchsorted(np.cumsum(sizes), np.arange(ranked.size), side="right")
    where = tier_of[seq]
    hit = (prev >= 0) & (where < len(sizes))
    tier_hits = tuple(int(np.count_nonzero(hit & (where == k))) for k in range(len(sizes)))
    return _stats(hit, 0, tier_hits if tiers is not None else None)


# ---------------------------------------------------------------- Lobster


def lobster(sequence, capacity: int, steps=None, steps_per_epoch: int | None = None,
            prefetch: int = 1, eager: bool = False, bypass: bool = True) -> CacheStats:
    """Lobster §4.4 on a node: reuse-distance eviction coordinated with prefetching.

    Time is in iterations (``steps``: the iteration of each access; a ``NodeSequence`` brings
    its own), I = ``steps_per_epoch``. A sample's *key* is its next use by the node's own GPUs,
    in iterations (its reuse distance from now); the largest key is evicted first. Step by step:

    - *prefetch*: before iteration h is consumed, the prefetcher has looked up every access
      of iterations ≤ h + ``prefetch`` in order. Found in the cache: a hit (it keeps the key of
      that use until the iteration is consumed). Otherwise a miss — one storage read
      into the staging buffer — and the cache decides whether the sample stays for its *next*
      use ("prioritizing the prefetches with the nearest reuse distance"): kept if there is
      room, or in place of the cached sample with the largest reuse distance when that one is
      needed later; else (needed later than everything cached, or never again: reuse count)
      it only passes through the staging buffer.
    - *after iteration h*, for each sample d_k in B^h: its key becomes its next use; no
      further access by the node (reuse count) → evicted. The reuse-distance rule — next use
      ≥ 2I − h iterations ahead, i.e. not in the next epoch — orders evictions only: those
      samples have the largest keys, so they leave first *when room is needed*.

    ``eager=True`` applies the reuse-distance rule literally (evict at once, room or not, and
    never keep such a sample): the paper does it to make room for deeper prefetching, which
    cannot save a storage read; it bounds what stays cached by the next epoch's reuse, not by
    ``capacity`` — a node with 2 of 8 ranks reads a sample again in the next epoch only a
    quarter of the time, so its hit ratio does not grow with the cache.
    ``bypass=False`` lets every miss in (keyed by the iteration that uses it, as a prefetch)
    at the cost of the farthest-needed sample, even one needed sooner than the newcomer's next
    use — the behaviour of ``lobster-lazy``; with ``eager=True`` too, the paper's literal rule.
    """
    if isinstance(sequence, NodeSequence):
        steps = sequence.step if steps is None else steps
        steps_per_epoch = steps_per_epoch or sequence.steps_per_epoch
        sequence = sequence.samples
    seq = np.asarray(sequence)
    n = seq.size
    steps = np.arange(n, dtype=np.int64) if steps is None else np.asarray(steps, np.int64)
    if steps.size != n or (n and np.any(np.diff(steps) < 0)):
        raise InputError("lobster: steps must give a non-decreasing iteration per access")
    if prefetch < 0:
        raise InputError(f"lobster: prefetch must be at least 0 iterations, got {prefetch}")
    period = int(steps_per_epoch or (int(steps[-1]) + 1 if n else 1))
    nxt = next_access(seq)
    never = np.iinfo(np.int64).max
    next_step = np.where(nxt < n, steps[np.minimum(nxt, n - 1)], never)
    # evict after use: no further access (reuse count), or (eager) none in the next epoch
    drop = nxt == n
    if eager:
        drop |= next_step >= (steps // period + 2) * period
    # a miss competes for a slot with its next use (bypass) or with the iteration using it
    admit = np.where(drop, never, next_step) if bypass else steps
    bounds = np.searchsorted(steps, np.arange(int(steps[-1]) + 2 if n else 1)).tolist()
    samples, keys, drops = seq.tolist(), next_step.tolist(), drop.tolist()
    admits = admit.tolist()
    span = int(seq.max()) + 1 if n else 1
    key_of = [-1] * span  # next use (iteration) of each cached sample, −1: not cached
    heap: list[int] = []  # −(key·span + sample), stale when key_of disagrees
    push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
    hit = bytearray(n)
    size = evictions = looked = 0
    for h in range(len(bounds) - 1):
        stop = bounds[min(h + prefetch + 1, len(bounds) - 1)]
        for i in range(looked, stop):  # prefetch phase: look up the accesses up to h + prefetch
            x = samples[i]
            if key_of[x] >= 0:
                hit[i] = 1
                continue
            g = admits[i]
            if g == never:
                continue  # not read again (in time): staging buffer only
            if size < capacity:
                push(heap, -(g * span + x))
                key_of[x] = g
                size += 1
                continue
            while heap:
                k, y = divmod(-heap[0], span)
                if key_of[y] == k:
                    break
                pop(heap)
            else:
                continue  # capacity 0
            if k <= g:
                continue  # everything cached is needed no later: staging buffer only
            key_of[y] = -1
            replace(heap, -(g * span + x))
            key_of[x] = g
            evictions += 1
        looked = stop
        for i in range(bounds[h], bounds[h + 1]):  # iteration h consumed
            x = samples[i]
            if key_of[x] < 0:
                continue
            if drops[i]:
                key_of[x] = -1
                size -= 1
                evictions += 1
            elif keys[i] != key_of[x]:
                key_of[x] = keys[i]
                push(heap, -(keys[i] * span + x))
    return _stats(np.frombuffer(hit, dtype=bool), evictions)


def lobster_lazy(sequence, capacity: int, **kw) -> CacheStats:
    """``lobster`` with ``bypass=False``: every miss is let in at the farthest one's cost."""
    return lobster(sequence, capacity, **{"bypass": False, **kw})


def lru_expected(fraction: float) -> float:
    """E[LRU hit ratio] for uniformly shuffled epochs at cache fraction c (epochs ≥ 2).

    Sample read at epoch fraction u, again at v of the next epoch: the window holds
    ≈ N(1 − u(1 − v)) distinct samples, a hit iff u(1 − v) > 1 − c; u, v ~ U(0, 1).
    """
    c = min(max(fraction, 0.0), 1.0)
    return c + (1 - c) * math.log1p(-c) if c < 1 else 1.0
