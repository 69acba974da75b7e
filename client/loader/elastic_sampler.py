"""The batches of an epoch, windows over them, the worker pool reading one, threaded fetch.

An ``ElasticDataLoader`` plans an epoch once (``epoch_batches``) and hands each worker pool a
``BatchWindow``: the batches from a position on. Resizing cuts the old window a little after where
it stopped sending (so that it keeps the trainer fed while the new pool starts) and opens the
next one there, so every batch is read exactly once whatever the number
of pools (DESIGN.md, "the cleanest resize").
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate, default_convert
from torch.utils.data._utils.pin_memory import pin_memory


def epoch_batches(order: Sequence[int], batch_size: int | None, drop_last: bool) -> list:
    """Consecutive chunks of ``order`` (the last partial one dropped with ``drop_last``).

    With ``batch_size=None`` (no automatic batching) each unit is one sample index.
    """
    if batch_size is None:
        return list(order)  # a sampler may yield lists (torch hands each to the dataset)
    indices = [int(i) for i in order]
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    return [indices[i : i + batch_size] for i in range(0, stop, batch_size)]


def batch_count(samples: int, batch_size: int | None, drop_last: bool) -> int:
    if batch_size is None:
        return samples
    return samples // batch_size if drop_last else -(-samples // batch_size)


class BatchWindow:
    """Batches ``[start, stop)`` of an epoch, handed out in order to one torch DataLoader.

    Passed as that loader's ``batch_sampler`` (or ``sampler`` when unbatched); torch draws from
    it only in the consumer's thread. ``next_pos`` is the first batch not yet handed out and
    ``cut()`` ends the window there: what was handed out is still delivered, nothing more.
    ``redo`` (positions a dead pool left outstanding) is handed out first; ``handed[k]`` is the
    position of the k-th unit handed out (torch's send index k).
    """

    def __init__(self, batches: list, start: int, stop: int | None = None,
                 redo: Sequence[int] = ()) -> None:
        self.reset(batches, start, stop, redo)

    def reset(self, batches: list, start: int, stop: int | None = None,
              redo: Sequence[int] = ()) -> None:
        self.batches = batches
        self.start = start
        self.stop = len(batches) if stop is None else stop
        self.next_pos = start
        self.redo = list(redo)
        self.handed: list[int] = []

    def __iter__(self) -> Iterator:
        batches, handed = self.batches, self.handed
        for pos in self.redo:
            handed.append(pos)
            yield batches[pos]
        while self.next_pos < self.stop:
            pos = self.next_pos
            self.next_pos += 1
            handed.append(pos)
            yield batches[pos]

    def __len__(self) -> int:
        return len(self.redo) + self.stop - self.start

    def cut(self, ahead: int = 0) -> int:
        """End the window ``ahead`` batches after the first not handed out yet; returns the end."""
        self.stop = min(self.stop, self.next_pos + ahead)
        return self.stop


class WindowPool:
    """One torch DataLoader (``workers`` processes) reading one window of the epoch.

    Built (its workers forked) where it is made, which is the consumer's thread; torch's
    ``iter`` returns once the workers are forked and their first batches asked for, so the
    consumer goes on reading the old pool while they start. A failure to start is raised
    by ``wait``, where the consumer next reads this pool.
    """

    def __init__(self, build: Callable[[], DataLoader], window: BatchWindow,
                 workers: int) -> None:
        self.window, self.workers, self.delivered = window, workers, 0
        self.created = time.perf_counter()
        self.loader: DataLoader | None = None
        self.iterator: Any = None
        self._error: BaseException | None = None
        try:
            self.loader = build()
            self.iterator = iter(self.loader)
        except Exception as exc:
            self._error = exc

    def wait(self) -> WindowPool:
        if self._error is not None:
            raise self._error
        return self

    @property
    def drained(self) -> bool:
        return self.delivered >= len(self.window)


class InlineFetch:
    """The 0-worker pool: fetch and collate in the consumer's thread, as torch's single-process
    loader does (``__getitems__`` when the dataset has it, pinning with ``pin_memory`` on
    CUDA), without a torch DataLoader's per-batch bookkeeping. A sample that raises costs its
    batch only: the window has moved past it (``processed``) and the next call goes on."""

    def __init__(self, dataset, window: BatchWindow, batched: bool, collate_fn,
                 pin_memory: bool, pin_memory_device: str = "") -> None:
        self.dataset, self.window, self.batched = dataset, window, batched
        self.collate = collate_fn or (default_collate if batched else default_convert)
        self.pin = pin_memory and torch.cuda.is_available()
        self.device = pin_memory_device or None
        self.getitems = getattr(dataset, "__getitems__", None) if batched else None
        self.units = iter(window)
        self.processed = False

    def __iter__(self) -> InlineFetch:
        return self

    def __next__(self) -> Any:
        self.processed = False
        unit = next(self.units)
        self.processed = True
        dataset = self.dataset
        if not self.batched:
            data = dataset[unit]
        elif self.getitems is not None:
            data = self.getitems(unit)
        else:
            data = [dataset[i] for i in unit]
        data = self.collate(data)
        return pin_memory(data, self.device) if self.pin else data


class Lookahead:
    """How far past its sent batches an old pool keeps reading: L = ⌈startup / interval⌉.

    ``startup`` (a new pool's creation to its first batch) and ``interval`` (the consumer's
    wait + step per batch) are exponential moving averages of what the loader observes.
    """

    EMA = 0.3  # weight of a new observation
    WAITED_S = 0.002  # a first batch that took longer than this was waited for
    MAX = 64

    def __init__(self, startup_s: float = 0.1) -> None:
        self.startup_s = startup_s
        self.interval_s: float | None = None

    def batch(self, interval_s: float) -> None:
        old = self.interval_s
        self.interval_s = interval_s if old is None else old + self.EMA * (interval_s - old)

    def started(self, created: float, asked: float, got: float) -> None:
        """A pool's first batch, asked for at ``asked`` and got at ``got``; if it was ready
        already, the pool started before ``asked`` and that only bounds the estimate."""
        if got - asked > self.WAITED_S:
            sample = got - created
        else:
            sample = min(self.startup_s, asked - created)
        self.startup_s += self.EMA * (sample - self.startup_s)

    def batches(self) -> int:
        if self.interval_s is None:
            return 0
        return min(self.MAX, math.ceil(self.startup_s / max(self.interval_s, 1e-4)))


def shutdown(pool: WindowPool) -> None:
    stop = getattr(pool.iterator, "_shutdown_workers", None)  # joins the worker processes
    if stop is not None:
        stop()


def shutdown_later(pool: WindowPool) -> None:
    if pool.workers:
        name = "adloader-retire"
        threading.Thread(target=shutdown, args=(pool,), name=name, daemon=True).start()


class ThreadedDataset(Dataset):
    """Reads the samples of one batch with ``threads`` threads (Locality-aware loading §III-B).

    torch's fetcher calls ``__getitems__`` with a batch's indices; each worker process maps
    ``dataset[i]`` over them with its own ``ThreadPoolExecutor`` (created lazily, after fork),
    or, when the dataset reads batches itself (its own ``__getitems__``: a cache's batched
    policy, chunk runs), hands each thread a contiguous part of the batch, order kept.
    """

    def __init__(self, dataset: Dataset, threads: int) -> None:
        self.dataset = dataset
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list:
        if self._pool is None or self._pid != os.getpid():
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="adloader-fetch")
            self._pid = os.getpid()
        batched = getattr(self.dataset, "__getitems__", None)
        if batched is None or not indices:
            return list(self._pool.map(self.dataset.__getitem__, indices))
        step = -(-len(indices) // max(self.threads, 1))  # the dataset's own batched read
        parts = [list(indices[k:k + step]) for k in range(0, len(indices), step)]
        return [x for part in self._pool.map(batched, parts) for x in part]

    def __getstate__(self) -> dict:
        return {"dataset": self.dataset, "threads": self.threads, "_pool": None, "_pid": -1}
