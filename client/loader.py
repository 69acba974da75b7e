"""ElasticDataLoader: a drop-in ``torch.utils.data.DataLoader`` whose worker count p changes live.

The order of epoch e is ``adloader.order.rank_order`` (or the given sampler's), planned once
as a list of batches. Each worker pool is a plain torch DataLoader reading a ``BatchWindow`` of
that list. ``resize(n)`` ("drain") cuts the running pool's window L batches past where it has
sent (L = ⌈pool startup / batch interval⌉, both learnt as it runs), starts a pool of n workers
there and lets the old one deliver up to the cut: nothing is lost, repeated or reordered, and
the new workers start while the old ones still feed the trainer.

Workers are forked only in the consumer's thread, at a batch boundary, never from the thread
that calls ``resize`` (the master's): a fork copies every lock as it is at that instant, and
one the training step holds (tempfile's, a logging handler's, the script's own) would stay
locked forever in the child.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from adloader.client.elastic_sampler import (
    BatchWindow,
    InlineFetch,
    Lookahead,
    ThreadedDataset,
    WindowPool,
    batch_count,
    epoch_batches,
    shutdown,
    shutdown_later,
)
from adloader.errors import InputError
from adloader.limits import MAX_WORKERS
from adloader.order import rank_order, samples_per_rank

HANDOVERS = ("drain", "restart", "serial")
STATE_FIELDS = ("dataset_size", "batch_size", "world_size", "rank", "shuffle", "drop_last")


@dataclass(frozen=True, slots=True)
class BatchStats:
    """One batch boundary as the consumer saw it (what the application master measures)."""

    epoch: int
    index: int  # batch index in the epoch
    wait_s: float  # time __next__ blocked getting this batch
    step_s: float  # consumer's time between the previous batch's return and this __next__
    workers: int  # worker count in effect
    samples: int  # batch size


def _dist_default(rank: int | None, world_size: int | None) -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    return (0 if rank is None else rank), (1 if world_size is None else world_size)


class EpochIterator:
    """The batches of one epoch; ``next`` goes through the loader (which may resize between)."""

    def __init__(self, loader: ElasticDataLoader) -> None:
        self._loader = loader

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> Any:
        return self._loader._next(self)

    def __len__(self) -> int:
        return len(self._loader)


class ElasticDataLoader:
    """``DataLoader`` arguments plus ``seed``/``rank``/``world_size``/``threads``; resizable live.

    One iteration at a time: ``iter(loader)`` (re)starts the current epoch, at the resume
    position after ``load_state_dict``, and ends the previous iterator. A completed epoch
    advances ``epoch`` by one; ``set_epoch`` picks one. ``on_batch`` (None or a callable taking
    ``BatchStats``) runs in the consumer's thread before each batch is returned and may call
    ``resize``/``release`` or block. ``handover`` picks how a resize treats the old pool:
    "drain" (default), "restart" (new pool at the consumer's position, old torn down in the
    background; prefetched batches re-read), "serial" (old torn down first, then the new).
    With ``threads`` > 0 the workers see the dataset wrapped in a ``ThreadedDataset``.
    """

    def __init__(
        self, dataset, batch_size: int | None = 1, shuffle: bool = False, sampler=None,
        batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
        drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
        multiprocessing_context=None, generator=None, prefetch_factor: int | None = None,
        persistent_workers: bool = False, *, seed: int = 0, rank: int | None = None,
        world_size: int | None = None, threads: int = 0, handover: str = "drain",
    ) -> None:
        if isinstance(dataset, IterableDataset):
            raise InputError("ElasticDataLoader: needs a map-style dataset, got an IterableDataset")
        if batch_sampler is not None and (
            batch_size != 1 or shuffle or sampler is not None or drop_last
        ):
            raise InputError(
                "batch_sampler is mutually exclusive with batch_size, shuffle, sampler, drop_last"
            )
        if sampler is not None and shuffle:
            raise InputError("sampler is mutually exclusive with shuffle")
        if batch_size is None and drop_last:
            raise InputError("batch_size=None disables batching and excludes drop_last")
        if batch_size is not None and batch_size < 1:
            raise InputError(f"batch_size must be at least 1, got {batch_size}")
        if threads < 0:
            raise InputError(f"threads must be >= 0, got {threads}")
        if handover not in HANDOVERS:
            raise InputError(f"handover must be one of {', '.join(HANDOVERS)}, got {handover!r}")
        rank, world_size = _dist_default(rank, world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise InputError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
        self.dataset = dataset
        self.batch_size = None if batch_sampler is not None else batch_size
        self.shuffle = bool(shuffle)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.drop_last = drop_last
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        if multiprocessing_context is None and sys.platform.startswith("linux"):
            multiprocessing_context = "fork"
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.seed, self.rank, self.world_size = int(seed), rank, world_size
        self.threads = threads
        self.handover = handover
        self.on_batch: Callable[[BatchStats], Any] | None = None
        self._fetch_dataset = ThreadedDataset(dataset, threads) if threads else dataset
        self._batched = batch_size is not None or batch_sampler is not None
        self._lock = threading.RLock()
        self._target = self._check_workers(num_workers)
        self._dirty = False  # a resize waits to be applied
        self._want_release = False
        self._epoch = 0
        self._resume = 0  # where the next iteration starts (load_state_dict)
        self._batches: list | None = None  # the plan of the epoch being iterated
        self._consumed = 0
        self._pools: deque[WindowPool] = deque()
        self._kept: WindowPool | None = None  # a persistent pool between epochs
        self._last_return: float | None = None
        self._active: EpochIterator | None = None
        self._ahead = Lookahead()
        self._consumer: int | None = None  # the thread iterating: the only one that forks

    # ---- public controls -------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        return self._target

    @num_workers.setter
    def num_workers(self, n: int) -> None:
        self.resize(n)

    @property
    def consumed(self) -> int:
        """Batches returned to the consumer in the current epoch."""
        return self._consumed if self._batches is not None else self._resume

    @property
    def epoch(self) -> int:
        return self._epoch

    def resize(self, n: int) -> None:
        """Run with n workers (0: load in the consumer's process) from the next batch boundary.
        Any thread may call it; called in the consumer's thread, it starts the pool at once."""
        self._target = self._check_workers(n)
        self._dirty = True
        if threading.get_ident() == self._consumer:
            self._try_apply()

    def release(self) -> None:
        """Shut the worker pool down now; the next batch (or ``resize``) starts one again."""
        self._dirty = False
        self._want_release = True
        self._try_apply()  # only shuts down: nothing is dirty

    def close(self) -> None:
        with self._lock:
            self._shutdown_all()
            self._batches = self._active = None

    def set_epoch(self, epoch: int) -> None:
        with self._lock:
            if epoch != self._epoch:
                self._epoch, self._resume = int(epoch), 0
        for s in (self.sampler, getattr(self.batch_sampler, "sampler", None), self.batch_sampler):
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)

    def state_dict(self) -> dict:
        with self._lock:
            return {
                "epoch": self._epoch, "consumed": self.consumed, "seed": self.seed,
                "dataset_size": len(self.dataset), "batch_size": self.batch_size,
                "world_size": self.world_size, "rank": self.rank, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "num_workers": self._target,
            }

    def load_state_dict(self, state: dict) -> None:
        """Resume where ``state`` was taken: the next iteration continues that epoch."""
        missing = [k for k in ("epoch", "consumed", "seed", *STATE_FIELDS) if k not in state]
        if missing:
            raise InputError(f"loader state: missing field {missing[0]!r}")
        mine = self.state_dict()
        for key in STATE_FIELDS:
            if state[key] != mine[key]:
                raise InputError(
                    f"loader state: {key} is {state[key]!r}, this loader has {mine[key]!r}"
                )
        with self._lock:
            self._shutdown_all()
            self._batches = self._active = None
            self.seed, self._epoch, self._resume = int(state["seed"]), int(state["epoch"]), int(
                state["consumed"]
            )

    # ---- iteration -------------------------------------------------------------------
    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.sampler is not None:
            samples = len(self.sampler)
        else:
            samples = samples_per_rank(len(self.dataset), self.world_size)
        return batch_count(samples, self.batch_size, self.drop_last)

    def plan(self, epoch: int) -> list:
        """The batches (index lists; indices when unbatched) of ``epoch`` in order."""
        if self.batch_sampler is not None:
            return [list(b) for b in self.batch_sampler]
        if self.sampler is not None:
            order = list(self.sampler)
        else:
            order = rank_order(self.seed, epoch, len(self.dataset), self.world_size, self.rank,
                               self.shuffle, drop_last=False).tolist()
        return epoch_batches(order, self.batch_size, self.drop_last)

    def __iter__(self) -> EpochIterator:
        self._consumer = threading.get_ident()
        with self._lock:
            if self._batches is not None:  # an abandoned iteration: start the epoch over
                self._shutdown_all()
            self._batches = self.plan(self._epoch)
            self._consumed, self._resume = min(self._resume, len(self._batches)), 0
            self._last_return = None
            self._dirty = self._want_release = False
            kept, self._kept = self._kept, None
            if kept is not None and kept.workers == self._target and self._consumed < len(
                self._batches
            ):
                kept.window.reset(self._batches, self._consumed)
                kept.iterator, kept.delivered = iter(kept.loader), 0
                kept.created = time.perf_counter()
                self._pools.append(kept)
            elif kept is not None:
                shutdown(kept)
            if not self._pools and self._consumed < len(self._batches):
                self._pools.append(self._start_pool(self._consumed))
            self._active = EpochIterator(self)
            return self._active

    def _next(self, it: EpochIterator) -> Any:
        t0 = time.perf_counter()
        self._consumer = threading.get_ident()
        with self._lock:
            if it is not self._active or self._batches is None:
                raise StopIteration
            if self._dirty or self._want_release:
                self._apply()
            if self._consumed >= len(self._batches):
                self._end_epoch()
                raise StopIteration
            try:
                batch = self._next_unit()
            except BaseException:
                self._shutdown_all()  # the next call re-reads this batch with a fresh pool
                raise
            index, epoch, workers = self._consumed, self._epoch, self._target
            unit = self._batches[index]
            self._consumed += 1
            if self._want_release:
                self._apply()
        now = time.perf_counter()
        step = 0.0 if self._last_return is None else t0 - self._last_return
        if self._last_return is not None:
            self._ahead.batch(now - t0 + step)
        hook = self.on_batch
        if hook is not None:
            samples = len(unit) if self._batched else 1
            hook(BatchStats(epoch, index, now - t0, step, workers, samples))
            now = time.perf_counter()  # the hook's time (a pause) is neither wait nor step
        self._last_return = now
        return batch

    # ---- internals (the lock is held) -------------------------------------------------
    def _try_apply(self) -> None:
        if self._lock.acquire(blocking=False):  # else the consumer applies it at the boundary
            try:
                self._apply()
            finally:
                self._lock.release()

    @staticmethod
    def _check_workers(n: int) -> int:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(f"num_workers must be an integer >= 0, got {n!r}")
        if n > MAX_WORKERS:
            raise InputError(f"num_workers must be at most {MAX_WORKERS} (adloader.limits."
                             f"MAX_WORKERS), got {n}")
        return n

    def _apply(self) -> None:
        if self._want_release:
            self._want_release = False
            self._shutdown_all()
        if not self._dirty or threading.get_ident() != self._consumer:
            return  # a pool is started in the consumer's thread only
        self._dirty = False
        if self._batches is None:
            return  # not iterating: the next epoch starts with the new count
        pools = self._pools
        if pools and pools[-1].workers == self._target:
            return
        if not pools:
            if self._consumed < len(self._batches):
                self._pools.append(self._start_pool(self._consumed))
        elif self.handover == "drain":
            ahead = self._ahead.batches() if self._target else 0  # 0 workers: no startup
            start = pools[-1].wait().window.cut(ahead)
            if start < len(self._batches):
                pools.append(self._start_pool(start))
            self._retire_drained()
        elif self.handover == "restart":
            new = self._start_pool(self._consumed)
            while pools:
                shutdown_later(pools.popleft())
            pools.append(new)
        else:
            self._shutdown_all()
            pools.append(self._start_pool(self._consumed))

    def _start_pool(self, start: int) -> WindowPool:
        assert self._batches is not None
        window = BatchWindow(self._batches, start)
        n = self._target
        if n == 0:  # in the consumer's thread: nothing to start
            return WindowPool(lambda: InlineFetch(self._fetch_dataset, window, self._batched,
                                                  self.collate_fn, self.pin_memory), window, 0)
        kwargs: dict[str, Any] = dict(
            num_workers=n, collate_fn=self.collate_fn, pin_memory=self.pin_memory,
            timeout=self.timeout, worker_init_fn=self.worker_init_fn, generator=self.generator,
            multiprocessing_context=self.multiprocessing_context,
            prefetch_factor=self.prefetch_factor, persistent_workers=self.persistent_workers,
        )
        if self._batched:
            kwargs["batch_sampler"] = window
        else:
            kwargs.update(sampler=window, batch_size=None)
        return WindowPool(lambda: DataLoader(self._fetch_dataset, **kwargs), window, n)

    def _retire_drained(self) -> None:
        while len(self._pools) > 1 and self._pools[0].drained:
            shutdown_later(self._pools.popleft())

    def _next_unit(self) -> Any:
        while True:
            if not self._pools:
                self._pools.append(self._start_pool(self._consumed))
            head = self._pools[0]
            if head.drained:
                shutdown_later(self._pools.popleft())
                continue
            first = head.delivered == 0 and head.workers > 0
            asked = time.perf_counter() if first else 0.0
            try:
                batch = next(head.wait().iterator)
            except StopIteration:
                raise RuntimeError("a worker pool ended before its window") from None
            if first:
                self._ahead.started(head.created, asked, time.perf_counter())
            head.delivered += 1
            return batch

    def _end_epoch(self) -> None:
        last = self._pools.pop() if self._pools else None
        self._shutdown_all()
        if last is not None and self.persistent_workers and last.workers > 0:
            self._kept = last
        elif last is not None:
            shutdown_later(last)
        self._batches = self._active = None
        self._epoch += 1
        self._consumed = 0
        self._last_return = None

    def _shutdown_all(self) -> None:
        while self._pools:
            shutdown(self._pools.popleft())
        if self._kept is not None:
            shutdown(self._kept)
            self._kept = None
