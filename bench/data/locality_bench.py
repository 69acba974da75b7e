"""``bench locality``: the share of each global batch fetched from another rank or storage.

Simulated (``run_locality_bench``), after the locality paper's Fig. 6: p ranks, local batch b,
global batch B = b·p. In epoch 1 every rank reads its regular share (``rank_order``, what the
``ElasticDataLoader`` yields) and caches the first ``cache_fraction``·N samples it reads, never
evicting (default 1/p: all it read — the caches are disjoint and cover the dataset, the
paper's setting). For epochs ≥ 2 each mode of ``adloader.datapath.locality_batch`` is measured per
step:

- ``regular``: rank r trains on positions r::p and fetches what it lacks (≈ (p − 1)/p);
- ``locality``: Balance, the remote share is Σ_r deficits / B (the paper: 3.4 % median at
  b = 128), transfers per step ≤ p − 1 (checked);
- ``solar``: no transfers; remote = uncached samples only, local batch sizes differ (reported
  as the largest local batch);
- ``bounded`` (``adloader.datapath.bounded_imbalance``): local batches ≤ ⌊α · b⌋ (``max_imbalance``
α),
  the remote share is Σ_r max(h_r − c, 0) + uncached, the largest batch clip(max h_r, b, c).

Counts for all steps are vectorised; only Algorithm 1 runs per step (O(p log p)), and a few
steps per epoch are re-planned with the real planners to check the vectorised counts.
``run_gloo_locality_bench`` measures the same on real gloo ranks with ``LocalityBatches``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from adloader.datapath.bounded_imbalance import (
    MAX_IMBALANCE,
    batch_bound,
    bounded_assign,
    capped_fill,
)
from adloader.datapath.locality_batch import (
    even_targets,
    global_order,
    plan_step,
    regular_assign,
    transfer_schedule,
    uneven_assign,
)
from adloader.datapath.locality_modes import get_mode
from adloader.datapath.sample_order import samples_per_rank
from adloader.errors import InputError
from adloader.workloads.ranks import spawn_gloo

MODES = ("regular", "locality", "solar", "bounded")
IMAGENET = 1_281_167
QUICK = {"ps": (4, 16, 64), "dataset_size": 131_072, "epochs": 2}


def _owner_after_first_epoch(seed: int, size: int, p: int, capacity: int) -> np.ndarray:
    """Per sample, the rank that cached it in epoch 1 (−1: none); first reader wins."""
    order = global_order(seed, 0, size, p)
    k = np.arange(order.size)
    cached = k // p < capacity  # rank k mod p's (k // p)-th read
    owner = np.full(size, -1, dtype=np.int64)
    owner[order[cached][::-1]] = (k[cached] % p)[::-1]
    return owner


def _step_counts(own: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step: held samples per rank (S, p) and unheld samples per regular rank (S, p)."""
    steps, big = own.shape
    row = np.repeat(np.arange(steps), big).reshape(steps, big) * p
    held = own >= 0
    counts = np.bincount((row + own)[held], minlength=steps * p).reshape(steps, p)
    regular = np.broadcast_to(np.arange(big) % p, own.shape)
    unheld = np.bincount((row + regular)[~held], minlength=steps * p).reshape(steps, p)
    return counts, unheld


def _locality(counts, unheld, target, read_cost, message_cost):
    """Vectorised ``plan_step`` counts: remote, storage reads, transfers per step."""
    kept = np.minimum(counts, target)
    room = target - kept
    filled = np.minimum(unheld, room)
    left = room - filled
    rest = unheld.sum(1) - filled.sum(1)
    before = np.cumsum(left, axis=1) - left
    add = np.clip(rest[:, None] - before, 0, left)
    after = kept + filled + add + (counts - kept)
    remote = room.sum(1)
    storage = unheld.sum(1).copy()
    transfers = np.zeros(len(counts), dtype=np.int64)
    for s in range(len(counts)):
        for _, _, n in transfer_schedule(after[s], target):
            if n * read_cost < message_cost + n:
                storage[s] += n
            else:
                transfers[s] += 1
    return remote, storage, transfers


def _bounded(counts, unheld, b, cap, read_cost, message_cost):
    """Vectorised ``bounded_assign`` counts (one holder per sample, compute cost 0): remote,
    storage reads, transfers and the largest local batch per step (full steps: B = b · p)."""
    largest = np.clip(counts.max(1), b, cap)
    kept = np.minimum(counts, largest[:, None])
    remote = unheld.sum(1) + (counts - kept).sum(1)
    storage = unheld.sum(1).copy()
    transfers = np.zeros(len(counts), dtype=np.int64)
    for s in range(len(counts)):
        quota = capped_fill(np.zeros(counts.shape[1]), largest[s] - kept[s], remote[s])
        filled = np.minimum(unheld[s], quota)  # ``_fill``: regular rank first, then in order
        left = quota - filled
        rest = unheld[s].sum() - filled.sum()
        reads = filled + np.clip(rest - (np.cumsum(left) - left), 0, left)
        for _, _, n in transfer_schedule(counts[s] + reads, kept[s] + quota):
            if n * read_cost < message_cost + n:
                storage[s] += n
            else:
                transfers[s] += 1
    return remote, storage, transfers, largest


def _check(mode: str, own_rows, owner, p, b, read_cost, message_cost, expect,
           max_imbalance=MAX_IMBALANCE) -> None:
    for s, batch in own_rows:
        if mode == "bounded":
            plan = bounded_assign(batch, owner, p, b, max_imbalance=max_imbalance,
                                  read_cost=read_cost, message_cost=message_cost)
        elif mode == "locality":
            plan = plan_step(batch, owner, p, b, read_cost=read_cost, message_cost=message_cost)
        elif mode == "solar":
            plan = uneven_assign(batch, owner, p, b)
        else:
            plan = regular_assign(batch, owner, p, b)
        got = (plan.transferred + plan.read, plan.read, len(plan.transfers),
               int(plan.local_sizes.max()))
        want = tuple(int(x[s]) for x in expect)
        if got != want:
            raise RuntimeError(f"bench locality: p={p} {mode} step {s}: the planner gives "
                               f"{got}, the vectorised count {want}")


def run_locality_bench(ps=(4, 16, 64, 256), local_batch: int = 128, epochs: int = 3,
                       dataset_size: int = IMAGENET, cache_fraction: float | None = None,
                       modes=MODES, seed: int = 0, read_cost: float = 2.0,
                       message_cost: float = 0.0, max_imbalance: float = MAX_IMBALANCE,
                       quick: bool = False,
                       progress: Callable[[dict], None] | None = None) -> list[dict]:
    """One row per (p, mode) over epochs ≥ 2: remote share (mean, median, p95, max), the
    shares moved between ranks and read from storage, transfers per step, largest local batch
    (also × b, ``largest_ratio``).

    ``cache_fraction``: samples each rank caches, as a fraction of the dataset (default and
    maximum: its share, 1/p). ``max_imbalance``: α of the ``bounded`` mode, whose row meets
    its target with ≤ 1 % fetched (mean) and no local batch over ⌊α · b⌋.
    ``quick``: ``QUICK`` sizes for tests.
    """
    if quick:
        ps, dataset_size, epochs = QUICK["ps"], QUICK["dataset_size"], QUICK["epochs"]
    if epochs < 2:
        raise InputError(f"bench locality: needs at least 2 epochs (the first fills the "
                         f"caches), got {epochs}")
    if local_batch < 1:
        raise InputError(f"bench locality: local batch must be at least 1, got {local_batch}")
    if cache_fraction is not None and not 0 <= cache_fraction <= 1:
        raise InputError(f"bench locality: cache fraction must be in [0, 1], got "
                         f"{cache_fraction}")
    for m in modes:
        get_mode(m)
    cap = batch_bound(local_batch, max_imbalance)
    rows: list[dict] = []
    for p in ps:
        per_rank = samples_per_rank(dataset_size, p)
        steps = per_rank // local_batch
        if p < 1 or steps < 1:
            raise InputError(f"bench locality: {dataset_size} samples make no global batch of "
                             f"{local_batch} × {p} ranks")
        capacity = per_rank if cache_fraction is None else min(
            int(round(cache_fraction * dataset_size)), per_rank)
        t0 = time.perf_counter()
        owner = _owner_after_first_epoch(seed, dataset_size, p, capacity)
        big = local_batch * p
        target = even_targets(big, p)
        batches = np.concatenate([global_order(seed, e, dataset_size, p)[: steps * big]
                                  .reshape(steps, big) for e in range(1, epochs)])
        own = owner[batches]
        counts, unheld = _step_counts(own, p)
        setup = time.perf_counter() - t0
        unheld_total = unheld.sum(1)
        checks = sorted({0, steps // 2, len(batches) - 1, steps})
        checks = [(s, batches[s]) for s in checks if s < len(batches)]
        for mode in modes:
            t0 = time.perf_counter()
            if mode == "bounded":
                remote, storage, transfers, largest = _bounded(counts, unheld, local_batch, cap,
                                                               read_cost, message_cost)
            elif mode == "locality":
                remote, storage, transfers = _locality(counts, unheld, target, read_cost,
                                                       message_cost)
                largest = np.full(len(batches), target.max())
            elif mode == "solar":
                remote = storage = unheld_total
                transfers = np.zeros(len(batches), dtype=np.int64)
                extra = unheld_total[:, None] // p + (
                    np.arange(p)[None, :] < (unheld_total % p)[:, None])
                largest = (counts + extra).max(1)
            else:
                remote = storage = (own != np.arange(big) % p).sum(1)
                transfers = np.zeros(len(batches), dtype=np.int64)
                largest = np.full(len(batches), target.max())
            _check(mode, checks, owner, p, local_batch, read_cost, message_cost,
                   (remote, storage, transfers, largest), max_imbalance)
            share = remote / big
            if transfers.max(initial=0) > p - 1:
                raise RuntimeError(f"bench locality: {transfers.max()} transfers in a step "
                                   f"at p={p} (Balance promises ≤ {p - 1})")
            row = {
                "p": p, "mode": mode, "local_batch": local_batch, "global_batch": big,
                "dataset_size": dataset_size, "cache_per_rank": capacity,
                "coverage": float((owner >= 0).mean()), "steps": int(len(batches)),
                "remote_share_mean": float(share.mean()),
                "remote_share_median": float(np.median(share)),
                "remote_share_p95": float(np.percentile(share, 95)),
                "remote_share_max": float(share.max()),
                "moved_share": float((remote - storage).sum() / (big * len(batches))),
                "storage_share": float(storage.sum() / (big * len(batches))),
                "transfers_mean": float(transfers.mean()),
                "transfers_max": int(transfers.max(initial=0)), "transfer_bound": p - 1,
                "largest_local_batch": int(largest.max()),
                "largest_ratio": float(largest.max() / local_batch),
                "seconds": setup + time.perf_counter() - t0,
            }
            if mode == "bounded":
                row.update(max_imbalance=max_imbalance, batch_bound=cap)
            row["meets_target"] = {
                "locality": row["remote_share_mean"] <= 0.05 and row["transfers_max"] <= p - 1,
                "bounded": row["remote_share_mean"] <= 0.01 and row["largest_local_batch"] <= cap
                and row["transfers_max"] <= p - 1,
            }.get(mode, True)
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


class SyntheticImages(torch.utils.data.Dataset):
    """Deterministic (image, label) samples made from their index: a stand-in for storage."""

    def __init__(self, size: int, shape=(3, 16, 16), classes: int = 10) -> None:
        self.size, self.shape, self.classes = size, tuple(shape), classes

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(int(i))
        return torch.randn(self.shape, generator=g), int(i) % self.classes


def _gloo_measure(rank, world_size, mode, local_batch, size, epochs, seed, max_imbalance):
    from adloader.client.data.locality import LocalityBatches

    batches = LocalityBatches(SyntheticImages(size), local_batch, mode=mode, seed=seed,
                              max_imbalance=max_imbalance)
    largest = 0  # this rank's largest local batch after epoch 1
    t0 = time.perf_counter()
    for epoch in range(epochs):
        for batch in batches:
            largest = max(largest, len(batch.ids)) if epoch else largest
    seconds = time.perf_counter() - t0
    later = [batches.stats[e] for e in range(1, epochs)]
    return {
        "samples": sum(s.samples for s in later), "hits": sum(s.hits for s in later),
        "received": sum(s.received for s in later), "read": sum(s.read for s in later),
        "messages": [m for s in later for m in s.messages],
        "plan_remote": sum(s.plan_remote for s in later),
        "plan_samples": sum(s.plan_samples for s in later),
        "plan_transfers_max": max(s.plan_transfers_max for s in later), "seconds": seconds,
        "largest_local_batch": largest,
    }


def run_gloo_locality_bench(world_size: int = 4, local_batch: int = 128, epochs: int = 3,
                            steps_per_epoch: int = 10, modes=MODES, seed: int = 0,
                            max_imbalance: float = MAX_IMBALANCE,
                            timeout: float = 120.0) -> list[dict]:
    """The same measure on real gloo ranks (forked here) with ``LocalityBatches``: per mode,
    the share of samples each rank got from a peer or storage after epoch 1 (counted by
    the ranks), the transfers received per step, summed over ranks, and the largest local
    batch any rank trained on (× b: ``largest_ratio``)."""
    size = world_size * local_batch * steps_per_epoch
    rows = []
    for mode in modes:
        parts = spawn_gloo(_gloo_measure, world_size, mode, local_batch, size, epochs, seed,
                           max_imbalance, timeout=timeout)
        largest = max(r["largest_local_batch"] for r in parts)
        samples = sum(r["samples"] for r in parts)
        per_step = np.sum([r["messages"] for r in parts], axis=0)
        rows.append({
            "p": world_size, "mode": mode, "local_batch": local_batch, "dataset_size": size,
            "steps": len(per_step),
            "remote_share": sum(r["received"] + r["read"] for r in parts) / samples,
            "planned_remote_share": parts[0]["plan_remote"] / parts[0]["plan_samples"],
            "transfers_mean": float(per_step.mean()), "transfers_max": int(per_step.max()),
            "transfer_bound": world_size - 1,
            "largest_local_batch": largest, "largest_ratio": largest / local_batch,
            "seconds": max(r["seconds"] for r in parts),
        })
    return rows
