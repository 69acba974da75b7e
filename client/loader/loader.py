"""ElasticDataLoader: a drop-in ``torch.utils.data.DataLoader`` whose worker count p changes live.

It takes torch's arguments and checks them as torch does, yields the same batches (with no
``seed=``, the same shuffle for the same ``torch.manual_seed`` or ``generator``), and raises a
sample's error for its batch and goes on. ``resize(n)`` moves to n workers at the next batch
boundary with nothing lost, repeated or reordered (``adloader.client.loader.epoch``); a dead
worker is replaced and its batches re-read. An ``IterableDataset`` runs as torch runs it and
resizes at its next epoch, or at the next shard of a ``ShardedStream``
(``adloader.client.loader.stream``).
"""

from __future__ import annotations

import base64
import contextlib
import threading
import weakref
from typing import Any, TypeVar

import torch
from torch.utils.data import IterableDataset, RandomSampler
from torch.utils.data._utils.collate import default_collate, default_convert
from torch.utils.data.dataloader import _DatasetKind
from torch.utils.data.datapipes.datapipe import IterDataPipe

from adloader.client.loader import stream
from adloader.client.loader.batch_segments import SegmentCollate
from adloader.client.loader.elastic_sampler import (
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
from adloader.client.loader.epoch import BatchStats, EpochIterator
from adloader.client.loader.loader_args import check_arguments, check_elastic
from adloader.client.loader.loader_contract import DataLoaderContract, rank_units
from adloader.client.loader.pool_iter import PoolLoader
from adloader.client.loader.torch_support import order_kwargs
from adloader.datapath.sample_order import samples_per_rank
from adloader.errors import InputError
from adloader.limits import MAX_WORKERS

__all__ = ["BatchStats", "ElasticDataLoader"]

HANDOVERS = ("inplace", "drain", "restart", "serial")
STATE_FIELDS = ("dataset_size", "batch_size", "world_size", "rank", "shuffle", "drop_last")
T_co = TypeVar("T_co", covariant=True)


def _draw_seed(generator) -> int:
    """One int64 from ``generator`` (or the global RNG), as torch's iterator and sampler draw."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class ElasticDataLoader(DataLoaderContract[T_co]):
    """``DataLoader`` arguments plus ``seed``/``rank``/``world_size``/``threads``; resizable live.

    Each ``iter(loader)`` is an independent pass over the current epoch (at the resume position
    after ``load_state_dict``); the newest one follows ``resize`` and ``on_batch``. A completed
    epoch advances ``epoch`` by one; ``set_epoch`` picks one. ``seed`` makes the shuffle a pure
    function of (seed, epoch), as across ranks it must be; without it the shuffle is torch's.
    ``on_batch`` (None or a callable taking ``BatchStats``) runs in the consumer's thread before
    each batch is returned and may call ``resize``/``release`` or block. ``handover`` picks how a
    resize treats the running pool: "inplace" (default: workers forked into it or retired
    from it, the others loading on), "drain" (a new pool of n workers, the old one delivering
    what it read ahead), "restart" (new pool at the consumer's position, old torn down in the
    background; prefetched batches re-read), "serial".
    With ``threads`` > 0 the workers see the dataset wrapped in a ``ThreadedDataset``.
    ``epoch_order`` (with ``seed``): epoch e reads epoch ``epoch_order[e]``'s shuffle (SOLAR).
    """

    def __init__(
        self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
        batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
        drop_last: bool = False, timeout: float = 0, worker_init_fn=None,
        multiprocessing_context=None, generator=None, *, prefetch_factor: int | None = None,
        persistent_workers: bool = False, pin_memory_device: str = "", in_order: bool = True,
        seed: int | None = None, rank: int | None = None, world_size: int | None = None,
        threads: int = 0, handover: str = "inplace", epoch_order=None,
    ) -> None:
        self._target = self._check_workers(num_workers)
        self._iterable = isinstance(dataset, IterableDataset)
        if isinstance(dataset, IterDataPipe) and shuffle is not None:
            dataset = torch.utils.data.graph_settings.apply_shuffle_settings(dataset,
                                                                             shuffle=shuffle)
            shuffle = None
        shuffle = check_arguments(dataset, self._iterable, batch_size, shuffle, sampler,
                                  batch_sampler, drop_last, num_workers, timeout,
                                  prefetch_factor, persistent_workers)
        rank, world_size, self.epoch_order = check_elastic(
            threads, handover, HANDOVERS, epoch_order, seed, sampler, batch_sampler,
            self._iterable, rank, world_size)
        self.dataset = dataset
        self.batch_size = None if batch_sampler is not None else batch_size
        self.shuffle = shuffle
        self._sampler, self._batch_sampler = sampler, batch_sampler  # as given (or None)
        self._views: tuple | None = None  # torch's view of them, made on first use
        self._batched = batch_size is not None or batch_sampler is not None
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if self._batched else default_convert)
        self._dataset_kind = _DatasetKind.Iterable if self._iterable else _DatasetKind.Map
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.drop_last = drop_last if batch_sampler is None else False
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        order_kwargs(in_order)  # refused here where this torch has no in_order
        self.in_order = in_order
        self.seed = None if seed is None else int(seed)
        self.rank, self.world_size = rank, world_size
        self.threads = threads
        self.handover = handover
        self.on_batch = None
        self._fetch_dataset = ThreadedDataset(dataset, threads) if threads else dataset
        self._lock = threading.RLock()
        self._dirty = False  # a resize waits to be applied
        self._want_release = False
        self._epoch = 0
        self._resume = 0  # where the next iteration starts (load_state_dict)
        self._resume_order: dict | None = None  # how the resumed epoch's shuffle was drawn
        self._order: dict | None = None  # how the current iteration's shuffle was drawn
        self._active = lambda: None  # the newest iterator, weakly: del it ends its workers
        self._kept: WindowPool | None = None  # a persistent pool between epochs
        self._ahead = Lookahead()
        self._consumer: int | None = None  # the thread iterating: the only one that forks
        self._IterableDataset_len_called = None
        self._stream_kept = None  # a plain stream's torch loader kept for persistent workers
        self._stream_state = None  # a ShardedStream epoch's live state (shards done, open)
        self._fixed = True  # torch's settings that cannot change from here on
        self.check_worker_number_rationality()

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
        it = self._active_iterator()
        return it.consumed if it is not None else self._resume

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
            it = self._active_iterator()
            if it is not None:
                it.close()
            self._active = lambda: None
            self._drop_kept()

    def set_epoch(self, epoch: int) -> None:
        with self._lock:
            if epoch != self._epoch:
                self._epoch, self._resume, self._resume_order = int(epoch), 0, None
        given = self._sampler, getattr(self._batch_sampler, "sampler", None), self._batch_sampler
        for s in given:
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)

    def state_dict(self) -> dict:
        with self._lock:
            it = self._active_iterator()
            return {
                "epoch": self._epoch, "consumed": self.consumed, "seed": self.seed,
                "order": self._order_state(it),
                "dataset_size": None if self._iterable else len(self.dataset),
                "batch_size": self.batch_size, "world_size": self.world_size,
                "rank": self.rank, "shuffle": self.shuffle, "drop_last": self.drop_last,
                "num_workers": self._target,
                "epoch_order": None if self.epoch_order is None else list(self.epoch_order),
            }

    def _order_state(self, it) -> dict | None:
        if self._iterable:
            live = self._stream_state
            return live() if live is not None else self._resume_order
        return self._order if it is not None else self._resume_order

    def load_state_dict(self, state: dict) -> None:
        """Resume where ``state`` was taken: the next iteration continues that epoch."""
        missing = [k for k in ("epoch", "consumed", "seed", *STATE_FIELDS) if k not in state]
        if missing:
            raise InputError(f"loader state: missing field {missing[0]!r}")
        mine = self.state_dict()
        for key in (*STATE_FIELDS, "epoch_order"):  # epoch_order: absent in old states
            if state.get(key, mine[key]) != mine[key]:
                raise InputError(
                    f"loader state: {key} is {state[key]!r}, this loader has {mine[key]!r}"
                )
        with self._lock:
            self.close()
            seed = state["seed"]
            self.seed = None if seed is None else int(seed)
            self._epoch, self._resume = int(state["epoch"]), int(state["consumed"])
            self._resume_order = state.get("order")

    # ---- iteration -------------------------------------------------------------------
    def __len__(self) -> int:
        if self._iterable:
            return stream.length(self)
        if self._batch_sampler is not None:
            return len(self._batch_sampler)
        if self._sampler is not None:
            samples = len(self._sampler)
        else:
            samples = samples_per_rank(len(self.dataset), self.world_size)
        return batch_count(samples, self.batch_size, self.drop_last)

    def _draw_order(self) -> dict | None:
        """How this epoch's shuffle is drawn, consuming the RNG as torch's RandomSampler does."""
        if (self.seed is not None or not self.shuffle or self._sampler is not None
                or self._batch_sampler is not None or self.world_size > 1):
            return None
        if self.generator is None:
            return {"seed": _draw_seed(None)}
        state = self.generator.get_state()
        return {"generator": base64.b64encode(state.numpy().tobytes()).decode()}

    def plan(self, epoch: int, order: dict | None = None) -> list:
        """The batches (index lists; indices when unbatched) of ``epoch`` in order."""
        if self._batch_sampler is not None:
            return [list(b) for b in self._batch_sampler]
        if self._sampler is not None:
            units = list(self._sampler)
        elif order is not None:
            n = len(self.dataset)
            if "seed" in order:
                g = torch.Generator()
                g.manual_seed(int(order["seed"]))
            elif self.generator is not None and self._order is order:
                g = self.generator  # the user's generator advances as torch's sampler has it
            else:
                g = torch.Generator()
                raw = base64.b64decode(order["generator"])
                g.set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
            units = RandomSampler(range(n), generator=g).__iter__()
            units = list(units)
        elif self.seed is None and self.shuffle and self.world_size == 1:
            raise InputError("the shuffle of an ElasticDataLoader without seed= is torch's, drawn "
                             "from its RNG when the epoch starts; pass seed= to know it ahead")
        else:  # a seed, no shuffle, or ranks (which share seed 0, as DistributedSampler's)
            units = rank_units(self, epoch)
        return epoch_batches(units, self.batch_size, self.drop_last)

    def __iter__(self):
        self._consumer = threading.get_ident()
        if self._iterable:
            return stream.iterate(self)
        with self._lock:
            old = self._active_iterator()
            if old is not None and self.persistent_workers:
                old.close()  # torch resets its one persistent iterator; ours starts over
            base_seed = _draw_seed(self.generator)
            if self._resume_order is not None:
                self._order, self._resume_order = self._resume_order, None
            else:
                self._order = self._draw_order()
            batches = self.plan(self._epoch, self._order)
            start, self._resume = self._resume, 0
            self._dirty = self._want_release = False
            kept, self._kept = self._kept, None
            it = EpochIterator(self, self._epoch, batches, start, base_seed, kept)
            self._active = weakref.ref(it)
            return it

    # ---- internals (the lock is held) -------------------------------------------------
    def _active_iterator(self) -> EpochIterator | None:
        return self._active()

    def _try_apply(self) -> None:
        if self._lock.acquire(blocking=False):  # else the consumer applies it at the boundary
            try:
                it = self._active_iterator()
                if it is not None:
                    it.apply()
                else:
                    self._want_release = False
                    if self._dirty and self._kept is not None:
                        self._drop_kept()
            finally:
                self._lock.release()

    @staticmethod
    def _check_workers(n: int) -> int:
        if isinstance(n, bool) or not isinstance(n, int):
            raise InputError(f"num_workers must be an integer >= 0, got {n!r}")
        if n < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if n > MAX_WORKERS:
            raise InputError(f"num_workers must be at most {MAX_WORKERS} (adloader.limits."
                             f"MAX_WORKERS), got {n}")
        return n

    def _make_pool(self, window: BatchWindow, n: int, seed: int) -> WindowPool:
        if n == 0:  # in the consumer's thread: nothing to start
            return WindowPool(lambda: InlineFetch(self._fetch_dataset, window, self._batched,
                                                  self.collate_fn, self.pin_memory,
                                                  self.pin_memory_device), window, 0)
        generator = torch.Generator()  # a throwaway: the user's RNG is drawn once, in __iter__
        collate_fn = self.collate_fn
        if collate_fn is default_collate and self._batched and not self.pin_memory:
            collate_fn = SegmentCollate.for_pool(n, self.prefetch_factor)  # reused segments
        kwargs: dict[str, Any] = dict(
            num_workers=n, collate_fn=collate_fn, pin_memory=self.pin_memory,
            timeout=self.timeout, worker_init_fn=self.worker_init_fn, generator=generator,
            multiprocessing_context=self._context(), prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
            pin_memory_device=self.pin_memory_device, **order_kwargs(self.in_order),
        )
        if self._batched:
            kwargs["batch_sampler"] = window
        else:
            kwargs.update(sampler=window, batch_size=None)
        def build() -> PoolLoader:
            pool = PoolLoader(self._fetch_dataset, **kwargs)
            pool.base_seed = seed
            return pool

        return WindowPool(build, window, n)

    def _epoch_done(self, it: EpochIterator, last: WindowPool | None) -> None:
        """The newest iterator ended its epoch: keep a persistent pool, advance the epoch."""
        self._drop_kept()
        if last is not None and self.persistent_workers and last.workers > 0:
            self._kept = last
        elif last is not None:
            shutdown_later(last)
        self._active = lambda: None
        self._epoch += 1
        self._order = None

    def _drop_kept(self) -> None:
        if self._kept is not None:
            shutdown(self._kept)
            self._kept = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._drop_kept()
