"""The map-style dataset an ``ElasticDataLoader`` reads through: cache → staging → storage.

``CachedDataset(decode, source, cache, prefetcher)``: sample i is ``decode(raw_bytes, i)``
(decoding and augmentation, in the worker), where the raw bytes come from the shared cache
(``SharedSampleCache``), else the prefetcher's staging buffer, else the storage ``source``.
torch's fetcher hands a worker a whole local batch (``__getitems__``), so a batched policy
(Lobster) sees the iteration it plans for. Where every access was served from is counted per
epoch in the cache's shared counters (``stats``).

Typical use (the order is the loader's, a pure function of its seed)::

    dataset = CachedDataset(decode, source)
    loader = ElasticDataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, seed=0)
    plan = AccessPlan.from_loader(loader, epochs)
    cache = SharedSampleCache(8 << 30, len(source), "belady", plan)  # before workers fork
    prefetcher = Prefetcher(plan, source, cache)
    dataset.attach(cache, prefetcher)
    prefetcher.start()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import Dataset

from adloader.client.data.cache_store import SharedSampleCache
from adloader.client.data.prefetch import Prefetcher

Decode = Callable[[bytes, int], Any]


class CachedDataset(Dataset):
    """``decode(bytes, index)`` over ``source``'s samples, read through ``cache``/``prefetcher``.

    Either may be None (no cache: every read goes to the staging buffer or storage).
    ``wait_s``: how long a worker waits for a sample the prefetcher has in flight before it
    reads it from storage itself.
    """

    def __init__(self, decode: Decode, source, cache: SharedSampleCache | None = None,
                 prefetcher: Prefetcher | None = None, wait_s: float = 10.0) -> None:
        self.decode, self.source, self.wait_s = decode, source, wait_s
        self.attach(cache, prefetcher)

    def attach(self, cache: SharedSampleCache | None = None,
               prefetcher: Prefetcher | None = None) -> None:
        """Read through ``cache``/``prefetcher`` from now on (before the workers start)."""
        self.cache = cache
        self.staging = prefetcher.staging if prefetcher is not None else None

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        return self.decode(self.raw([index])[0], index)

    def __getitems__(self, indices: Sequence[int]) -> list:
        return [self.decode(data, i) for data, i in zip(self.raw(indices), indices, strict=True)]

    def raw(self, indices: Sequence[int]) -> list[bytes]:
        """The raw bytes of ``indices`` (one local batch), recording the accesses."""
        if self.staging is not None:
            self.staging.note_access(len(indices))
        if self.cache is not None:
            return self.cache.fetch_many(indices, self._load)
        return [self._load(int(i))[0] for i in indices]

    def _load(self, index: int) -> tuple[bytes, str]:
        if self.staging is not None:
            data = self.staging.take(index, self.wait_s)
            if data is not None:
                return data, "staged"
        return self.source.read(index), "storage"

    def stats(self) -> list[dict]:
        """Per epoch: accesses served from ram / disk / staged / storage, and the hit ratio."""
        return self.cache.stats() if self.cache is not None else []
