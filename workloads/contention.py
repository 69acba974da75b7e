"""Measure the contention surface: k loading pipelines side by side, each one's rate.

``measure_loading`` times one DataLoader alone (L(D), Fig. 5); live, every job's loader and
its main process (which collates, receives batches over IPC and trains) share the cores. Here
each pipeline is what a job runs: a process of its own (forked, as the job's main process)
holding a torch DataLoader (fork) with d_i workers over the same JPEG dataset, consuming
batches as fast as they come. Every pipeline warms up (each worker's first batch), then all
of them are timed over one common window of wall-clock time while all of them run, and each
one's rate is the samples it received over the time between its first and last batch in the
window. Each point is measured ``rounds`` times, each pipeline keeps its median.

The points are ``adloader.device.loading_surface.SurfacePoint``; ``adloader profile
--contention`` writes them into the device profile's ``loading_surface``.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import time
import warnings
from collections.abc import Callable, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from adloader.device.loading_surface import SurfacePoint, check_workers
from adloader.errors import InputError

Progress = Callable[[str], None]
SETTLE_S = 0.3  # after the last pipeline is warm, before the window opens
START_TIMEOUT_S = 120.0


def default_grid(capacity: int, max_jobs: int = 3, min_jobs: int = 1) -> list[tuple[int, ...]]:
    """A coarse grid up to ``capacity`` workers in all: for k = min_jobs..max_jobs pipelines,
    equal splits of 1, about half of and all of capacity//k workers each, and one unequal
    split (one pipeline with the bulk, the others 1 each)."""
    if capacity < 1 or max_jobs < 1 or min_jobs < 1:
        raise InputError(f"contention grid: capacity, max jobs and min jobs must be at least 1, "
                         f"got {capacity}, {max_jobs}, {min_jobs}")
    grid: list[tuple[int, ...]] = []
    for k in range(min_jobs, max_jobs + 1):
        each = capacity // k
        if each < 1:
            break
        for d in sorted({1, max(1, each // 2), each}):
            grid.append((d,) * k)
        bulk = capacity - (k - 1)
        if k > 1 and bulk > each:
            grid.append((bulk,) + (1,) * (k - 1))
    return grid


def parse_grid(text: str, flag: str = "--grid") -> list[tuple[int, ...]]:
    """``2,2;4,1,1``: points separated by ``;``, each point's workers per pipeline by ``,``."""
    points = []
    for part in text.split(";"):
        if not part.strip():
            raise InputError(f"{flag}: an empty point in {text!r} (points are separated by ';', "
                             f"e.g. 2,2;4,1,1)")
        try:
            workers = [int(x) for x in part.split(",")]
        except ValueError:
            raise InputError(f"{flag}: {part.strip()!r} is not comma-separated worker counts "
                             f"(e.g. 2,2;4,1,1)") from None
        points.append(workers)
    return check_grid(points, flag)


def check_grid(grid: Sequence[Sequence[int]], where: str = "grid") -> list[tuple[int, ...]]:
    """Every point checked (``loading_surface.check_workers``), none measured twice."""
    if not grid:
        raise InputError(f"{where}: no point to measure")
    out, seen = [], set()
    for point in grid:
        workers = check_workers(point, f"{where}: point {','.join(map(str, point))}")
        key = tuple(sorted(workers))
        if key in seen:
            raise InputError(f"{where}: point {','.join(map(str, workers))} appears twice")
        seen.add(key)
        out.append(workers)
    return out


def measure_contention(
    dataset: Dataset,
    grid: Sequence[Sequence[int]],
    batch_size: int = 32,
    window_s: float = 1.5,
    rounds: int = 1,
    warmup: int | None = None,
    multiprocessing_context: str = "fork",
    progress: Progress | None = None,
) -> list[SurfacePoint]:
    """Each point of ``grid`` measured ``rounds`` times, the median rate of each pipeline.

    ``warmup`` batches per pipeline (default its d: each worker's first) are not timed.
    The dataset must hold the batches a pipeline takes in its warm-up and window (a large
    virtual size, as ``SyntheticJPEGDataset`` gives)."""
    grid = check_grid(grid)
    if batch_size < 1 or rounds < 1 or window_s <= 0:
        raise InputError(f"batch size and rounds must be at least 1, the window above 0 s, got "
                         f"{batch_size}, {rounds}, {window_s}")
    rates: dict[int, list[list[float]]] = {i: [] for i in range(len(grid))}
    for r in range(rounds):
        for i, workers in enumerate(grid):
            got = _side_by_side(dataset, workers, batch_size, window_s, warmup,
                                multiprocessing_context)
            rates[i].append(got)
            if progress:
                shown = ", ".join(f"{x:.1f}" for x in got)
                progress(f"side by side d={','.join(map(str, workers))} (round {r + 1}/{rounds})"
                         f": {shown} samples/s")
    return [SurfacePoint(tuple(workers), tuple(statistics.median(run[p] for run in rates[i])
                                               for p in range(len(workers))))
            for i, workers in enumerate(grid)]


def _side_by_side(dataset: Dataset, workers: Sequence[int], batch_size: int, window_s: float,
                  warmup: int | None, context: str) -> list[float]:
    """One point: a consumer process per pipeline, all timed over one window."""
    ctx = mp.get_context("fork")  # a job's main process: its dataset object as it is here
    start = ctx.Value("d", 0.0, lock=False)  # time.monotonic() the window opens; 0: not yet
    ready, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_pipeline, daemon=False,
                         args=(i, dataset, d, batch_size, d if warmup is None else warmup,
                               window_s, start, context, ready, results))
             for i, d in enumerate(workers)]
    for p in procs:
        p.start()
    out: dict[int, list[float]] = {}
    failed = True
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        warm = 0
        while warm < len(procs):
            try:
                ready.get(timeout=max(0.1, deadline - time.monotonic()))
                warm += 1
            except queue.Empty:
                raise InputError(f"side by side d={list(workers)}: the pipelines did not start "
                                 f"in {START_TIMEOUT_S:.0f} s") from None
            _raise_failed(results, out, workers)
        start.value = time.monotonic() + SETTLE_S
        while len(out) < len(procs):
            try:
                index, stamps, error = results.get(timeout=window_s + START_TIMEOUT_S)
            except queue.Empty:
                raise InputError(f"side by side d={list(workers)}: a pipeline did not "
                                 f"report") from None
            if error:
                raise InputError(f"side by side d={list(workers)}: pipeline {index} failed: "
                                 f"{error}")
            out[index] = stamps
        failed = False
    finally:
        for p in procs:
            p.join(timeout=1 if failed else 30)
            if p.is_alive():
                p.kill()
                p.join()
    return [_rate(out[i], batch_size) for i in range(len(workers))]


def _raise_failed(results, out: dict, workers) -> None:
    """A pipeline that failed while the others warmed up fails the point now."""
    try:
        index, stamps, error = results.get_nowait()
    except queue.Empty:
        return
    if error:
        raise InputError(f"side by side d={list(workers)}: pipeline {index} failed: {error}")
    out[index] = stamps


def _rate(stamps: list[float], batch_size: int) -> float:
    """Samples/s between the first and the last batch received in the window."""
    if len(stamps) < 2 or stamps[-1] <= stamps[0]:
        raise InputError("side by side: a pipeline received fewer than 2 batches in the window "
                         "(make the window longer)")
    return (len(stamps) - 1) * batch_size / (stamps[-1] - stamps[0])


def _pipeline(index: int, dataset: Dataset, workers: int, batch_size: int, warmup: int,
              window_s: float, start, context: str, ready, results) -> None:
    """A job's main process: a DataLoader with ``workers`` workers, batches taken as they come;
    the arrival times of those in the window (and the first after it) are reported."""
    stamps: list[float] = []
    warm = False
    try:
        # forked from a process whose OpenMP threads may have run (its own DataLoader's
        # randperm): their pool is gone here, and a parallel op would wait for it for ever
        torch.set_num_threads(1)
        with warnings.catch_warnings():  # more workers than cores is part of the surface
            warnings.filterwarnings("ignore", message=".*worker processes in total.*")
            loader = DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                num_workers=workers, persistent_workers=False, prefetch_factor=2,
                                multiprocessing_context=context, drop_last=True)
            it = iter(loader)
        for _ in range(warmup):
            next(it)
        ready.put(index)
        warm = True
        opens = closes = None
        while True:  # consume until the window has closed, timing the batches inside it
            next(it)
            now = time.monotonic()
            if opens is None and start.value > 0:
                opens = start.value
                closes = opens + window_s
            if opens is not None and now >= opens:
                stamps.append(now)
                if now >= closes and len(stamps) >= 2:
                    break
        del it  # the iterator's finaliser stops its worker pool
    except BaseException as exc:  # reported to the parent, which fails the point
        if not warm:
            ready.put(index)
        results.put((index, None, "the dataset ran out of samples: give it a larger size"
                     if isinstance(exc, StopIteration) else repr(exc)))
        return
    results.put((index, stamps, None))
