"""A job's handle on its node's cache of one dataset: one node cache, shared.

The daemon makes one segment per dataset its jobs read (``create_segment``) and sizes it
live (``SampleArena.set_limit``: its share of the node's cache memory, from
``adloader.datapath.cache_arbiter``); every job on the node that names that dataset attaches to it
(``NodeCache``), so a sample one job decoded is a hit for the next.

Keys are predicted times of next use (CLOCK_MONOTONIC µs, one clock for the whole node): a
job reading sample i at plan position p, next at p', keys it t + (p' − p)·Δ, Δ its own
measured seconds per access; a sample keeps the earliest future use any job gave it, and the
largest key leaves first — Belady's MIN on the node's merged stream, each job's stream placed
in time by its own rate. A job's own counts (its k-th read of i, where its reads were served
from) live in a small segment of its own, shared with its workers only.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import Callable
from multiprocessing import shared_memory

import numpy as np

from adloader.client.data.cache_store import SOURCES, SharedSampleCache
from adloader.datapath.online_cache import NEVER, UNKNOWN, Access, AccessPlan, OnlinePolicy
from adloader.errors import InputError
from adloader.host.node_segment import FIELDS
from adloader.host.shm_arena import EMPTY, LIMIT, SampleArena
from adloader.protocol import DataSpec

DEFAULT_STEP_S = 1e-3  # Δ before a job has read enough to measure it
MEASURE_AFTER = 32  # plan positions between the first access and a measured Δ
LAST = UNKNOWN - 1  # the key of a sample no job is known to read again: first to leave
STALE_S = 5.0  # a key this far in the past: its job did not come back for it (gone, stalled)


def now_us() -> int:
    return time.monotonic_ns() // 1000


class NodeMin(OnlinePolicy):
    """MIN across jobs: the key is when this job will read the sample next (µs); one it
    will not read again stays while there is room (another job may)."""

    name = "node-min"

    def __init__(self, plan: AccessPlan) -> None:
        super().__init__(plan)
        self._start: tuple[int, int, int] | None = None  # (pid, t0 µs, p0)
        self.step_us = DEFAULT_STEP_S * 1e6

    def _when(self, a: Access) -> int:
        if a.next_pos in (NEVER, UNKNOWN):  # not this job's again: another's, while room
            return LAST
        t, pid = now_us(), os.getpid()
        if a.pos >= 0:
            if self._start is None or self._start[0] != pid:  # a forked worker measures anew
                self._start = (pid, t, a.pos)
            elif a.pos - self._start[2] >= MEASURE_AFTER:
                self.step_us = (t - self._start[1]) / (a.pos - self._start[2])
        return t + int(max(a.next_pos - max(a.pos, 0), 1) * self.step_us)

    def admit(self, a, tier=0):
        k = self._when(a)
        return k, k

    def touch(self, a, tier=0):
        return self._when(a)


class _Counts:
    """This job's part: how often it read each sample, where its reads came from."""

    def __init__(self, size: int, epochs: int, name: str | None = None) -> None:
        n = size + epochs * len(SOURCES)
        if name is None:
            self.shm = shared_memory.SharedMemory(create=True, size=8 * n)
            self.owner = os.getpid()
        else:
            self.shm = shared_memory.SharedMemory(name=name)
            with contextlib.suppress(Exception):
                from multiprocessing import resource_tracker

                resource_tracker.unregister(self.shm._name, "shared_memory")  # type: ignore[attr-defined]
            self.owner = -1
        arr = np.ndarray((n,), dtype=np.int64, buffer=self.shm.buf)
        if name is None:
            arr[:] = 0
        self.size, self.epochs = size, epochs
        self.uses, self.where = arr[:size], arr[size:].reshape(epochs, len(SOURCES))

    def close(self) -> None:
        self.__dict__.pop("uses", None)
        self.__dict__.pop("where", None)
        with contextlib.suppress(BufferError):
            self.shm.close()
        if self.owner == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()

    def __getstate__(self) -> dict:
        return {"name": self.shm.name, "size": self.size, "epochs": self.epochs}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["size"], state["epochs"], state["name"])


class NodeCache(SharedSampleCache):
    """This job's view of the node segment ``segment`` (a name the daemon gave at Register).

    ``plan``: this job's ``AccessPlan`` (the loader's, ``AccessPlan.from_loader``). Made in
    the job's main process before its workers fork; ``close`` leaves the segment to the
    daemon and removes only this job's counts.
    """

    def __init__(self, segment: str, plan: AccessPlan) -> None:
        if plan is None:
            raise InputError("node cache: needs the job's access plan (AccessPlan.from_loader)")
        self.arena = SampleArena(0, 0, fields=FIELDS, name=segment, what="node cache")
        if self.arena.size != plan.size:
            size = self.arena.size
            self.arena.close()
            raise InputError(f"node cache {segment!r}: the segment holds {size} samples, "
                             f"the job's dataset {plan.size}")
        self.policy, self.plan = NodeMin(plan), plan
        self.epochs_counted = plan.epochs + 1
        self.disk, self.disk_budget = None, 0
        self.arena.on_repair = None
        self.me = int.from_bytes(os.urandom(7), "big") + 1  # who keyed a sample (owner field)
        self._swept = 0
        self.counts = _Counts(plan.size, self.epochs_counted)
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(self, _release, self.arena, self.counts)

    # ---- this job's part of the shared read path (lock held) --------------------------------
    def _access(self, i: int) -> Access:
        k = int(self.counts.uses[i])
        self.counts.uses[i] = k + 1
        return self.plan.access(i, k, self.arena.tick())

    def _count(self, a: Access, where: str) -> None:
        e = min(self.plan.epoch_of(a.pos), self.epochs_counted - 1)
        self.counts.where[e, SOURCES.index(where)] += 1

    def _apply(self, i: int, key: int | None) -> None:
        """Keep the earliest future use: another job's key stands if it is still ahead and
        sooner; this job's own earlier key (for the read now under way) does not."""
        ar = self.arena
        if key is None or not ar.has(i):
            return
        owner, old = ar.field["owner"], int(ar.key[i])
        if owner[i] != self.me and old < key and old > now_us():
            return
        ar.key[i], owner[i] = key, self.me

    def _admit(self, a: Access, data: bytes, where: str) -> None:
        ar, t = self.arena, now_us()
        if ar.room < ar.blocks_for(len(data)) and t - self._swept > STALE_S * 1e6:
            self._swept = t
            with ar.locked():  # keys long past: first to leave, not pinned forever
                stale = np.flatnonzero((ar.key != EMPTY) & (ar.key < t - STALE_S * 1e6))
                ar.key[stale] = LAST
        super()._admit(a, data, where)
        with ar.locked():
            if ar.has(a.index):
                ar.field["owner"][a.index] = self.me

    # ---- reports ---------------------------------------------------------------------------------
    def _where(self) -> np.ndarray:
        return self.counts.where.copy()  # this job's reads, not the node's

    def usage(self) -> dict:
        out = super().usage()
        out["limit_blocks"] = int(self.arena.header[LIMIT])
        return out

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._finalizer = weakref.finalize(self, _release, self.arena, self.counts)


def _release(arena: SampleArena, counts: _Counts) -> None:
    arena.owner = -1  # the daemon's segment: never unlinked by a job
    arena.close()
    counts.close()


# ---- attach(share_cache=...): what the master sends and does with the daemon's answer -----
def data_spec(loader, dataset: str, epochs: int | None, iterations: int | None) -> DataSpec:
    """The ``DataSpec`` of ``loader`` (an ``ElasticDataLoader`` over a ``CachedDataset``)."""
    ds = getattr(loader, "dataset", None)
    if not hasattr(ds, "attach") or not hasattr(ds, "source"):
        raise InputError("attach(share_cache=...): the loader's dataset must be a "
                         "CachedDataset (it reads through the cache)")
    if getattr(loader, "seed", None) is None:
        raise InputError("attach(share_cache=...): give the loader a seed= so that its reads "
                         "can be planned (the node cache is clairvoyant)")
    if epochs is None and iterations:
        epochs = -(-int(iterations) // max(len(loader), 1))
    if not epochs:
        raise InputError("attach(share_cache=...): give epochs= or iterations= (how far "
                         "the job reads)")
    sizes = ds.source.sizes() if hasattr(ds.source, "sizes") else None
    mean = int(np.mean(sizes)) if sizes is not None and len(sizes) else 4096
    try:
        return DataSpec(dataset=dataset, size=len(ds), sample_bytes=max(mean, 1),
                        seed=int(loader.seed), epochs=int(epochs),
                        batch=(loader.batch_size or 1) * getattr(loader, "world_size", 1))
    except ValueError as exc:
        raise InputError(f"attach(share_cache={dataset!r}): {exc.errors()[0]['msg']}") from None


def grant_handler(loader, epochs: int, log) -> Callable[[str], None]:
    """What the master does with the segment the daemon granted: this job's ``NodeCache``
    on the loader's dataset (workers already forked are restarted so they see it)."""

    def on_cache(segment: str) -> None:
        ds = loader.dataset
        if getattr(ds, "cache", None) is not None:
            return  # a cache of its own (or the grant again after a reconnect)
        try:
            cache = NodeCache(segment, AccessPlan.from_loader(loader, epochs))
        except Exception as exc:  # the job runs on without it, and says why
            log(f"adloader: node cache {segment!r} not used: {exc}")
            return
        staging = getattr(ds, "staging", None)
        ds.attach(cache)
        ds.staging = staging  # a prefetcher's staging buffer stays as it was
        if getattr(loader, "num_workers", 0):
            loader.release()  # the next batch starts workers that see the cache
        log(f"adloader: reading through the node cache {segment}")

    return on_cache
