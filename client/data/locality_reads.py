"""The samples a rank reads itself in locality-aware assembly, through an ``ElasticDataLoader``.

Rank r's storage reads of step t, ``StepPlan.storage_reads[r]``, follow from the seed and the
epoch's cache directory alone, so once the directory is exchanged the whole epoch's read lists
are known: ``StepReads`` hands them to the loader as its batch sampler (one list per step, maybe
empty), and the loader's worker pool — resizable live by the application master — reads them
ahead while the trainer exchanges and trains. Items come back uncollated, in step order, and
the ``on_batch`` hook (the master's heartbeat) counts the samples trained on, not those read.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from adloader.client.loader.loader import BatchStats, ElasticDataLoader


class StepReads:
    """Batch sampler: per step of the epoch, the dataset indices this rank reads itself."""

    def __init__(self) -> None:
        self.steps: list[list[int]] = []
        self.trained: list[int] = []  # n_r of each step: the samples the rank trains on

    def set_steps(self, steps: Sequence[Sequence[int]], trained: Sequence[int]) -> None:
        self.steps = [[int(i) for i in s] for s in steps]
        self.trained = [int(n) for n in trained]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


def as_list(items: list) -> list:
    """The loader's collate: a step's items stay separate (the trainer adds what it gets)."""
    return list(items)


class ReadsLoader(ElasticDataLoader):
    """An ``ElasticDataLoader`` over a ``StepReads`` sampler whose ``on_batch`` hook sees, as
    ``BatchStats.samples``, the step's trained samples n_r (the job's throughput)."""

    batch_sampler: StepReads

    @property
    def on_batch(self) -> Callable[[BatchStats], Any] | None:
        hook = self.__dict__.get("_hook")
        return None if hook is None else functools.partial(self._report, hook)

    @on_batch.setter
    def on_batch(self, hook: Callable[[BatchStats], Any] | None) -> None:
        if isinstance(hook, functools.partial) and hook.func == self._report:
            hook = hook.args[0]  # our own wrapper given back: keep the hook it wraps
        self.__dict__["_hook"] = hook

    def _report(self, hook: Callable[[BatchStats], Any], stats: BatchStats) -> Any:
        trained = self.batch_sampler.trained
        if 0 <= stats.index < len(trained):
            stats = dataclasses.replace(stats, samples=trained[stats.index])
        return hook(stats)


def reads_loader(dataset, num_workers: int, threads: int, seed: int) -> ReadsLoader:
    """A ``ReadsLoader`` of ``num_workers`` workers (``threads`` each) reading uncollated."""
    return ReadsLoader(dataset, batch_sampler=StepReads(), num_workers=num_workers,
                       collate_fn=as_list, seed=seed, threads=threads)


def own(item: Any) -> Any:
    """``item`` with tensors a worker put in shared memory copied out, so that a long-lived
    cache holds no shared segments (one open file descriptor each)."""
    if isinstance(item, torch.Tensor):
        return item.clone() if item.is_shared() else item
    if isinstance(item, tuple | list):
        out = [own(x) for x in item]
        return type(item)(out) if not hasattr(item, "_fields") else type(item)(*out)
    if isinstance(item, dict):
        return {k: own(v) for k, v in item.items()}
    return item
