"""A keyed arena of samples in ONE shared-memory segment, with its index inside the segment.

The segment is exactly ``budget_bytes`` and holds everything, so the RAM it takes is bounded by
the budget whatever is stored:

    header (int64 × 16) | counters (int64 × C) | per sample: first block (int32), length (int32),
    key (int64), extra fields (int64 × F) | per block: next block (int32), free stack (int32) |
    data (B blocks × block_bytes)

A sample's bytes sit in a chain of fixed-size blocks (no fragmentation: any B free blocks hold
a sample of B blocks). ``key`` is the eviction key of a stored sample (the largest leaves first)
and ``EMPTY`` when absent. Every method below expects ``lock`` to be held. A mutation raises the
header's dirty flag first and clears it last, so whoever takes the lock after a holder died
mid-mutation sees the flag and rebuilds the free list from the index (``repair``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker, shared_memory

import numpy as np
import psutil

from adloader.errors import InputError, StorageError
from adloader.host.file_lock import FileLock

EMPTY = np.iinfo(np.int64).min  # key of an absent sample
HEADER = 16
MAGIC_VALUE = 0x41444C43  # "ADLC"
(MAGIC, DIRTY, TICK, BLOCKS, FREE_TOP, USED, BLOCK_BYTES, SIZE, STORED, NFIELDS,
 NCOUNTERS, LIMIT) = range(12)  # header slots; LIMIT: blocks that may hold data (0: all)
ALIGN = 64
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
SHM_DIR = "/dev/shm"


def _up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _layout(size: int, blocks: int, block_bytes: int, fields: int, counters: int) -> dict:
    """Byte offsets of each region, and the total."""
    at, out = 0, {}
    for name, nbytes in (("header", 8 * HEADER), ("counters", 8 * counters),
                         ("first", 4 * size), ("length", 4 * size), ("key", 8 * size),
                         ("fields", 8 * size * fields), ("next", 4 * blocks),
                         ("free", 4 * blocks), ("data", blocks * block_bytes)):
        out[name] = at
        at = _up(at + nbytes)
        if name == "free":  # data starts on a page: a freed block's pages can be given back
            at = -(-at // PAGE) * PAGE
    out["total"] = at
    return out


def budget_for(size: int, data_bytes: int, block_bytes: int, fields: int = 0,
               counters: int = 0) -> int:
    """The smallest budget (whole pages) whose data region holds ``data_bytes`` (whole blocks)."""
    blocks = max(1, -(-int(data_bytes) // block_bytes))
    total = _layout(size, blocks, block_bytes, fields, counters)["total"]
    return -(-total // PAGE) * PAGE


def _blocks_in(budget: int, size: int, block_bytes: int, fields: int, counters: int) -> int:
    fixed = _layout(size, 0, block_bytes, fields, counters)["total"]
    blocks = max(0, (budget - fixed) // (block_bytes + 8) + PAGE // block_bytes + 2)
    while blocks and _layout(size, blocks, block_bytes, fields, counters)["total"] > budget:
        blocks -= 1
    return blocks


def check_free_memory(what: str, budget: int) -> None:
    """A budget the node cannot hold in RAM (or in its shared-memory mount) is a user error."""
    available = psutil.virtual_memory().available
    if budget > available:
        raise InputError(f"{what}: budget {budget / 2**20:.1f} MiB is more than the free "
                         f"memory ({available / 2**20:.1f} MiB)")
    if os.path.isdir(SHM_DIR):
        free = shutil.disk_usage(SHM_DIR).free
        if budget > free:
            raise InputError(f"{what}: budget {budget / 2**20:.1f} MiB is more than the free "
                             f"space of {SHM_DIR} ({free / 2**20:.1f} MiB)")


class SampleArena:
    """``size`` sample slots over one shared segment of ``budget`` bytes (see the module doc).

    Create it in the parent before the workers fork (they inherit the mapping), or attach to
    it by ``name`` (what unpickling does, e.g. under a spawn context). ``fields``: names of
    extra int64 arrays per sample; ``counters``: length of a shared int64 counter array.
    """

    def __init__(self, budget: int, size: int, block_bytes: int = 4096,
                 fields: Sequence[str] = (), counters: int = 0, what: str = "cache",
                 name: str | None = None) -> None:
        self.fields_names = tuple(fields)
        self.what = what
        if name is not None:
            self._attach(name)
            return
        if int(size) < 1:
            raise InputError(f"{what}: the dataset needs at least 1 sample, got {size}")
        if int(block_bytes) < 64:
            raise InputError(f"{what}: block size must be at least 64 bytes, got {block_bytes}")
        # whole pages: the OS backs the segment by pages, so it never holds more than the budget
        budget, size, block_bytes = int(budget) // PAGE * PAGE, int(size), int(block_bytes)
        blocks = _blocks_in(budget, size, block_bytes, len(self.fields_names), counters)
        if blocks < 1:
            need = budget_for(size, block_bytes, block_bytes, len(self.fields_names), counters)
            raise InputError(f"{what}: budget {budget} bytes cannot hold the index of {size} "
                             f"samples and one block; need at least {need} bytes")
        check_free_memory(what, budget)
        self.shm = shared_memory.SharedMemory(create=True, size=budget)
        self.owner = os.getpid()
        self._map(budget, size, blocks, block_bytes, counters)
        self.header[:] = 0
        self.header[[MAGIC, BLOCKS, FREE_TOP, BLOCK_BYTES, SIZE]] = (
            MAGIC_VALUE, blocks, blocks, block_bytes, size)
        self.header[NFIELDS], self.header[NCOUNTERS] = len(self.fields_names), counters
        self.counters[:] = 0
        self.first[:] = -1
        self.length[:] = 0
        self.key[:] = EMPTY
        self.fields[:] = 0
        self.free[:] = np.arange(blocks, dtype=np.int32)
        self._make_lock()
        self.on_repair: Callable[[], None] | None = None

    # ---- mapping -------------------------------------------------------------------------
    def _map(self, budget: int, size: int, blocks: int, block_bytes: int, counters: int) -> None:
        self.budget, self.size, self.blocks, self.block_bytes = budget, size, blocks, block_bytes
        lay = _layout(size, blocks, block_bytes, len(self.fields_names), counters)
        buf = self.shm.buf

        def view(name, dtype, count):
            return np.ndarray((count,), dtype=dtype, buffer=buf, offset=lay[name])

        self.header = view("header", np.int64, HEADER)
        self.counters = view("counters", np.int64, counters)
        self.first = view("first", np.int32, size)
        self.length = view("length", np.int32, size)
        self.key = view("key", np.int64, size)
        fields = view("fields", np.int64, size * len(self.fields_names))
        self.fields = fields.reshape(len(self.fields_names), size)
        self.field = {n: self.fields[k] for k, n in enumerate(self.fields_names)}
        self.next = view("next", np.int32, blocks)
        self.free = view("free", np.int32, blocks)
        self.data = np.ndarray((blocks, block_bytes), dtype=np.uint8, buffer=buf,
                               offset=lay["data"])
        self._data_at = lay["data"]

    def _attach(self, name: str) -> None:
        try:
            self.shm = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            raise StorageError(f"{self.what}: shared segment {name!r} does not exist "
                               "(was the cache closed?)") from None
        # Python < 3.13 registers an attached segment with this process's resource tracker,
        # which would unlink it when this process exits: only the creator owns it.
        with contextlib.suppress(Exception):
            resource_tracker.unregister(self.shm._name, "shared_memory")  # type: ignore[attr-defined]
        self.owner = -1
        head = np.ndarray((HEADER,), dtype=np.int64, buffer=self.shm.buf)
        if head[MAGIC] != MAGIC_VALUE or head[NFIELDS] != len(self.fields_names):
            del head
            self.shm.close()
            raise StorageError(f"{self.what}: shared segment {name!r} is not a sample arena")
        budget, size, blocks, bb, counters = (self.shm.size, int(head[SIZE]), int(head[BLOCKS]),
                                              int(head[BLOCK_BYTES]), int(head[NCOUNTERS]))
        del head
        self._map(budget, size, blocks, bb, counters)
        self._make_lock()
        self.on_repair = None

    def _make_lock(self) -> None:
        self._name = self.shm.name  # kept after close, to check that the segment is gone
        path = os.path.join(SHM_DIR, self._name)
        if not os.path.exists(path):  # no /dev/shm (not Linux): a lock file beside it
            path = os.path.join(tempfile.gettempdir(), f"adloader-{self.shm.name}.lock")
        self.lock_path = path
        self._lock = FileLock(path)

    @property
    def name(self) -> str:
        return self._name

    @property
    def segment_path(self) -> str:
        return os.path.join(SHM_DIR, self._name)

    @contextlib.contextmanager
    def locked(self):
        """Hold the lock; repair the index first if its last holder died mid-mutation."""
        with self._lock:
            if self.header[DIRTY]:
                self.repair()
            yield self

    def close(self) -> None:
        """Unmap; the creating process also unlinks the segment (no leak in /dev/shm)."""
        if getattr(self, "shm", None) is None:
            return
        self._lock.close()
        for attr in ("header", "counters", "first", "length", "key", "fields", "field", "next",
                     "free", "data"):
            self.__dict__.pop(attr, None)  # numpy views pin the buffer: drop them first
        shm, self.shm = self.shm, None
        with contextlib.suppress(BufferError):
            shm.close()
        if self.owner == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()
            if self.lock_path.startswith(tempfile.gettempdir()):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.lock_path)

    @property
    def closed(self) -> bool:
        return getattr(self, "shm", None) is None

    def __getstate__(self) -> dict:
        return {"name": self._name, "fields": self.fields_names, "what": self.what}

    def __setstate__(self, state: dict) -> None:
        self.__init__(0, 0, fields=state["fields"], what=state["what"], name=state["name"])

    # ---- operations (lock held) --------------------------------------------------------------
    def has(self, i: int) -> bool:
        return self.first[i] >= 0

    def blocks_for(self, nbytes: int) -> int:
        return max(1, -(-nbytes // self.block_bytes))

    @property
    def free_blocks(self) -> int:
        return int(self.header[FREE_TOP])

    @property
    def room(self) -> int:
        """Blocks a new sample may take now: the free ones, within the limit if one is set."""
        top, limit = int(self.header[FREE_TOP]), int(self.header[LIMIT])
        if limit <= 0:
            return top
        return max(0, min(top, limit - (self.blocks - top)))

    def set_limit(self, blocks: int) -> int:
        """Let at most ``blocks`` blocks hold data (0: all): the samples with the largest
        keys leave until the rest fit, and the pages of the blocks they held go back to the
        OS (a tmpfs hole), so the segment's resident size follows the limit. Returns how
        many samples left."""
        blocks = max(0, min(int(blocks), self.blocks))
        self.header[LIMIT] = blocks if blocks < self.blocks else 0
        left, freed = 0, []
        while self.header[LIMIT] and self.blocks - int(self.header[FREE_TOP]) > blocks:
            v = self.victim()
            if v < 0:
                break
            freed += self._chain(v)
            self.drop(v)
            left += 1
        self._give_back(freed)
        return left

    def _give_back(self, blocks: list[int]) -> None:
        mm = getattr(self.shm, "_mmap", None)
        step = self.block_bytes
        if not blocks or mm is None or step % PAGE or not hasattr(mm, "madvise"):
            return
        import mmap

        if not hasattr(mmap, "MADV_REMOVE"):
            return
        base = self._data_at
        for b in sorted(blocks):
            with contextlib.suppress(OSError, ValueError):
                mm.madvise(mmap.MADV_REMOVE, base + b * step, step)

    @property
    def held_bytes(self) -> int:
        """Bytes of the blocks that hold data (whole blocks: what the limit counts)."""
        return (self.blocks - int(self.header[FREE_TOP])) * self.block_bytes

    @property
    def used_bytes(self) -> int:
        return int(self.header[USED])

    @property
    def stored(self) -> int:
        return int(self.header[STORED])

    def tick(self) -> int:
        t = int(self.header[TICK])
        self.header[TICK] = t + 1
        return t

    def _chain(self, i: int) -> list[int]:
        out, b = [], int(self.first[i])
        for _ in range(self.blocks_for(int(self.length[i]))):
            out.append(b)
            b = int(self.next[b])
        return out

    def read(self, i: int) -> bytes:
        n = int(self.length[i])
        chain = self._chain(i)
        flat = self.data[chain].reshape(-1)  # one fancy-index copy of the chain
        return flat[:n].tobytes()

    def store(self, i: int, data: bytes, key: int) -> bool:
        """Store sample i under ``key`` if enough blocks are free (replacing its old copy)."""
        if self.has(i):
            self.drop(i)
        n = len(data)
        k = self.blocks_for(n)
        top = int(self.header[FREE_TOP])
        if k > self.room:
            return False
        self.header[DIRTY] = 1
        ids = self.free[top - k : top].copy()
        self.header[FREE_TOP] = top - k
        self.next[ids[:-1]] = ids[1:]
        self.next[ids[-1]] = -1
        full, bb = n // self.block_bytes, self.block_bytes
        src = np.frombuffer(data, dtype=np.uint8)
        if full:
            self.data[ids[:full]] = src[: full * bb].reshape(full, bb)
        if n > full * bb:
            self.data[ids[full], : n - full * bb] = src[full * bb :]
        self.length[i] = n
        self.key[i] = key
        self.first[i] = ids[0]  # published last
        self.header[USED] += n
        self.header[STORED] += 1
        self.header[DIRTY] = 0
        return True

    def drop(self, i: int) -> None:
        if not self.has(i):
            return
        self.header[DIRTY] = 1
        chain = self._chain(i)
        top = int(self.header[FREE_TOP])
        self.first[i] = -1
        self.key[i] = EMPTY
        self.free[top : top + len(chain)] = chain
        self.header[FREE_TOP] = top + len(chain)
        self.header[USED] -= int(self.length[i])
        self.header[STORED] -= 1
        self.length[i] = 0
        self.header[DIRTY] = 0

    def victim(self) -> int:
        """The stored sample with the largest key (ties: the largest id), or −1."""
        if not self.header[STORED]:
            return -1
        j = self.size - 1 - int(np.argmax(self.key[::-1]))
        return j if self.key[j] != EMPTY else -1

    def keys_below(self, bound: int) -> np.ndarray:
        """Stored samples whose key is < ``bound``."""
        return np.flatnonzero((self.key != EMPTY) & (self.key < bound))

    def repair(self) -> None:
        """Rebuild the free list from the index: blocks no valid chain reaches are free."""
        used = np.zeros(self.blocks, dtype=bool)
        total = count = 0
        for i in np.flatnonzero(self.first >= 0).tolist():
            ok, b, chain = True, int(self.first[i]), []
            for _ in range(self.blocks_for(int(self.length[i]))):
                if not 0 <= b < self.blocks or used[b]:
                    ok = False
                    break
                chain.append(b)
                b = int(self.next[b])
            if ok and b == -1:
                used[chain] = True
                total += int(self.length[i])
                count += 1
            else:
                self.first[i], self.length[i] = -1, 0
        self.key[self.first < 0] = EMPTY
        free = np.flatnonzero(~used).astype(np.int32)
        self.free[: free.size] = free
        self.header[FREE_TOP] = free.size
        self.header[USED], self.header[STORED] = total, count
        if self.on_repair is not None:
            self.on_repair()
        self.header[DIRTY] = 0
