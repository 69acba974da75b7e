"""Locality-aware batches across the ranks of a job, over ``torch.distributed``.

Every rank knows the global batch of each step from the seed (``adloader.datapath.locality_batch.
global_batches``: the union of what each rank's ``ElasticDataLoader`` yields) and, once per
epoch, every rank's cache contents (an all-gather of one packed bitmap per rank: the cache
directory, fixed for the epoch). From these all ranks compute the same ``StepPlan``
(``adloader.datapath.locality_batch``, mode by name), so nobody negotiates: rank r sends its planned
transfers with ``isend``, receives its own with ``irecv`` (on CPU: gloo, or a gloo group of
all ranks beside nccl), reads the rest from storage (the dataset) and trains on its part
with loss weight w_r = n_r / B (Theorem 1, SOLAR eq. 3).

The cache is any ``MutableMapping`` sample id → item (default: a dict), filled with what the
rank reads from storage until it holds ``cache_capacity`` samples (default ⌈N/p⌉, the rank's
share), never evicted by this class (the locality paper's cache: populated in the first
epoch, at most 1/p of the dataset per rank, disjoint across ranks). A peer that dies or stalls
mid-exchange costs at most ``timeout`` seconds: its samples are read from storage
(``on_peer_failure="storage"``) or ``ExchangeError`` is raised (``"error"``) — never a hang.

With ``num_workers`` > 0 the planned storage reads go through ``loader``, an
``ElasticDataLoader`` whose worker pool the application master resizes live
(``client.data.locality_reads``); the exchange stays in the training process::

    batches = LocalityBatches(dataset, 128, mode="locality", num_workers=2)
    attach(batches.loader, model="resnet18", batch_size=128)
    for epoch in range(epochs):
        for x, y, w in batches:  # loss = w * criterion(model(x), y); sum-all-reduce grads
            ...
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import default_collate

from adloader.client.data.locality_reads import own, reads_loader
from adloader.datapath.locality_batch import StepPlan, global_batches
from adloader.datapath.locality_modes import get_mode
from adloader.datapath.sample_order import samples_per_rank
from adloader.errors import InputError

FAILURE_MODES = ("storage", "error")
REDUCTIONS = ("sum", "mean")


class ExchangeError(RuntimeError):
    """A peer rank did not take part in a locality exchange in time (dead or stalled)."""


@dataclass
class LocalityStats:
    """One rank's counters for an epoch; the ``plan_*`` fields describe all ranks' plans."""

    steps: int = 0
    samples: int = 0  # trained on by this rank
    hits: int = 0  # from this rank's cache
    received: int = 0  # from peers' caches
    read: int = 0  # from storage (planned reads, plus fallbacks)
    sent: int = 0  # to peers
    fallbacks: int = 0  # planned transfers read from storage because the peer failed
    plan_samples: int = 0  # Σ global batch sizes
    plan_remote: int = 0  # Σ samples moved between ranks or read from storage, all ranks
    plan_transfers: int = 0  # Σ transfers (messages) per step, all ranks
    plan_transfers_max: int = 0
    messages: list[int] = field(default_factory=list)  # transfers this rank received, per step
    lost_peers: set[int] = field(default_factory=set)

    @property
    def remote_share(self) -> float:
        return self.plan_remote / self.plan_samples if self.plan_samples else 0.0


@dataclass(frozen=True)
class LocalBatch:
    """This rank's part of a global batch; unpacks as ``inputs, targets, loss_weight``."""

    inputs: Any
    targets: Any
    loss_weight: float
    step: int
    ids: np.ndarray

    def __iter__(self):
        return iter((self.inputs, self.targets, self.loss_weight))


class LocalityBatches:
    """Per step, this rank's share of the global batch under ``mode`` (see ``balance.MODES``).

    ``local_batch``: b, the regular per-rank batch (global batch B = b · p). ``reduction``:
    "sum" gives w_r = n_r / B for a summing gradient all-reduce, "mean" gives p · n_r / B for
    an averaging one (DDP). Costs (``read_cost``, ``message_cost``, ``compute_cost``) go to
    the planner, and so does ``max_imbalance`` α of the ``bounded`` mode (local batches
    ≤ ⌊α · b⌋). ``threads`` > 0 reads storage samples with a thread pool, during the exchange.
    ``num_workers`` > 0 reads them ahead with ``loader`` (an ``ElasticDataLoader`` of that many
    workers, each with ``threads`` threads; resizable live, e.g. by ``attach(batches.loader)``);
    0 leaves ``loader`` None and reads in this process.
    ``timeout`` bounds each step's exchange and the directory all-gather; make it longer than
    the longest pause one rank can take between steps (a checkpoint), or a slow peer is
    treated as lost for the rest of the epoch (its samples then come from storage).
    """

    def __init__(self, dataset, local_batch: int, *, mode: str = "locality", seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False,
                 cache: MutableMapping | None = None, cache_capacity: int | None = None,
                 collate_fn=None, timeout: float = 30.0, on_peer_failure: str = "storage",
                 reduction: str = "sum", read_cost: float = 2.0, message_cost: float = 0.0,
                 compute_cost: float = 0.0, max_imbalance: float = 1.1, threads: int = 0,
                 num_workers: int = 0) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise InputError("locality batches: torch.distributed is not initialised "
                             "(call init_process_group first)")
        if local_batch < 1:
            raise InputError(f"locality batches: local batch must be at least 1, got {local_batch}")
        if on_peer_failure not in FAILURE_MODES:
            raise InputError(f"locality batches: on_peer_failure must be one of "
                             f"{', '.join(FAILURE_MODES)}, got {on_peer_failure!r}")
        if reduction not in REDUCTIONS:
            raise InputError(f"locality batches: reduction must be 'sum' or 'mean', "
                             f"got {reduction!r}")
        if cache_capacity is not None and cache_capacity < 0:
            raise InputError(f"locality batches: cache capacity must be >= 0 samples, "
                             f"got {cache_capacity}")
        if not max_imbalance >= 1:
            raise InputError(f"locality batches: max_imbalance must be at least 1, "
                             f"got {max_imbalance!r}")
        if timeout <= 0:
            raise InputError(f"locality batches: timeout must be positive, got {timeout}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise InputError(f"locality batches: num_workers must be an integer >= 0, "
                             f"got {num_workers!r}")
        self.planner = get_mode(mode)
        self.mode = mode
        self.dataset = dataset
        self.size = len(dataset)
        self.local_batch = int(local_batch)
        self.seed, self.shuffle, self.drop_last = int(seed), bool(shuffle), bool(drop_last)
        self.cache: MutableMapping = {} if cache is None else cache
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        # samples travel as CPU byte tensors: under nccl, over a gloo group of all ranks
        self.group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        self.cache_capacity = (samples_per_rank(self.size, self.world_size)
                               if cache_capacity is None else int(cache_capacity))
        self.collate_fn = collate_fn or default_collate
        self.timeout = float(timeout)
        self.on_peer_failure = on_peer_failure
        self.reduction = reduction
        self.costs = dict(read_cost=read_cost, message_cost=message_cost,
                          compute_cost=compute_cost, max_imbalance=max_imbalance)
        self.threads = int(threads)
        self.epoch = 0
        self.stats: dict[int, LocalityStats] = {}
        self.lost: set[int] = set()
        self._template = None  # one item, to shape an empty batch
        self._abandoned: list = []  # buffers of receives given up on (gloo may still write)
        self.loader = (reads_loader(dataset, num_workers, self.threads, self.seed)
                       if num_workers > 0 else None)

    # ---- public ---------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        per_rank = samples_per_rank(self.size, self.world_size)
        b = self.local_batch
        return per_rank // b if self.drop_last else -(-per_rank // b)

    def holdings(self) -> np.ndarray:
        """This rank's cache as a boolean array over the dataset."""
        held = np.zeros(self.size, dtype=bool)
        ids = np.fromiter((int(i) for i in self.cache), dtype=np.int64)
        held[ids[(ids >= 0) & (ids < self.size)]] = True
        return held

    def directory(self) -> np.ndarray:
        """All ranks' holdings, shape (p, N): one all-gather of packed bitmaps."""
        mine = torch.from_numpy(np.packbits(self.holdings()))
        parts = [torch.empty_like(mine) for _ in range(self.world_size)]
        try:
            work = dist.all_gather(parts, mine, group=self.group, async_op=True)
            work.wait(timeout=timedelta(seconds=self.timeout))
        except RuntimeError as exc:
            raise ExchangeError(f"locality exchange: the cache directory all-gather of epoch "
                                f"{self.epoch} failed on rank {self.rank} "
                                f"({_first_line(exc)})") from None
        bits = np.stack([p.numpy() for p in parts])
        return np.unpackbits(bits, axis=1, count=self.size).astype(bool)

    def __iter__(self) -> Iterator[LocalBatch]:
        epoch = self.epoch
        batches = global_batches(self.seed, epoch, self.size, self.world_size,
                                 self.local_batch, self.shuffle, self.drop_last)
        holder = self.directory()
        self.lost = set()  # everyone took part in the directory exchange: all alive again
        stats = self.stats[epoch] = LocalityStats(lost_peers=self.lost)
        plans = (self.planner(batch, holder, self.world_size, local_batch=self.local_batch,
                              **self.costs) for batch in batches)
        fetched, start, done = None, 0, False
        if self.loader is not None:  # the epoch's read lists up front, for the worker pool
            plans = list(plans)
            self.loader.batch_sampler.set_steps([p.storage_reads[self.rank] for p in plans],
                                                [p.positions[self.rank].size for p in plans])
            self.loader.set_epoch(epoch)
            fetched = iter(self.loader)
            start = self.loader.consumed  # > 0 only after the loader's load_state_dict
            plans = plans[start:]
        pool = ThreadPoolExecutor(self.threads) if self.threads > 0 else None
        try:
            for step, plan in enumerate(plans, start):
                yield self._assemble(plan, step, stats, pool, fetched)
            if fetched is not None:
                next(fetched, None)  # ends the loader's epoch: its pool shuts down
            done = True
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            if fetched is not None and not done:
                self.loader.release()  # an abandoned epoch: no pool reading ahead for it
        self.epoch = epoch + 1

    # ---- one step --------------------------------------------------------------------------
    def _assemble(self, plan: StepPlan, step: int, stats: LocalityStats, pool,
                  fetched=None) -> LocalBatch:
        """Exchange first (every rank is in this phase at once, so a wait measures only the
        peer), storage reads meanwhile in the loader's workers (``fetched``, read ahead) or the
        pool (``threads``), or after it."""
        me = self.rank
        ids = plan.local_samples[me]
        sends = [(dst, sent) for src, dst, sent in plan.transfers if src == me]
        recvs = [(src, got) for src, dst, got in plan.transfers if dst == me]
        reads = plan.storage_reads[me].tolist()
        early = ([pool.submit(self.dataset.__getitem__, i) for i in reads]
                 if pool is not None and fetched is None else None)
        pending = self._post_receives(recvs, step)
        send_work = self._send(sends, step, stats)
        deadline = time.monotonic() + self.timeout
        received = self._finish_receives(pending, step, deadline)
        self._finish_sends(send_work, step, deadline)
        stats.messages.append(len(received))
        if fetched is not None:
            got_reads = next(fetched, None)
            if got_reads is None:
                raise RuntimeError(f"locality batches: the loader's iteration of epoch "
                                   f"{self.epoch} ended at step {step} (was it iterated "
                                   f"elsewhere?)")
        elif early is not None:
            got_reads = [f.result() for f in early]
        else:
            got_reads = self._read(reads, pool)
        items = dict(zip(reads, got_reads, strict=True))
        stats.read += len(reads)
        for src, got in recvs:
            if src in received:
                items.update(zip(got.tolist(), received[src], strict=True))
                stats.received += got.size
            else:  # the peer failed: read its samples from storage
                items.update(zip(got.tolist(), self._read(got.tolist(), pool), strict=True))
                stats.read += got.size
                stats.fallbacks += got.size
        local = []
        for i in ids.tolist():
            if i not in items:
                items[i] = self._local(i)
                stats.hits += 1
            local.append(items[i])
        self._fill_cache(plan.storage_reads[me], items)
        stats.steps += 1
        stats.samples += ids.size
        stats.plan_samples += plan.global_batch.size
        stats.plan_remote += plan.transferred + plan.read
        stats.plan_transfers += len(plan.transfers)
        stats.plan_transfers_max = max(stats.plan_transfers_max, len(plan.transfers))
        weight = float(plan.loss_weights[me])
        if self.reduction == "mean":
            weight *= self.world_size
        inputs, targets = self._collate(local, plan)
        return LocalBatch(inputs, targets, weight, step, ids)

    def _local(self, i: int):
        try:
            return self.cache[i]
        except KeyError:  # evicted by an outside policy since the directory was taken
            return self.dataset[i]

    def _read(self, keys: list[int], pool) -> list:
        if pool is not None and len(keys) > 1:
            return list(pool.map(self.dataset.__getitem__, keys))
        return [self.dataset[i] for i in keys]

    def _fill_cache(self, reads: np.ndarray, items: dict) -> None:
        room = self.cache_capacity - len(self.cache)
        for i in reads.tolist():
            if room <= 0:
                break
            if i not in self.cache:
                self.cache[i] = own(items[i]) if self.loader is not None else items[i]
                room -= 1

    def _collate(self, local: list, plan: StepPlan):
        if local:
            self._template = local[0]
            out = self.collate_fn(local)
        else:  # an empty local batch (solar mode): zero-length tensors of the right shape
            if self._template is None:
                self._template = self.dataset[int(plan.global_batch[0])]
            one = self.collate_fn([self._template])
            out = [x[:0] for x in one] if isinstance(one, list | tuple) else one[:0]
        if isinstance(out, list | tuple) and len(out) == 2:
            return out[0], out[1]
        return out, None

    # ---- point-to-point exchange --------------------------------------------------------------
    def _tag(self, step: int, part: int) -> int:
        return ((self.epoch * 100_003 + step) * 2 + part) % (2**31 - 1)

    def _post_receives(self, recvs, step: int) -> dict:
        pending = {}
        for src, _ in recvs:
            if src in self.lost:
                continue
            length = torch.zeros(1, dtype=torch.int64)
            pending[src] = (length, self._try(lambda s=src, t=length: dist.irecv(
                t, s, group=self.group, tag=self._tag(step, 0)), src, step))
        return pending

    def _send(self, sends, step: int, stats: LocalityStats) -> list:
        work = []
        for dst, ids in sends:
            if dst in self.lost:
                continue
            payload = pickle.dumps([self._local(i) for i in ids.tolist()],
                                   protocol=pickle.HIGHEST_PROTOCOL)
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            length = torch.tensor([data.numel()], dtype=torch.int64)
            for tensor, part in ((length, 0), (data, 1)):
                w = self._try(lambda t=tensor, d=dst, k=part: dist.isend(
                    t, d, group=self.group, tag=self._tag(step, k)), dst, step)
                if w is not None:
                    work.append((dst, w, tensor))
            stats.sent += ids.size
        return work

    def _finish_receives(self, pending: dict, step: int, deadline: float) -> dict[int, list]:
        out: dict[int, list] = {}
        for src, (length, work) in pending.items():
            if work is None or not self._wait(work, src, step, deadline, length):
                continue
            data = torch.empty(int(length.item()), dtype=torch.uint8)
            work = self._try(lambda s=src, t=data: dist.irecv(
                t, s, group=self.group, tag=self._tag(step, 1)), src, step)
            if work is None or not self._wait(work, src, step, deadline, data):
                continue
            out[src] = pickle.loads(data.numpy().tobytes())
        return out

    def _finish_sends(self, work: list, step: int, deadline: float) -> None:
        for dst, w, tensor in work:
            if dst not in self.lost:
                self._wait(w, dst, step, deadline, tensor)

    def _try(self, start, peer: int, step: int):
        try:
            return start()
        except RuntimeError as exc:
            self._peer_failed(peer, step, exc)
            return None

    def _wait(self, work, peer: int, step: int, deadline: float, buffer) -> bool:
        left = max(deadline - time.monotonic(), 0.001)
        try:
            work.wait(timeout=timedelta(seconds=left))
            return True
        except RuntimeError as exc:
            self._abandoned.append((work, buffer))
            self._peer_failed(peer, step, exc)
            return False

    def _peer_failed(self, peer: int, step: int, exc: BaseException) -> None:
        self.lost.add(peer)
        if self.on_peer_failure == "error":
            raise ExchangeError(f"locality exchange: rank {peer} failed in step {step} of "
                                f"epoch {self.epoch} (seen by rank {self.rank}; "
                                f"{_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
