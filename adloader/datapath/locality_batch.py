"""Locality-aware assembly of a global mini-batch across p ranks (Locality-aware loading §V).

Every rank knows the global batch of each step (a pure function of the seed) and which rank
caches which sample (the *cache directory*). Any split of the global batch among the ranks
gives the same summed gradient (Theorem 1), so each rank trains on what it holds:

- ``regular``: rank r takes positions r, r + p, … of the global batch — what the
  ``ElasticDataLoader`` yields — and reads what it does not hold from storage;
- ``locality``: ``plan_step`` — each rank keeps the held samples it has room for (target
  b_r = B/p), uncached samples fill deficits as storage reads, and ``transfer_schedule`` (Algorithm
  1 Balance:
  surplus and deficit heaps, ≤ p − 1 transfers) moves the surplus to the deficits — as a
  transfer, or as a storage read of the same samples by the receiver when cheaper;
- ``solar``: ``uneven_assign`` (SOLAR §4.3) — no transfers: each rank trains on all it holds,
  uncached samples are spread to even out per-rank time, local batch sizes differ, and the
  loss weights w_r = n_r / B make Σ_r w_r · mean_r the global mean.
- ``bounded``: ``adloader.datapath.bounded_imbalance`` — between the two: a rank grows its local
batch
  with its own samples up to ⌊α · ⌈B/p⌉⌋ (``max_imbalance`` α), only the rest is moved.

Positions, not sample ids, are assigned (a padded epoch may repeat a sample in one batch).
``split_workers`` is Lobster §4.2: a job's workers split among its ranks by predicted misses.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from adloader.datapath.sample_order import epoch_permutation, samples_per_rank
from adloader.errors import InputError


@dataclass(frozen=True)
class StepPlan:
    """Who trains on what in one step, and how each rank gets the samples it lacks.

    ``positions[r]``: rank r's positions in the global batch (sorted); ``local_samples[r]``
    their sample ids; ``transfers``: (src, dst, sample ids) sent from src's cache to dst;
    ``storage_reads[r]``: ids rank r reads from storage; ``loss_weights[r]`` = n_r / B.
    """

    global_batch: np.ndarray
    positions: tuple[np.ndarray, ...]
    transfers: tuple[tuple[int, int, np.ndarray], ...]
    storage_reads: tuple[np.ndarray, ...]

    @property
    def world_size(self) -> int:
        return len(self.positions)

    @property
    def local_samples(self) -> tuple[np.ndarray, ...]:
        return tuple(self.global_batch[pos] for pos in self.positions)

    @property
    def local_sizes(self) -> np.ndarray:
        return np.array([pos.size for pos in self.positions], dtype=np.int64)

    @property
    def loss_weights(self) -> np.ndarray:
        """w_r = n_r / B: with a summing all-reduce, Σ_r w_r ∇mean_r is the global mean."""
        return self.local_sizes / max(self.global_batch.size, 1)

    @property
    def transferred(self) -> int:
        return int(sum(ids.size for _, _, ids in self.transfers))

    @property
    def read(self) -> int:
        return int(sum(ids.size for ids in self.storage_reads))

    @property
    def remote_share(self) -> float:
        """Share of the global batch fetched from another rank or from storage."""
        return (self.transferred + self.read) / max(self.global_batch.size, 1)


# ---- the global batch of a step -------------------------------------------------------------
def global_order(seed: int, epoch: int, size: int, world_size: int,
                 shuffle: bool = True) -> np.ndarray:
    """The epoch's order padded like ``rank_order``: rank r's order is ``global_order[r::W]``."""
    order = epoch_permutation(seed, epoch, size, shuffle)
    pad = samples_per_rank(size, world_size) * world_size - size
    return np.concatenate([order, np.resize(order, pad)]) if pad else order


def global_batches(seed: int, epoch: int, size: int, world_size: int, local_batch: int,
                   shuffle: bool = True, drop_last: bool = False) -> list[np.ndarray]:
    """The global batch of every step: the union of what each rank's ``ElasticDataLoader``
    yields at that step (``rank_order`` chunks of ``local_batch``), in rank-interleaved order."""
    if local_batch < 1 or world_size < 1:
        raise InputError(f"global batches: local batch {local_batch} and world size "
                         f"{world_size} must be at least 1")
    order = global_order(seed, epoch, size, world_size, shuffle)
    per_rank = order.size // world_size
    steps = per_rank // local_batch if drop_last else -(-per_rank // local_batch)
    big = local_batch * world_size
    return [order[s * big : (s + 1) * big] for s in range(steps)]


# ---- Algorithm 1 --------------------------------------------------------------------------
def transfer_schedule(counts, target) -> list[tuple[int, int, int]]:
    """Algorithm 1 Balance(p, L): greedy max-surplus → max-deficit schedule of (src, dst, n).

    Each step sends min(surplus, deficit) between the current largest of each heap (ties:
    lower rank first), so every step zeroes at least one rank: ≤ p − 1 transfers
    (a 2-approximation of the NP-complete minimum, Theorem 2). Needs Σ counts = Σ target.
    """
    counts = np.asarray(counts, dtype=np.int64)
    target = np.broadcast_to(np.asarray(target, dtype=np.int64), counts.shape)
    if counts.sum() != target.sum():
        raise InputError(f"balance: counts sum to {counts.sum()}, targets to {target.sum()}")
    diff = counts - target
    surplus = [(-int(d), r) for r, d in enumerate(diff) if d > 0]  # max-heaps via negation
    deficit = [(int(d), r) for r, d in enumerate(diff) if d < 0]
    heapq.heapify(surplus)
    heapq.heapify(deficit)
    schedule = []
    while surplus:
        s_neg, src = surplus[0]
        d_neg, dst = deficit[0]
        m = min(-s_neg, -d_neg)
        schedule.append((src, dst, m))
        if m == -s_neg:
            heapq.heappop(surplus)
        else:
            heapq.heapreplace(surplus, (s_neg + m, src))
        if m == -d_neg:
            heapq.heappop(deficit)
        else:
            heapq.heapreplace(deficit, (d_neg + m, dst))
    return schedule


# ---- helpers ------------------------------------------------------------------------------
def even_targets(size: int, p: int) -> np.ndarray:
    """b_r: B split evenly, the first B mod p ranks one more (what ``r::p`` slicing gives)."""
    return np.full(p, size // p, dtype=np.int64) + (np.arange(p) < size % p)


def check_batch(global_batch, p: int, local_batch: int | None) -> np.ndarray:
    batch = np.asarray(global_batch, dtype=np.int64).reshape(-1)
    if p < 1:
        raise InputError(f"locality plan: world size must be at least 1, got {p}")
    if local_batch is not None and batch.size > p * local_batch:
        raise InputError(f"locality plan: global batch of {batch.size} samples exceeds "
                         f"{p} ranks × local batch {local_batch}")
    return batch


def owners(global_batch, holder, p: int) -> np.ndarray:
    """Per position, the rank that holds its sample (−1: nobody).

    ``holder``: per-sample owner array (−1 = nobody) or a boolean (p, N) matrix of cache
    contents; a sample in several caches goes to its regular rank (position mod p) when that
    rank holds it, else to the lowest holding rank.
    """
    batch = np.asarray(global_batch, dtype=np.int64)
    held = np.asarray(holder)
    if held.ndim == 1:
        if batch.size and (batch.max() >= held.size or batch.min() < 0):
            raise InputError(f"locality plan: a sample id is outside the directory of "
                             f"{held.size} samples")
        own = held[batch].astype(np.int64)
        if own.size and own.max() >= p:
            raise InputError(f"locality plan: an owner rank is outside 0..{p - 1}")
        return np.where(own < 0, -1, own)
    if held.ndim != 2 or held.shape[0] != p:
        raise InputError(f"locality plan: holder matrix must have {p} rows, got shape "
                         f"{held.shape}")
    if batch.size and batch.max() >= held.shape[1]:
        raise InputError(f"locality plan: a sample id is outside the directory of "
                         f"{held.shape[1]} samples")
    cols = held[:, batch].astype(bool)  # (p, B)
    regular = np.arange(batch.size) % p
    first = np.where(cols.any(axis=0), cols.argmax(axis=0), -1)
    return np.where(cols[regular, np.arange(batch.size)], regular, first).astype(np.int64)


def group_by_rank(pos: np.ndarray, ranks: np.ndarray, p: int) -> list[np.ndarray]:
    """Positions split by rank, each in increasing order."""
    order = np.lexsort((pos, ranks))
    bounds = np.searchsorted(ranks[order], np.arange(p + 1))
    return [pos[order[bounds[r] : bounds[r + 1]]] for r in range(p)]


def fill_rooms(pos: np.ndarray, room: np.ndarray, p: int) -> np.ndarray:
    """Rank for each of ``pos`` (unheld positions), room[r] places on rank r (Σ room ≥ len).

    A position goes to its regular rank (pos mod p) while that has room — so a cold epoch
    reads exactly what the regular loader reads — the rest to ranks with room, in rank order.
    """
    out = np.full(pos.size, -1, dtype=np.int64)
    if not pos.size:
        return out
    regular = pos % p
    order = np.argsort(regular, kind="stable")
    starts = np.searchsorted(regular[order], np.arange(p))
    rank_in_group = np.arange(pos.size) - starts[regular[order]]
    take = rank_in_group < room[regular[order]]
    out[order[take]] = regular[order[take]]
    left = room - np.bincount(out[out >= 0], minlength=p)
    rest = np.flatnonzero(out < 0)
    out[rest] = np.repeat(np.arange(p), left)[: rest.size]
    return out


def water_fill(levels, units: int) -> np.ndarray:
    """k_r ≥ 0 with Σ k_r = units minimising max_r(levels_r + k_r) (ties: lower level, rank).

    The same as giving units one by one to the currently lowest rank.
    """
    a = np.asarray(levels, dtype=np.float64)
    p = a.size
    k = np.zeros(p, dtype=np.int64)
    if units <= 0 or p == 0:
        return k
    order = np.argsort(a, kind="stable")
    s = a[order]
    m = np.arange(1, p + 1)
    h = (units + np.cumsum(s)) / m  # water level if the m lowest ranks share the units
    ok = np.append(h[:-1] <= s[1:], True)
    mm = int(np.argmax(ok)) + 1
    ks = np.zeros(p, dtype=np.int64)
    ks[:mm] = np.maximum(np.floor(h[mm - 1] - s[:mm] + 1e-9).astype(np.int64), 0)
    while ks.sum() > units:  # float slack: take back from the highest
        ks[np.argmax(np.where(ks > 0, s + ks, -np.inf))] -= 1
    rem = units - int(ks.sum())
    if rem:  # one more each for the lowest final levels (lower rank first on ties)
        pick = np.lexsort((order, s + ks))[:rem]
        np.add.at(ks, pick, 1)
    k[order] = ks
    return k


# ---- the three modes ------------------------------------------------------------------------
def regular_assign(global_batch, holder, p: int, local_batch: int | None = None,
                   **_costs) -> StepPlan:
    """The regular loader: rank r takes positions r::p and reads what it lacks from storage."""
    batch = check_batch(global_batch, p, local_batch)
    own = owners(batch, holder, p)
    pos = np.arange(batch.size)
    positions = tuple(pos[r::p] for r in range(p))
    reads = tuple(batch[q[own[q] != r]] for r, q in enumerate(positions))
    return StepPlan(batch, positions, (), reads)


class Assignment(NamedTuple):
    """Stage 1 of ``plan_step``, per rank: held positions kept (≤ b_r), spare held positions
    (its surplus), unheld positions it reads from storage, and its target b_r."""

    kept: list[np.ndarray]
    spare: list[np.ndarray]
    reads: list[np.ndarray]
    target: np.ndarray


def locality_assign(global_batch, holder, p: int, local_batch: int | None = None) -> Assignment:
    """Each rank takes the held samples of the global batch it has room for (b_r = B/p);
    samples nobody holds fill the remaining room (their regular rank first)."""
    batch = check_batch(global_batch, p, local_batch)
    own = owners(batch, holder, p)
    target = even_targets(batch.size, p)
    pos = np.arange(batch.size)
    held = own >= 0
    mine = group_by_rank(pos[held], own[held], p)
    kept = [q[: target[r]] for r, q in enumerate(mine)]
    spare = [q[target[r] :] for r, q in enumerate(mine)]
    room = target - np.array([q.size for q in kept], dtype=np.int64)
    unheld = pos[~held]
    reads = group_by_rank(unheld, fill_rooms(unheld, room, p), p)
    return Assignment(kept, spare, reads, target)


def plan_step(global_batch, holder, p: int, local_batch: int | None = None,
              read_cost: float = 2.0, message_cost: float = 0.0, **_costs) -> StepPlan:
    """Locality-aware plan with Balance: each rank ends with exactly b_r = B/p samples.

    Costs are in units of moving one sample between ranks: a transfer of n samples costs
    ``message_cost + n``, reading them from storage ``n * read_cost``; the cheaper is chosen
    for each transfer of the Balance schedule.
    """
    plan = locality_assign(global_batch, holder, p, local_batch)
    batch = np.asarray(global_batch, dtype=np.int64).reshape(-1)
    return exchange(batch, plan, read_cost, message_cost)


def exchange(batch: np.ndarray, plan: Assignment, read_cost: float = 2.0,
             message_cost: float = 0.0) -> StepPlan:
    """Balance (Algorithm 1) moves the spare positions to the ranks below target b_r; each
    transfer of n samples is a message (``message_cost + n``) or the receiver's storage read
    (``n * read_cost``), whichever is cheaper. Needs Σ kept + spare + reads = Σ b_r."""
    kept, spare, reads, target = plan
    p = len(kept)
    counts = np.array([k.size + r.size + s.size
                       for k, r, s in zip(kept, reads, spare, strict=True)], dtype=np.int64)
    got = [[k, r] for k, r in zip(kept, reads, strict=True)]
    read_pos = [[r] for r in reads]
    transfers = []
    used = np.zeros(p, dtype=np.int64)
    for src, dst, n in transfer_schedule(counts, target):
        moved = spare[src][used[src] : used[src] + n]
        used[src] += n
        got[dst].append(moved)
        if n * read_cost < message_cost + n:
            read_pos[dst].append(moved)
        else:
            transfers.append((src, dst, batch[moved]))
    positions = tuple(np.sort(np.concatenate(g)) for g in got)
    storage = tuple(batch[np.sort(np.concatenate(r))] for r in read_pos)
    return StepPlan(batch, positions, tuple(transfers), storage)


def uneven_assign(global_batch, holder, p: int, local_batch: int | None = None,
                  read_cost: float = 1.0, compute_cost: float = 0.0, **_costs) -> StepPlan:
    """SOLAR §4.3: no transfers; each rank trains on all it holds, uncached samples spread so
    per-rank time n_r·compute_cost + reads_r·read_cost is even (compute_cost 0: reads even)."""
    batch = check_batch(global_batch, p, None)
    own = owners(batch, holder, p)
    pos = np.arange(batch.size)
    held = own >= 0
    mine = group_by_rank(pos[held], own[held], p)
    sizes = np.array([q.size for q in mine], dtype=np.int64)
    unheld = pos[~held]
    per_read = read_cost + compute_cost
    levels = sizes * compute_cost / per_read if per_read > 0 else np.zeros(p)
    room = water_fill(levels, unheld.size)
    reads = group_by_rank(unheld, fill_rooms(unheld, room, p), p)
    positions = tuple(np.sort(np.concatenate([m, r])) for m, r in zip(mine, reads, strict=True))
    return StepPlan(batch, positions, (), tuple(batch[r] for r in reads))


# ---- Lobster §4.2 -------------------------------------------------------------------------
def split_workers(total_workers: int, miss_load_per_rank) -> np.ndarray:
    """Workers per rank in proportion to its predicted miss load (largest remainder).

    Each rank gets at least one worker when there are enough; all loads zero → even split.
    """
    load = np.asarray(miss_load_per_rank, dtype=np.float64).reshape(-1)
    p, total = load.size, int(total_workers)
    if p == 0:
        raise InputError("split workers: no ranks")
    if total < 0 or np.any(load < 0) or not np.all(np.isfinite(load)):
        raise InputError(f"split workers: workers ({total}) and miss loads must be "
                         f"non-negative and finite")
    floor = 1 if total >= p else 0
    weights = load if load.sum() > 0 else np.ones(p)
    share = (total - floor * p) * weights / weights.sum()
    out = np.floor(share).astype(np.int64)
    rem = total - floor * p - int(out.sum())
    if rem:  # largest remainders first; ties: larger load, then lower rank
        pick = np.lexsort((np.arange(p), -load, -(share - out)))[:rem]
        out[pick] += 1
    return out + floor
