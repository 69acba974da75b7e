"""Where samples come from: their raw bytes (e.g. a JPEG file), before decoding.

- ``LocalDirectorySource``: the files of a folder, what real users have.
- ``RemoteStorageSource``: a stand-in for a parallel file system in front of another source.
  Every read takes latency + bytes / bandwidth, and the bandwidth is ONE link shared by every
  process of the node that uses the same ``state_dir``: the link's state (the time it is busy
  until, bytes and reads so far) is a small file updated under ``flock``, and each read reserves
  the next free interval of the link. Latency overlaps other transfers (many requests are in
  flight on a PFS); transfers queue, so N readers together never exceed the bandwidth.

A sample that cannot be read raises ``SampleReadError`` naming the sample and its path.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np

from adloader.errors import InputError
from adloader.host.file_lock import FileLock

LINK = struct.Struct("<dqq")  # busy until (CLOCK_MONOTONIC seconds), bytes, reads
MB = 1e6


class SampleReadError(OSError):
    """A sample's bytes cannot be read (missing, unreadable, truncated storage): an I/O
    failure of the data, not a user's bad input."""


class LocalDirectorySource:
    """Sample i is the i-th file (sorted by name) matching ``pattern`` under ``root``.

    With ``size`` larger than the number of files, sample i is file i mod files (like
    ``SyntheticJPEGDataset``, which cycles over its images).
    """

    def __init__(self, root, pattern: str = "*", size: int | None = None) -> None:
        root = Path(root)
        if not root.is_dir():
            raise InputError(f"sample folder {root}: does not exist or is not a folder")
        self.root = root
        self.files = sorted(str(p) for p in root.glob(pattern) if p.is_file())
        if not self.files:
            raise InputError(f"sample folder {root}: no file matches {pattern!r}")
        if size is not None and int(size) < 1:
            raise InputError(f"sample folder {root}: size must be at least 1, got {size}")
        self.size = len(self.files) if size is None else int(size)

    def __len__(self) -> int:
        return self.size

    def path(self, index: int) -> str:
        if not 0 <= index < self.size:
            raise IndexError(f"sample {index} out of range 0..{self.size - 1}")
        return self.files[index % len(self.files)]

    def read(self, index: int) -> bytes:
        path = self.path(index)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise SampleReadError(f"sample {index}: cannot read {path}: "
                                  f"{exc.strerror or exc}") from None

    def sizes(self) -> np.ndarray:
        """Every sample's size in bytes (a stat per file)."""
        per_file = []
        for index, path in enumerate(self.files):
            try:
                per_file.append(os.stat(path).st_size)
            except OSError as exc:
                raise SampleReadError(f"sample {index}: cannot stat {path}: "
                                      f"{exc.strerror or exc}") from None
        return np.resize(np.asarray(per_file, dtype=np.int64), self.size)


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


class RemoteStorageSource:
    """``inner``'s samples behind a link of ``bandwidth_mb_s`` (10⁶ B/s) and ``latency_ms``.

    ``state_dir``: where the link's state lives; every source (in any process or job of the
    node) given the same folder shares the link. Default: a fresh private folder, shared by
    this object's forked workers and removed when it is closed.
    """

    def __init__(self, inner, bandwidth_mb_s: float, latency_ms: float = 0.0,
                 state_dir=None) -> None:
        if not bandwidth_mb_s > 0:
            raise InputError(f"remote storage: bandwidth must be > 0 MB/s, got {bandwidth_mb_s}")
        if not latency_ms >= 0:
            raise InputError(f"remote storage: latency must be >= 0 ms, got {latency_ms}")
        self.inner = inner
        self.bandwidth = float(bandwidth_mb_s) * MB
        self.latency = float(latency_ms) / 1e3
        if state_dir is None:
            state_dir = tempfile.mkdtemp(prefix="adloader-link-")
            self._finalizer = weakref.finalize(self, _remove, state_dir, os.getpid())
        else:
            try:
                Path(state_dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"remote storage: cannot create the state folder {state_dir}: "
                                 f"{exc.strerror or exc}") from None
            self._finalizer = None
        self.state_dir = str(state_dir)
        self._lock = FileLock(os.path.join(self.state_dir, "link.state"))
        with self._lock:  # fail now, not in a worker, if the folder is not writable
            pass

    def __len__(self) -> int:
        return len(self.inner)

    def path(self, index: int) -> str:
        return self.inner.path(index)

    def sizes(self) -> np.ndarray:
        return self.inner.sizes()

    def _reserve(self, nbytes: int) -> float:
        """Book the link for ``nbytes``; returns when (CLOCK_MONOTONIC) the transfer ends."""
        with self._lock:
            fd = self._lock.fileno()
            raw = os.pread(fd, LINK.size, 0)
            busy, total, reads = LINK.unpack(raw) if len(raw) == LINK.size else (0.0, 0, 0)
            start = max(time.monotonic() + self.latency, busy)
            done = start + nbytes / self.bandwidth
            os.pwrite(fd, LINK.pack(done, total + nbytes, reads + 1), 0)
        return done

    def read(self, index: int) -> bytes:
        data = self.inner.read(index)
        done = self._reserve(len(data))
        delay = done - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return data

    def link(self) -> dict:
        """The shared link's totals so far: bytes and reads by every user of ``state_dir``."""
        with self._lock:
            raw = os.pread(self._lock.fileno(), LINK.size, 0)
        busy, total, reads = LINK.unpack(raw) if len(raw) == LINK.size else (0.0, 0, 0)
        return {"bytes": total, "reads": reads, "busy_until": busy}

    def close(self) -> None:
        self._lock.close()
        if self._finalizer is not None:
            self._finalizer()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_finalizer"] = None  # only the creating process removes the folder
        return state
