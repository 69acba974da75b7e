"""Clairvoyant access streams: every sample every rank reads, known from the seed (NoPFS §3.1).

The ``ElasticDataLoader`` of rank r in epoch e reads ``rank_order(seed, e, N, W, r, shuffle,
drop_last=False)`` (padded like ``DistributedSampler``) in consecutive local batches of
b = global_batch // W, the last partial batch dropped when the loader's ``drop_last``. An
``AccessStream`` holds exactly that for all epochs and ranks, one permutation drawn per epoch.

Layout: ``samples[e, r, k]`` is the k-th sample rank r reads in epoch e (k < ``rank_len``);
local step s of the epoch is ``samples[e, r, s*b:(s+1)*b]`` — the flat per-rank layout, because
without ``drop_last`` the last batch of an epoch is ragged. A rank's *position* is
``e * rank_len + k``.

Node view: the ranks of a node run their steps in lock-step, so the node's access sequence is,
epoch by epoch and step by step, the local batch of each of its ranks in rank order —
``[B_e,s(r0), B_e,s(r1), …, B_e,s+1(r0), …]``. ``node_sequence`` returns it with the global step
(iteration) of every access; ``cache`` policies run on such sequences.

Epoch order (SOLAR §4.2.1): with ``epoch_order``, epoch e reads the shuffled index list drawn
for epoch ``order[e]`` (``adloader.datapath.epoch_order``) — the loader's ``epoch_order=`` opt-in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adloader.datapath.epoch_order import check_order, plan_epoch_order, source_epoch
from adloader.datapath.reuse import next_access
from adloader.datapath.sample_order import epoch_permutation, samples_per_rank
from adloader.errors import InputError

NOT_AGAIN = np.inf  # next use of a sample that is not accessed again


@dataclass(frozen=True)
class AccessStream:
    """The accesses of a job: ``samples`` of shape (epochs, world_size, rank_len)."""

    samples: np.ndarray
    size: int
    global_batch: int
    world_size: int
    drop_last: bool
    epoch_order: tuple[int, ...] | None = None  # epoch e reads planned epoch order[e]

    @property
    def epochs(self) -> int:
        return self.samples.shape[0]

    @property
    def local_batch(self) -> int:
        return self.global_batch // self.world_size

    @property
    def rank_len(self) -> int:
        """Samples one rank reads per epoch."""
        return self.samples.shape[2]

    @property
    def steps_per_epoch(self) -> int:
        """Iterations I of an epoch (the last may be a partial batch)."""
        return -(-self.rank_len // self.local_batch)

    def batch(self, epoch: int, rank: int, step: int) -> np.ndarray:
        b = self.local_batch
        return self.samples[epoch, rank, step * b : (step + 1) * b]

    def rank_sequence(self, rank: int) -> np.ndarray:
        """Rank r's accesses over all epochs, by position."""
        return self.samples[:, rank, :].reshape(-1)


def access_stream(seed: int, epochs: int, size: int, global_batch: int, world_size: int = 1,
                  drop_last: bool = False, shuffle: bool = True, epoch_order="sequential",
                  capacity: int | None = None) -> AccessStream:
    """Every rank's sample sequence for every epoch, identical to what the loader yields.

    ``epoch_order``: "sequential" (epoch e reads its own list), "solar" (the order that
    maximises reuse in a buffer of ``capacity`` samples, ``plan_epoch_order``), or an order.
    """
    for name, value, low in (("epochs", epochs, 1), ("dataset size", size, 1),
                             ("world size", world_size, 1), ("global batch", global_batch, 1)):
        if int(value) < low:
            raise InputError(f"access stream: {name} must be at least {low}, got {value}")
    if global_batch % world_size:
        raise InputError(f"access stream: global batch {global_batch} is not a multiple of "
                         f"the world size {world_size}")
    order = None
    if isinstance(epoch_order, str) and epoch_order == "solar":
        if capacity is None:
            raise InputError("access stream: epoch_order='solar' needs the buffer capacity")
        order = plan_epoch_order(seed, epochs, size, capacity, shuffle).order
    elif isinstance(epoch_order, str) and epoch_order != "sequential":
        raise InputError(f"access stream: epoch_order must be 'sequential', 'solar' or an "
                         f"order of the epochs, got {epoch_order!r}")
    elif not isinstance(epoch_order, str) and epoch_order is not None:
        order = check_order(epoch_order)
    local = global_batch // world_size
    per_rank = samples_per_rank(size, world_size, drop_last=False)
    rank_len = per_rank - per_rank % local if drop_last else per_rank
    if rank_len == 0:
        raise InputError(f"access stream: {per_rank} samples per rank make no local batch of "
                         f"{local} with drop_last")
    dtype = np.int32 if size < 2**31 else np.int64
    out = np.empty((epochs, world_size, rank_len), dtype=dtype)
    pad = per_rank * world_size - size
    for e in range(epochs):
        perm = epoch_permutation(seed, source_epoch(order, e), size, shuffle).astype(dtype)
        if pad:
            perm = np.concatenate([perm, np.resize(perm, pad)])
        # position k of rank r is global position k*W + r (DistributedSampler's striding)
        out[e] = perm.reshape(per_rank, world_size).T[:, :rank_len]
    return AccessStream(out, size, global_batch, world_size, drop_last, order)


def next_use(stream: AccessStream, rank: int) -> np.ndarray:
    """Position of rank r's next access of the same sample, per position; ``inf`` if none."""
    # a rank never reads a sample twice in one epoch (padding goes to other ranks)
    nxt = next_access(stream.rank_sequence(rank), period=stream.rank_len).astype(np.float64)
    nxt[nxt == nxt.size] = NOT_AGAIN
    return nxt


def reuse_distance(stream: AccessStream, rank: int, unit: str = "access") -> np.ndarray:
    """How far ahead rank r reads the same sample again (``inf`` if never).

    ``unit="access"``: in positions (accesses) of the rank; ``unit="step"``: in iterations,
    Lobster's j − i (§3, Observation 4).
    """
    nxt = next_use(stream, rank)
    pos = np.arange(nxt.size, dtype=np.float64)
    if unit == "access":
        return nxt - pos
    if unit == "step":
        def step(p):
            return (p // stream.rank_len) * stream.steps_per_epoch + (
                (p % stream.rank_len) // stream.local_batch)
        dist = np.full(nxt.size, NOT_AGAIN)
        ok = np.isfinite(nxt)
        dist[ok] = step(nxt[ok]) - step(pos[ok])
        return dist
    raise InputError(f"reuse distance: unit must be 'access' or 'step', got {unit!r}")


def access_frequency(stream: AccessStream) -> np.ndarray:
    """r_k per rank: how often each rank reads each sample over the run, shape (W, N)."""
    out = np.empty((stream.world_size, stream.size), dtype=np.int64)
    for r in range(stream.world_size):
        out[r] = np.bincount(stream.rank_sequence(r), minlength=stream.size)
    return out


@dataclass(frozen=True)
class NodeSequence:
    """A node's accesses in order (``samples``) and the global iteration of each (``step``)."""

    samples: np.ndarray
    step: np.ndarray
    steps_per_epoch: int
    accesses_per_epoch: int

    def __len__(self) -> int:
        return self.samples.size


def node_sequence(stream: AccessStream, ranks=None) -> NodeSequence:
    """The node-level view of ``ranks`` (default: all): step by step, ranks in order."""
    ranks = np.arange(stream.world_size) if ranks is None else np.asarray(sorted(ranks))
    if ranks.size == 0 or ranks.min() < 0 or ranks.max() >= stream.world_size:
        raise InputError(f"node sequence: ranks must be in 0..{stream.world_size - 1}")
    b, length = stream.local_batch, stream.rank_len
    full, tail = divmod(length, b)
    arr = stream.samples[:, ranks, :]
    e, r = arr.shape[:2]
    head = arr[:, :, : full * b].reshape(e, r, full, b).transpose(0, 2, 1, 3).reshape(e, -1)
    parts = [head, arr[:, :, full * b :].reshape(e, -1)] if tail else [head]
    samples = np.concatenate(parts, axis=1)
    steps_per_epoch = full + (1 if tail else 0)
    local = np.concatenate([np.repeat(np.arange(full), r * b), np.full(r * tail, full)])
    step = (np.arange(e)[:, None] * steps_per_epoch + local[None, :]).reshape(-1)
    return NodeSequence(samples.reshape(-1), step.astype(np.int64), steps_per_epoch,
                        samples.shape[1])


def node_frequency(stream: AccessStream, ranks=None) -> np.ndarray:
    """r_k of a node: how often the node's ranks read each sample over the run, shape (N,)."""
    ranks = range(stream.world_size) if ranks is None else ranks
    out = np.zeros(stream.size, dtype=np.int64)
    for r in ranks:
        out += np.bincount(stream.rank_sequence(r), minlength=stream.size)
    return out
