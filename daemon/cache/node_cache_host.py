"""The node cache, the daemon's side: memory C split among datasets, live.

Jobs that register with a ``DataSpec`` share one segment per dataset (same name, same size:
``client.data.node_cache``). The daemon makes the segment (room up to C or the whole dataset,
untouched pages cost nothing), hands its name back in the Allocation, and divides C among the
datasets the way it divides workers: maximise Σ_d h_d(c_d), Σ_d c_d ≤ C
(``adloader.datapath.cache_arbiter.allocate_dp``, exact on the grid), h_d predicted by Belady's MIN
on
the merged stream of d's jobs, each placed in time by its rate (``adloader.datapath.shared_cache``).
Sizes are bytes, so datasets of different sample sizes compete fairly. The split is
re-solved in a thread at every arrival and departure and applied with
``SampleArena.set_limit`` (what leaves gives its pages back to the OS). A dataset whose jobs
have all left keeps what it holds in the room the others do not need (the next
hyper-parameter run finds it warm), most recently used first; with no room left, it goes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from adloader.protocol import Allocation, DataSpec, replaced

from ..control.live import ENDED, Actions

log = logging.getLogger("adloader.node_cache")
POINTS = 16  # the arbiter's grid: C / POINTS bytes a step
MAX_ACCESSES = 50_000  # of each job's stream, predicted per split (bounds the solve's time)


def dataset_key(spec: DataSpec) -> str:
    return f"{spec.dataset}:{spec.size}"


def predict_split(members: dict[str, tuple[DataSpec, float]], capacity: int,
                  block_bytes: int = 4096, points: int = POINTS) -> dict[str, int]:
    """Bytes per dataset key from the jobs' specs and rates (iterations/s), Σ ≤ capacity."""
    from adloader.datapath.access_stream import access_stream, node_sequence
    from adloader.datapath.cache_arbiter import allocate_dp
    from adloader.datapath.cache_policies import evaluate
    from adloader.datapath.shared_cache import JobAccesses, dataset_view, merge_streams

    if not members:
        return {}
    jobs, blocks = [], {}
    for job_id, (spec, rate) in sorted(members.items()):
        epochs = max(1, min(spec.epochs, MAX_ACCESSES // spec.size))
        stream = access_stream(spec.seed, epochs, spec.size, spec.batch)
        seq = node_sequence(stream)
        key = dataset_key(spec)
        jobs.append(JobAccesses(job_id, key, spec.size, seq, max(rate, 1e-6)))
        blocks[key] = -(-spec.sample_bytes // block_bytes)
    merged = merge_streams(jobs)
    unit = max(1, -(-capacity // points))
    curves = {}
    for key in merged.datasets:
        seq, _ = dataset_view(merged, key)
        size, per = merged.size_of(key), blocks[key] * block_bytes
        top = min(points, -(-size * per // unit))
        curves[key] = [float(evaluate("belady", seq, min(k * unit // per, size)).hits)
                       for k in range(top + 1)]
    units = allocate_dp(curves, capacity // unit)
    return {k: min(units[k] * unit, merged.size_of(k) * blocks[k] * block_bytes)
            for k in curves}


class NodeCacheHost:
    """The node's cache memory ``capacity`` bytes, one segment per dataset its jobs read."""

    def __init__(self, capacity: int, record: Callable[[str | None, str, dict], None],
                 lock: threading.RLock, block_bytes: int = 4096) -> None:
        self.capacity, self.block_bytes = int(capacity), block_bytes
        self.segments: dict = {}  # dataset key -> SampleArena
        self.members: dict[str, DataSpec] = {}  # job id -> its data
        self.split: dict[str, int] = {}
        self._record, self._lock = record, lock
        self._generation = 0
        self.left_at: dict[str, float] = {}  # dataset key -> when its last job left

    def route(self, actions: Actions, jobs: dict) -> None:
        """Give each Allocation to a job that asked its dataset's segment; forget ended
        jobs; re-split when the datasets' jobs changed."""
        changed = False
        for n, (job_id, msg) in enumerate(actions.send):
            job = jobs.get(job_id)
            spec = getattr(job, "data", None)
            if isinstance(msg, Allocation) and spec is not None:
                name = self._join(job_id, spec)
                if name is not None:
                    actions.send[n] = (job_id, replaced(msg, cache=name))
                    changed = True
        for job_id, kind, _ in list(actions.events):
            spec = self.members.pop(job_id, None) if kind in ENDED else None
            if spec is not None:
                self.left_at[dataset_key(spec)] = time.monotonic()
                changed = True
        if changed:
            self.resplit(jobs)

    def _join(self, job_id: str, spec: DataSpec) -> str | None:
        from adloader.host.node_segment import create_segment

        key = dataset_key(spec)
        if key not in self.segments:
            room = spec.size * -(-spec.sample_bytes // self.block_bytes) * self.block_bytes
            try:
                seg = create_segment(min(self.capacity, room), spec.size, self.block_bytes)
            except Exception as exc:  # no memory for it: the job runs without the cache
                self._record(job_id, "cache_refused", {"dataset": key, "reason": str(exc)})
                return None
            with seg.locked():
                seg.set_limit(1)  # nothing until the split says how much
            self.segments[key] = seg
        self.members[job_id] = spec
        return self.segments[key].name

    def resplit(self, jobs: dict) -> None:
        """Solve the split for the jobs present, in a thread; apply it when done (a newer
        solve supersedes an older one)."""
        self._generation += 1
        members = {j: (s, _rate(jobs.get(j), s)) for j, s in self.members.items()}
        threading.Thread(target=self._solve, args=(self._generation, members), daemon=True,
                         name="adloader-cache-split").start()

    def _solve(self, generation: int, members: dict) -> None:
        t0 = time.perf_counter()
        try:
            split = predict_split(members, self.capacity, self.block_bytes)
        except Exception:
            log.exception("node cache split")
            return
        with self._lock:
            if generation != self._generation:
                return
            read = {dataset_key(s) for s in self.members.values()}
            spare = self.capacity - sum(split.values())
            for key in sorted(set(self.segments) - read, key=lambda k: -self.left_at.get(k, 0)):
                keep = min(spare, self.segments[key].held_bytes)  # warm for the next job
                split[key], spare = keep, spare - keep
            self.split = split
            for key, seg in list(self.segments.items()):
                if key not in read and split.get(key, 0) < seg.block_bytes:
                    seg.close()  # no job reads it and no room is spare: the segment goes
                    del self.segments[key]
                    continue
                with seg.locked():
                    left = seg.set_limit(max(1, split.get(key, 0) // seg.block_bytes))
                if left:
                    log.info("node cache %s: %d samples left for the new split", key, left)
            self._record(None, "cache_split", {
                "bytes": split, "jobs": sorted(self.members),
                "solve_ms": round(1000 * (time.perf_counter() - t0), 1)})

    def summary(self) -> dict:
        used = sum(s.held_bytes for s in self.segments.values())
        return {"capacity_bytes": self.capacity, "used_bytes": used,
                "free_bytes": max(0, self.capacity - used), "split": dict(self.split),
                "datasets": sorted(self.segments)}

    def close(self) -> None:
        for seg in self.segments.values():
            seg.close()
        self.segments.clear()


def _rate(job, spec: DataSpec) -> float:
    """Iterations/s: measured once it runs, else 1 (every job alike)."""
    samples = float(getattr(job, "throughput", 0.0) or 0.0)
    return samples / spec.batch if samples > 0 else 1.0
