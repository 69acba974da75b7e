"""``adloader bench loaders``: ElasticDataLoader beside its peers, one workload, the same cores.

Every loader reads the same ``SyntheticJPEGDataset`` (real JPEG files decoded with Pillow,
random resized crop, flip, normalisation), in the same shuffled order, with the same batch
size, crop and prefetch depth (2 batches per worker), at each worker count:

- ``torch``: ``torch.utils.data.DataLoader`` (fork), the baseline of every ratio;
- ``stateful``: torchdata's ``StatefulDataLoader`` (fork);
- ``spdl-threads``: SPDL's pipeline, multi-threaded ("MT", SPDL's own idea): one process, the
  samples decoded by ``workers`` threads (``pipe(dataset.__getitem__, concurrency=workers)``),
  then ``aggregate(batch)`` and ``default_collate``, on a pool of ``workers`` threads;
- ``spdl-processes``: SPDL's pipeline over a process pool ("MP"):
  ``spdl.dataloader.get_pytorch_dataloader`` (fork), which pipes each batch's indices to a
  ``ProcessPoolExecutor`` with ``concurrency=workers``;
- ``elastic``: ``adloader.ElasticDataLoader`` (fork);
- ``elastic-threads``: ``ElasticDataLoader(num_workers=0, threads=workers)``: no worker
  process, each batch's samples read by ``workers`` threads in this process (ours, like MT).

Every loader computes with one torch thread per worker: torch's DataLoader sets that in its
workers, and the bench sets it in this process for the run (restored after), so SPDL's forked
processes and its threads (which collate here) have it too. With torch's default (a thread per
core) the workers' ``torch.stack`` in collate spins OpenMP threads against the decoders on busy
cores. SPDL runs with its defaults otherwise (batches in completion order); the others deliver
in order. A run starts the loader, reads ``warmup`` batches (the pool's start-up is left out),
then times ``batches`` batches: samples/s of wall time, and CPU-seconds per sample summed over
this process (every thread) and its whole process tree (psutil, sampled before and after while
the workers are alive; children reaped in between come from the process's children times).
Rounds interleave the loaders at each worker count, in an order rotated every round, and
medians over rounds are reported; "paired" is the median of each round's ratio to torch.
"""

from __future__ import annotations

import importlib
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
import torch
from torch.utils.data import DataLoader, default_collate

from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.sample_order import rank_order
from adloader.errors import InputError
from adloader.workloads.dataset import SyntheticJPEGDataset

CTX = "fork"
PREFETCH = 2  # batches per worker, every loader
TIMEOUT_S = 120.0
FULL = {"workers": (1, 2, 4), "rounds": 5, "batch_size": 32, "batches": 40, "warmup": 4,
        "crop": 224, "image_size": 256, "images": 256}
QUICK = {"workers": (1, 2), "rounds": 1, "batch_size": 8, "batches": 10, "warmup": 2,
         "crop": 48, "image_size": 64, "images": 16}
Progress = Callable[[str, int, int], None]  # (what runs now, done, total)


@dataclass(frozen=True)
class Job:
    """What one run reads: the same for every loader."""

    dataset: SyntheticJPEGDataset
    order: list[int]
    batch_size: int
    workers: int
    seed: int


def _torch(job: Job) -> Iterator:
    loader = DataLoader(job.dataset, job.batch_size, sampler=job.order, num_workers=job.workers,
                        multiprocessing_context=CTX, prefetch_factor=PREFETCH,
                        generator=torch.Generator().manual_seed(job.seed), timeout=TIMEOUT_S)
    it = iter(loader)
    try:
        yield from it
    finally:
        del it  # the last reference: torch shuts its workers down here


def _stateful(job: Job) -> Iterator:
    from torchdata.stateful_dataloader import StatefulDataLoader

    warnings.filterwarnings("ignore", "'set_vital' is deprecated")  # torchdata 0.11 on torch 2.13
    loader = StatefulDataLoader(job.dataset, job.batch_size, sampler=job.order,
                                num_workers=job.workers, multiprocessing_context=CTX,
                                prefetch_factor=PREFETCH, timeout=TIMEOUT_S,
                                generator=torch.Generator().manual_seed(job.seed))
    it = iter(loader)
    try:
        yield from it
    finally:
        del it


def _spdl_threads(job: Job) -> Iterator:
    from spdl.pipeline import PipelineBuilder

    pipeline = (PipelineBuilder()
                .add_source(job.order)
                .pipe(job.dataset.__getitem__, concurrency=job.workers)
                .aggregate(job.batch_size)
                .pipe(default_collate)
                .add_sink(PREFETCH * job.workers)
                .build(num_threads=job.workers))
    with pipeline.auto_stop(timeout=TIMEOUT_S):
        yield from pipeline.get_iterator(timeout=TIMEOUT_S)


def _spdl_processes(job: Job) -> Iterator:
    from spdl.dataloader import get_pytorch_dataloader

    loader = get_pytorch_dataloader(job.dataset, job.batch_size, sampler=job.order,
                                    num_workers=job.workers, multiprocessing_context=CTX,
                                    prefetch_factor=PREFETCH, timeout=TIMEOUT_S)
    it = iter(loader)
    try:
        yield from it
    finally:
        it.close()  # stops the pipeline and joins the process pool
        shared = getattr(loader, "_shmem", None)  # the pickled dataset: SPDL leaves it behind
        if shared is not None:
            shared.close()
            shared.unlink()


def _elastic(job: Job) -> Iterator:
    loader = ElasticDataLoader(job.dataset, job.batch_size, shuffle=True, seed=job.seed,
                               num_workers=job.workers, multiprocessing_context=CTX,
                               prefetch_factor=PREFETCH, timeout=TIMEOUT_S,
                               generator=torch.Generator().manual_seed(job.seed))
    try:
        yield from loader
    finally:
        loader.close()


def _elastic_threads(job: Job) -> Iterator:
    """ElasticDataLoader's in-process mode: no worker process, each batch's samples read by
    ``workers`` threads in the consumer's process (``threads=``), as SPDL's threads do."""
    loader = ElasticDataLoader(job.dataset, job.batch_size, shuffle=True, seed=job.seed,
                               num_workers=0, threads=job.workers)
    try:
        yield from loader
    finally:
        loader.close()


@dataclass(frozen=True)
class Peer:
    name: str
    title: str
    open: Callable[[Job], Iterator]
    module: str | None = None  # what must import, else "not installed"
    pip: str | None = None


PEERS = (
    Peer("torch", "torch DataLoader", _torch),
    Peer("stateful", "StatefulDataLoader", _stateful, "torchdata.stateful_dataloader",
         "torchdata"),
    Peer("spdl-threads", "SPDL threads", _spdl_threads, "spdl.pipeline", "spdl"),
    Peer("spdl-processes", "SPDL processes", _spdl_processes, "spdl.dataloader", "spdl"),
    Peer("elastic", "ElasticDataLoader", _elastic),
    Peer("elastic-threads", "Elastic, threads", _elastic_threads),
)


def missing(peer: Peer) -> str | None:
    """Why ``peer`` cannot run here (None: it can)."""
    if peer.module is None:
        return None
    try:
        importlib.import_module(peer.module)
    except ImportError:
        return f"not installed (pip install {peer.pip})"
    return None


# -- CPU of the process tree ------------------------------------------------------------
def cpu_snapshot() -> tuple[float, dict[int, tuple[float, bool]], float]:
    """(this process's user+sys over all its threads, {pid: (user+sys, a direct child)} of
    every live descendant, the user+sys of the children this process has reaped)."""
    me = psutil.Process()
    own = me.cpu_times()
    kids: dict[int, tuple[float, bool]] = {}
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            kids[child.pid] = (t.user + t.system, child.ppid() == me.pid)
        except psutil.Error:  # gone meanwhile: its time shows in the reaped total
            continue
    return own.user + own.system, kids, own.children_user + own.children_system


def cpu_seconds(before, after) -> float:
    """CPU-seconds spent by the process tree between two ``cpu_snapshot``s."""
    own0, kids0, reaped0 = before
    own1, kids1, reaped1 = after
    live = sum(t - kids0.get(pid, (0.0, False))[0] for pid, (t, _) in kids1.items())
    # a direct child reaped in between counts its whole life in the reaped total
    gone = sum(t for pid, (t, direct) in kids0.items() if direct and pid not in kids1)
    return (own1 - own0) + live + max(reaped1 - reaped0 - gone, 0.0)


def _settle(limit_s: float = 15.0) -> None:
    """Wait for the previous run's worker processes to exit (no run pays for another's).
    multiprocessing's resource tracker (started for SPDL's shared memory) stays: not a worker."""
    from multiprocessing import resource_tracker

    keep = {getattr(resource_tracker._resource_tracker, "_pid", None)}
    me = psutil.Process()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and any(
            p.pid not in keep for p in me.children(recursive=True)):
        time.sleep(0.01)


def measure(peer: Peer, job: Job, warmup: int, batches: int) -> dict:
    """One run: start ``peer``, read ``warmup`` batches, then time ``batches`` batches."""
    shape = (job.batch_size, 3, job.dataset.crop, job.dataset.crop)
    t_open = time.perf_counter()
    stream = peer.open(job)
    try:
        next(stream)
        first_s = time.perf_counter() - t_open
        for _ in range(warmup - 1):
            next(stream)
        samples = 0
        before, t0 = cpu_snapshot(), time.perf_counter()
        for _ in range(batches):
            images, labels = next(stream)
            if tuple(images.shape) != shape or len(labels) != job.batch_size:
                raise RuntimeError(f"{peer.name}: a batch of {tuple(images.shape)}, "
                                   f"expected {shape}")
            samples += len(images)
        elapsed, after = time.perf_counter() - t0, cpu_snapshot()
    finally:
        stream.close()
    _settle()
    cpu = cpu_seconds(before, after)
    return {"samples_per_s": samples / elapsed, "cpu_s_per_sample": cpu / samples,
            "cores_busy": cpu / elapsed, "first_batch_ms": first_s * 1e3, "samples": samples,
            "seconds": elapsed}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio(a: float, b: float) -> float | None:
    """a / b, None where b is 0 (CPU times tick in 10 ms: a tiny run may read 0)."""
    return round(a / b, 4) if b > 0 else None


def summarise(runs: list[dict], workers: tuple[int, ...], names: list[str],
              missing_by_name: dict[str, str | None]) -> list[dict]:
    """A row per (workers, loader): medians over rounds, ratios against torch."""
    rows = []
    for w in workers:
        mine = [r for r in runs if r["workers"] == w]
        base = {r["round"]: r for r in mine if r["loader"] == "torch"}
        base_rate = _median([r["samples_per_s"] for r in base.values()])
        base_cpu = _median([r["cpu_s_per_sample"] for r in base.values()])
        for name in names:
            why = missing_by_name[name]
            if why:
                rows.append({"workers": w, "loader": name, "status": why})
                continue
            own = [r for r in mine if r["loader"] == name]
            rate = _median([r["samples_per_s"] for r in own])
            cpu = _median([r["cpu_s_per_sample"] for r in own])
            paired = [r["samples_per_s"] / base[r["round"]]["samples_per_s"] for r in own
                      if r["round"] in base]
            paired_cpu = [r["cpu_s_per_sample"] / base[r["round"]]["cpu_s_per_sample"]
                          for r in own if base.get(r["round"], {}).get("cpu_s_per_sample")]
            rows.append({
                "workers": w, "loader": name, "status": "ok", "rounds": len(own),
                "samples_per_s": round(rate, 2), "cpu_s_per_sample": round(cpu, 6),
                "ratio": round(rate / base_rate, 4), "paired_ratio": round(_median(paired), 4),
                "cpu_ratio": _ratio(cpu, base_cpu),
                "paired_cpu_ratio": round(_median(paired_cpu), 4) if paired_cpu else None,
                "cores_busy": round(_median([r["cores_busy"] for r in own]), 3),
                "first_batch_ms": round(_median([r["first_batch_ms"] for r in own]), 1),
                "each_samples_per_s": [round(r["samples_per_s"], 1) for r in own],
            })
    return rows


def _rounds(cfg: dict, ready: list[Peer], dataset, order: list[int], seed: int,
            progress: Progress | None) -> list[dict]:
    total, runs = cfg["rounds"] * len(cfg["workers"]) * len(ready), []
    for r in range(cfg["rounds"]):
        for w in cfg["workers"]:
            job = Job(dataset, order, cfg["batch_size"], w, seed + r)
            for k in range(len(ready)):
                peer = ready[(k + r) % len(ready)]  # ABCD, BCDA, ...: no fixed position
                if progress:
                    progress(f"round {r + 1}, {w} workers: {peer.name}", len(runs), total)
                row = measure(peer, job, cfg["warmup"], cfg["batches"])
                runs.append({"round": r, "workers": w, "loader": peer.name, **row})
    return runs


def run_loaders_bench(
    workers: tuple[int, ...] | None = None, rounds: int | None = None,
    batch_size: int | None = None, batches: int | None = None, warmup: int | None = None,
    crop: int | None = None, image_size: int | None = None, images: int | None = None,
    seed: int = 0, root: str | None = None, quick: bool = False, torch_threads: int = 1,
    loaders: tuple[str, ...] | None = None, progress: Progress | None = None,
) -> dict:
    """Every loader at every worker count, ``rounds`` times interleaved; ``quick`` picks small
    settings (seconds) for the ones not given."""
    given = {"workers": workers, "rounds": rounds, "batch_size": batch_size,
             "batches": batches, "warmup": warmup, "crop": crop, "image_size": image_size,
             "images": images}
    cfg = {k: (v if v is not None else (QUICK if quick else FULL)[k]) for k, v in given.items()}
    cfg["workers"] = tuple(int(w) for w in cfg["workers"])
    if not cfg["workers"] or min(cfg["workers"]) < 1:
        raise InputError("bench loaders: worker counts must be >= 1")
    if min(cfg["rounds"], cfg["batch_size"], cfg["batches"], cfg["warmup"], cfg["crop"],
           cfg["images"]) < 1 or cfg["image_size"] < cfg["crop"]:
        raise InputError("bench loaders: rounds, batch size, batches, warm-up, crop and images "
                         "must be >= 1, and the images at least as large as the crop")
    names = [p.name for p in PEERS]
    if loaders is not None:
        unknown = sorted(set(loaders) - set(names))
        if unknown or "torch" not in loaders:
            raise InputError(f"bench loaders: loaders are {', '.join(names)} (torch, the "
                             f"baseline, always runs); unknown: {', '.join(unknown) or '-'}")
        names = [n for n in names if n in loaders]
    peers = [p for p in PEERS if p.name in names]
    why = {p.name: missing(p) for p in peers}
    ready = [p for p in peers if not why[p.name]]
    # enough samples that no pool runs dry while it is timed
    size = (cfg["warmup"] + cfg["batches"] + PREFETCH * max(cfg["workers"]) + 2) * cfg[
        "batch_size"]
    order = rank_order(seed, 0, size, shuffle=True).tolist()  # ElasticDataLoader's own order
    load_before, threads = os.getloadavg(), torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        with tempfile.TemporaryDirectory(prefix="adloader-bench-") as tmp, \
                warnings.catch_warnings():
            # more workers than cores is the point of the 4-worker rows
            warnings.filterwarnings("ignore", "This DataLoader will create")
            side = cfg["image_size"]
            dataset = SyntheticJPEGDataset(root or tmp, size=size, image_size=(side, side),
                                           crop=cfg["crop"], images=cfg["images"], seed=seed)
            for i in range(cfg["images"]):  # the files in the page cache before any timing
                dataset[i]
            runs = _rounds(cfg, ready, dataset, order, seed, progress)
    finally:
        torch.set_num_threads(threads)
    return {
        "config": {**cfg, "workers": list(cfg["workers"]), "seed": seed, "quick": quick,
                   "prefetch_per_worker": PREFETCH, "multiprocessing_context": CTX,
                   "torch_threads": torch_threads,
                   "cores": len(os.sched_getaffinity(0)), "load_before": list(load_before),
                   "load_after": list(os.getloadavg())},
        "loaders": {p.name: p.title for p in peers},
        "rows": summarise(runs, cfg["workers"], names, why),
        "runs": runs,
    }


def loaders_table(result: dict) -> tuple[str, list[str], list[list]]:
    """(title, columns, rows) of the table ``adloader bench loaders`` prints."""
    cfg, names = result["config"], result["loaders"]
    rows = [[r["workers"], names[r["loader"]], r["status"]] if r["status"] != "ok" else
            [r["workers"], names[r["loader"]], f"{r['samples_per_s']:.0f}", f"{r['ratio']:.3f}",
             f"{r['paired_ratio']:.3f}", f"{r['cpu_s_per_sample'] * 1e3:.2f}",
             "—" if r["cpu_ratio"] is None else f"{r['cpu_ratio']:.3f}",
             f"{r['cores_busy']:.2f}", f"{r['first_batch_ms']:.0f}"]
            for r in result["rows"]]
    rounds = cfg["rounds"]
    title = (f"JPEG decode + augment, {cfg['image_size']}² → crop {cfg['crop']}, batch "
             f"{cfg['batch_size']}, {cfg['batches']} batches after {cfg['warmup']}, "
             f"{cfg['cores']} cores; medians of {rounds} round{'s' if rounds > 1 else ''}")
    return title, ["workers", "loader", "samples/s", "× torch", "× torch, paired",
                   "CPU ms/sample", "CPU × torch", "cores busy", "first batch ms"], rows
