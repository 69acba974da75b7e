"""``bench chunks``: SOLAR's aggregated chunk loading (§4.4) on a real HDF5 file, read cold.

An HDF5 file of ``size_mb`` (10⁶ B) holds rows of 3×64×64 uint8 (12 KiB each), chunked
``chunk_rows`` rows a chunk, uncompressed; it is written once and fsynced. This machine's RAM
holds any file written in the time budget, so before every run the file's pages are dropped from
the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)`` and a fresh h5py handle is opened
(an empty HDF5 chunk cache). ``cache`` says whether the drop took effect: the kernel's
``Cached`` before and after it, and the MB/s of one region read just after it (cold) and again.

(a) ``patterns``, the paper's Table 3 on one process, ``pattern_rows`` rows each: random (one
row a read, anywhere in the file), sequential-stride (rows s, s + P, s + 2P, … one a read;
P = ``stride``), chunk-cycle (consecutive rows, one a read), full-chunk (the same rows in one
read). MB/s of the rows wanted.

(b) ``loaders``, a mini-batch workload (``batch_size`` rows a batch, uint8 → float32 / 255 per
sample, ``workers`` fork workers, 2 batches prefetched each): "per-sample" is ``H5Rows`` with
``__getitems__`` hidden (torch's fetcher then calls ``dataset[i]`` per sample), "aggregated" is
``H5Rows.__getitems__`` (one h5py read per run of the batch's sorted indices, the threshold from
``measure_threshold`` on the cold file), each through torch's ``DataLoader`` and through
``ElasticDataLoader``; "torch sorted" is the control: ``__getitems__`` with no merging (one
read per sample, in ascending order), so what merging adds shows apart from sorting. Two
orders: "shuffle" (a random permutation: SOLAR's case, where only indices that fall close
merge) and "block-shuffle" (blocks of ``block`` consecutive rows in a random order, the rows
inside each batch shuffled: a chunk-cycle order). A run times ``batches`` batches after
``warmup``; rounds rotate the loaders; medians over rounds, and each round's ratio to
per-sample torch in the same order. ``plan``: runs and rows read per batch, from the plan.
``identical``: every loader's batches are equal tensors, batch by batch (same set, same order).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader

from adloader.client.data.chunked import H5Rows, measure_threshold
from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.chunk_runs import ChunkThreshold, plan_reads
from adloader.errors import InputError

ROW = (3, 64, 64)
ROW_BYTES = int(np.prod(ROW))
KEY = "x"
CTX = "fork"
FULL = {"size_mb": 2048, "chunk_rows": 16, "pattern_rows": 2048, "stride": 4, "batch_size": 64,
        "batches": 60, "warmup": 2, "workers": 2, "block": 16, "rounds": 5, "check_batches": 4}
QUICK = {"size_mb": 24, "chunk_rows": 16, "pattern_rows": 128, "stride": 4, "batch_size": 16,
         "batches": 6, "warmup": 1, "workers": 2, "block": 8, "rounds": 1, "check_batches": 7}
PATTERNS = ("random", "sequential-stride", "chunk-cycle", "full-chunk")
LOADERS = ("torch per-sample", "torch sorted", "torch aggregated", "elastic per-sample",
           "elastic aggregated")
SORTED = ChunkThreshold(max_gap=0, max_run=1)  # "sorted": one read per sample, ascending
ORDERS = ("shuffle", "block-shuffle")
Progress = Callable[[str], None]


class PerSampleRows(H5Rows):
    """``H5Rows`` read one sample at a time: torch's fetcher skips a falsy ``__getitems__``."""

    __getitems__ = None  # type: ignore[assignment]


def to_float(row: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(row).float().div_(255.0)


# -- the file and the page cache ------------------------------------------------------------
def write_rows_file(path: str, rows: int, chunk_rows: int, seed: int = 0) -> None:
    """``rows`` random rows under ``KEY``, chunked, then fsynced (so the pages can be dropped)."""
    import h5py

    rng = np.random.default_rng(seed)
    step = max(chunk_rows, (64 << 20) // ROW_BYTES // chunk_rows * chunk_rows)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(KEY, shape=(rows,) + ROW, dtype=np.uint8,
                              chunks=(chunk_rows,) + ROW)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            ds[start:stop] = rng.integers(0, 256, (stop - start,) + ROW, dtype=np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_cache(path: str) -> None:
    """Drop ``path``'s clean pages from the page cache (POSIX_FADV_DONTNEED on the whole file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _cached_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1]) / 1e3
    return float("nan")


def cache_check(path: str, region_mb: int = 64) -> dict:
    """Whether dropping took effect: Cached before/after, and a region read cold then warm."""
    fd = os.open(path, os.O_RDONLY)
    try:
        nbytes = min(region_mb * 10**6, os.fstat(fd).st_size)
        _read(fd, nbytes)  # warm the region first, so the drop has something to drop
        before = _cached_mb()
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        after = _cached_mb()
        cold = _read(fd, nbytes)
        warm = _read(fd, nbytes)
    finally:
        os.close(fd)
    return {"method": "posix_fadvise(POSIX_FADV_DONTNEED) on the file before every run",
            "cached_mb_before_drop": round(before, 1), "cached_mb_after_drop": round(after, 1),
            "cold_mb_s": round(nbytes / 1e6 / cold, 1), "warm_mb_s": round(nbytes / 1e6 / warm, 1),
            "took_effect": cold > 2 * warm and before - after > 0.5 * nbytes / 1e6}


def _read(fd: int, nbytes: int) -> float:
    t0, at = time.perf_counter(), 0
    while at < nbytes:
        at += len(os.pread(fd, min(8 << 20, nbytes - at), at)) or nbytes
    return time.perf_counter() - t0


# -- (a) access patterns ----------------------------------------------------------------
def read_pattern(path: str, pattern: str, rows: int, stride: int,
                 rng: np.random.Generator) -> float:
    """Seconds to read ``rows`` rows of ``pattern`` through a fresh h5py handle, file cold."""
    import h5py

    drop_cache(path)
    with h5py.File(path, "r") as f:
        ds = f[KEY]
        n = len(ds)
        if pattern == "random":
            todo = rng.choice(n, rows, replace=False)
        elif pattern == "sequential-stride":
            todo = int(rng.integers(0, n - rows * stride + 1)) + np.arange(rows) * stride
        else:
            first = int(rng.integers(0, n - rows + 1))
            todo = np.arange(first, first + rows)
        t0 = time.perf_counter()
        if pattern == "full-chunk":
            buf = np.empty((rows,) + ROW, dtype=np.uint8)
            ds.read_direct(buf, np.s_[todo[0]:todo[-1] + 1], np.s_[0:rows])
        else:
            for i in todo:
                ds[int(i)]
        return time.perf_counter() - t0


# -- (b) the mini-batch workload --------------------------------------------------------
def make_order(kind: str, n: int, count: int, batch_size: int, block: int,
               rng: np.random.Generator) -> list[int]:
    """The first ``count`` sample indices of an epoch in ``kind`` order."""
    if kind == "shuffle":
        return rng.permutation(n)[:count].tolist()
    starts = rng.permutation(n // block)[: -(-count // block)] * block
    order = (starts[:, None] + np.arange(block)).ravel()[:count]
    for at in range(0, count, batch_size):  # shuffle inside each batch
        rng.shuffle(order[at:at + batch_size])
    return order.tolist()


def open_loader(name: str, path: str, threshold: ChunkThreshold, order: list[int],
                batch_size: int, workers: int) -> tuple[Iterator, Callable[[], None]]:
    """(batches, close) of loader ``name`` reading ``order``."""
    cls = PerSampleRows if name.endswith("per-sample") else H5Rows
    threshold = SORTED if name.endswith("sorted") else threshold
    dataset = cls(path, KEY, threshold=threshold, transform=to_float)
    kwargs = dict(batch_size=batch_size, sampler=order, num_workers=workers,
                  multiprocessing_context=CTX, prefetch_factor=2, timeout=300)
    if name.startswith("torch"):
        it = iter(DataLoader(dataset, **kwargs))
        return it, lambda: it._shutdown_workers()
    loader = ElasticDataLoader(dataset, **kwargs)
    return iter(loader), loader.close


def time_loader(name: str, path: str, threshold: ChunkThreshold, order: list[int],
                cfg: dict) -> float:
    """Samples/s of ``cfg['batches']`` batches after ``cfg['warmup']``, the file cold."""
    drop_cache(path)
    batches, close = open_loader(name, path, threshold, order, cfg["batch_size"], cfg["workers"])
    try:
        for _ in range(cfg["warmup"]):
            next(batches)
        samples, t0 = 0, time.perf_counter()
        for _ in range(cfg["batches"]):
            samples += len(next(batches))
        return samples / (time.perf_counter() - t0)
    finally:
        close()


def same_batches(path: str, threshold: ChunkThreshold, order: list[int], cfg: dict) -> bool:
    """Whether every loader yields the same tensors, batch by batch, over ``order``."""
    seen: list[list[torch.Tensor]] = []
    for name in LOADERS:
        batches, close = open_loader(name, path, threshold, order, cfg["batch_size"],
                                     cfg["workers"])
        try:
            seen.append(list(batches))
        finally:
            close()
    first = seen[0]
    return all(len(other) == len(first) and all(torch.equal(a, b) for a, b in
               zip(first, other, strict=True)) for other in seen[1:])


def plan_stats(order: list[int], batch_size: int, threshold: ChunkThreshold) -> dict:
    runs, rows = [], []
    for at in range(0, len(order), batch_size):
        plan = plan_reads(order[at:at + batch_size], threshold)
        runs.append(len(plan.runs))
        rows.append(plan.rows_read)
    merged = 1 - sum(runs) / len(order)
    return {"runs_per_batch": round(statistics.mean(runs), 2),
            "rows_read_per_batch": round(statistics.mean(rows), 2),
            "samples_merged": round(merged, 4)}  # share of samples that cost no call


def _median(values: list[float]) -> float:
    return statistics.median(values)


def run_chunks_bench(size_mb: int | None = None, quick: bool = False, path: str | None = None,
                     rounds: int | None = None, workers: int | None = None,
                     chunk_rows: int | None = None, seed: int = 0,
                     progress: Progress | None = None) -> dict:
    """Access patterns and the mini-batch workload on one cold HDF5 file (see the module).

    ``path``: where the file lives (kept, and reused when it has the size asked for); default a
    temporary file removed afterwards. ``quick``: small settings (seconds) for tests.
    """
    cfg = dict(QUICK if quick else FULL)
    for name, value in (("size_mb", size_mb), ("rounds", rounds), ("workers", workers),
                        ("chunk_rows", chunk_rows)):
        if value is not None:
            if value < (0 if name == "workers" else 1):
                raise InputError(f"bench chunks: {name} must be positive, got {value}")
            cfg[name] = int(value)
    need = cfg["batch_size"] * (cfg["batches"] + cfg["warmup"])
    rows = cfg["size_mb"] * 10**6 // ROW_BYTES
    if rows < max(need, cfg["pattern_rows"] * cfg["stride"]) * 2:
        raise InputError(f"bench chunks: {cfg['size_mb']} MB holds {rows} rows, too few")
    say = progress or (lambda _msg: None)
    own = path is None
    if own:
        fd, path = tempfile.mkstemp(prefix="adloader-chunks-", suffix=".h5")
        os.close(fd)
    try:
        t0 = time.perf_counter()
        if own or not _has_rows(path, rows, cfg["chunk_rows"]):
            say(f"writing {cfg['size_mb']} MB of HDF5 rows to {path}")
            write_rows_file(path, rows, cfg["chunk_rows"], seed)
        write_s = time.perf_counter() - t0
        cache = cache_check(path)
        drop_cache(path)
        cold = measure_threshold(path, KEY, refresh=True, seed=seed)
        rng = np.random.default_rng(seed)
        pattern_runs: dict[str, list[float]] = {p: [] for p in PATTERNS}
        loader_runs: dict[tuple[str, str], list[float]] = {}
        paired: dict[tuple[str, str], list[float]] = {}
        plans: dict[str, list[dict]] = {o: [] for o in ORDERS}
        for r in range(cfg["rounds"]):
            for k in range(len(PATTERNS)):
                pattern = PATTERNS[(k + r) % len(PATTERNS)]
                say(f"round {r + 1}: pattern {pattern}")
                s = read_pattern(path, pattern, cfg["pattern_rows"], cfg["stride"], rng)
                pattern_runs[pattern].append(cfg["pattern_rows"] * ROW_BYTES / 1e6 / s)
            for kind in ORDERS:
                order = make_order(kind, rows, need, cfg["batch_size"], cfg["block"], rng)
                plans[kind].append(plan_stats(order[cfg["batch_size"] * cfg["warmup"]:],
                                              cfg["batch_size"], cold))
                rates = {}
                for k in range(len(LOADERS)):
                    name = LOADERS[(k + r) % len(LOADERS)]
                    say(f"round {r + 1}: {kind}, {name}")
                    rates[name] = time_loader(name, path, cold, order, cfg)
                    loader_runs.setdefault((kind, name), []).append(rates[name])
                for name in LOADERS:
                    paired.setdefault((kind, name), []).append(
                        rates[name] / rates["torch per-sample"])
        identical = {}
        for kind in ORDERS:
            say(f"checking the batches ({kind})")
            count = cfg["batch_size"] * cfg["check_batches"]
            order = make_order(kind, rows, count, cfg["batch_size"], cfg["block"], rng)
            identical[kind] = same_batches(path, cold, order, cfg)
        drop_cache(path)
    finally:
        if own:
            os.unlink(path)
    random_mb_s = _median(pattern_runs["random"])
    return {
        "config": {**cfg, "rows": rows, "row_bytes": ROW_BYTES,
                   "file_mb": round(rows * ROW_BYTES / 1e6, 1), "write_s": round(write_s, 1),
                   "threshold": {"max_gap": cold.max_gap, "max_run": cold.max_run}},
        "cache": cache,
        "patterns": [{"pattern": p, "mb_s": round(_median(v), 2),
                      "speedup": round(_median(v) / random_mb_s, 2),
                      "each_mb_s": [round(x, 1) for x in v]} for p, v in pattern_runs.items()],
        "loaders": [{"order": kind, "loader": name,
                     "samples_per_s": round(_median(loader_runs[kind, name]), 1),
                     "ratio": round(_median(paired[kind, name]), 3),
                     "each_samples_per_s": [round(x, 1) for x in loader_runs[kind, name]]}
                    for kind in ORDERS for name in LOADERS],
        "plan": {kind: {key: round(_median([p[key] for p in plans[kind]]), 4)
                        for key in plans[kind][0]} for kind in ORDERS},
        "identical": identical,
    }


def _has_rows(path: str, rows: int, chunk_rows: int) -> bool:
    """Whether ``path`` is already the file this bench would write."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            ds = f.get(KEY)
            return ds is not None and ds.shape == (rows,) + ROW and ds.dtype == np.uint8 \
                and ds.chunks == (chunk_rows,) + ROW
    except OSError:
        return False
