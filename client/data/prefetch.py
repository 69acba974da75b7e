"""Clairvoyant prefetching into a bounded staging buffer (NoPFS §4: storage class 0).

``StagingBuffer``: a ``SampleArena`` of its own (shared memory, bounded) where prefetched samples
wait for the worker that reads them; a worker takes a sample out (NoPFS drops a sample from the
staging buffer right after its access) and counts every access it makes, which is the
prefetcher's clock.

``Prefetcher``: one coordinator thread and ``threads`` fetch threads (p₀) in the MAIN process.
The workers are forked processes that torch hands batches to in turn, and the pool is replaced
on every resize; the main process alone knows the whole access order (the ``AccessPlan``), lives
as long as the job, and its threads mostly wait on storage, so they cost the trainer little.
It walks the plan from the workers' position, skips samples the cache holds, and reads the next
``depth`` accesses ahead in order. A sample being fetched is marked in flight, so a worker that
needs it waits for it (up to ``wait_s``) instead of reading it from storage a second time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from adloader.datapath.online_cache import AccessPlan
from adloader.errors import InputError
from adloader.host.shm_arena import SampleArena, budget_for

POLL_S = 0.0005


class StagingBuffer:
    """Prefetched samples keyed by their plan position, taken once; ``budget_bytes`` of RAM."""

    def __init__(self, budget_bytes: int, size: int, block_bytes: int = 4096) -> None:
        self.arena = SampleArena(budget_bytes, size, block_bytes, fields=("inflight",),
                                 counters=1, what="staging buffer")

    @staticmethod
    def budget_for(size: int, data_bytes: int, block_bytes: int = 4096) -> int:
        """The budget whose buffer holds ``data_bytes`` (whole blocks) for ``size`` samples."""
        return budget_for(size, data_bytes, block_bytes, fields=1, counters=1)

    @property
    def consumed(self) -> int:
        """Accesses the workers have made (a lock-free glance)."""
        return int(self.arena.counters[0])

    def note_access(self, n: int = 1) -> None:
        with self.arena.locked() as ar:
            ar.counters[0] += n

    def has(self, i: int) -> bool:
        return bool(self.arena.first[i] >= 0 or self.arena.field["inflight"][i])

    def mark(self, i: int, flag: bool) -> None:
        with self.arena.locked() as ar:
            ar.field["inflight"][i] = int(flag)

    def purge(self, stale_below: int) -> None:
        """Drop staged samples for positions before ``stale_below`` (read elsewhere already)."""
        with self.arena.locked() as ar:
            for j in ar.keys_below(stale_below).tolist():
                ar.drop(j)

    def put(self, i: int, data: bytes, pos: int, stale_below: int) -> bool:
        """Stage sample i for plan position ``pos``: drops entries older than ``stale_below``,
        and makes room from entries needed after ``pos``. False: no room now."""
        with self.arena.locked() as ar:
            for j in ar.keys_below(stale_below).tolist():
                ar.drop(j)
            need = ar.blocks_for(len(data))
            if need > ar.blocks:
                return False
            while ar.room < need:
                v = ar.victim()
                if v < 0 or ar.key[v] <= pos:
                    return False
                ar.drop(v)
            ar.store(i, data, pos)
            ar.field["inflight"][i] = 0
            return True

    def take(self, i: int, wait_s: float = 10.0) -> bytes | None:
        """Sample i's staged bytes (removed from the buffer), waiting while it is in flight."""
        deadline = time.monotonic() + wait_s
        while True:
            with self.arena.locked() as ar:
                if ar.has(i):
                    data = ar.read(i)
                    ar.drop(i)
                    return data
                if not ar.field["inflight"][i]:
                    return None
            if time.monotonic() > deadline:
                return None
            time.sleep(POLL_S)

    def close(self) -> None:
        self.arena.close()


class Prefetcher:
    """Reads ahead along ``plan`` from ``source`` into a staging buffer of ``staging_bytes``."""

    def __init__(self, plan: AccessPlan, source, cache=None, *, staging_bytes: int = 16 << 20,
                 threads: int = 4, depth: int | None = None, slack: int | None = None,
                 block_bytes: int = 4096) -> None:
        if threads < 1:
            raise InputError(f"prefetcher: threads must be at least 1, got {threads}")
        if depth is None:  # far enough to keep the link busy, near enough that the cache's
            depth = max(1, min(1024, int(plan.epoch_start[1]) // 2))  # contents still hold
        if depth < 1:
            raise InputError(f"prefetcher: depth must be at least 1 sample, got {depth}")
        self.plan, self.source, self.cache = plan, source, cache
        self.threads, self.depth = int(threads), int(depth)
        self.slack = 8 * plan.local_batch if slack is None else int(slack)
        self.staging = StagingBuffer(staging_bytes, plan.size, block_bytes)
        self.counts = {"fetched": 0, "cached": 0, "late": 0, "failed": 0}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_pos = self._start_consumed = 0

    def start(self, position: int = 0) -> Prefetcher:
        """Prefetch from plan ``position`` on (the workers' position now; 0: the beginning)."""
        self.stop()
        self._stop.clear()
        self._start_pos, self._start_consumed = int(position), self.staging.consumed
        self._thread = threading.Thread(target=self._run, name="adloader-prefetch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.staging.close()

    def _cursor(self) -> int:
        """The plan position the workers have reached."""
        return self._start_pos + self.staging.consumed - self._start_consumed

    def _run(self) -> None:
        slots = threading.Semaphore(2 * self.threads)  # bytes held by fetch threads stay bounded
        seq, staging, cache = self.plan.sequence, self.staging, self.cache
        with ThreadPoolExecutor(self.threads, thread_name_prefix="adloader-fetch") as pool:
            p = self._start_pos
            while not self._stop.is_set() and p < seq.size:
                cur = self._cursor()
                if p < cur:
                    p = cur
                    continue
                if p >= cur + self.depth or not slots.acquire(timeout=0.01):
                    self._stop.wait(POLL_S * 4)
                    continue
                i = int(seq[p])
                if staging.has(i):  # staged for an earlier read: wait until that one is done
                    slots.release()
                    staging.purge(cur - self.slack)
                    self._stop.wait(POLL_S * 4)
                    continue
                if cache is not None and cache.contains(i):
                    self.counts["cached"] += 1
                    slots.release()
                else:
                    staging.mark(i, True)
                    pool.submit(self._fetch, p, i, slots)
                p += 1

    def _fetch(self, p: int, i: int, slots: threading.Semaphore) -> None:
        try:
            try:
                data = self.source.read(i)
            except Exception:  # the worker reads it itself and raises the error there
                self.counts["failed"] += 1
                return
            while not self._stop.is_set():
                cur = self._cursor()
                if p < cur - self.slack:
                    self.counts["late"] += 1
                    return
                if self.staging.put(i, data, p, cur - self.slack):
                    self.counts["fetched"] += 1
                    return
                self._stop.wait(POLL_S * 4)
        finally:
            with contextlib.suppress(Exception):
                if not self.staging.arena.closed and not self.staging.arena.has(i):
                    self.staging.mark(i, False)
            slots.release()
