"""The cache policies of ``adloader.datapath.eviction``, applied online: each access becomes
eviction keys (``cache_policies`` pairs each with its offline form, under one name).

``AccessPlan``: the positions at which this rank reads every sample over the planned epochs —
the ``ElasticDataLoader``'s epoch plans (``loader.plan(e)``) laid end to end, a pure function of
the seed. The k-th read of sample i is its k-th occurrence in the plan, so a worker that only
sees an index still knows where in the stream it is, and when i is needed next (NoPFS §3.1).

A policy turns an access into keys for ``SharedSampleCache`` (the largest key is evicted first;
``NEVER``: not kept): ``admit`` on a miss gives (admit key, key) — room is made by evicting
samples whose key is larger than the admit key, else the sample bypasses the cache — and
``touch`` on a hit gives the new key (None: unchanged). A ``batched`` policy gets its keys after
use from ``after``, once the whole local batch was looked up (Lobster's "after iteration h").
The decisions are those of ``adloader.datapath.eviction.evaluate`` for the same name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adloader.errors import InputError

NEVER = np.iinfo(np.int64).max  # not used again: not worth a slot
UNKNOWN = NEVER - 1  # read past the planned epochs: kept only while there is room


@dataclass(frozen=True, slots=True)
class Access:
    """The k-th read of sample ``index``: at plan position ``pos``, next at ``next_pos``."""

    index: int
    occurrence: int
    pos: int  # −1: past the plan
    next_pos: int  # NEVER: not read again; UNKNOWN: past the plan
    tick: int  # the cache's access clock


class AccessPlan:
    """Every planned read of one rank: ``epochs`` sequences of sample ids, in order."""

    def __init__(self, epochs: Sequence, size: int, local_batch: int = 1) -> None:
        seqs = [np.asarray(e, dtype=np.int64).reshape(-1) for e in epochs]
        if not seqs:
            raise InputError("access plan: needs at least one epoch")
        if int(local_batch) < 1:
            raise InputError(f"access plan: local batch must be at least 1, got {local_batch}")
        seq = np.concatenate(seqs)
        if seq.size and (seq.min() < 0 or seq.max() >= size):
            raise InputError(f"access plan: sample ids must be in 0..{size - 1}")
        small = np.int32 if max(size, seq.size) < 2**31 else np.int64  # 4 B per access
        self.size, self.local_batch = int(size), int(local_batch)
        self.sequence = seq.astype(small)
        lens = np.array([s.size for s in seqs], dtype=np.int64)
        self.epoch_start = np.concatenate([[0], np.cumsum(lens)])
        steps = -(-lens // self.local_batch)
        self.step_start = np.concatenate([[0], np.cumsum(steps)])
        self.counts = np.bincount(seq, minlength=size)  # r_k of this rank
        self._starts = np.concatenate([[0], np.cumsum(self.counts)])
        # positions grouped by sample, ascending: the k-th read of i is _positions[_starts[i]+k]
        self._positions = np.argsort(self.sequence, kind="stable").astype(small)

    @classmethod
    def from_loader(cls, loader, epochs: int) -> AccessPlan:
        """The plan of an ``ElasticDataLoader`` for its epochs 0..epochs−1."""
        if int(epochs) < 1:
            raise InputError(f"access plan: epochs must be at least 1, got {epochs}")
        seqs = []
        for e in range(int(epochs)):
            units = loader.plan(e)
            seqs.append([i for u in units for i in (u if isinstance(u, list) else [u])])
        return cls(seqs, len(loader.dataset), loader.batch_size or 1)

    @classmethod
    def from_stream(cls, stream, rank: int = 0) -> AccessPlan:
        """The plan of rank r of an ``adloader.datapath.access_stream.AccessStream``."""
        return cls(list(stream.samples[:, rank, :]), stream.size, stream.local_batch)

    @property
    def epochs(self) -> int:
        return self.epoch_start.size - 1

    def __len__(self) -> int:
        return int(self.sequence.size)

    @property
    def steps_per_epoch(self) -> int:
        return int(self.step_start[1])

    def position(self, index: int, occurrence: int) -> int:
        """Plan position of the ``occurrence``-th read (from 0) of sample ``index``; −1: none."""
        if occurrence >= self.counts[index]:
            return -1
        return int(self._positions[self._starts[index] + occurrence])

    def access(self, index: int, occurrence: int, tick: int = 0) -> Access:
        pos = self.position(index, occurrence)
        if pos < 0:
            return Access(index, occurrence, -1, UNKNOWN, tick)
        nxt = self.position(index, occurrence + 1)
        return Access(index, occurrence, pos, NEVER if nxt < 0 else nxt, tick)

    def epoch_of(self, pos: int) -> int:
        """Epoch of a plan position (``epochs`` for −1: past the plan)."""
        if pos < 0:
            return self.epochs
        return int(np.searchsorted(self.epoch_start, pos, side="right")) - 1

    def step_of(self, pos: int) -> int:
        """Global iteration of a plan position (Lobster's h)."""
        e = self.epoch_of(pos)
        return int(self.step_start[e]) + (pos - int(self.epoch_start[e])) // self.local_batch

    def ranking(self) -> np.ndarray:
        """Samples read by this rank, most often first, then first read first (NoPFS §5.1)."""
        read = np.flatnonzero(self.counts)
        first = self._positions[self._starts[read]]
        return read[np.lexsort((first, -self.counts[read]))]


class OnlinePolicy(ABC):
    """An eviction policy applied online; subclasses decide admission (``admit``)."""

    name = "?"
    batched = False
    needs_plan = True

    def __init__(self, plan: AccessPlan | None) -> None:
        if plan is None and self.needs_plan:
            raise InputError(f"cache policy {self.name!r} is clairvoyant: it needs the access "
                             "plan (AccessPlan.from_loader)")
        self.plan = plan

    @abstractmethod
    def admit(self, a: Access, tier: int = 0) -> tuple[int, int]:
        """(admit key, keep key) for a newly read sample in ``tier``: it displaces cached
        samples whose key is larger than its admit key, then is kept under its keep key
        (larger = evicted first; NEVER = not cached)."""

    def touch(self, a: Access, tier: int = 0) -> int | None:
        return None

    def after(self, a: Access) -> int | None:
        return None


class LRU(OnlinePolicy):
    """Least recently used: key = −(access clock)."""

    name, needs_plan = "lru", False

    def admit(self, a, tier=0):
        return -a.tick, -a.tick

    def touch(self, a, tier=0):
        return -a.tick


class Belady(OnlinePolicy):
    """MIN: key = the position of the next use; bypass when it is the farthest."""

    name = "belady"

    def admit(self, a, tier=0):
        return a.next_pos, a.next_pos

    def touch(self, a, tier=0):
        return a.next_pos


class Lobster(OnlinePolicy):
    """Lobster §4.4: keys in iterations, each sample's next use; a miss stays only if it is
    needed sooner than the farthest-needed cached sample, else it bypasses the cache; after its
    batch a sample keeps its next use as key, or leaves when not read again (reuse count)."""

    name, batched = "lobster", True
    bypass = True

    def admit(self, a, tier=0):
        if self.bypass:
            k = self.after(a)
            return k, k
        g = self.plan.step_of(a.pos) if a.pos >= 0 else UNKNOWN
        return g, g

    def after(self, a):
        if a.next_pos in (NEVER, UNKNOWN):
            return a.next_pos
        return self.plan.step_of(a.next_pos)


class LobsterLazy(Lobster):
    """``lobster-lazy``: a miss is always let in (it is being prefetched), keyed by the
    iteration that uses it, at the cost of the farthest-needed sample."""

    name, bypass = "lobster-lazy", False


class NoPFS(OnlinePolicy):
    """NoPFS §5.1: static placement of the most frequently read samples, tier by tier, each
    filled on its first read and never evicted. ``place`` sizes the tiers in bytes."""

    name = "nopfs"

    def __init__(self, plan):
        super().__init__(plan)
        self.rank = np.full(plan.size, NEVER, dtype=np.int64)
        order = plan.ranking()
        self.rank[order] = np.arange(order.size)
        self.tier = np.full(plan.size, 99, dtype=np.int8)

    def place(self, sample_bytes: np.ndarray, capacities: Sequence[int], unit=None) -> None:
        """Tier t holds the next prefix of the ranking whose sizes (in ``unit[t]`` rounding:
        whole blocks for RAM) fit ``capacities[t]`` bytes."""
        order = self.plan.ranking()
        sizes = np.asarray(sample_bytes, dtype=np.int64)[order]
        at = 0
        for t, cap in enumerate(capacities):
            u = (unit or [1] * len(capacities))[t]
            need = np.cumsum(-(-np.maximum(sizes[at:], 1) // u) * u)
            n = int(np.searchsorted(need, cap, side="right"))
            self.tier[order[at : at + n]] = t
            at += n

    def admit(self, a, tier=0):
        if self.tier[a.index] != tier:
            return NEVER, NEVER
        r = int(self.rank[a.index])
        return r, r
