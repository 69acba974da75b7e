"""Accelerate's ``prepare`` for an ``ElasticDataLoader``: the loader prepared is the one given.

``accelerate.Accelerator.prepare`` rebuilds every ``DataLoader`` it is given as its own (torch's
``DataLoader`` inside a ``DataLoaderShard``): the rebuilt loader fixes its workers when an epoch
starts, has no ``resize`` and no position, and across processes shards by batch a loader that
already reads its rank's share, so that each process reads 1/N of its share. Here:

- ``ElasticAccelerator``: ``accelerate.Accelerator`` whose ``prepare`` (and
  ``prepare_data_loader``) prepares each ``ElasticDataLoader`` with ``prepare_loader`` and
  everything else as Accelerate does, so a script's ``accelerator.prepare(model, optimizer,
  loader)`` stays as it is.
- ``prepare_loader(accelerator, loader)``: what ``prepare`` does for a loader, for an
  accelerator made elsewhere. Sharding: the loader's own (every rank reads its share of one
  seeded shuffle), checked to be the accelerator's processes; each batch is placed on
  ``accelerator.device`` (``AcceleratedLoader``); the loader is registered with the
  accelerator, and ``save_state`` writes each rank's position beside the checkpoint
  (``adloader-loader-rank<R>.json``, as ``ElasticTrainer`` does), which ``load_state`` puts
  back. It returns the loader itself.

Accelerate's own ways to keep a loader's state do not fit a loader whose ranks read different
shares: its stateful-dataloader file is one for all processes, each writing it, and
``register_for_checkpointing`` saves the main process's state only, which another rank's
loader refuses.

Importing this module does not import ``accelerate``: ``ElasticAccelerator`` is built on first
use (an install without Accelerate imports every ``adloader.client`` module).
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.utils.data import DistributedSampler, IterableDataset

from adloader.client.integrations.accelerated_loader import AcceleratedLoader
from adloader.client.loader.loader import ElasticDataLoader
from adloader.client.loader.loader_contract import RankSequence, RankShuffle
from adloader.errors import InputError

if TYPE_CHECKING:  # what type checkers see; at run time ``__getattr__`` below
    from accelerate import Accelerator as ElasticAccelerator

__all__ = ["ElasticAccelerator", "prepare_loader"]


def prepare_loader(accelerator, loader: ElasticDataLoader,
                   device_placement: bool | None = None) -> AcceleratedLoader:
    """``loader`` prepared for ``accelerator`` (the same object, now an ``AcceleratedLoader``):
    its batches on ``accelerator.device`` (``device_placement``, default the accelerator's),
    its position in the accelerator's ``save_state``. InputError, in one line, where the loader
    does not read this process's share of the data."""
    if not isinstance(loader, ElasticDataLoader):
        raise InputError(f"prepare_loader: {type(loader).__module__}.{type(loader).__qualname__}"
                         " is not an ElasticDataLoader: give it to accelerator.prepare")
    _check_share(accelerator, loader)
    if device_placement is None:
        device_placement = accelerator.device_placement
    prepared = AcceleratedLoader.prepare(loader, accelerator, device_placement)
    if not any(known is prepared for known in accelerator._dataloaders):
        accelerator._dataloaders.append(prepared)  # what save_state and load_state walk
    prepared._is_accelerate_prepared = True  # prepare() given it again returns it as it is
    _carry_positions(accelerator)
    return prepared


_CARRYING: weakref.WeakSet = weakref.WeakSet()  # accelerators whose checkpoints carry them


def _carry_positions(accelerator) -> None:
    """Hooks on ``accelerator``'s ``save_state`` and ``load_state`` (run on every process)
    that write and read back each prepared loader's position, one file a rank."""
    if accelerator in _CARRYING:
        return
    _CARRYING.add(accelerator)
    accelerator.register_save_state_pre_hook(
        lambda models, weights, folder: _save_positions(accelerator, folder))
    accelerator.register_load_state_pre_hook(
        lambda models, folder: _load_positions(accelerator, folder))


def _position_files(accelerator, folder) -> list[tuple[AcceleratedLoader, Path]]:
    loaders = [d for d in accelerator._dataloaders if isinstance(d, AcceleratedLoader)]
    return [(loader, Path(folder) / f"adloader-loader{f'-{i}' if i else ''}-rank{loader.rank}"
                                     ".json") for i, loader in enumerate(loaders)]


def _save_positions(accelerator, folder) -> None:
    for loader, path in _position_files(accelerator, folder):
        path.write_text(json.dumps(loader.state_dict()))


def _load_positions(accelerator, folder) -> None:
    for loader, path in _position_files(accelerator, folder):
        if path.exists():  # a checkpoint taken before the loader was prepared has none
            loader.load_state_dict(json.loads(path.read_text()))


def _check_share(accelerator, loader: ElasticDataLoader) -> None:
    """InputError unless each of the accelerator's processes reads its own share through
    ``loader``: the loader's order over the same ranks, or a ``DistributedSampler``'s."""
    processes, index = accelerator.num_processes, accelerator.process_index
    if accelerator.split_batches:
        raise InputError("prepare_loader: split_batches=True splits each batch over the "
                         "processes; an ElasticDataLoader's batch_size is each process's")
    if accelerator.dispatch_batches:
        raise InputError("prepare_loader: dispatch_batches=True reads on the main process "
                         "only; each process's ElasticDataLoader reads its own share")
    parallel = getattr(accelerator, "parallelism_config", None)
    if parallel is not None and (getattr(parallel, "tp_enabled", False)
                                 or getattr(parallel, "cp_enabled", False)):
        raise InputError("prepare_loader: processes that share batches (tensor or context "
                         "parallel) are not supported; each rank reads its own share")
    if isinstance(loader.dataset, IterableDataset):
        return  # a stream is read as under torchrun: the dataset splits itself by rank
    sampler, batch_sampler = loader.sampler, loader.batch_sampler
    if batch_sampler is not None and getattr(batch_sampler, "sampler", None) is not sampler:
        sampler = getattr(batch_sampler, "sampler", batch_sampler)  # batches given: theirs
    if isinstance(sampler, RankShuffle | RankSequence) or processes == 1 == loader.world_size:
        ranks = (loader.rank, loader.world_size)
        if ranks != (index, processes):
            raise InputError(
                f"prepare_loader: the loader reads rank {ranks[0]} of {ranks[1]}, this is "
                f"process {index} of {processes}: build the loader after the Accelerator "
                "(which starts the process group), or pass it rank=accelerator.process_index, "
                "world_size=accelerator.num_processes")
    elif isinstance(sampler, DistributedSampler):
        if (sampler.rank, sampler.num_replicas) != (index, processes):
            raise InputError(f"prepare_loader: the loader's DistributedSampler reads rank "
                             f"{sampler.rank} of {sampler.num_replicas}, this is process "
                             f"{index} of {processes}")
    elif processes > 1:
        raise InputError(f"prepare_loader: every process reads all of the loader's "
                         f"{type(sampler).__name__}: give the loader no sampler (each rank "
                         "reads its share of one seeded shuffle) or a DistributedSampler")


def _elastic_accelerator() -> type:
    from accelerate import Accelerator

    class ElasticAccelerator(Accelerator):
        """``accelerate.Accelerator`` whose ``prepare`` keeps an ``ElasticDataLoader`` the
        loader it is (``prepare_loader``): resizable, its position in ``save_state``."""

        def prepare_data_loader(self, data_loader, device_placement=None,
                                slice_fn_for_dispatch=None):
            if isinstance(data_loader, ElasticDataLoader):
                return prepare_loader(self, data_loader, device_placement)
            return super().prepare_data_loader(data_loader, device_placement,
                                               slice_fn_for_dispatch)

    ElasticAccelerator.__module__, ElasticAccelerator.__qualname__ = __name__, "ElasticAccelerator"
    return ElasticAccelerator


def __getattr__(name: str) -> Any:
    if name == "ElasticAccelerator":
        built = globals()[name] = _elastic_accelerator()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
