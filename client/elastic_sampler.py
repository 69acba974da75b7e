"""The batches of an epoch as a list, windows over it that a worker pool reads, threaded fetch.

An ``ElasticDataLoader`` plans an epoch once (``epoch_batches``) and hands each worker pool a
``BatchWindow``: the batches from a position on. Resizing cuts the old window where it stopped
sending and opens the next one there, so every batch is read exactly once whatever the number
of pools (DESIGN.md, "the cleanest resize").
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torch.utils.data import Dataset


def epoch_batches(order: Sequence[int], batch_size: int | None, drop_last: bool) -> list:
    """Consecutive chunks of ``order`` (the last partial one dropped with ``drop_last``).

    With ``batch_size=None`` (no automatic batching) each unit is one sample index.
    """
    indices = [int(i) for i in order]
    if batch_size is None:
        return indices
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
    """

    def __init__(self, batches: list, start: int) -> None:
        self.reset(batches, start)

    def reset(self, batches: list, start: int) -> None:
        self.batches = batches
        self.start = start
        self.stop = len(batches)
        self.next_pos = start

    def __iter__(self) -> Iterator:
        while self.next_pos < self.stop:
            unit = self.batches[self.next_pos]
            self.next_pos += 1
            yield unit

    def __len__(self) -> int:
        return self.stop - self.start

    def cut(self) -> int:
        """End the window at the first batch not handed out yet; returns that position."""
        self.stop = self.next_pos
        return self.stop


class ThreadedDataset(Dataset):
    """Reads the samples of one batch with ``threads`` threads (Locality-aware loading §III-B).

    torch's fetcher calls ``__getitems__`` with a batch's indices; each worker process maps
    ``dataset[i]`` over them with its own ``ThreadPoolExecutor`` (created lazily, after fork).
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
        return list(self._pool.map(self.dataset.__getitem__, indices))

    def __getstate__(self) -> dict:
        return {"dataset": self.dataset, "threads": self.threads, "_pool": None, "_pid": -1}
