"""One iteration over an ``ElasticDataLoader``: the epoch's batches, read by a chain of pools.

The order of the epoch is planned once as a list of batches; each worker pool reads a
``BatchWindow`` of it. ``resize(n)`` ("inplace", the default) grows or shrinks the running
pool (``PoolIter.resize``: a worker forked or retired, the others loading on); from or to no
workers, and for a pool kept across epochs, it does what "drain" does: cut the running pool's
window L batches past where it has sent (L = ⌈pool startup / batch interval⌉, learnt as it
runs), start a pool of n workers there and let the old one deliver up to the cut. Either
way nothing is lost, repeated or reordered, and the trainer is fed while new workers start.

As torch's iterator does, a sample's exception is raised for its batch and the next call goes
on with the next batch. Unlike torch (pytorch#97622), a worker that dies is replaced: the
batches it left outstanding go to a fresh pool first, and the epoch completes with every
sample once; only ``MAX_DEATHS`` deaths in a row with no batch between end the epoch, with an
error naming the signal and the samples.

Workers are forked only in the consumer's thread, at a batch boundary, never from the thread
that calls ``resize`` (the master's): a fork copies every lock as it is at that instant, and
one the training step holds would stay locked forever in the child.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adloader.client.loader.elastic_sampler import (
    BatchWindow,
    WindowPool,
    shutdown,
    shutdown_later,
)
from adloader.client.loader.pool_iter import PoolIter, WorkerDied
from adloader.client.loader.torch_support import resizable

if TYPE_CHECKING:
    from adloader.client.loader.loader import ElasticDataLoader

MAX_DEATHS = 3  # deaths in a row, with no batch delivered between, that end the epoch


@dataclass(frozen=True, slots=True)
class BatchStats:
    """One batch boundary as the consumer saw it (what the application master measures)."""

    epoch: int
    index: int  # batch index in the epoch
    wait_s: float  # time __next__ blocked getting this batch
    step_s: float  # consumer's time between the previous batch's return and this __next__
    workers: int  # worker count in effect
    samples: int  # batch size


class EpochIterator:
    """The batches of one epoch from ``start``; the loader's newest iterator follows resizes."""

    def __init__(self, loader: ElasticDataLoader, epoch: int, batches: list, start: int,
                 base_seed: int, kept: WindowPool | None = None) -> None:
        self._loader = loader
        self.epoch, self.batches, self.consumed = epoch, batches, min(start, len(batches))
        self.base_seed = base_seed
        self.pools: deque[WindowPool] = deque()
        self.started = 0  # pools started (each gets its own worker seeds)
        self.deaths = 0  # deaths in a row without a batch delivered
        self._last_return: float | None = None
        self._ended = False
        if kept is not None and kept.workers == loader._target and self.consumed < len(batches):
            kept.window.reset(batches, self.consumed)
            kept.iterator, kept.delivered = iter(kept.loader), 0
            kept.created = time.perf_counter()
            self.pools.append(kept)
            self._last_pool = kept
        elif kept is not None:
            shutdown(kept)
        if not self.pools and self.consumed < len(batches):
            self.pools.append(self._start_pool(BatchWindow(batches, self.consumed)))

    def __iter__(self) -> EpochIterator:
        return self

    def __len__(self) -> int:
        return len(self.batches)

    def __del__(self) -> None:  # workers go with their iterator, not with the collector
        with contextlib.suppress(Exception):
            self.close()

    # ---- the consumer's call ---------------------------------------------------------
    def __next__(self) -> Any:
        loader = self._loader
        t0 = time.perf_counter()
        loader._consumer = threading.get_ident()
        with loader._lock:
            if self._ended:
                raise StopIteration
            mine = loader._active_iterator() is self
            if mine and (loader._dirty or loader._want_release):
                self.apply()
            if self.consumed >= len(self.batches):
                self._end_epoch()
                raise StopIteration
            index = self.consumed
            batch = self._next_unit()  # a sample's error is raised here, its batch consumed
            workers = loader._target if mine else self.pools[0].workers if self.pools else 0
            if mine and loader._want_release:
                self.apply()
        now = time.perf_counter()
        step = 0.0 if self._last_return is None else t0 - self._last_return
        if self._last_return is not None:
            loader._ahead.batch(now - t0 + step)
        hook = loader.on_batch if mine else None
        if hook is not None:
            samples = len(self.batches[index]) if loader._batched else 1
            hook(BatchStats(self.epoch, index, now - t0, step, workers, samples))
            now = time.perf_counter()  # the hook's time (a pause) is neither wait nor step
        self._last_return = now
        return batch

    def __getattr__(self, name: str):  # torch's iterator internals (``_workers``, …)
        pool = self.__dict__.get("_last_pool")
        if name.startswith("__") or pool is None or pool.iterator is None:
            raise AttributeError(name)
        return getattr(pool.iterator, name)

    def _shutdown_workers(self) -> None:
        self.close()

    def close(self) -> None:
        self._ended = True
        while self.pools:
            shutdown(self.pools.popleft())

    # ---- resizing (the loader's lock is held) ----------------------------------------
    def apply(self) -> None:
        loader = self._loader
        if loader._want_release:
            loader._want_release = False
            while self.pools:
                shutdown(self.pools.popleft())
        if not loader._dirty or threading.get_ident() != loader._consumer:
            return  # a pool is started in the consumer's thread only
        loader._dirty = False
        if self._ended:
            return
        pools, batches = self.pools, self.batches
        if pools and pools[-1].workers == loader._target:
            return
        if not pools:
            if self.consumed < len(batches):
                pools.append(self._start_pool(BatchWindow(batches, self.consumed)))
        elif loader.handover == "inplace" and self._in_place(pools[-1]):
            pools[-1].iterator.resize(loader._target)  # the running pool, grown or shrunk
            pools[-1].workers = loader._target
        elif loader.handover in ("drain", "inplace"):
            ahead = loader._ahead.batches() if loader._target else 0  # 0 workers: no startup
            start = pools[-1].wait().window.cut(ahead)
            if start < len(batches):
                pools.append(self._start_pool(BatchWindow(batches, start)))
            while len(pools) > 1 and pools[0].drained:
                shutdown_later(pools.popleft())
        elif loader.handover == "restart":
            new = self._start_pool(BatchWindow(batches, self.consumed))
            while pools:
                shutdown_later(pools.popleft())
            pools.append(new)
        else:
            while pools:
                shutdown(pools.popleft())
            pools.append(self._start_pool(BatchWindow(batches, self.consumed)))

    def _in_place(self, pool: WindowPool) -> bool:
        """Whether ``pool`` can change its workers as it runs: a started pool of workers (to
        or from none, a pool is started or stopped), not kept across epochs (torch's
        persistent pool resumes each epoch by worker id), on a torch whose iterator keeps what
        a resize in place needs (``torch_support.resizable``: torch ≥ 2.6)."""
        loader = self._loader
        iterator = pool.wait().iterator
        return (pool.workers > 0 and loader._target > 0 and not loader.persistent_workers
                and isinstance(iterator, PoolIter) and resizable(iterator))

    def _start_pool(self, window: BatchWindow, workers: int | None = None) -> WindowPool:
        self.started += 1
        n = self._loader._target if workers is None else workers
        seed = (self.base_seed + 7919 * (self.started - 1)) % (1 << 63)  # the first is torch's
        self._last_pool = self._loader._make_pool(window, n, seed)
        return self._last_pool

    # ---- reading --------------------------------------------------------------------
    def _next_unit(self) -> Any:
        pools = self.pools
        while True:
            if not pools:
                pools.append(self._start_pool(BatchWindow(self.batches, self.consumed)))
            head = pools[0]
            if head.drained:
                shutdown_later(pools.popleft())
                continue
            first = head.delivered == 0 and head.workers > 0
            asked = time.perf_counter() if first else 0.0
            try:
                batch = next(head.wait().iterator)
            except WorkerDied as died:
                self._respawn(head, died)
                continue
            except StopIteration:
                raise RuntimeError("a worker pool ended before its window") from None
            except BaseException:
                if getattr(head.iterator, "processed", False):  # the batch's own error
                    head.delivered += 1
                    self.consumed += 1
                    self.deaths = 0
                raise
            if first:
                self._loader._ahead.started(head.created, asked, time.perf_counter())
            head.delivered += 1
            self.consumed += 1
            self.deaths = 0
            return batch

    def _respawn(self, head: WindowPool, died: WorkerDied) -> None:
        """Replace a pool that lost a worker: its outstanding batches first, then the rest."""
        window = head.window
        handed = set(window.handed)
        redo = [window.handed[k] for k in died.outstanding if k < len(window.handed)]
        redo += [p for p in window.redo if p not in handed]  # never handed out: still due
        self.deaths += 1
        if self.deaths >= MAX_DEATHS:
            self.close()
            raise RuntimeError(f"{died} The epoch's pool lost a worker {self.deaths} times in a "
                               f"row with no batch between, reading "
                               f"{self._samples([window.handed[k] for k in died.lost])}; "
                               f"giving up") from died
        shutdown(head)
        fresh = BatchWindow(self.batches, window.next_pos, window.stop, redo)
        self.pools[0] = self._start_pool(fresh, head.workers)
        self.pools[0].delivered = 0

    def _samples(self, positions: list[int]) -> str:
        if not positions:
            return "no outstanding batch"
        units = [self.batches[p] for p in positions]
        flat = [i for u in units for i in (u if isinstance(u, list) else [u])]
        shown = ", ".join(map(str, flat[:8])) + (", …" if len(flat) > 8 else "")
        return (f"samples [{shown}] (batches {min(positions)}–{max(positions)} of epoch "
                f"{self.epoch})")

    def _end_epoch(self) -> None:
        loader = self._loader
        last = self.pools.pop() if self.pools else None
        self.close()
        if loader._active_iterator() is self:
            loader._epoch_done(self, last)
        elif last is not None:
            shutdown_later(last)
