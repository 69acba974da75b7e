"""torch's attribute contract for an ``ElasticDataLoader``: it *is* a ``DataLoader``.

``DataLoaderContract`` is the ``torch.utils.data.DataLoader`` subclass the elastic loader
builds on, so that ``isinstance(loader, DataLoader)`` holds where users' code and frameworks
check it, and its attributes read as torch's do. In particular ``sampler`` and
``batch_sampler``: torch's ``DataLoader`` always exposes a sampler (``RandomSampler``,
``SequentialSampler`` or ``_InfiniteConstantSampler`` when none is given) and, when it
batches, a ``BatchSampler`` over it; frameworks read them (Lightning decides whether a loader
shuffles by the sampler's type, and rebuilds the loader around a ``DistributedSampler``;
Accelerate rebuilds the batch sampler). The loader's own order — a shuffle that is a pure
function of (seed, epoch) shared by every rank, each rank reading its share — is exposed as a
``RandomSampler`` (shuffled) or ``SequentialSampler`` (not) that yields exactly the indices
the loader reads this epoch.
"""

from __future__ import annotations

import multiprocessing
import sys
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler
from torch.utils.data.dataloader import _InfiniteConstantSampler

from adloader.client.loader.loader_args import check_context
from adloader.datapath.epoch_order import source_epoch
from adloader.datapath.sample_order import rank_order, samples_per_rank

if TYPE_CHECKING:
    from adloader.client.loader.loader import ElasticDataLoader


def rank_units(loader: ElasticDataLoader, epoch: int) -> list[int]:
    """The dataset indices this rank reads in ``epoch``, in order: the seeded shuffle (or the
    plain order) shared by every rank (ranks without a seed share seed 0, as
    ``DistributedSampler``'s do), strided by rank."""
    return rank_order(loader.seed or 0, source_epoch(loader.epoch_order, epoch),
                      len(loader.dataset), loader.world_size, loader.rank, loader.shuffle,
                      drop_last=False).tolist()


class _RankOrder:
    """The loader's current epoch for this rank; ``set_epoch`` moves the loader's epoch."""

    def __init__(self, loader: ElasticDataLoader) -> None:
        super().__init__(loader.dataset)  # type: ignore[call-arg]  # torch's samplers' own state
        self._loader = weakref.ref(loader)

    def __iter__(self) -> Iterator[int]:
        loader = self._loader()
        return iter(rank_units(loader, loader.epoch) if loader is not None else ())

    def __len__(self) -> int:
        loader = self._loader()
        return 0 if loader is None else samples_per_rank(len(loader.dataset), loader.world_size)

    def set_epoch(self, epoch: int) -> None:
        loader = self._loader()
        if loader is not None:
            loader.set_epoch(epoch)


class RankShuffle(_RankOrder, RandomSampler):
    """A seeded (or ranked) shuffle: the loader's (seed, epoch, rank) order."""


class RankSequence(_RankOrder, SequentialSampler):
    """Ranks without a shuffle: every ``world_size``-th index from ``rank``."""


def sampler_view(loader: ElasticDataLoader, given) -> Sampler:
    """What ``loader.sampler`` is: the sampler given, else the one torch would expose, else
    the loader's own order (a seed or several ranks)."""
    if given is not None:
        return given
    if loader._iterable:
        return _InfiniteConstantSampler()
    if loader.seed is None and loader.world_size == 1:
        return (RandomSampler(loader.dataset, generator=loader.generator) if loader.shuffle
                else SequentialSampler(loader.dataset))
    return RankShuffle(loader) if loader.shuffle else RankSequence(loader)


def batch_sampler_view(loader: ElasticDataLoader, given, sampler: Sampler):
    """What ``loader.batch_sampler`` is: the one given, None when unbatched, else torch's
    ``BatchSampler`` over ``sampler``."""
    if given is not None or loader.batch_size is None:
        return given
    return BatchSampler(sampler, loader.batch_size, loader.drop_last)


FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
T_co = TypeVar("T_co", covariant=True)


class DataLoaderContract(DataLoader[T_co]):
    """A ``torch.utils.data.DataLoader`` whose attributes a subclass fills in its own way:
    torch's settings that cannot change after ``__init__`` (``FIXED``), the start method
    checked as torch checks it, ``sampler``/``batch_sampler`` as torch exposes them, and the
    names torch's own code reads (``_auto_collation``, ``_iterator``). torch's ``__init__``
    is not run: the subclass sets what it would.
    """

    _fixed = False  # set True at the end of the subclass's __init__
    _mp_context = None
    _views: tuple | None = None  # (seed, sampler, batch_sampler) as last built

    # ---- torch's settings ------------------------------------------------------------
    def __setattr__(self, attr: str, val) -> None:
        if self._fixed and attr in FIXED:
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{self.__class__.__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def multiprocessing_context(self):
        return self._mp_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context) -> None:
        self._mp_context = check_context(context, self._target)

    def _context(self):
        """The start method workers use: the user's (given here, or set globally with
        ``multiprocessing.set_start_method``), else fork on Linux (spawn costs ~1 s)."""
        if (self._mp_context is None and sys.platform.startswith("linux")
                and multiprocessing.get_start_method(allow_none=True) is None):
            return torch.multiprocessing.get_context("fork")
        return self._mp_context

    @property
    def _auto_collation(self) -> bool:  # torch's name: batches are collated
        return self._batched

    @property
    def _iterator(self):  # torch's name: the live iterator, if any
        return self._active_iterator()

    @_iterator.setter
    def _iterator(self, value) -> None:
        if value is None:
            self._active = lambda: None

    @property
    def sampler(self):  # torch's: the sampler given, or the one the loader's order is
        return self._view()[1]

    @property
    def batch_sampler(self):  # torch's: the one given, or a BatchSampler over ``sampler``
        return self._view()[2]

    def _view(self) -> tuple:
        if self._views is None or self._views[0] != self.seed:  # load_state_dict sets a seed
            sampler = sampler_view(self, self._sampler)
            self._views = (self.seed, sampler,
                           batch_sampler_view(self, self._batch_sampler, sampler))
        return self._views
