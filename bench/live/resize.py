"""``adloader bench resize``: the ElasticDataLoader resized live, and its cost beside torch's.

(a) ≥ 1,000 resizes at batch boundaries, cycling the worker count through ``pattern`` (1→2→0→2→1:
both 1↔2 and 0↔2), over real JPEG decoding with a consumer that sleeps a step: the indices
yielded must equal the uninterrupted order (lost = repeated = 0). ``resize()`` is called right
before ``__next__`` (the worst place: no step left to hide a pool's start behind). Stall of one
resize = time in ``resize()`` + the wait of the next batch − the median wait of an uninterrupted
run with the new worker count; the "interval" stall sums those excess waits over every batch up
to the next resize (with "drain" the old pool still serves a few batches and the new pool's
first one comes later; "inplace", the default, grows or shrinks the running pool, and drains
to and from no workers). "drain", "restart" and "serial" run fewer resizes, for comparison.
(b) Per-batch time of ElasticDataLoader vs ``torch.utils.data.DataLoader``, same workers and
order, runs alternating, median of several; on the JPEG dataset and on a tiny in-memory one
where the loader's own per-batch cost shows.
(c) A ``ShardedStream`` resized, workers killed, per-worker memory (``loader_faults``).
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from adloader.bench.live import loader_faults as faults
from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.sample_order import rank_order
from adloader.errors import InputError
from adloader.workloads.dataset import SyntheticJPEGDataset

CTX = "fork"
Progress = Callable[[str, int, int], None]  # (phase, done, total)


class _Indexed(Dataset):
    """A dataset whose samples also carry their index, so the bench can check the order."""

    def __init__(self, dataset: Dataset, size: int) -> None:
        self.dataset, self.size = dataset, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        image, label = self.dataset[i]
        return image, label, i


class _Tiny(Dataset):
    def __init__(self, size: int) -> None:
        self.data = torch.arange(size * 4, dtype=torch.float32).reshape(size, 4)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return self.data[i], i


def _settle(limit_s: float = 10.0) -> None:
    """Wait until the worker processes of the previous run have exited (so no run pays for
    the last one's teardown, which ElasticDataLoader does off the consumer's path)."""
    deadline = time.monotonic() + limit_s
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.005)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _ms(x: float) -> float:
    return round(x * 1e3, 3)


def _baseline(jpeg, size, workers, batch_size, step_s, seed) -> float:
    """Median __next__ wait of an uninterrupted run with ``workers`` (warm-up batches left out)."""
    loader = ElasticDataLoader(_Indexed(jpeg, size), batch_size, shuffle=True, seed=seed,
                               num_workers=workers)
    waits: list[float] = []
    loader.on_batch = lambda s: waits.append(s.wait_s)
    for _ in loader:
        time.sleep(step_s)
    _settle()
    return statistics.median(waits[5:] or waits)


def _resize_run(jpeg, handover, resizes, every, pattern, batch_size, step_s, seed, base,
                progress: Progress | None) -> dict:
    batches = (resizes + 1) * every
    size = batches * batch_size
    loader = ElasticDataLoader(_Indexed(jpeg, size), batch_size, shuffle=True, seed=seed,
                               num_workers=pattern[0], handover=handover)
    waits: list[float] = []
    loader.on_batch = lambda s: waits.append(s.wait_s)
    seen: list[int] = []
    events: list[tuple[int, int, float]] = []  # (next batch, new workers, seconds in resize())
    start = time.perf_counter()
    for b, (_, _, idx) in enumerate(loader):
        seen += idx.tolist()
        time.sleep(step_s)  # the training step
        if (b + 1) % every == 0 and len(events) < resizes:
            n = pattern[(len(events) + 1) % len(pattern)]
            t = time.perf_counter()
            loader.resize(n)
            events.append((b + 1, n, time.perf_counter() - t))
            if progress and len(events) % 50 == 0:
                progress(f"resize {handover}", len(events), resizes)
    elapsed = time.perf_counter() - start
    _settle()
    expected = rank_order(seed, 0, size, shuffle=True).tolist()
    stall, interval, calls = [], [], []
    by_move: dict[str, list[float]] = {}
    for k, (first, n, call) in enumerate(events):
        stall.append(call + waits[first] - base[n])
        interval.append(call + sum(w - base[n] for w in waits[first : first + every]))
        calls.append(call)
        move = f"{events[k - 1][1] if k else pattern[0]}->{n}"
        by_move.setdefault(move, []).append(interval[-1])
    return {
        "handover": handover, "resizes": len(events), "batches": len(waits),
        "in_order": seen == expected,
        "lost": sum((Counter(expected) - Counter(seen)).values()),
        "repeated": sum((Counter(seen) - Counter(expected)).values()),
        "stall_median_ms": _ms(statistics.median(stall)), "stall_p95_ms": _ms(_pct(stall, 95)),
        "interval_stall_median_ms": _ms(statistics.median(interval)),
        "interval_stall_p95_ms": _ms(_pct(interval, 95)),
        "interval_stall_mean_ms": _ms(statistics.fmean(interval)),
        "resize_call_median_ms": _ms(statistics.median(calls)),
        "interval_stall_median_ms_by_move": {
            m: _ms(statistics.median(v)) for m, v in sorted(by_move.items())
        },
        "ms_per_batch": _ms(elapsed / len(waits)),
        "elapsed_s": round(elapsed, 2),
    }


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _per_batch(loader) -> float:
    """Seconds per batch from the first batch to the last: pool start and teardown (which
    torch does inline in the ``next`` that ends the epoch) left out."""
    it = iter(loader)
    next(it)
    count = len(loader) - 1
    t = time.perf_counter()
    for _ in range(count):
        next(it)
    elapsed = time.perf_counter() - t
    for _ in it:  # end the epoch (teardown) outside the clock
        pass
    return elapsed / max(count, 1)


def _overhead(dataset, workers, batch_size, runs, seed) -> dict:
    """Median per-batch time of torch's DataLoader and ours, same order, runs alternating.

    Measured from the first batch to the last: torch joins its workers inline at the end of an
    epoch and ElasticDataLoader in a background thread, which would flatter the latter.
    """
    order = rank_order(seed, 0, len(dataset), shuffle=True).tolist()
    ctx = CTX if workers else None
    times: dict[str, list[float]] = {"torch": [], "elastic": []}
    for r in range(runs):  # same seeds on both sides: same augmentations, same work
        ours = ElasticDataLoader(dataset, batch_size, shuffle=True, seed=seed, num_workers=workers,
                                 multiprocessing_context=ctx, generator=_gen(seed + r))
        ref = DataLoader(dataset, batch_size, sampler=order, num_workers=workers,
                         multiprocessing_context=ctx, generator=_gen(seed + r))
        pair = [("torch", ref), ("elastic", ours)]
        for name, loader in pair if r % 2 == 0 else pair[::-1]:
            random.seed(seed + r)
            times[name].append(_per_batch(loader))
            _settle()
    t_torch, t_ours = statistics.median(times["torch"]), statistics.median(times["elastic"])
    paired = [o / t for o, t in zip(times["elastic"], times["torch"], strict=True)]
    return {
        "workers": workers, "batches": -(-len(dataset) // batch_size), "runs": runs,
        "torch_ms_per_batch": _ms(t_torch), "elastic_ms_per_batch": _ms(t_ours),
        "overhead_us_per_batch": round((t_ours - t_torch) * 1e6, 1),
        "ratio": round(t_ours / t_torch, 4),
        "paired_ratio": round(statistics.median(paired), 4),  # each run against its partner
    }


def run_resize_bench(
    resizes: int = 1000, every: int = 3, pattern: tuple[int, ...] = (1, 2, 0, 2),
    batch_size: int = 8, step_ms: float = 5.0, crop: int = 64, image_size: int = 128,
    compare_resizes: int = 200, overhead_runs: int = 15, overhead_batches: int = 60,
    seed: int = 0, root: str | None = None, quick: bool = False,
    progress: Progress | None = None,
) -> dict:
    """Run (a) and (b); ``quick`` shrinks every count so that it takes seconds (tests)."""
    if quick:
        resizes, compare_resizes, overhead_runs, overhead_batches = 12, 4, 2, 8
    if resizes < 1 or every < 1 or batch_size < 1 or len(pattern) < 2 or min(pattern) < 0:
        raise InputError("bench resize: need resizes, every, batch_size >= 1 and a pattern of "
                         ">= 2 worker counts >= 0")
    step_s = step_ms / 1e3
    with tempfile.TemporaryDirectory(prefix="adloader-bench-") as tmp:
        jpeg = SyntheticJPEGDataset(root or tmp, size=1 << 30, image_size=(image_size, image_size),
                                    crop=crop, images=64, seed=seed)
        base_batches = 12 if quick else 60
        base = {}
        for n in sorted(set(pattern)):
            base[n] = _baseline(jpeg, base_batches * batch_size, n, batch_size, step_s, seed)
            if progress:
                progress("baseline", len(base), len(set(pattern)))
        runs = [_resize_run(jpeg, "inplace", resizes, every, pattern, batch_size, step_s, seed,
                            base, progress)]
        for handover in ("drain", "restart", "serial"):
            runs.append(_resize_run(jpeg, handover, compare_resizes, every, pattern, batch_size,
                                    step_s, seed, base, progress))
        overhead = []
        for kind in ("jpeg", "tiny"):
            for workers in (0, 2):
                if kind == "jpeg":
                    size = overhead_batches * batch_size
                    dataset = _Indexed(jpeg, size)
                else:
                    dataset = _Tiny(overhead_batches * 10 * batch_size)
                row = _overhead(dataset, workers, batch_size, overhead_runs, seed)
                overhead.append({"dataset": kind, **row})
                if progress:
                    progress("overhead", len(overhead), 4)
        if progress:
            progress("stream, kills, memory", 0, 3)
        stream = faults.stream_row(jpeg, pattern, every, 60 if quick else 600, batch_size, step_s)
        kill = faults.kill_row(jpeg, 2, 3 if quick else 10, batch_size, 80 if quick else 600)
        memory = faults.memory_rows(10**5 if quick else 10**6, 2, 256,
                                    20_000 if quick else 200_000)
    return {
        "config": {
            "resizes": resizes, "every": every, "pattern": list(pattern),
            "batch_size": batch_size, "step_ms": step_ms, "crop": crop,
            "image_size": image_size, "compare_resizes": compare_resizes,
            "overhead_runs": overhead_runs, "seed": seed, "quick": quick,
        },
        "baseline_wait_ms": {str(n): _ms(w) for n, w in base.items()},
        "resize": runs,
        "overhead": overhead,
        "stream": stream, "kill": kill, "memory": memory,
    }
