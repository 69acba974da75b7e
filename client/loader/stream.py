"""``IterableDataset`` under an ``ElasticDataLoader``: torch's semantics, elastic at shards.

A plain ``IterableDataset`` runs exactly as torch runs it (each of n workers iterates its own
replica and shards with ``get_worker_info``; ``worker_init_fn``, the length warning and the
end of each worker's stream are torch's), and a resize takes effect at its next epoch: a
stream that shards itself by worker id cannot be re-sharded mid-way without losing or
repeating samples.

A ``ShardedStream`` says where its boundaries are (``shards()``, ``read(shard)``): WebDataset
tar files, HF dataset parts, log files. The loader then hands shards to workers one at a time
from a shared counter, as it hands batches to a window; ``resize(n)`` ends the running pool at
the next shard boundary (each of its workers finishes the shard it is reading) and starts n
workers on the shards after it, so every sample is read once. Each batch carries which shard
its samples came from, so ``state_dict()`` names the shards done and how far each open shard
was delivered; ``load_state_dict`` resumes there with any worker count (an open shard's
delivered samples are skipped with ``read(shard, skip)``; the default reads and drops them).
"""

from __future__ import annotations

import itertools
import multiprocessing
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from adloader.client.loader.pool_iter import QuietLoader
from adloader.client.loader.torch_support import order_kwargs

if TYPE_CHECKING:
    from adloader.client.loader.loader import ElasticDataLoader


class ShardedStream(IterableDataset):
    """A stream in shards. Subclasses give ``shards()`` and ``read(shard, skip=0)``.

    Run by torch's own DataLoader it shards by worker id like any ``IterableDataset``; run
    by an ``ElasticDataLoader`` it is handed out a shard at a time (see the module).
    """

    @abstractmethod
    def shards(self) -> Sequence:
        """The shard keys, in order (file names, part ids, …)."""

    @abstractmethod
    def read(self, shard) -> Iterator:
        """The samples of one shard, in order."""

    def read_from(self, shard, skip: int) -> Iterator:
        """``read(shard)`` past its first ``skip`` samples; override with a faster seek."""
        return itertools.islice(self.read(shard), skip, None)

    def __iter__(self) -> Iterator:
        info = get_worker_info()
        shards = list(self.shards())
        mine = shards if info is None else shards[info.id :: info.num_workers]
        for shard in mine:
            yield from self.read(shard)


def length(loader: ElasticDataLoader) -> int:
    """torch's ``len`` of an iterable-style loader (and the warning if more samples come)."""
    n = loader._IterableDataset_len_called = len(loader.dataset)
    if loader.batch_size is not None:
        n = n // loader.batch_size if loader.drop_last else -(-n // loader.batch_size)
    return n


def _torch_loader(loader: ElasticDataLoader, dataset, n: int, **over) -> DataLoader:
    kwargs: dict[str, Any] = dict(
        batch_size=loader.batch_size, num_workers=n, collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory, drop_last=loader.drop_last, timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn, generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if n else None,
        persistent_workers=loader.persistent_workers and n > 0,
        pin_memory_device=loader.pin_memory_device, **order_kwargs(loader.in_order),
        multiprocessing_context=loader._context() if n else None,
    )
    kwargs.update(over)
    inner = QuietLoader(dataset, **kwargs)
    inner._IterableDataset_len_called = loader._IterableDataset_len_called
    return inner


def iterate(loader: ElasticDataLoader) -> Iterator:
    if isinstance(loader.dataset, ShardedStream):
        return ShardIterator(loader)
    return StreamIterator(loader)


class StreamIterator:
    """A plain stream: one torch DataLoader for the epoch (kept with ``persistent_workers``)."""

    def __init__(self, loader: ElasticDataLoader) -> None:
        self._loader = loader
        kept = loader._stream_kept
        if kept is not None and kept.num_workers == loader.num_workers:
            inner = kept
        else:
            inner = _torch_loader(loader, loader.dataset, loader.num_workers)
            if inner.persistent_workers:
                loader._stream_kept = inner
        inner._IterableDataset_len_called = loader._IterableDataset_len_called
        self._it = iter(inner)
        self.epoch = loader.epoch

    def __getattr__(self, name: str):  # torch's iterator internals (``_workers``, …)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_it"], name)

    def __iter__(self) -> StreamIterator:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self._loader._epoch = max(self._loader._epoch, self.epoch + 1)
            raise

    def __len__(self) -> int:
        return len(self._loader)


class _ShardFeed(IterableDataset):
    """What one pool's workers iterate: shards ``order[next…stop)`` taken one at a time."""

    def __init__(self, stream: ShardedStream, order: list, counter, stop, skips: dict) -> None:
        self.stream, self.order, self.counter, self.stop = stream, order, counter, stop
        self.skips = skips  # shard position → samples already delivered (a resume)

    def __iter__(self) -> Iterator:
        while True:
            with self.counter.get_lock():
                pos = self.counter.value
                if pos >= self.stop.value:
                    return
                self.counter.value = pos + 1
            skip = self.skips.get(pos, 0)
            shard = self.order[pos]
            samples = iter(self.stream.read_from(shard, skip) if skip else self.stream.read(shard))
            count = skip
            item = next(samples, _END)
            while item is not _END:
                after = next(samples, _END)
                count += 1
                yield (pos, count, after is _END), item
                item = after


_END = object()


class _TaggedCollate:
    """Collate the samples of a batch, keeping each one's (shard, count, last) tag beside."""

    def __init__(self, collate) -> None:
        self.collate = collate

    def __call__(self, items: list) -> tuple:
        return [t for t, _ in items], self.collate([x for _, x in items])


class ShardIterator:
    """A ``ShardedStream``'s epoch: pools over a shared shard counter, cut at resizes."""

    def __init__(self, loader: ElasticDataLoader) -> None:
        self._loader = loader
        self.epoch = loader.epoch
        self.order = list(loader.dataset.shards())
        resume = loader._resume_order or {}
        loader._resume_order = None
        self.done: set[int] = set(resume.get("done", []))
        self.open: dict[int, int] = {int(k): v for k, v in resume.get("open", {}).items()}
        self.pending = [p for p in range(len(self.order)) if p not in self.done]
        self.pools: list = []  # [(iterator, counter, stop)] oldest first
        self._next = 0  # index into pending of the next shard not given to a pool
        loader._stream_state = self.state
        self._start_pool()

    def state(self) -> dict:
        return {"done": sorted(self.done), "open": {str(k): v for k, v in self.open.items()}}

    def _start_pool(self) -> None:
        loader = self._loader
        ctx = loader._context()
        n = loader.num_workers
        order = [self.order[p] for p in self.pending]
        skips = {i: self.open[p] for i, p in enumerate(self.pending) if p in self.open}
        mp = ctx or multiprocessing
        counter = mp.Value("q", self._next)
        stop = mp.Value("q", len(order), lock=False)
        feed = _ShardFeed(loader.dataset, order, counter, stop, skips)
        over: dict[str, Any] = {"drop_last": False, "persistent_workers": False}
        if loader.batch_size is not None:
            over["collate_fn"] = _TaggedCollate(loader.collate_fn or default_collate)
        inner = _torch_loader(loader, feed, n, **over)
        self.pools.append((iter(inner), counter, stop, n))
        self._workers = n

    def __iter__(self) -> ShardIterator:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def _resize_if_asked(self) -> None:
        loader = self._loader
        if not loader._dirty or loader.num_workers == self._workers:
            return
        loader._dirty = False
        _, counter, stop, _ = self.pools[-1]
        with counter.get_lock():
            stop.value = counter.value  # the old pool ends at the next shard boundary
            self._next = counter.value
        self._start_pool()

    def __next__(self) -> Any:
        loader = self._loader
        self._resize_if_asked()
        while self.pools:
            it = self.pools[0][0]
            try:
                tagged = next(it)
            except StopIteration:
                self.pools.pop(0)
                continue
            if loader.batch_size is None:
                tags, batch = [tagged[0]], tagged[1]
            else:
                tags, batch = tagged
            for pos, count, last in tags:
                shard = self.pending[pos]
                if last:
                    self.done.add(shard)
                    self.open.pop(shard, None)
                else:
                    self.open[shard] = count
            return batch
        loader._epoch = max(loader._epoch, self.epoch + 1)
        loader._stream_state = None
        raise StopIteration
