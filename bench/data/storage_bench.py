"""``bench storage``: epochs over a slow remote storage, with and without the node-local cache.

Real processes: an ``ElasticDataLoader`` with ``workers`` forked workers reads SyntheticJPEG
files (decode + augmentation in the workers) through a ``RemoteStorageSource`` whose shared
bandwidth makes storage the bottleneck: an uncached epoch takes about ``epoch_s`` seconds.
The same loader runs twice in the same run — plain, then with a ``SharedSampleCache`` of
``cache_fraction`` of the dataset (policy ``policy``) and a ``Prefetcher`` — and a third time
over the local files (no link) to show the decode floor. Reported: per-epoch times, the ratio of
second-and-later epoch times (target: cached ≥ 2× faster), where each epoch's accesses were
served from, storage reads on the link, and the RAM tier's memory as the OS measures it (the
segment's resident pages, counted once; per process, psutil's RSS of its mapping) against its
budget.
"""

from __future__ import annotations

import io
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import torch
from PIL import Image

from adloader.client.data.cache_store import SharedSampleCache
from adloader.client.data.cached_dataset import CachedDataset
from adloader.client.data.prefetch import Prefetcher, StagingBuffer
from adloader.client.data.storage import LocalDirectorySource, RemoteStorageSource
from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.online_cache import AccessPlan
from adloader.errors import InputError
from adloader.workloads.dataset import MEAN, STD, ensure_images, random_resized_crop

Progress = Callable[[str, int, int], None]  # (phase, epochs done, epochs)
FULL = {"images": 256, "image_size": (256, 256), "crop": 224, "batch_size": 16, "epoch_s": 3.0,
        "latency_ms": 2.0, "block_bytes": 2048}
QUICK = {"images": 64, "image_size": (96, 96), "crop": 64, "batch_size": 8, "epoch_s": 0.5,
         "latency_ms": 1.0, "block_bytes": 1024}
TARGET = 2.0


class JPEGDecode:
    """Raw JPEG bytes → (CHW float32, label): decode, random resized crop, flip, normalise
    (what ``SyntheticJPEGDataset.__getitem__`` does after reading the file)."""

    def __init__(self, crop: int, num_classes: int = 1000) -> None:
        self.crop, self.num_classes = crop, num_classes

    def __call__(self, data: bytes, index: int):
        with Image.open(io.BytesIO(data)) as img:
            img = img.convert("RGB")
        box = random_resized_crop(*img.size)
        img = img.resize((self.crop, self.crop), Image.Resampling.BILINEAR, box=box)
        if random.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = (np.asarray(img, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), index % 1000


def _pids() -> list[int]:
    me = psutil.Process()
    return [me.pid] + [c.pid for c in me.children(recursive=True)]


def _epochs(loader: ElasticDataLoader, epochs: int, label: str, progress: Progress | None,
            link: RemoteStorageSource | None = None,
            paused: list[float] | None = None) -> tuple[list[float], list[int]]:
    """Time each epoch (less what ``paused`` says the measuring hook took in it)."""
    times, reads = [], []
    for e in range(epochs):
        before = link.link()["reads"] if link is not None else 0
        hook_s = sum(paused) if paused is not None else 0.0
        t0 = time.perf_counter()
        for _ in loader:
            pass
        spent = time.perf_counter() - t0
        times.append(spent - ((sum(paused) - hook_s) if paused is not None else 0.0))
        reads.append(link.link()["reads"] - before if link is not None else 0)
        if progress is not None:
            progress(label, e + 1, epochs)
    return times, reads


def _loader(dataset, cfg: dict, workers: int, seed: int) -> ElasticDataLoader:
    return ElasticDataLoader(dataset, batch_size=cfg["batch_size"], shuffle=True,
                             num_workers=workers, seed=seed)


def run_storage_bench(quick: bool = False, *, images: int | None = None,
                      bandwidth_mb_s: float | None = None, latency_ms: float | None = None,
                      cache_fraction: float = 0.75, policy: str = "belady", epochs: int = 3,
                      workers: int = 2, prefetch_threads: int = 4, seed: int = 0,
                      root: str | Path | None = None,
                      progress: Progress | None = None) -> dict:
    """Run the three loaders and return the report (see the module doc); prints nothing.

    ``bandwidth_mb_s`` default: the dataset's bytes over the mode's ``epoch_s``. ``root``: a
    folder for the JPEG files (default: a temporary one).
    """
    cfg = dict(QUICK if quick else FULL)
    if images is not None:
        cfg["images"] = int(images)
    if latency_ms is not None:
        cfg["latency_ms"] = float(latency_ms)
    if epochs < 2:
        raise InputError(f"bench storage: needs at least 2 epochs (the first is cold), "
                         f"got {epochs}")
    if not 0 < cache_fraction <= 1:
        raise InputError(f"bench storage: cache fraction must be in (0, 1], got {cache_fraction}")
    if workers < 1:
        raise InputError(f"bench storage: needs at least 1 worker, got {workers}")
    with tempfile.TemporaryDirectory(prefix="adloader-bench-storage-") as tmp:
        folder = Path(root or tmp) / "images"
        ensure_images(folder, cfg["images"], cfg["image_size"], seed)
        local = LocalDirectorySource(folder, "img_*.jpg")
        sizes = local.sizes()
        total = int(sizes.sum())
        bw = bandwidth_mb_s or total / cfg["epoch_s"] / 1e6
        decode = JPEGDecode(cfg["crop"])
        out: dict = {"config": {
            "images": len(local), "image_bytes_mean": int(sizes.mean()), "dataset_bytes": total,
            "bandwidth_mb_s": round(bw, 3), "latency_ms": cfg["latency_ms"], "workers": workers,
            "batch_size": cfg["batch_size"], "epochs": epochs, "policy": policy,
            "cache_fraction": cache_fraction, "prefetch_threads": prefetch_threads}}

        # the decode floor: the same loader over the local files, no link, no cache
        plain = _loader(CachedDataset(decode, local), cfg, workers, seed)
        out["local_epoch_s"], _ = _epochs(plain, 1, "local", progress)
        plain.close()

        remote = RemoteStorageSource(local, bw, cfg["latency_ms"])
        base = _loader(CachedDataset(decode, remote), cfg, workers, seed)
        times, reads = _epochs(base, epochs, "uncached", progress, remote)
        base.close()
        remote.close()
        out["uncached"] = {"epoch_s": times, "storage_reads": reads}

        out["cached"], out["memory"] = _cached_run(local, decode, cfg, bw, workers, seed, epochs,
                                                   policy, cache_fraction, prefetch_threads,
                                                   total, progress)
    later_u = statistics.fmean(out["uncached"]["epoch_s"][1:])
    later_c = statistics.fmean(out["cached"]["epoch_s"][1:])
    out["speedup_per_epoch"] = [u / c for u, c in zip(out["uncached"]["epoch_s"],
                                                      out["cached"]["epoch_s"], strict=True)]
    out["later_epoch_speedup"] = later_u / later_c
    out["target"] = TARGET
    out["met"] = out["later_epoch_speedup"] >= TARGET and out["memory"]["within_budget"]
    return out


def _cached_run(local, decode, cfg, bw, workers, seed, epochs, policy, fraction, threads,
                total, progress) -> tuple[dict, dict]:
    remote = RemoteStorageSource(local, bw, cfg["latency_ms"])
    dataset = CachedDataset(decode, remote)
    loader = _loader(dataset, cfg, workers, seed)
    plan = AccessPlan.from_loader(loader, epochs)
    block = cfg["block_bytes"]
    sizes = local.sizes()
    footprint = int((-(-sizes // block) * block).sum())  # the dataset in whole blocks
    budget = SharedSampleCache.budget_for(len(local), int(fraction * footprint), block, epochs)
    cache = SharedSampleCache(budget, len(local), policy, plan, block_bytes=block,
                              sample_bytes=local.sizes())
    staging_bytes = StagingBuffer.budget_for(  # a local batch per fetch thread
        len(local), threads * cfg["batch_size"] * int(sizes.max()), block)
    prefetcher = Prefetcher(plan, remote, cache, staging_bytes=staging_bytes, threads=threads,
                            block_bytes=block)
    dataset.attach(cache, prefetcher)
    peak = {"resident_bytes": 0, "rss_max_bytes": 0, "rss_sum_bytes": 0, "pss_sum_bytes": 0,
            "processes": 0, "samples": 0, "staging_resident_bytes": 0}
    paused: list[float] = []
    last = len(loader) - 1

    def sample(stats) -> None:  # in the last batch of an epoch, while its workers still live
        if stats.index not in (last // 2, last):
            return
        t0 = time.perf_counter()
        m = cache.memory(_pids())
        for k in ("resident_bytes", "rss_max_bytes", "rss_sum_bytes", "pss_sum_bytes",
                  "processes"):
            peak[k] = max(peak[k], m[k])
        peak["staging_resident_bytes"] = max(peak["staging_resident_bytes"],
                                             os.stat(prefetcher.staging.arena.segment_path)
                                             .st_blocks * 512)
        peak["samples"] += 1
        paused.append(time.perf_counter() - t0)

    loader.on_batch = sample
    try:
        prefetcher.start()
        times, reads = _epochs(loader, epochs, "cached", progress, remote, paused)
        final = cache.memory(_pids())
        stats = cache.stats()
        usage = cache.usage()
    finally:
        loader.close()
        prefetcher.close()
        cache.close()
        remote.close()
    cached = {"epoch_s": times, "storage_reads": reads,
              "hit_ratio": [r["hit_ratio"] for r in stats],
              "served": [{k: r[k] for k in ("ram", "disk", "staged", "storage")} for r in stats],
              "prefetcher": dict(prefetcher.counts), "dataset_footprint_bytes": footprint,
              "cache_data_bytes": usage["data_bytes"]}
    memory = {"budget_bytes": budget, "segment_bytes": final["segment_bytes"],
              "staging_budget_bytes": staging_bytes, **peak,
              "within_budget": max(peak["resident_bytes"], peak["rss_max_bytes"],
                                   final["segment_bytes"]) <= budget}
    return cached, memory
