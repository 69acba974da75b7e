"""torch's argument checks for a DataLoader, with torch's messages (its tests match on them)."""

from __future__ import annotations

import multiprocessing

import torch

from adloader.errors import InputError


def check_arguments(dataset, iterable: bool, batch_size, shuffle, sampler, batch_sampler,
                    drop_last, num_workers, timeout, prefetch_factor,
                    persistent_workers) -> bool:
    """Raise ``ValueError`` as ``torch.utils.data.DataLoader`` does; returns ``shuffle``."""
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                         "let num_workers > 0 to enable multiprocessing, otherwise set "
                         "prefetch_factor to None.")
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if iterable:
        if shuffle not in {False, None}:
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                             f"option, but got shuffle={shuffle}")
        if sampler is not None:
            raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                             f"option, but got sampler={sampler}")
        if batch_sampler is not None:
            raise ValueError("DataLoader with IterableDataset: expected unspecified "
                             f"batch_sampler option, but got batch_sampler={batch_sampler}")
    shuffle = bool(shuffle) and not iterable
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None and (
        batch_size != 1 or shuffle or sampler is not None or drop_last
    ):
        raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                         "shuffle, sampler, and drop_last")
    if batch_sampler is None and batch_size is None and drop_last:
        raise ValueError("batch_size=None option disables auto-batching and is mutually "
                         "exclusive with drop_last")
    if batch_sampler is None and batch_size is not None and batch_size < 1:
        raise InputError(f"batch_size must be at least 1, got {batch_size}")
    return shuffle


def check_context(context, workers: int):
    """torch's ``multiprocessing_context`` setter: a start method's name or a context."""
    if context is None:
        return None
    if workers == 0:
        raise ValueError("multiprocessing_context can only be used with multi-process "
                         f"loading (num_workers > 0), but got num_workers={workers}")
    if isinstance(context, str):
        valid = torch.multiprocessing.get_all_start_methods()
        if context not in valid:
            raise ValueError("multiprocessing_context option should specify a valid start "
                             f"method in {valid!r}, but got multiprocessing_context={context!r}")
        context = torch.multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError("multiprocessing_context option should be a valid context object or a "
                        "string specifying the start method, but got "
                        f"multiprocessing_context={context}")
    return context


def check_elastic(threads: int, handover: str, handovers, epoch_order, seed, sampler,
                  batch_sampler, iterable: bool, rank: int | None, world_size: int | None):
    """ElasticDataLoader's own arguments: (rank, world_size, epoch_order), checked; rank and
    world size default to torch.distributed's when a process group is up."""
    from adloader.datapath.epoch_order import check_order

    if threads < 0:
        raise InputError(f"threads must be >= 0, got {threads}")
    if handover not in handovers:
        raise InputError(f"handover must be one of {', '.join(handovers)}, got {handover!r}")
    if epoch_order is not None and (seed is None or sampler is not None
                                    or batch_sampler is not None or iterable):
        raise InputError("epoch_order= needs seed= and the loader's own shuffle")
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    rank, world_size = (0 if rank is None else rank), (1 if world_size is None else world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise InputError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
    return rank, world_size, None if epoch_order is None else check_order(epoch_order)

