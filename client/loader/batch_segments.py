"""Batches collated into shared-memory segments a worker reuses once the trainer lets go.

torch's ``default_collate``, in a worker, stacks each batch's tensors into a *fresh*
shared-memory segment, which the kernel allocates and zeroes page by page and frees when the
trainer drops the batch: many times the CPU of stacking into a segment already made, a
visible part of what loading a sample costs (``docs/benchmarks.md``, "The batches' shared
memory, reused").

``SegmentCollate`` is ``default_collate`` with one change: a tensor of at least
``MIN_BYTES`` is stacked into one of the worker's ``slots`` segments when the trainer has
given one back, else into a new one while the worker has fewer than ``slots`` and they hold
less than ``RING_BYTES``, else into a fresh segment as torch does. Each segment carries,
past the batch's bytes, a tail naming it (``MAGIC``, the pool's token, the worker, the
slot). The trainer (``PoolIter``) hands each batch it receives to ``received``; at each
next batch ``release`` looks at the segments it holds and gives back, through a flag per
slot in shared memory, those whose storage no tensor of the trainer refers to any more
(torch's ``StorageWeakRef``). A batch the user keeps keeps its segment: it is never
written again while anything in the trainer can read it.

Used for a pool of workers where the loader collates with torch's default and does not pin
memory (a pinned batch is a copy made in the trainer; the segment is dropped there, unseen).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import collate, collate_tensor_fn, default_collate_fn_map

MAGIC = 0x41444C42415443  # "ADLBATC"
MIN_BYTES = 1 << 20  # smaller tensors are cheap to make fresh
RING_BYTES = 256 << 20  # a worker keeps at most this much: past it, fresh segments as torch
ALIGN = 64
TAIL = 4  # int64s past the batch's bytes: MAGIC, token, worker, slot
ROWS, GROW = 64, 4  # a pool's flags: for this many workers' ids at least, or GROW × its own


def _body(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def _tail(storage: torch.UntypedStorage, body: int) -> torch.Tensor:
    """The int64s past a segment's ``body`` bytes that name it."""
    return torch.empty(0, dtype=torch.int64).set_(storage, body // 8, (TAIL,))


class SegmentCollate:
    """``default_collate`` into reused segments (see the module); one per pool of
    ``workers`` workers, made in the trainer before they fork."""

    def __init__(self, workers: int, slots: int) -> None:
        self.workers, self.slots = int(workers), int(slots)
        self.token = random.getrandbits(62)
        self.free = torch.zeros((max(self.workers, 1), self.slots), dtype=torch.int8)
        self.free.share_memory_()
        self._mine: list[tuple[torch.UntypedStorage, torch.Size, torch.dtype]] = []
        self._bytes = 0  # the worker's segments, in all
        self._held: list[tuple[StorageWeakRef, int, int]] = []  # the trainer's side
        self._map = {**default_collate_fn_map, torch.Tensor: self._tensor}

    @classmethod
    def for_pool(cls, workers: int, prefetch_factor: int | None) -> SegmentCollate:
        """Enough segments a worker for its batches in flight, the one the loop holds and
        the one before it, which the loop still holds while it asks for the next; flags for
        ``GROW`` × ``workers`` workers (at least ``ROWS``): the ones a pool resized in place
        forks later (each a new id) reuse theirs too."""
        return cls(max(ROWS, GROW * workers), (prefetch_factor or 2) + 3)

    # -- in a worker ------------------------------------------------------------------------
    def __call__(self, batch):
        return collate(batch, collate_fn_map=self._map)

    def _tensor(self, batch, *, collate_fn_map=None):
        info = get_worker_info()
        elem = batch[0]
        shape = torch.Size((len(batch), *elem.shape))
        nbytes = shape.numel() * elem.element_size()
        if info is None or type(elem) is not torch.Tensor or nbytes < MIN_BYTES \
                or elem.layout != torch.strided or elem.device.type != "cpu" \
                or info.id >= self.workers:  # a subclass keeps torch's path, and its type
            return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
        slot = self._slot(info.id, shape, elem.dtype, nbytes)
        if slot is None:
            return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
        storage = self._mine[slot][0]
        out = torch.empty(0, dtype=elem.dtype).set_(storage, 0, shape)
        return torch.stack(batch, 0, out=out)

    def _slot(self, worker: int, shape, dtype, nbytes: int) -> int | None:
        """A slot given back that fits, else a new one while there is room, else None."""
        flags = self.free[worker]
        for k, (_, s, d) in enumerate(self._mine):
            if s == shape and d == dtype and flags[k]:
                flags[k] = 0
                return k
        body = _body(nbytes)
        if len(self._mine) >= self.slots or self._bytes + body > RING_BYTES:
            return None
        self._bytes += body
        storage = torch.UntypedStorage._new_shared(body + TAIL * 8)
        k = len(self._mine)
        _tail(storage, body).copy_(torch.tensor([MAGIC, self.token, worker, k]))
        self._mine.append((storage, shape, dtype))
        return k

    # -- in the trainer ---------------------------------------------------------------------
    def received(self, data) -> None:
        """Note the segments of a batch just received (the trainer's own storages)."""
        for t in _tensors(data):
            named = self._named(t)
            if named is not None:
                self._held.append((StorageWeakRef(t.untyped_storage()), *named))

    def release(self) -> int:
        """Give back the segments nothing in the trainer refers to any more; how many."""
        kept, given = [], 0
        for ref, worker, slot in self._held:
            if ref.expired():
                self.free[worker, slot] = 1
                given += 1
            else:
                kept.append((ref, worker, slot))
        self._held = kept
        return given

    def _named(self, t: torch.Tensor) -> tuple[int, int] | None:
        """(worker, slot) of a tensor that fills one of this pool's segments, else None."""
        if t.device.type != "cpu" or t.storage_offset() != 0 or not t.is_contiguous():
            return None
        storage = t.untyped_storage()
        body = _body(t.nbytes)
        if storage.nbytes() != body + TAIL * 8 or not storage.is_shared():
            return None
        tail = _tail(storage, body).tolist()
        if tail[0] != MAGIC or tail[1] != self.token \
                or not (0 <= tail[2] < self.workers and 0 <= tail[3] < self.slots):
            return None
        return tail[2], tail[3]


def _tensors(data):
    """The tensors of a batch (nested in sequences and mappings, as collate builds them)."""
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, Mapping):
        for v in data.values():
            yield from _tensors(v)
    elif isinstance(data, (list, tuple)):
        for v in data:
            yield from _tensors(v)
