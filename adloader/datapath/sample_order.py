"""The sample order of an epoch: a pure function of (seed, epoch, dataset size, ranks).

Both the ElasticDataLoader and the clairvoyant data path (access streams, caches, Balance)
use this one function, so what the caches plan for is exactly what the loader yields —
whatever the worker count and however often it changes (DESIGN.md: the cleanest resize).
Like ``DistributedSampler``: the permutation is padded (or cut, with ``drop_last``) to a
multiple of the world size and rank r takes positions r, r + W, r + 2W, …
"""

from __future__ import annotations

import numpy as np


def epoch_permutation(seed: int, epoch: int, size: int, shuffle: bool = True) -> np.ndarray:
    """The global order of epoch e: a permutation of 0..N−1 drawn from (seed, e)."""
    if not shuffle:
        return np.arange(size, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF]))
    return rng.permutation(size).astype(np.int64)


def rank_order(
    seed: int,
    epoch: int,
    size: int,
    world_size: int = 1,
    rank: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> np.ndarray:
    """The sample indices rank r reads in epoch e, in order."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    order = epoch_permutation(seed, epoch, size, shuffle)
    if drop_last:
        order = order[: size - size % world_size]
    elif size % world_size:
        pad = world_size - size % world_size
        order = np.concatenate([order, np.resize(order, pad)])
    return order[rank::world_size]


def samples_per_rank(size: int, world_size: int = 1, drop_last: bool = False) -> int:
    return size // world_size if drop_last else -(-size // world_size)
