"""The node-local sample cache: a RAM tier in shared memory and an optional disk tier.

``SharedSampleCache(budget_bytes, size, policy, plan)`` creates one shared segment of exactly
``budget_bytes`` (a ``SampleArena``: data and index together) in the parent, before the
``ElasticDataLoader`` forks its workers; every worker reads and fills the same copy. It starts
empty and fills on the fly in the first epoch: ``fetch(i, load)`` serves sample i from RAM, then
disk, else calls ``load(i)`` (the staging buffer or storage) and lets the policy (a name of
``adloader.datapath.cache_policies``, applied online) decide what stays. Tiers are
exclusive: what RAM evicts or refuses is offered to the disk tier, whose files are written
atomically (temp file, then rename). Where each access was served from is counted per epoch in
shared counters; ``memory()`` measures the segment with the OS and psutil, not bookkeeping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import psutil

from adloader.datapath.cache_policies import online_policy
from adloader.datapath.online_cache import NEVER, Access, AccessPlan
from adloader.errors import InputError
from adloader.host.atomic import write_bytes
from adloader.host.shm_arena import EMPTY, SampleArena, budget_for

SOURCES = ("ram", "disk", "staged", "storage")  # where an access was served from
Load = Callable[[int], tuple[bytes, str]]  # sample → (bytes, "staged" | "storage")


def _disk_dir(path, budget: int) -> tuple[Path, bool]:
    """The disk tier's folder: created if missing; a clear error if it cannot be used."""
    path = Path(path)
    if int(budget) <= 0:
        raise InputError(f"cache disk tier {path}: disk_budget_bytes must be > 0, got {budget}")
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"cache disk tier {path}: cannot create or write the folder: "
                         f"{exc.strerror or exc}") from None
    free = shutil.disk_usage(path).free
    if budget > free:
        raise InputError(f"cache disk tier {path}: budget {budget / 2**20:.1f} MiB is more "
                         f"than the free disk space ({free / 2**20:.1f} MiB)")
    return path, created


def _release(arena: SampleArena, owner: int, disk: Path | None, created: bool) -> None:
    if os.getpid() == owner and disk is not None:
        if created:
            shutil.rmtree(disk, ignore_errors=True)
        else:
            for f in disk.glob("*.smp"):
                f.unlink(missing_ok=True)
    arena.close()


class SharedSampleCache:
    """Samples 0..size−1 cached in ``budget_bytes`` of shared RAM (+ ``disk_budget_bytes``).

    ``plan`` (an ``AccessPlan``) is required by the clairvoyant policies (belady, lobster,
    lobster-lazy, nopfs); ``sample_bytes`` (each sample's size) by nopfs, which places the most
    often read samples up front. ``block_bytes``: the RAM tier's allocation unit.
    """

    def __init__(self, budget_bytes: int, size: int, policy: str = "lru",
                 plan: AccessPlan | None = None, *, disk_dir=None, disk_budget_bytes: int = 0,
                 block_bytes: int = 4096, sample_bytes: Sequence[int] | None = None) -> None:
        self.policy = online_policy(policy, plan)
        if plan is not None and plan.size != size:
            raise InputError(f"cache: the plan covers {plan.size} samples, the dataset {size}")
        self.plan = plan
        self.epochs_counted = (plan.epochs if plan is not None else 16) + 1
        self.disk: Path | None = None
        created = False
        if disk_dir is not None:
            self.disk, created = _disk_dir(disk_dir, disk_budget_bytes)
        self.disk_budget = int(disk_budget_bytes) if self.disk is not None else 0
        self.arena = SampleArena(budget_bytes, size, block_bytes, fields=("uses", "dkey", "dlen"),
                                 counters=len(SOURCES) * self.epochs_counted + 1, what="cache")
        self.arena.on_repair = self._resync_disk
        self.arena.field["dkey"][:] = EMPTY
        if self.policy.name == "nopfs":
            if sample_bytes is None or len(sample_bytes) != size:
                raise InputError("cache policy 'nopfs' places samples by size: give "
                                 "sample_bytes (source.sizes())")
            caps = [self.arena.blocks * self.arena.block_bytes, self.disk_budget]
            self.policy.place(np.asarray(sample_bytes), caps, unit=[self.arena.block_bytes, 1])
        self._owner = os.getpid()
        self._finalizer = weakref.finalize(self, _release, self.arena, self._owner, self.disk,
                                           created)

    @staticmethod
    def budget_for(size: int, data_bytes: int, block_bytes: int = 4096,
                   epochs: int = 16) -> int:
        """The budget whose RAM tier stores ``data_bytes`` (whole blocks) for ``size`` samples."""
        return budget_for(size, data_bytes, block_bytes, 3, len(SOURCES) * (epochs + 1) + 1)

    # ---- the read path -------------------------------------------------------------------------
    def fetch(self, index: int, load: Load) -> bytes:
        """Sample ``index`` from RAM, disk, or ``load``; records the access."""
        return self.fetch_many([index], load)[0]

    def fetch_many(self, indices: Sequence[int], load: Load) -> list[bytes]:
        """A local batch in order; a batched policy (lobster) updates its keys after all."""
        batched = self.policy.batched
        out, accesses = [], []
        try:
            for i in indices:
                i = int(i)
                a, data = self._lookup(i, touch=not batched)
                accesses.append(a)
                if data is None:
                    data, where = load(i)
                    self._admit(a, data, where)
                out.append(data)
        finally:  # also when a read fails: no sample stays pinned at its "in use" key
            if batched and accesses:
                with self.arena.locked():
                    for a in accesses:
                        self._apply(a.index, self.policy.after(a))
        return out

    def contains(self, index: int) -> bool:
        """Whether sample i is in a tier now (a lock-free glance, for the prefetcher)."""
        return bool(self.arena.first[index] >= 0 or self.arena.field["dkey"][index] != EMPTY)

    def _access(self, i: int) -> Access:
        uses = self.arena.field["uses"]
        k = int(uses[i])
        uses[i] = k + 1
        tick = self.arena.tick()
        if self.plan is None:
            return Access(i, k, -1, NEVER, tick)
        return self.plan.access(i, k, tick)

    def _count(self, a: Access, where: str) -> None:
        e = self.plan.epoch_of(a.pos) if self.plan is not None else a.occurrence
        e = min(e, self.epochs_counted - 1)
        self.arena.counters[e * len(SOURCES) + SOURCES.index(where)] += 1

    def _lookup(self, i: int, touch: bool) -> tuple[Access, bytes | None]:
        with self.arena.locked() as ar:
            a = self._access(i)
            if ar.has(i):
                data = ar.read(i)
                if touch:
                    self._apply(i, self.policy.touch(a, 0))
                self._count(a, "ram")
                return a, data
            if ar.field["dkey"][i] != EMPTY:
                try:
                    data = self._disk_path(i).read_bytes()
                except OSError:  # removed or unreadable behind our back: a miss
                    self._disk_drop(i)
                    return a, None
                if touch:
                    self._apply(i, self.policy.touch(a, 1))
                self._count(a, "disk")
                return a, data
        return a, None

    def _apply(self, i: int, key: int | None) -> None:
        """A stored sample's new key (None: unchanged; NEVER: it leaves)."""
        if key is None:
            return
        ar, dkey = self.arena, self.arena.field["dkey"]
        if ar.has(i):
            if key == NEVER:
                ar.drop(i)
            else:
                ar.key[i] = key
        elif dkey[i] != EMPTY:
            if key == NEVER:
                self._disk_drop(i)
            else:
                dkey[i] = key

    def _admit(self, a: Access, data: bytes, where: str) -> None:
        with self.arena.locked() as ar:
            self._count(a, where)
            i = a.index
            if ar.has(i) or ar.field["dkey"][i] != EMPTY:
                return  # another worker brought it in meanwhile
            admit_key, key = self.policy.admit(a, 0)
            need = ar.blocks_for(len(data))
            demoted = []  # (sample, bytes, key) that RAM gave up, for the disk tier
            if need <= ar.blocks:
                while ar.room < need:
                    v = ar.victim()
                    if v < 0 or ar.key[v] <= admit_key:
                        break
                    if self.disk is not None:
                        demoted.append((v, ar.read(v), int(ar.key[v])))
                    ar.drop(v)
                if ar.room >= need and key != NEVER:
                    ar.store(i, data, key)
                    data = None
            if self.disk is None:
                return
            for v, blob, k in demoted:
                self._disk_offer(v, blob, k, k)
            if data is not None:
                self._disk_offer(i, data, *self.policy.admit(a, 1))

    # ---- disk tier (lock held) -------------------------------------------------------------------
    def _disk_path(self, i: int) -> Path:
        return self.disk / f"{i}.smp"

    def _disk_used(self) -> int:
        return int(self.arena.counters[-1])

    def _disk_offer(self, i: int, data: bytes, admit_key: int, key: int) -> None:
        dkey, dlen, n = self.arena.field["dkey"], self.arena.field["dlen"], len(data)
        if key == NEVER or n > self.disk_budget:
            return
        while self._disk_used() + n > self.disk_budget:
            stored = np.flatnonzero(dkey != EMPTY)
            if not stored.size:
                return
            v = int(stored[stored.size - 1 - np.argmax(dkey[stored][::-1])])  # ties: largest id
            if dkey[v] <= admit_key:
                return
            self._disk_drop(v)
        path = self._disk_path(i)
        try:
            write_bytes(path, data)
        except OSError:
            return  # a full or failing disk only loses a cache entry
        dlen[i] = n
        dkey[i] = key
        self.arena.counters[-1] += n

    def _disk_drop(self, i: int) -> None:
        dkey, dlen = self.arena.field["dkey"], self.arena.field["dlen"]
        self._disk_path(i).unlink(missing_ok=True)
        self.arena.counters[-1] -= int(dlen[i])
        dkey[i], dlen[i] = EMPTY, 0

    def _resync_disk(self) -> None:
        """After a holder died mid-write: the disk index is what the files say."""
        if self.disk is None:
            return
        dkey, dlen = self.arena.field["dkey"], self.arena.field["dlen"]
        for i in np.flatnonzero(dkey != EMPTY).tolist():
            if not self._disk_path(i).exists():
                dkey[i], dlen[i] = EMPTY, 0
        self.arena.counters[-1] = int(dlen[dkey != EMPTY].sum())

    # ---- reports ---------------------------------------------------------------------------------
    def stats(self) -> list[dict]:
        """Per epoch (with accesses): where the reads were served from, and the hit ratio."""
        rows = []
        for e, row in enumerate(self._where().tolist()):
            total = sum(row)
            if total:
                d = dict(zip(SOURCES, row, strict=True))
                rows.append({"epoch": e, **d, "accesses": total,
                             "hit_ratio": (d["ram"] + d["disk"]) / total})
        return rows

    def _where(self) -> np.ndarray:
        """Accesses per (epoch, source)."""
        return self.arena.counters[:-1].reshape(self.epochs_counted, len(SOURCES)).copy()

    def usage(self) -> dict:
        ar = self.arena
        return {"budget_bytes": ar.budget, "data_bytes": ar.blocks * ar.block_bytes,
                "stored": ar.stored, "stored_bytes": ar.used_bytes,
                "free_blocks": ar.free_blocks, "disk_bytes": self._disk_used()}

    def memory(self, pids: Sequence[int] | None = None) -> dict:
        """The RAM tier as the OS sees it: the segment's size and resident pages (tmpfs: the
        physical memory it takes, counted once), and per process (psutil ``memory_maps``) the
        RSS and PSS of its mapping of it. RSS summed over processes far above the resident size
        shows the pages are shared, not copied. The PSS sum is read process by process, so a
        worker starting or exiting meanwhile skews it: information, not a bound."""
        path = self.arena.segment_path
        st = os.stat(path)
        rss, pss = [], 0
        for pid in pids or [os.getpid()]:
            with contextlib.suppress(psutil.Error):
                for m in psutil.Process(pid).memory_maps(grouped=True):
                    if m.path.startswith(path):
                        rss.append(m.rss)
                        pss += m.pss
        return {"budget_bytes": self.arena.budget, "segment_bytes": st.st_size,
                "resident_bytes": st.st_blocks * 512, "processes": len(rss),
                "rss_max_bytes": max(rss, default=0), "rss_sum_bytes": sum(rss),
                "pss_sum_bytes": pss}

    # ---- life cycle ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.arena.name

    def close(self) -> None:
        """Unlink the segment and remove the disk tier's files (the creating process only)."""
        self._finalizer()

    def __enter__(self) -> SharedSampleCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k != "_finalizer"}
        state["_owner"] = -1
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)  # the arena attaches by name as it unpickles
        self.arena.on_repair = self._resync_disk
        self._finalizer = weakref.finalize(self, self.arena.close)
