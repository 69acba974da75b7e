"""``adloader bench resize``, part (c): a stream resized, workers killed, memory per worker.

- stream: a ``ShardedStream`` of JPEG samples resized every few batches through ``pattern``;
  every sample must come exactly once (lost = repeated = 0).
- kill: a worker of a running epoch is sent SIGKILL from outside, ``kills`` times; the stall of
  a respawn is the excess wait (over the median) of the 2·workers + 2 batches after the kill,
  where the dead worker's batches are re-read by the fresh pool; torch's
  DataLoader, killed the same way in the same run, ends the epoch there (pytorch#97622).
- memory: per-worker unique memory (USS) after reading ``touch`` samples of a dataset that holds
  10^6 paths as a Python list, for torch's DataLoader and ours, and for ours over a
  ``PathTable`` (refcount-free; pytorch#13246).
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import time
from collections import Counter

import psutil
from torch.utils.data import DataLoader, Dataset

from adloader.client.data.paths import PathTable
from adloader.client.loader.loader import ElasticDataLoader
from adloader.client.loader.stream import ShardedStream

CTX = "fork"


class JpegShards(ShardedStream):
    """``shards`` shards of ``per`` JPEG samples each; a sample is (image, label, id)."""

    def __init__(self, jpeg, shards: int, per: int) -> None:
        self.jpeg, self.n, self.per = jpeg, shards, per

    def shards(self):
        return list(range(self.n))

    def read(self, shard):
        for j in range(self.per):
            image, label = self.jpeg[shard * self.per + j]
            yield image, label, shard * self.per + j


def stream_row(jpeg, pattern, every: int, batches: int, batch_size: int, step_s: float) -> dict:
    per = 8
    shards = -(-batches * batch_size // per)
    loader = ElasticDataLoader(JpegShards(jpeg, shards, per), batch_size=batch_size,
                               num_workers=pattern[0], multiprocessing_context=CTX)
    seen: list[int] = []
    resizes = 0
    t = time.perf_counter()
    for b, (_, _, ids) in enumerate(loader):
        seen += ids.tolist()
        time.sleep(step_s)
        if (b + 1) % every == 0:
            resizes += 1
            loader.resize(pattern[resizes % len(pattern)])
    elapsed = time.perf_counter() - t
    expected = list(range(shards * per))
    return {"kind": "ShardedStream", "resizes": resizes, "samples": len(seen),
            "lost": sum((Counter(expected) - Counter(seen)).values()),
            "repeated": sum((Counter(seen) - Counter(expected)).values()),
            "samples_per_s": round(len(seen) / elapsed, 1)}


class _Ids(Dataset):
    def __init__(self, jpeg, size: int) -> None:
        self.jpeg, self.size = jpeg, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        image, label = self.jpeg[i]
        return image, i


def _kill_a_worker() -> bool:
    kids = [c for c in psutil.Process().children() if c.is_running()]
    if not kids:
        return False
    os.kill(kids[-1].pid, signal.SIGKILL)
    return True


def kill_row(jpeg, workers: int, kills: int, batch_size: int, batches: int) -> dict:
    """Ours and torch's, each killed ``kills`` times (ours) or once (torch) mid-epoch."""
    size = batches * batch_size
    every = max(batches // (kills + 1), 4)
    ours = ElasticDataLoader(_Ids(jpeg, size), batch_size=batch_size, num_workers=workers,
                             multiprocessing_context=CTX)
    seen, waits, after_kill = [], [], []
    killed = 0
    it = iter(ours)
    last = time.perf_counter()
    for b in range(batches):
        if b and b % every == 0 and killed < kills and _kill_a_worker():
            killed += 1
            mark = len(waits)
            after_kill.append(mark)
        t = time.perf_counter()
        _, ids = next(it)
        waits.append(time.perf_counter() - t)
        seen += ids.tolist()
    last = time.perf_counter() - last
    usual = statistics.median(waits)
    span = 2 * workers + 2  # the batches a respawn can delay: the dead one's, re-read
    respawn = [sum(w - usual for w in waits[k : k + span]) for k in after_kill]
    expected = list(range(size))
    ref = DataLoader(_Ids(jpeg, size), batch_size=batch_size, num_workers=workers,
                     multiprocessing_context=CTX)
    torch_seen: list[int] = []
    torch_error = ""
    ref_it = iter(ref)
    try:
        for b, (_, ids) in enumerate(ref_it):
            torch_seen += ids.tolist()
            if b == every:
                _kill_a_worker()
    except Exception as exc:  # noqa: BLE001 - whatever torch raises is its failure to report
        # torch raises "worker killed" or, when the dead worker held a shared tensor's fd,
        # the ConnectionResetError or EOFError of fetching it
        torch_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        # unregisters its pids from torch's SIGCHLD check, even when that check fires again
        with contextlib.suppress(Exception):
            ref_it._shutdown_workers()
        del ref_it
    return {
        "workers": workers, "kills": killed,
        "respawn_stall_ms_median": round(statistics.median(respawn) * 1e3, 1) if respawn else None,
        "lost": sum((Counter(expected) - Counter(seen)).values()),
        "repeated": sum((Counter(seen) - Counter(expected)).values()),
        "torch_samples_lost": len(expected) - len(set(torch_seen)),
        "torch_error": torch_error, "elapsed_s": round(last, 2),
    }


class Paths(Dataset):
    """10^6 file paths; a sample is one path's length (the read itself left out)."""

    def __init__(self, paths) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> int:
        return len(self.paths[i])


def _paths(count: int) -> list[str]:
    return [f"/data/imagenet/train/n{i % 1000:08d}/n{i % 1000:08d}_{i:07d}.JPEG"
            for i in range(count)]


def _worker_uss(loader, touch_batches: int) -> list[float]:
    it = iter(loader)
    for _ in range(touch_batches):
        next(it)
    uss = [c.memory_full_info().uss / 2**20 for c in psutil.Process().children()
           if c.is_running()]
    del it
    return uss


def memory_rows(count: int, workers: int, batch_size: int, touch: int) -> list[dict]:
    listed = _paths(count)
    table = PathTable(listed)
    rows = []
    cases = [
        ("torch DataLoader, list", lambda: DataLoader(
            Paths(listed), batch_size=batch_size, shuffle=True, num_workers=workers,
            multiprocessing_context=CTX)),
        ("ElasticDataLoader, list", lambda: ElasticDataLoader(
            Paths(listed), batch_size=batch_size, shuffle=True, num_workers=workers,
            multiprocessing_context=CTX)),
        ("ElasticDataLoader, PathTable", lambda: ElasticDataLoader(
            Paths(table), batch_size=batch_size, shuffle=True, num_workers=workers,
            multiprocessing_context=CTX)),
    ]
    for name, build in cases:
        uss = _worker_uss(build(), max(touch // batch_size, 1))
        rows.append({"loader": name, "workers": len(uss),
                     "uss_mib_per_worker": round(statistics.fmean(uss), 1) if uss else None})
        deadline = time.monotonic() + 10
        while psutil.Process().children() and time.monotonic() < deadline:
            time.sleep(0.02)
    base = rows[0]["uss_mib_per_worker"] or 1.0
    for r in rows:
        r["ratio"] = round((r["uss_mib_per_worker"] or 0) / base, 3)
    return rows
