"""HDF5 rows as a map-style dataset whose mini-batches load in aggregated chunks (SOLAR §4.4).

``H5Rows(path, key)``: sample i is row i of the HDF5 dataset ``key`` (h5py). torch's fetcher
hands a worker a whole batch (``__getitems__``); the batch's indices are sorted, merged into
runs by ``adloader.datapath.chunk_runs.plan_reads`` and each run is read with one h5py call, then
the
rows go back to the sampler's order: the same batch as ``[ds[i] for i in indices]``.

The merge threshold is measured once per file by ``measure_threshold`` (SOLAR's micro-benchmark:
one read of k contiguous rows against single-row reads) unless given. The file is opened lazily
in the process that reads (after a worker's fork); a handle the parent opened is closed before
any ``os.fork`` so no handle is ever shared across one.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from adloader.datapath.chunk_runs import ChunkThreshold, plan_reads, threshold_from_timings
from adloader.errors import InputError

PROBE_SIZES = (1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513)
MAX_RUN_BYTES = 16 << 20  # one read spans at most this much (and at least one row)
_THRESHOLDS: dict[tuple, ChunkThreshold] = {}  # (file, key, size, mtime) → measured
_DATASETS: weakref.WeakSet = weakref.WeakSet()  # every H5Rows of this process
_HELD: list = []  # the ones whose lock a fork holds
_HOOKED = False


def _h5py():
    try:
        import h5py
    except ImportError:
        raise InputError("HDF5 datasets need h5py: pip install h5py") from None
    return h5py


def _open(path: str, key: str):
    h5py = _h5py()
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise InputError(f"{path}: cannot open as HDF5: {exc}") from None
    if key not in handle:
        handle.close()
        raise InputError(f"{path}: no dataset {key!r}")
    return handle


def _max_run(row_bytes: int) -> int:
    return max(1, MAX_RUN_BYTES // max(1, row_bytes))


def measure_threshold(path: str | os.PathLike, key: str, *, repeats: int = 15,
                      sizes: Sequence[int] = PROBE_SIZES, max_run: int | None = None,
                      seed: int = 0, refresh: bool = False) -> ChunkThreshold:
    """Time one h5py read of k contiguous rows (k in ``sizes``, at random places, median of
    ``repeats``) and pick the largest gap one read still beats two single-row reads
    (``threshold_from_timings``). Measured on the file as it is (cold or warm), once per
    (file, key, size, mtime) in this process unless ``refresh``. ``max_run``: default 16 MiB
    of rows."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    cache_key = (os.path.realpath(path), key, st.st_size, st.st_mtime_ns, max_run)
    if cache_key in _THRESHOLDS and not refresh:
        return _THRESHOLDS[cache_key]
    with _open(path, key) as handle:
        ds = handle[key]
        n = len(ds)
        row_bytes = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
        cap = _max_run(row_bytes) if max_run is None else max_run
        ks = sorted({int(k) for k in sizes if 1 <= k <= min(n, cap)} | {1})
        rng = np.random.default_rng(seed)
        times: dict[int, list[float]] = {k: [] for k in ks}
        buf = np.empty((max(ks),) + ds.shape[1:], dtype=ds.dtype)
        for _ in range(repeats):
            for k in rng.permutation(ks):  # interleaved: drift hits every size alike
                start = int(rng.integers(0, n - k + 1))
                t0 = time.perf_counter()
                ds.read_direct(buf, np.s_[start:start + k], np.s_[0:k])
                times[int(k)].append(time.perf_counter() - t0)
    medians = [statistics.median(times[k]) for k in ks]
    threshold = threshold_from_timings(ks, medians, cap) if len(ks) > 1 else \
        ChunkThreshold(0, cap)
    _THRESHOLDS[cache_key] = threshold
    return threshold


def _before_fork() -> None:
    """Hold every dataset's lock across the fork and close its handle: the child starts
    with none open and no lock held, the parent reopens on its next read."""
    _HELD[:] = list(_DATASETS)
    for dataset in _HELD:
        dataset._lock.acquire()
        dataset._close_locked()


def _after_fork() -> None:
    for dataset in _HELD:
        dataset._lock.release()
    _HELD.clear()


def _track(dataset: H5Rows) -> None:
    global _HOOKED
    if not _HOOKED:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                            after_in_child=_after_fork)
        _HOOKED = True
    _DATASETS.add(dataset)


class H5Rows(Dataset):
    """Rows of HDF5 dataset(s) ``dataset_key`` in ``path``; one h5py read per run of a batch.

    ``dataset_key``: one key (sample = ``transform(row)``) or several of the same length
    (sample = a tuple, one transformed row per key, every key read with the same plan).
    ``threshold``: a ``ChunkThreshold``, an int (``max_gap``; ``max_run`` 16 MiB of rows) or
    None (``measure_threshold`` on the first key). ``transform(row: np.ndarray)``: default
    ``torch.from_numpy``.
    """

    def __init__(self, path: str | os.PathLike, dataset_key: str | Sequence[str],
                 threshold: ChunkThreshold | int | None = None,
                 transform: Callable[[np.ndarray], Any] | None = None) -> None:
        self.path = os.fspath(path)
        self.keys = (dataset_key,) if isinstance(dataset_key, str) else tuple(dataset_key)
        if not self.keys:
            raise InputError("H5Rows: give at least one dataset key")
        lengths, row_bytes = set(), 0
        for key in self.keys:
            with _open(self.path, key) as handle:
                ds = handle[key]
                if ds.ndim < 1:
                    raise InputError(f"{self.path}: dataset {key!r} is a scalar, not rows")
                lengths.add(len(ds))
                row_bytes = max(row_bytes, int(np.prod(ds.shape[1:], dtype=np.int64))
                                * ds.dtype.itemsize)
        if len(lengths) != 1:
            raise InputError(f"{self.path}: datasets {self.keys} differ in length {lengths}")
        self.length = lengths.pop()
        if threshold is None:
            threshold = measure_threshold(self.path, self.keys[0])
        elif not isinstance(threshold, ChunkThreshold):
            threshold = ChunkThreshold(threshold, _max_run(row_bytes))
        self.threshold = threshold
        self.transform = transform
        self._handle: Any = None
        self._lock = threading.Lock()  # held while the handle is opened, read or closed
        _track(self)

    def __len__(self) -> int:
        return self.length

    def _datasets(self) -> list:
        """This process's open datasets, opened on first use (the lock is held)."""
        if self._handle is None:
            self._handle = _open(self.path, self.keys[0])
        return [self._handle[key] for key in self.keys]

    def _close_locked(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def close(self) -> None:
        """Close this process's handle (the next read opens it again)."""
        with self._lock:
            self._close_locked()

    def _check(self, index: int) -> int:
        if not 0 <= index < self.length:
            raise IndexError(f"sample {index} out of range 0..{self.length - 1}")
        return int(index)

    def _sample(self, rows: Sequence[np.ndarray]) -> Any:
        convert = self.transform or torch.from_numpy
        out = tuple(convert(np.asarray(row)) for row in rows)
        return out[0] if len(out) == 1 else out

    def __getitem__(self, index: int) -> Any:
        index = self._check(index)
        with self._lock:
            rows = [ds[index] for ds in self._datasets()]
        return self._sample(rows)

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The samples of ``indices`` in that order; one h5py read per run of the plan."""
        for i in indices:
            self._check(i)
        plan = plan_reads(indices, self.threshold)
        per_key = []
        with self._lock:
            for ds in self._datasets():
                buf = np.empty((plan.rows_read,) + ds.shape[1:], dtype=ds.dtype)
                for (start, stop), at in zip(plan.runs, plan.offsets, strict=True):
                    ds.read_direct(buf, np.s_[start:stop], np.s_[at:at + stop - start])
                per_key.append(buf[plan.take])
        return [self._sample([rows[k] for rows in per_key]) for k in range(len(indices))]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_handle=None, _lock=None)  # a new process opens its own
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _track(self)
