"""``AcceleratedLoader``: an ``ElasticDataLoader`` that an Accelerate ``Accelerator`` prepared.

What ``accelerator.prepare`` does for a loader, done by the loader itself, so that the loader
prepared is the loader given (the same object, which ``attach``'s master goes on driving
with ``resize``, and whose ``state_dict`` goes on saying its position). Each batch is placed on the
accelerator's device, as Accelerate's own ``DataLoaderShard`` places it; each pass is
Accelerate's active dataloader while it runs, and says on the last batch of the epoch that the
epoch ends (``end_of_dataloader``, which ``accelerator.accumulate`` syncs gradients on) and
how many of the last batches' samples are real (``remainder``, which ``gather_for_metrics``
trims to). Sharding is the loader's own: every rank reads its share of one seeded shuffle;
``adloader.client.integrations.accelerate`` checks that the loader's ranks are the
accelerator's, and carries each rank's position in ``save_state``.

Importing this module does not import ``accelerate``; a prepared loader's first pass does.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import torch
from torch.utils.data import IterableDataset

from adloader.client.loader.epoch import EpochIterator
from adloader.client.loader.loader import ElasticDataLoader

__all__ = ["AcceleratedLoader"]


class AcceleratedLoader(ElasticDataLoader):
    """An ``ElasticDataLoader`` prepared by an ``Accelerator``: batches on its device
    (``device``; None: where the workers put them), epochs told to its gradient state."""

    end_of_dataloader = False  # read by accelerate's GradientState while a pass runs
    remainder = -1  # real samples in the last batches of all processes (-1: not known)
    device: torch.device | None = None
    non_blocking = False
    gradient_state: Any = None

    @classmethod
    def prepare(cls, loader: ElasticDataLoader, accelerator,
                device_placement: bool) -> AcceleratedLoader:
        """``loader`` itself, its class now an ``AcceleratedLoader`` (of its own class) that
        places batches on ``accelerator.device`` when ``device_placement``."""
        loader.__class__ = _prepared(type(loader))
        loader.device = accelerator.device if device_placement else None
        loader.non_blocking = bool(getattr(accelerator, "non_blocking", False))
        loader.gradient_state = accelerator.gradient_state
        return cast(AcceleratedLoader, loader)

    def __iter__(self):
        return _PreparedPass(self, super().__iter__())

    def _remainder(self) -> int:
        """Accelerate's ``remainder`` for this loader: the real samples among the last
        batches of all ranks gathered (``gather_for_metrics`` keeps that many), or -1 where
        the gathered tail is not real samples followed by padding (the loader pads a
        dataset that ranks do not divide by repeating its first samples, one to each of
        the last ranks: those repeats are not at the tail of the gathered batches)."""
        if isinstance(self.dataset, IterableDataset) or self.batch_size is None or self.drop_last:
            return -1
        size = len(self.dataset)
        if size % self.world_size:
            return -1
        return size % (self.batch_size * self.world_size)


_PREPARED: dict[type, type] = {ElasticDataLoader: AcceleratedLoader}


def _prepared(cls: type) -> type:
    """The ``AcceleratedLoader`` of ``cls`` (a user's subclass of ``ElasticDataLoader`` keeps
    its own methods under the prepared one's)."""
    if issubclass(cls, AcceleratedLoader):
        return cls
    if cls not in _PREPARED:
        _PREPARED[cls] = type(f"Accelerated{cls.__name__}", (AcceleratedLoader, cls),
                              {"__module__": cls.__module__})
    return _PREPARED[cls]


class _PreparedPass:
    """One pass over an ``AcceleratedLoader``: the loader's own iterator (which a sample's
    error leaves usable, as torch's), each batch placed on the device."""

    def __init__(self, loader: AcceleratedLoader, inner) -> None:
        from accelerate.utils import send_to_device

        self._send = send_to_device
        self._loader, self._inner = loader, inner
        # a map-style epoch knows its batches; a stream's end is known when it comes
        self._total = len(inner) if isinstance(inner, EpochIterator) else None
        self._running = False

    def __iter__(self) -> _PreparedPass:
        return self

    def __next__(self) -> Any:
        loader = self._loader
        if not self._running:
            loader.end_of_dataloader, loader.remainder = False, loader._remainder()
            loader.gradient_state._add_dataloader(loader)
            self._running = True
        try:
            batch = next(self._inner)
        except StopIteration:
            self._end()
            raise
        if self._total is not None:
            loader.end_of_dataloader = self._inner.consumed >= self._total
        if loader.device is not None:
            batch = self._send(batch, loader.device, non_blocking=loader.non_blocking)
        return batch

    def __len__(self) -> int:
        return len(self._inner)

    def _end(self) -> None:
        if self._running:
            self._running = False
            self._loader.gradient_state._remove_dataloader(self._loader)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._end()
